// Reading GGUF files (llama.cpp's format for possibly quantized weights, the
// form small pretrained decoders are published in): the magic "GGUF", a
// version (2 or 3), the tensor and key-value counts, the key-value metadata
// (scalars, strings, arrays), each tensor's name, dimensions (fastest first),
// type and offset, then the tensor data from the next multiple of the
// alignment (general.alignment, else 32).
//
// The reader treats the file as untrusted input: every length, count,
// dimension, type and offset is checked against the file's size before
// anything is allocated, and every problem is an accel::ConfigError
// "FILE: gguf: <what> (tensor NAME)". A malformed file never crashes the
// process. Stricter than ggml where ggml would read nonsense: every string is
// UTF-8 (keys and names at most 64 KiB), an array holds scalars or strings
// (not arrays, as ggml), a tensor has 1 to 4 dimensions of at least 1.
// Little-endian files on little-endian hosts only (a file of the other byte
// order is said to be one).
//
// Tensors come back as float32 in torch's order (GGUF's dimensions
// reversed: GGUF [576, 192] is a [192, 576] weight), dequantized as ggml does:
// F32, F16, BF16 as they are; Q8_0 (blocks of 32: an fp16 scale d, 32 int8)
// d * q; Q4_0 (d, 16 bytes of nibbles) d * (q - 8); Q4_1 (d, an fp16 minimum
// m, 16 bytes) d * q + m; in a block, the low nibbles are its first 16
// values and the high nibbles its last 16.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "accel/util/json.h"

namespace accel::models {

// ggml's type numbers for the types read here.
enum class GgufType : uint32_t { F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q8_0 = 8, BF16 = 30 };

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // as the file gives them: fastest first
  uint32_t type = 0;
  uint64_t offset = 0;  // from the start of the data section
  uint64_t bytes = 0;   // its data's size
  int64_t numel() const;
  // Torch's shape: the dimensions reversed.
  std::vector<int64_t> shape() const;
};

struct GgufFile {
  std::filesystem::path path;
  uint32_t version = 0;
  // The metadata as JSON: numbers, booleans, strings and arrays of them.
  std::map<std::string, nlohmann::json> metadata;
  std::vector<GgufTensorInfo> tensors;  // file order
  uint64_t data_offset = 0;             // where the data section starts in the file
  const GgufTensorInfo* find(const std::string& name) const;
};

// The header: metadata and tensor infos, every tensor's extent checked
// against the file. Reads no tensor data.
GgufFile read_gguf_header(const std::filesystem::path& path);
// One tensor, dequantized to float32 in torch's order. ConfigError naming the
// tensor for a name the file lacks or a type not read here.
torch::Tensor read_gguf_tensor(const GgufFile& file, const std::string& name);
// Every tensor, by name.
std::map<std::string, torch::Tensor> read_gguf(const std::filesystem::path& path);

// "Q4_1" etc., or "type N" for a number not read here.
std::string gguf_type_name(uint32_t type);

}  // namespace accel::models
