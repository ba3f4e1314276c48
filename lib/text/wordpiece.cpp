// The WordPiece pipeline of accel/text/tokenizer.h. Each stage follows
// Hugging Face tokenizers' Rust implementation (normalizers/bert.rs,
// pre_tokenizers/bert.rs, models/wordpiece/mod.rs); the character classes
// come from utf8proc, not from tables of our own.
#include <utf8proc.h>

#include <openssl/evp.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <istream>
#include <ostream>
#include <sstream>

#include "accel/text/tokenizer.h"
#include "accel/util/errors.h"
#include "accel/util/input_file.h"

namespace accel::text {
namespace {

utf8proc_category_t category(char32_t c) { return utf8proc_category(utf8proc_int32_t(c)); }

// Rust's char::is_whitespace (the Unicode White_Space property) for the code
// points BertNormalizer keeps: tab, LF, CR and the space separators. (The
// other White_Space controls, VT, FF and NEL, are Cc and were dropped.)
bool is_whitespace(char32_t c) {
  if (c == U' ' || c == U'\t' || c == U'\n' || c == U'\r') return true;
  if (c == 0x0B || c == 0x0C || c == 0x85) return true;
  const auto cat = category(c);
  return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP;
}

// BertNormalizer's is_control: unicode_categories' is_other(), which is
// Cc, Cf and Co (not Cn: unassigned code points are kept), except tab, LF
// and CR, which count as whitespace.
bool is_control(char32_t c) {
  if (c == U'\t' || c == U'\n' || c == U'\r') return false;
  switch (category(c)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CO: return true;
    default: return false;
  }
}

// The CJK Unified Ideographs blocks BERT pads with spaces (code point
// ranges, not a character property; tokenizers' is_chinese_char, whose
// Extension E range starts at U+2B920 where Google's BERT has U+2B820).
bool is_chinese(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// ASCII punctuation (which includes symbols such as $ + < = > ^ ` | ~) or a
// Unicode punctuation category (Pc, Pd, Ps, Pe, Pi, Pf, Po).
bool is_punctuation(char32_t c) {
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
      (c >= 123 && c <= 126)) {
    return true;
  }
  const auto cat = category(c);
  return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
}

// Canonical decomposition (NFD, with canonical ordering of marks) of code points.
std::u32string nfd(std::u32string_view text) {
  if (text.empty()) return {};
  const std::string utf8 = encode_utf8(text);
  std::vector<utf8proc_int32_t> buf(text.size() * 4 + 16);
  const auto options = utf8proc_option_t(UTF8PROC_DECOMPOSE | UTF8PROC_STABLE);
  for (;;) {
    const auto n = utf8proc_decompose(reinterpret_cast<const utf8proc_uint8_t*>(utf8.data()),
                                      utf8proc_ssize_t(utf8.size()), buf.data(),
                                      utf8proc_ssize_t(buf.size()), options);
    if (n < 0) throw Utf8Error(std::string("NFD failed: ") + utf8proc_errmsg(n), 0);
    if (size_t(n) <= buf.size()) return std::u32string(buf.begin(), buf.begin() + n);
    buf.resize(size_t(n));
  }
}

}  // namespace

// ---- vocab ----------------------------------------------------------------------------

Vocab Vocab::build(std::vector<std::string> tokens, const std::string& source) {
  Vocab v;
  v.tokens_ = std::move(tokens);
  for (size_t i = 0; i < v.tokens_.size(); ++i) v.ids_[v.tokens_[i]] = int32_t(i);
  auto id_of = [&](const char* name) -> int32_t {
    auto it = v.ids_.find(name);
    if (it == v.ids_.end()) {
      throw DataError(source + ": the vocab has no " + name +
                      " token (a BERT WordPiece vocab.txt needs [CLS], [SEP], [PAD] and [UNK])");
    }
    return it->second;
  };
  v.cls_ = id_of("[CLS]");
  v.sep_ = id_of("[SEP]");
  v.pad_ = id_of("[PAD]");
  v.unk_ = id_of("[UNK]");
  for (const char* s : {"[MASK]", "[CLS]", "[SEP]", "[PAD]", "[UNK]"}) {
    if (v.ids_.count(s)) v.specials_.push_back(s);
  }
  std::stable_sort(v.specials_.begin(), v.specials_.end(),
                   [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  return v;
}

Vocab Vocab::from_tokens(std::vector<std::string> tokens) {
  try {
    return build(std::move(tokens), "vocab");
  } catch (const DataError& e) {
    throw std::invalid_argument(e.what());
  }
}

Vocab Vocab::from_file(const std::filesystem::path& file) {
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) throw ConfigError("no such vocab file: " + file.string());
  // A vocab.txt is a few hundred KB (BERT's 30522 tokens: 232 KB).
  std::istringstream in(read_input_file(file, "vocab file", int64_t{64} << 20));
  std::vector<std::string> tokens;
  std::string line;
  int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    // tokenizers reads each line with lines() and trim_end(): the LF, a CR
    // before it and any trailing Unicode whitespace are not part of the token.
    std::u32string cps;
    try {
      cps = decode_utf8(line);
    } catch (const Utf8Error& e) {
      throw DataError(file.string() + ":" + std::to_string(number) + ": " + e.what());
    }
    while (!cps.empty() && is_whitespace(cps.back())) cps.pop_back();
    line = encode_utf8(cps);
    tokens.push_back(line);
  }
  if (tokens.empty()) throw DataError(file.string() + ": the vocab is empty");
  return build(std::move(tokens), file.string());
}

std::optional<int32_t> Vocab::find(std::string_view token) const {
  auto it = ids_.find(std::string(token));
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

// ---- stages ---------------------------------------------------------------------------

std::u32string normalize(std::u32string_view text, const TokenizerOptions& options) {
  // clean_text and handle_chinese_chars in one pass.
  std::u32string out;
  out.reserve(text.size());
  for (char32_t c : text) {
    if (c == 0 || c == 0xFFFD || is_control(c)) continue;
    if (is_whitespace(c)) {
      out.push_back(U' ');
    } else if (is_chinese(c)) {
      out.push_back(U' ');
      out.push_back(c);
      out.push_back(U' ');
    } else {
      out.push_back(c);
    }
  }
  if (!options.lowercase) return out;
  // strip_accents (it follows lowercase when unset, as in the uncased
  // models' tokenizer.json), then lowercase.
  std::u32string decomposed = nfd(out);
  out.clear();
  for (char32_t c : decomposed) {
    if (category(c) == UTF8PROC_CATEGORY_MN) continue;
    out.push_back(char32_t(utf8proc_tolower(utf8proc_int32_t(c))));
  }
  return out;
}

std::vector<std::u32string> pre_tokenize(std::u32string_view text) {
  std::vector<std::u32string> words;
  std::u32string word;
  auto flush = [&] {
    if (!word.empty()) words.push_back(std::move(word));
    word.clear();
  };
  for (char32_t c : text) {
    if (is_whitespace(c)) {
      flush();
    } else if (is_punctuation(c)) {
      flush();
      words.emplace_back(1, c);
    } else {
      word.push_back(c);
    }
  }
  flush();
  return words;
}

void wordpiece(std::u32string_view word, const Vocab& vocab, int max_chars,
               std::vector<int32_t>& ids) {
  if (int64_t(word.size()) > max_chars) {
    ids.push_back(vocab.unk_id());
    return;
  }
  const size_t mark = ids.size();
  size_t start = 0;
  std::string piece;
  while (start < word.size()) {
    size_t end = word.size();
    std::optional<int32_t> found;
    while (start < end) {
      piece = start > 0 ? "##" : "";
      piece += encode_utf8(word.substr(start, end - start));
      found = vocab.find(piece);
      if (found) break;
      --end;
    }
    if (!found) {  // no piece starts here: the whole word is unknown
      ids.resize(mark);
      ids.push_back(vocab.unk_id());
      return;
    }
    ids.push_back(*found);
    start = end;
  }
}

// ---- the pipeline ---------------------------------------------------------------------

WordPieceTokenizer::WordPieceTokenizer(Vocab vocab, TokenizerOptions options)
    : vocab_(std::move(vocab)), options_(options) {
  if (options_.max_chars_per_word < 1) throw std::invalid_argument("max_chars_per_word must be >= 1");
}

std::vector<int32_t> WordPieceTokenizer::tokenize(std::string_view utf8) const {
  std::vector<int32_t> ids;
  const std::u32string text = decode_utf8(utf8);
  // Special tokens in the raw text are matched first, as `tokenizers`'
  // added vocabulary does (normalized: false), and the text between them
  // goes through the stages.
  const auto& specials = vocab_.special_tokens();
  std::vector<std::u32string> special32;
  for (const auto& s : specials) special32.push_back(decode_utf8(s));
  auto run_stages = [&](std::u32string_view part) {
    for (const auto& word : pre_tokenize(normalize(part, options_))) {
      wordpiece(word, vocab_, options_.max_chars_per_word, ids);
    }
  };
  size_t from = 0, i = 0;
  while (i < text.size()) {
    bool matched = false;
    if (text[i] == U'[') {
      for (size_t k = 0; k < special32.size(); ++k) {
        const auto& s = special32[k];
        if (text.compare(i, s.size(), s) == 0) {
          run_stages(std::u32string_view(text).substr(from, i - from));
          ids.push_back(*vocab_.find(specials[k]));
          i += s.size();
          from = i;
          matched = true;
          break;
        }
      }
    }
    if (!matched) ++i;
  }
  run_stages(std::u32string_view(text).substr(from));
  return ids;
}

std::vector<int32_t> WordPieceTokenizer::encode(std::string_view utf8, int64_t max_length) const {
  if (max_length != 0 && max_length < 2) {
    throw std::invalid_argument("encode: max_length must be 0 (no limit) or >= 2, got " +
                                std::to_string(max_length));
  }
  std::vector<int32_t> pieces = tokenize(utf8);
  if (max_length > 0 && int64_t(pieces.size()) > max_length - 2) pieces.resize(size_t(max_length - 2));
  std::vector<int32_t> ids;
  ids.reserve(pieces.size() + 2);
  ids.push_back(vocab_.cls_id());
  ids.insert(ids.end(), pieces.begin(), pieces.end());
  ids.push_back(vocab_.sep_id());
  return ids;
}

// ---- sha256 ---------------------------------------------------------------------------

std::string sha256_hex(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &len, EVP_sha256(), nullptr) != 1) {
    throw std::runtime_error("sha256: OpenSSL EVP_Digest failed");
  }
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    out.push_back(hex[digest[i] >> 4]);
    out.push_back(hex[digest[i] & 15]);
  }
  return out;
}

std::string file_sha256(const std::filesystem::path& file) {
  return sha256_hex(read_input_file(file, "", int64_t{1} << 32));
}

}  // namespace accel::text
