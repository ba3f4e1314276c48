// The tokenizer registry: what turns a text dataset's texts into ids is a
// row (data.tokenizer), WordPiece (text/tokenizer.h, BERT's uncased and
// cased) its first and default. A row makes a Tokenizer from the run's
// vocab file and options; the text datasets (lib/data/text_sets.cpp) encode,
// truncate and pad through that interface alone and record the row's label,
// vocab size and pad id in the data info. A tokenizer a model needs (a
// byte-level BPE for a decoder) adds a row here or through add_tokenizer (a
// test adds a toy one); nothing else names a tokenizer. Torch-free.
#pragma once

#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace accel::text {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // The ids of one UTF-8 text with the tokenizer's own special tokens
  // (WordPiece: [CLS] ... [SEP]), untruncated; Utf8Error on bad bytes.
  virtual std::vector<int32_t> encode(std::string_view utf8) const = 0;
  // Cuts encoded ids to max_length, keeping what must end them (WordPiece:
  // [SEP]); called only where ids.size() > max_length >= 2.
  virtual void truncate(std::vector<int32_t>& ids, int64_t max_length) const = 0;
  virtual int32_t pad_id() const = 0;
  virtual int32_t vocab_size() const = 0;
  // What the data info records as "tokenizer" ("wordpiece uncased").
  virtual std::string label() const = 0;
};

// What a row is made from: the run's data fields it reads.
struct TokenizerSpec {
  std::filesystem::path vocab;  // data.vocab (the installed one where "")
  bool lowercase = true;        // data.lowercase
};

struct TokenizerRow {
  std::string name;     // data.tokenizer
  std::string summary;  // one line
  // ConfigError naming the file where the vocab is missing; DataError
  // (WordPiece's vocab.txt) or ConfigError (a GGUF) where it is malformed.
  std::function<std::unique_ptr<Tokenizer>(const TokenizerSpec&)> make;
  // Where data.vocab is "": the file scripts/setup.sh installs, under the
  // text data folder (accel/data/catalog.h's text_data_dir; "" = WordPiece's),
  // and what to say when it is missing.
  std::string default_vocab;
  std::string vocab_hint;
};

// Every row, WordPiece first; a row's address holds while rows are added.
const std::deque<TokenizerRow>& tokenizer_catalog();
// data.tokenizer's choices, in registry order.
std::vector<std::string> tokenizer_choices();
// ConfigError "data.tokenizer: unknown tokenizer ..." naming the choices.
const TokenizerRow& tokenizer_row(const std::string& name);
// Adds a row; ConfigError when its name is empty or taken or it has no make.
// The registry is the process's: the schema takes its choices once, so a row
// added later is named in a resolved config's code (as a test does).
void add_tokenizer(TokenizerRow row);
// Takes a row added back; WordPiece stays.
void remove_tokenizer(const std::string& name);

// Each line of `in` (LF or CRLF) as its space-separated ids on a line of
// `out` (what `accel-bench tokenize` prints): encode, then truncate where
// longer than max_length (0 = no limit); returns the lines. A line that is
// not UTF-8 is a DataError "SOURCE:LINE: invalid UTF-8 at byte N".
int64_t tokenize_lines(std::istream& in, std::ostream& out, const Tokenizer& tokenizer, int64_t max_length,
                       const std::string& source);

}  // namespace accel::text
