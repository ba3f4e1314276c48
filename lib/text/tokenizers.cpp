#include "accel/text/tokenizers.h"

#include <algorithm>

#include "accel/text/tokenizer.h"
#include "accel/util/errors.h"

namespace accel::text {

namespace {

// WordPiece (tokenizer.h) through the interface.
class WordPieceRow final : public Tokenizer {
 public:
  WordPieceRow(const TokenizerSpec& spec)
      : tok_(Vocab::from_file(spec.vocab), TokenizerOptions{spec.lowercase}) {}
  std::vector<int32_t> encode(std::string_view utf8) const override { return tok_.encode(utf8, 0); }
  void truncate(std::vector<int32_t>& ids, int64_t max_length) const override {
    // [CLS] and the first max_length - 2 tokens, then [SEP] again.
    ids.resize(size_t(max_length - 1));
    ids.push_back(tok_.vocab().sep_id());
  }
  int32_t pad_id() const override { return tok_.vocab().pad_id(); }
  int32_t vocab_size() const override { return tok_.vocab().size(); }
  std::string label() const override {
    return std::string("wordpiece ") + (tok_.options().lowercase ? "uncased" : "cased");
  }

 private:
  WordPieceTokenizer tok_;
};

std::deque<TokenizerRow>& rows() {
  static std::deque<TokenizerRow> r = {
      {"wordpiece",
       "BERT's WordPiece over data.vocab ([CLS] text [SEP]; uncased with data.lowercase), ids as "
       "Hugging Face's tokenizers gives them",
       [](const TokenizerSpec& spec) -> std::unique_ptr<Tokenizer> { return std::make_unique<WordPieceRow>(spec); }},
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

void remove_tokenizer(const std::string& name) {
  auto& r = rows();
  const auto it = std::find_if(r.begin(), r.end(), [&](const TokenizerRow& row) { return row.name == name; });
  if (it == r.end() || it == r.begin()) return;  // WordPiece stays
  r.erase(it);
}

}  // namespace accel::text
