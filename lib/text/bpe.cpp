// Byte-level BPE (bpe.h). The split pattern is GPT-2's as `tokenizers` (and
// llama.cpp's own splitter) match it, written out as a scanner: at each
// position the first alternative that matches, as the regex's backtracking
// would end it. The merges run as `tokenizers`' Word::merge_all runs them: a
// queue of adjacent pairs by (rank, position), stale entries skipped.
#include "accel/text/bpe.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdint>
#include <queue>
#include <stdexcept>
#include <utility>

#include "accel/text/tokenizer.h"

namespace accel::text {

// Named, not anonymous: the torch-free sources are one unity batch.
namespace bpe_detail {

utf8proc_category_t category_of(char32_t c) { return utf8proc_category(utf8proc_int32_t(c)); }

bool letter(char32_t c) {
  switch (category_of(c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: return true;
    default: return false;
  }
}

bool number(char32_t c) {
  switch (category_of(c)) {
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO: return true;
    default: return false;
  }
}

// \s: Unicode's White_Space (the ASCII controls 9-13, U+0085 and the Z* categories).
bool space(char32_t c) {
  if ((c >= 9 && c <= 13) || c == 0x20 || c == 0x85) return true;
  switch (category_of(c)) {
    case UTF8PROC_CATEGORY_ZS: case UTF8PROC_CATEGORY_ZL: case UTF8PROC_CATEGORY_ZP: return true;
    default: return false;
  }
}

bool other(char32_t c) { return !space(c) && !letter(c) && !number(c); }

// GPT-2's pattern over `t`: appends the pieces.
void gpt2_split(std::u32string_view t, std::vector<std::u32string>& out) {
  const size_t n = t.size();
  size_t i = 0;
  auto emit = [&](size_t to) {
    out.emplace_back(t.substr(i, to - i));
    i = to;
  };
  while (i < n) {
    const char32_t c = t[i];
    if (c == U'\'' && i + 1 < n) {  // 's|'t|'re|'ve|'m|'ll|'d
      const char32_t a = t[i + 1], b = i + 2 < n ? t[i + 2] : 0;
      if (a == U's' || a == U't' || a == U'm' || a == U'd') {
        emit(i + 2);
        continue;
      }
      if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) {
        emit(i + 3);
        continue;
      }
    }
    // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': one optional space, then a run of one class.
    const size_t s = (c == U' ' && i + 1 < n) ? i + 1 : i;
    bool (*cls)(char32_t) = nullptr;
    if (letter(t[s])) {
      cls = letter;
    } else if (number(t[s])) {
      cls = number;
    } else if (other(t[s])) {
      cls = other;
    }
    if (cls != nullptr) {
      size_t e = s + 1;
      while (e < n && cls(t[e])) ++e;
      emit(e);
      continue;
    }
    // '\s+(?!\S)|\s+': a run of whitespace, less its last character where a
    // non-space follows and the run is longer than one.
    size_t e = i + 1;
    while (e < n && space(t[e])) ++e;
    emit(e < n && e - i >= 2 ? e - 1 : e);
  }
}

const std::vector<char32_t>& byte_chars() {
  static const std::vector<char32_t> table = [] {
    std::vector<char32_t> t(256);
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[size_t(b)] = printable ? char32_t(b) : next++;
    }
    return t;
  }();
  return table;
}

}  // namespace bpe_detail

namespace bd = bpe_detail;

char32_t bpe_byte_char(uint8_t byte) { return bd::byte_chars()[byte]; }

std::vector<std::u32string> bpe_pre_tokenize(std::u32string_view text, BpePre pre) {
  std::vector<std::u32string> out;
  if (pre == BpePre::Gpt2) {
    bd::gpt2_split(text, out);
    return out;
  }
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (!bd::number(text[i])) continue;
    bd::gpt2_split(text.substr(start, i - start), out);
    out.emplace_back(1, text[i]);
    start = i + 1;
  }
  bd::gpt2_split(text.substr(start), out);
  return out;
}

ByteLevelBpe::ByteLevelBpe(BpeVocabulary vocab) : vocab_(std::move(vocab)) {
  const std::string where = vocab_.source.empty() ? "bpe: " : vocab_.source + ": bpe: ";
  if (vocab_.tokens.empty()) throw std::invalid_argument(where + "no tokens");
  for (size_t i = 0; i < vocab_.tokens.size(); ++i) ids_[vocab_.tokens[i]] = int32_t(i);  // the last id of a repeat
  for (int b = 0; b < 256; ++b) {
    const char32_t c = bpe_byte_char(uint8_t(b));
    char_byte_[c] = uint8_t(b);
    const auto it = ids_.find(encode_utf8(std::u32string(1, c)));
    byte_id_[b] = it == ids_.end() ? -1 : it->second;
  }
  for (size_t r = 0; r < vocab_.merges.size(); ++r) {
    const std::string& m = vocab_.merges[r];
    const size_t sp = m.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 >= m.size() || m.find(' ', sp + 1) != std::string::npos) {
      throw std::invalid_argument(where + "merge " + std::to_string(r) + " \"" + m + "\" is not two tokens");
    }
    const auto left = ids_.find(m.substr(0, sp)), right = ids_.find(m.substr(sp + 1));
    const auto merged = ids_.find(m.substr(0, sp) + m.substr(sp + 1));
    if (left == ids_.end() || right == ids_.end() || merged == ids_.end()) {
      throw std::invalid_argument(where + "merge " + std::to_string(r) + " \"" + m + "\" names a token the vocabulary lacks");
    }
    // `tokenizers` would keep a repeat's last rank, llama.cpp its first: neither is assumed.
    const uint64_t key = uint64_t(uint32_t(left->second)) << 32 | uint32_t(right->second);
    if (!merges_.emplace(key, Merge{int32_t(r), merged->second}).second) {
      throw std::invalid_argument(where + "merge " + std::to_string(r) + " \"" + m + "\" is given twice");
    }
  }
  for (const auto& s : vocab_.specials) {
    if (s.empty() || !ids_.count(s)) throw std::invalid_argument(where + "special token \"" + s + "\" is not a token");
  }
  // Longest first, so the first match at a position is also the longest.
  std::sort(vocab_.specials.begin(), vocab_.specials.end(),
            [](const std::string& a, const std::string& b) { return a.size() != b.size() ? a.size() > b.size() : a < b; });
  for (const auto& s : vocab_.specials) specials_.push_back(decode_utf8(s));
  const auto n = int32_t(vocab_.tokens.size());
  if (vocab_.end_of_text >= n || vocab_.pad >= n || vocab_.bos >= n) {
    throw std::invalid_argument(where + "a special id is out of the vocabulary");
  }
}

void ByteLevelBpe::merge_piece(const std::u32string& piece, std::vector<int32_t>& ids) const {
  // The piece's bytes as tokens, in a linked list. A byte without a token is
  // left out before the merges, as `tokenizers` leaves it where the model has
  // no unknown token (SmolLM2 has none for 21 bytes: controls such as 4 and
  // 6, bytes UTF-8 never uses, and 0xF1 and 0xF2, lead bytes of planes 4-11).
  struct Sym {
    int32_t id;
    int prev, next;
    bool live;
  };
  std::vector<Sym> sym;
  for (unsigned char b : encode_utf8(piece)) {
    if (byte_id_[b] < 0) continue;
    const int i = int(sym.size());
    sym.push_back({byte_id_[b], i - 1, i + 1, true});
  }
  if (sym.empty()) return;
  sym.back().next = -1;
  // Adjacent pairs by (rank, left position), lowest first: the leftmost of
  // equal ranks first, as `tokenizers`' heap and llama.cpp's queue order them.
  struct Pair {
    int32_t rank;
    int left;
    int32_t merged;
    bool operator>(const Pair& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Pair, std::vector<Pair>, std::greater<Pair>> queue;
  auto push = [&](int left) {
    if (left < 0 || sym[size_t(left)].next < 0) return;
    const auto key = uint64_t(uint32_t(sym[size_t(left)].id)) << 32 | uint32_t(sym[size_t(sym[size_t(left)].next)].id);
    const auto m = merges_.find(key);
    if (m != merges_.end()) queue.push({m->second.rank, left, m->second.merged});
  };
  for (int i = 0; i + 1 < int(sym.size()); ++i) push(i);
  while (!queue.empty()) {
    const Pair p = queue.top();
    queue.pop();
    Sym& left = sym[size_t(p.left)];
    // Stale: the left symbol was merged into its neighbour, or either side changed since.
    if (!left.live || left.next < 0) continue;
    Sym& right = sym[size_t(left.next)];
    const auto key = uint64_t(uint32_t(left.id)) << 32 | uint32_t(right.id);
    const auto m = merges_.find(key);
    if (m == merges_.end() || m->second.merged != p.merged || m->second.rank != p.rank) continue;
    left.id = p.merged;
    right.live = false;
    left.next = right.next;
    if (right.next >= 0) sym[size_t(right.next)].prev = p.left;
    push(left.prev);
    push(p.left);
  }
  for (int i = 0; i >= 0; i = sym[size_t(i)].next) ids.push_back(sym[size_t(i)].id);
}

std::vector<int32_t> ByteLevelBpe::tokenize(std::string_view utf8) const {
  const std::u32string text = decode_utf8(utf8);
  std::vector<int32_t> ids;
  // Special tokens first, leftmost (longest at a position), as written.
  const auto& specials = specials_;
  size_t start = 0, i = 0;
  auto plain = [&](size_t end) {
    for (const auto& piece : bpe_pre_tokenize(std::u32string_view(text).substr(start, end - start), vocab_.pre)) {
      merge_piece(piece, ids);
    }
  };
  while (i < text.size()) {
    const std::u32string* hit = nullptr;
    if (!specials.empty()) {
      for (size_t k = 0; k < specials.size(); ++k) {
        if (text.compare(i, specials[k].size(), specials[k]) == 0) {
          hit = &specials[k];
          plain(i);
          ids.push_back(ids_.at(vocab_.specials[k]));
          i += specials[k].size();
          start = i;
          break;
        }
      }
    }
    if (hit == nullptr) ++i;
  }
  plain(text.size());
  return ids;
}

std::string ByteLevelBpe::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) throw std::invalid_argument("bpe: id " + std::to_string(id) + " out of range");
    const std::string& tok = vocab_.tokens[size_t(id)];
    if (std::find(vocab_.specials.begin(), vocab_.specials.end(), tok) != vocab_.specials.end()) {
      out += tok;
      continue;
    }
    for (char32_t c : decode_utf8(tok)) {
      const auto b = char_byte_.find(c);
      if (b == char_byte_.end()) {
        out += encode_utf8(std::u32string(1, c));  // not a byte's character: as written
      } else {
        out += char(b->second);
      }
    }
  }
  return out;
}

std::vector<int32_t> ByteLevelBpe::encode(std::string_view utf8) const {
  std::vector<int32_t> ids;
  if (vocab_.bos >= 0) ids.push_back(vocab_.bos);
  const auto text = tokenize(utf8);
  ids.insert(ids.end(), text.begin(), text.end());
  if (vocab_.end_of_text >= 0) ids.push_back(vocab_.end_of_text);
  return ids;
}

void ByteLevelBpe::truncate(std::vector<int32_t>& ids, int64_t max_length) const {
  if (vocab_.end_of_text < 0) {
    ids.resize(size_t(max_length));
    return;
  }
  ids.resize(size_t(max_length - 1));
  ids.push_back(vocab_.end_of_text);
}

int32_t ByteLevelBpe::pad_id() const {
  if (vocab_.pad >= 0) return vocab_.pad;
  return vocab_.end_of_text >= 0 ? vocab_.end_of_text : 0;
}

std::string ByteLevelBpe::label() const {
  std::string l = std::string("byte-level bpe (") + (vocab_.pre == BpePre::Smollm ? "smollm" : "gpt2") + ")";
  if (!vocab_.source.empty()) l += " of " + std::filesystem::path(vocab_.source).filename().string();
  return l;
}

}  // namespace accel::text
