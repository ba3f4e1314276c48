// The header of a GGUF file (llama.cpp's format for possibly quantized
// weights, the form small pretrained decoders are published in): the magic
// "GGUF", a version (2 or 3), the tensor and key-value counts, the key-value
// metadata (scalars, strings, arrays), each tensor's name, dimensions
// (fastest first), type and offset; the tensor data starts at the next
// multiple of the alignment (general.alignment, else 32). Torch-free, so the
// text layer reads a GGUF's tokenizer through it; the models layer reads its
// tensors (accel/models/gguf.h).
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
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "accel/util/json.h"

namespace accel {

// ggml's type numbers for the types read here.
enum class GgufType : uint32_t { F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q8_0 = 8, BF16 = 30 };

// A tensor type read here: values and bytes per block (F32: 1 and 4; Q4_1: 32 and 20).
struct GgufTypeInfo {
  uint32_t id;
  const char* name;
  int64_t block;
  int64_t block_bytes;
};
// nullptr for a type not read here.
const GgufTypeInfo* gguf_type_info(uint32_t type);
// "Q4_1" etc., or "type N" for a number not read here.
std::string gguf_type_name(uint32_t type);

// The most values a tensor may have (2^40).
constexpr uint64_t kGgufMaxElements = 1ull << 40;

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

// Throws the reader's ConfigError "PATH: gguf: WHAT (tensor TENSOR)".
[[noreturn]] void gguf_error(const std::filesystem::path& path, const std::string& what, const std::string& tensor = "");

}  // namespace accel
