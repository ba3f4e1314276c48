// Byte-level BPE, the tokenizer of GPT-2 and of the Llama-family decoders
// published as GGUF (SmolLM2), stage by stage as Hugging Face's `tokenizers`
// runs it for such a model: special tokens matched in the raw text first,
// then the pre-tokenizer (for "smollm": every numeric character a piece of
// its own, then GPT-2's split pattern), each piece's UTF-8 bytes mapped to
// GPT-2's printable characters, and the merges applied lowest rank first. So
// the ids equal `tokenizers`' for the same tokens and merges (tests compare
// them on a fixture made by tests/reference/hf_bpe_ids.py from the installed
// SmolLM2 GGUF). Torch-free: Unicode categories from utf8proc, the GGUF's
// metadata from accel/util/gguf_header.h.
//
//   auto tok = text::gguf_bpe("SmolLM2-135M-Instruct.Q4_1.gguf");
//   tok->encode("Hello, world!");  // [19556, 28, 905, 17, 0]: the text and <|endoftext|>
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "accel/text/tokenizers.h"

namespace accel::text {

// How a text is split before the merges: "gpt2" (GPT-2's pattern
// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)
// or "smollm" (each \p{N} character isolated first, as `tokenizers`'
// Digits(individual_digits) and llama.cpp's "smollm" pre-tokenizer).
enum class BpePre { Gpt2, Smollm };

// The pieces of a text (code points), in order; their concatenation is the text.
std::vector<std::u32string> bpe_pre_tokenize(std::u32string_view text, BpePre pre);
// GPT-2's byte-to-character map: printable bytes (0x21-0x7E, 0xA1-0xAC,
// 0xAE-0xFF) stand for themselves, the other 68 for U+0100 upwards in byte
// order (space: U+0120 'Ġ', LF: U+010A 'Ċ').
char32_t bpe_byte_char(uint8_t byte);

struct BpeVocabulary {
  std::vector<std::string> tokens;    // id -> token text (byte-mapped characters)
  std::vector<std::string> merges;    // "left right", rank = index
  std::vector<std::string> specials;  // matched literally in raw text (control and user-defined tokens)
  BpePre pre = BpePre::Gpt2;
  int32_t bos = -1;          // put before every text where >= 0 (a file whose add_bos_token is true)
  int32_t end_of_text = -1;  // appended to every text where >= 0 (the document separator)
  int32_t pad = -1;          // what padding carries (else end_of_text)
  std::string source;        // the file, for messages and the label
};

class ByteLevelBpe final : public Tokenizer {
 public:
  // std::invalid_argument for no tokens, a merge without a space or given
  // twice, a merge or special token whose text is not a token, or an id out
  // of range. A byte whose character is not a token is left out of the texts
  // it is in (as `tokenizers` leaves it, with no unknown token).
  explicit ByteLevelBpe(BpeVocabulary vocab);
  // The ids of a text without BOS and end-of-text (Utf8Error on bad bytes).
  // Linear in the text but for the merges, O(n log n) in a piece's bytes.
  std::vector<int32_t> tokenize(std::string_view utf8) const;
  // The text of ids (the byte map undone); special tokens as their text.
  std::string decode(const std::vector<int32_t>& ids) const;

  // Tokenizer: BOS (where the file adds one), tokenize, the end-of-text
  // token; truncation keeps the end-of-text token last.
  std::vector<int32_t> encode(std::string_view utf8) const override;
  void truncate(std::vector<int32_t>& ids, int64_t max_length) const override;
  int32_t pad_id() const override;
  int32_t vocab_size() const override { return int32_t(vocab_.tokens.size()); }
  std::string label() const override;

 private:
  struct Merge {
    int32_t rank, merged;
  };
  void merge_piece(const std::u32string& piece, std::vector<int32_t>& ids) const;
  BpeVocabulary vocab_;
  std::unordered_map<std::string, int32_t> ids_;
  std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> rank, merged id
  int32_t byte_id_[256];                        // a byte's token, or -1
  std::vector<std::u32string> specials_;        // vocab_.specials decoded, longest first
  std::unordered_map<char32_t, uint8_t> char_byte_;
};

// The tokenizer a GGUF file carries (tokenizer.ggml.model "gpt2": tokens,
// merges, token types, pre-tokenizer, special ids, add_bos_token):
// ConfigError naming the file where it is missing, malformed, or carries
// another kind of tokenizer or a pre-tokenizer not read here.
std::unique_ptr<ByteLevelBpe> gguf_bpe(const std::filesystem::path& file);

}  // namespace accel::text
