// Reading and writing .safetensors files (the format Hugging Face and timm
// publish weights in): an 8-byte little-endian header length N, N bytes of
// JSON {"name": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
// "__metadata__": {str: str}}, then the tensor bytes (offsets relative to the
// byte buffer after the header).
//
// The reader treats the file as untrusted input: every length, offset, shape
// and dtype is checked before anything is allocated, and every problem is an
// accel::ConfigError "FILE: safetensors: <what> (tensor NAME)". A malformed
// file never crashes the process. Little-endian hosts only (x86-64, aarch64).
#pragma once

#include <filesystem>
#include <map>
#include <string>

#include <torch/torch.h>

namespace accel::models {

// Same alias as in weights.h (a redeclaration of the same type is allowed), so
// this header does not need the model headers.
using NamedTensors = std::map<std::string, torch::Tensor>;

struct SafetensorsFile {
  NamedTensors tensors;                         // CPU tensors, file dtypes
  std::map<std::string, std::string> metadata;  // "__metadata__", may be empty
};

// Supported dtypes: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL.
SafetensorsFile read_safetensors_file(const std::filesystem::path& path);
NamedTensors read_safetensors(const std::filesystem::path& path);

// Writes tensors (any device; made contiguous CPU copies) in name order with
// a header padded to 8 bytes, to a temporary file renamed over `path`.
// Unsupported dtypes or a tensor called "__metadata__" throw ConfigError;
// I/O failures throw RunError. Both name the file.
void write_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// "F32" etc. for a supported torch dtype; throws ConfigError otherwise.
std::string safetensors_dtype_name(torch::ScalarType type);

}  // namespace accel::models
