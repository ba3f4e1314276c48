// The tensors of a GGUF file (its header: accel/util/gguf_header.h, read
// against the file's size, every problem a ConfigError naming the file and
// the tensor).
//
// Tensors come back as float32 in torch's order (GGUF's dimensions
// reversed: GGUF [576, 192] is a [192, 576] weight), dequantized as ggml does:
// F32, F16, BF16 as they are; Q8_0 (blocks of 32: an fp16 scale d, 32 int8)
// d * q; Q4_0 (d, 16 bytes of nibbles) d * (q - 8); Q4_1 (d, an fp16 minimum
// m, 16 bytes) d * q + m; in a block, the low nibbles are its first 16
// values and the high nibbles its last 16.
#pragma once

#include <filesystem>
#include <map>
#include <string>

#include <torch/torch.h>

#include "accel/util/gguf_header.h"

namespace accel::models {

using accel::GgufFile;
using accel::GgufTensorInfo;
using accel::GgufType;
using accel::gguf_type_name;
using accel::read_gguf_header;

// One tensor, dequantized to float32 in torch's order. ConfigError naming the
// tensor for a name the file lacks or a type not read here.
torch::Tensor read_gguf_tensor(const GgufFile& file, const std::string& name);
// Every tensor, by name.
std::map<std::string, torch::Tensor> read_gguf(const std::filesystem::path& path);

}  // namespace accel::models
