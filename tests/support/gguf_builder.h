// A GGUF file written byte by byte, for the tests of the GGUF reader, the
// decoder's GGUF adapter and the GGUF's tokenizer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace accel_test {

// As llama.cpp's writer lays a file out: header, metadata, tensor infos,
// then each tensor's bytes at the next multiple of 32.
struct GgufBuilder {
  std::string meta, infos, data;
  uint64_t n_kv = 0, n_tensors = 0;
  uint32_t version = 3;
  static void raw(std::string& out, const void* p, size_t n) { out.append(static_cast<const char*>(p), n); }
  template <class T>
  static void put(std::string& out, T v) { raw(out, &v, sizeof v); }
  static void str(std::string& out, const std::string& s) {
    put<uint64_t>(out, s.size());
    out += s;
  }
  GgufBuilder& kv_str(const std::string& k, const std::string& v) {
    str(meta, k), put<uint32_t>(meta, 8), str(meta, v), ++n_kv;
    return *this;
  }
  GgufBuilder& kv_u32(const std::string& k, uint32_t v) {
    str(meta, k), put<uint32_t>(meta, 4), put<uint32_t>(meta, v), ++n_kv;
    return *this;
  }
  GgufBuilder& kv_f32(const std::string& k, float v) {
    str(meta, k), put<uint32_t>(meta, 6), put<float>(meta, v), ++n_kv;
    return *this;
  }
  GgufBuilder& kv_strings(const std::string& k, const std::vector<std::string>& v) {
    str(meta, k), put<uint32_t>(meta, 9), put<uint32_t>(meta, 8), put<uint64_t>(meta, v.size());
    for (const auto& x : v) str(meta, x);
    ++n_kv;
    return *this;
  }
  GgufBuilder& kv_bool(const std::string& k, bool v) {
    str(meta, k), put<uint32_t>(meta, 7), put<uint8_t>(meta, v ? 1 : 0), ++n_kv;
    return *this;
  }
  GgufBuilder& kv_i32s(const std::string& k, const std::vector<int32_t>& v) {
    str(meta, k), put<uint32_t>(meta, 9), put<uint32_t>(meta, 5), put<uint64_t>(meta, v.size());
    for (auto x : v) put<int32_t>(meta, x);
    ++n_kv;
    return *this;
  }
  // A tensor's info and its bytes, at the next multiple of 32 in the data.
  GgufBuilder& tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type, const std::string& bytes) {
    while (data.size() % 32 != 0) data += '\0';
    str(infos, name), put<uint32_t>(infos, uint32_t(dims.size()));
    for (auto d : dims) put<uint64_t>(infos, d);
    put<uint32_t>(infos, type), put<uint64_t>(infos, data.size());
    data += bytes;
    ++n_tensors;
    return *this;
  }
  std::string bytes() const {
    std::string out = "GGUF";
    put<uint32_t>(out, version), put<uint64_t>(out, n_tensors), put<uint64_t>(out, n_kv);
    out += meta + infos;
    while (out.size() % 32 != 0) out += '\0';
    return out + data;
  }
};

}  // namespace accel_test
