// BERT's uncased WordPiece tokenizer, stage by stage as Hugging Face's
// `tokenizers` runs it (BertNormalizer -> BertPreTokenizer -> WordPiece ->
// the [CLS] ... [SEP] post-processor, then truncation and padding), so the
// ids match `tokenizers`' for the same vocab.txt (tests compare them on a
// fixture made by tests/reference/hf_tokenizer_ids.py). Unicode facts
// (categories, NFD, lowercase) come from utf8proc (Debian's libutf8proc);
// nothing here depends on LibTorch.
//
//   auto tok = text::WordPieceTokenizer(text::Vocab::from_file("vocab.txt"));
//   std::vector<int32_t> ids = tok.encode("A gripping, funny film.", 128);
//   // [101, 1037, 13940, 1010, 6057, 2143, 1012, 102]
#pragma once

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "accel/util/utf8.h"

namespace accel::text {

// UTF-8 (accel/util/utf8.h) under the text layer's names.
using accel::decode_utf8;
using accel::encode_utf8;
using accel::Utf8Error;

// vocab.txt: one token per line, the id is the 0-based line number (a line's
// trailing whitespace and CR are not part of the token, as `tokenizers`
// reads it; a token listed twice keeps its last id).
class Vocab {
 public:
  // ConfigError when the file is missing; DataError naming file and line when
  // a line is not UTF-8, the file is empty, or [CLS], [SEP], [PAD] or [UNK]
  // is missing.
  static Vocab from_file(const std::filesystem::path& file);
  // From tokens in id order (tests); std::invalid_argument without the four
  // special tokens.
  static Vocab from_tokens(std::vector<std::string> tokens);

  std::optional<int32_t> find(std::string_view token) const;
  const std::string& token(int32_t id) const { return tokens_.at(size_t(id)); }
  int32_t size() const { return int32_t(tokens_.size()); }
  int32_t cls_id() const { return cls_; }
  int32_t sep_id() const { return sep_; }
  int32_t pad_id() const { return pad_; }
  int32_t unk_id() const { return unk_; }
  // The special tokens matched in raw text before normalisation ([PAD],
  // [UNK], [CLS], [SEP] and [MASK] where the vocab has it), longest first.
  const std::vector<std::string>& special_tokens() const { return specials_; }

 private:
  static Vocab build(std::vector<std::string> tokens, const std::string& source);
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<std::string> specials_;
  int32_t cls_ = -1, sep_ = -1, pad_ = -1, unk_ = -1;
};

struct TokenizerOptions {
  bool lowercase = true;        // BertNormalizer lowercase (accents stripped with it)
  int max_chars_per_word = 100; // WordPiece: a longer word is [UNK]
};

// ---- the stages (exposed for tests) --------------------------------------------
// BertNormalizer: drops NUL, U+FFFD and control/format/unassigned/private-use
// code points (tab, LF and CR count as whitespace), turns every Unicode space
// into ' ', puts spaces around CJK ideographs, and with lowercase: NFD,
// non-spacing marks (Mn) removed, lowercase.
std::u32string normalize(std::u32string_view text, const TokenizerOptions& options);
// BertPreTokenizer: splits on whitespace (dropped) and makes every
// punctuation character (ASCII 33-47, 58-64, 91-96, 123-126, Unicode P*) a
// word of its own.
std::vector<std::u32string> pre_tokenize(std::u32string_view normalized);
// WordPiece: greedy longest-match-first pieces, "##" before every piece but
// the first; a word without a full match, or longer than max_chars, is one
// [UNK]. Appends to `ids`.
void wordpiece(std::u32string_view word, const Vocab& vocab, int max_chars,
               std::vector<int32_t>& ids);

class WordPieceTokenizer {
 public:
  explicit WordPieceTokenizer(Vocab vocab, TokenizerOptions options = {});
  // The ids of a UTF-8 text without special tokens (Utf8Error on bad bytes).
  std::vector<int32_t> tokenize(std::string_view utf8) const;
  // [CLS] tokens [SEP], the tokens truncated so the whole fits max_length
  // (0 = no limit; else >= 2).
  std::vector<int32_t> encode(std::string_view utf8, int64_t max_length) const;
  const Vocab& vocab() const { return vocab_; }
  const TokenizerOptions& options() const { return options_; }

 private:
  Vocab vocab_;
  TokenizerOptions options_;
};

// tokenizers.h's tokenize_lines over this tokenizer: each line of `in` (LF
// or CRLF) as its space-separated ids on a line of `out`; returns the lines.
// A line that is not UTF-8 is a DataError "SOURCE:LINE: invalid UTF-8 at byte N".
int64_t tokenize_lines(std::istream& in, std::ostream& out, const WordPieceTokenizer& tokenizer,
                       int64_t max_length, const std::string& source);

// Hex SHA-256 of a file's bytes (the run records its vocab's), or of bytes.
std::string sha256_hex(std::string_view bytes);
std::string file_sha256(const std::filesystem::path& file);

}  // namespace accel::text
