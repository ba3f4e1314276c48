// GGUF tensors (gguf.h): the header read by accel/util/gguf_header.h, field
// by field against the file's size, then each tensor's bytes read and
// dequantized.
#include "accel/models/gguf.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include "accel/util/errors.h"

namespace accel::models {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace gguf_detail {

[[noreturn]] void fail(const fs::path& path, const std::string& what, const std::string& tensor = "") {
  gguf_error(path, what, tensor);
}

float half_to_float(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return static_cast<float>(c10::Half(bits, c10::Half::from_bits()));
}

float bf16_to_float(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return static_cast<float>(c10::BFloat16(bits, c10::BFloat16::from_bits()));
}

// ggml's dequantization, block by block, into `out` (n values).
void dequantize(uint32_t type, const uint8_t* src, float* out, int64_t n) {
  switch (type) {
    case 0:
      std::memcpy(out, src, static_cast<size_t>(n) * 4);
      return;
    case 1:
      for (int64_t i = 0; i < n; ++i) out[i] = half_to_float(src + 2 * i);
      return;
    case 30:
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(src + 2 * i);
      return;
    case 8:  // Q8_0: d, then 32 int8
      for (int64_t b = 0; b < n / 32; ++b) {
        const uint8_t* blk = src + 34 * b;
        const float d = half_to_float(blk);
        for (int j = 0; j < 32; ++j) out[32 * b + j] = d * static_cast<float>(static_cast<int8_t>(blk[2 + j]));
      }
      return;
    case 2:  // Q4_0: d, then 16 bytes; low nibbles first, each less 8
      for (int64_t b = 0; b < n / 32; ++b) {
        const uint8_t* blk = src + 18 * b;
        const float d = half_to_float(blk);
        for (int j = 0; j < 16; ++j) {
          out[32 * b + j] = static_cast<float>((blk[2 + j] & 0x0F) - 8) * d;
          out[32 * b + j + 16] = static_cast<float>((blk[2 + j] >> 4) - 8) * d;
        }
      }
      return;
    case 3:  // Q4_1: d, m, then 16 bytes; low nibbles first
      for (int64_t b = 0; b < n / 32; ++b) {
        const uint8_t* blk = src + 20 * b;
        const float d = half_to_float(blk);
        const float m = half_to_float(blk + 2);
        for (int j = 0; j < 16; ++j) {
          out[32 * b + j] = static_cast<float>(blk[4 + j] & 0x0F) * d + m;
          out[32 * b + j + 16] = static_cast<float>(blk[4 + j] >> 4) * d + m;
        }
      }
      return;
    default:
      break;
  }
}

}  // namespace gguf_detail

torch::Tensor read_gguf_tensor(const GgufFile& file, const std::string& name) {
  using namespace gguf_detail;
  const auto* t = file.find(name);
  if (t == nullptr) fail(file.path, "no tensor of this name", name);
  const auto* info = gguf_type_info(t->type);
  if (info == nullptr) fail(file.path, gguf_type_name(t->type) + " is not read here", name);
  // The extent again from the dimensions and type (a GgufFile may have been
  // made or changed by its caller): dequantize never reads past what was read.
  uint64_t numel = 1;
  for (const auto d : t->dims) {
    if (d <= 0 || uint64_t(d) > kGgufMaxElements || numel > kGgufMaxElements / uint64_t(d)) {
      fail(file.path, "dimensions out of range", name);
    }
    numel *= uint64_t(d);
  }
  if (t->dims.empty() || t->dims[0] % info->block != 0 ||
      t->bytes != numel / uint64_t(info->block) * uint64_t(info->block_bytes)) {
    fail(file.path, "its size does not agree with its dimensions and type", name);
  }
  torch::Tensor out;
  try {
    std::vector<uint8_t> raw(static_cast<size_t>(t->bytes));
    std::ifstream in(file.path, std::ios::binary);
    if (!in) fail(file.path, "cannot open the file", name);
    in.seekg(static_cast<std::streamoff>(file.data_offset + t->offset));
    in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(raw.size()));
    if (!in || static_cast<uint64_t>(in.gcount()) != t->bytes) {
      fail(file.path, "file ended early (changed since its header was read?)", name);
    }
    out = torch::empty({static_cast<int64_t>(numel)}, torch::kFloat32);
    dequantize(t->type, raw.data(), out.data_ptr<float>(), static_cast<int64_t>(numel));
  } catch (const std::bad_alloc&) {
    fail(file.path, "cannot allocate " + std::to_string(numel) + " values", name);
  } catch (const c10::Error&) {
    fail(file.path, "cannot allocate " + std::to_string(numel) + " values", name);
  }
  return out.reshape(t->shape());
}

std::map<std::string, torch::Tensor> read_gguf(const fs::path& path) {
  const auto file = read_gguf_header(path);
  std::map<std::string, torch::Tensor> out;
  for (const auto& t : file.tensors) out.emplace(t.name, read_gguf_tensor(file, t.name));
  return out;
}

}  // namespace accel::models
