#include "accel/metrics/hardware.h"

#include <dlfcn.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

namespace accel::metrics {

std::vector<std::string> CpuFeatures::names() const {
  std::vector<std::string> out;
  const std::pair<bool, const char*> all[] = {
      {avx2, "avx2"},          {fma, "fma"},           {avx512f, "avx512f"},
      {avx512bw, "avx512bw"},  {avx512vl, "avx512vl"}, {avx512dq, "avx512dq"},
      {avx512cd, "avx512cd"},  {avx512_bf16, "avx512_bf16"}, {avx512_fp16, "avx512_fp16"},
      {amx_tile, "amx_tile"},  {amx_bf16, "amx_bf16"}, {amx_fp16, "amx_fp16"}};
  for (const auto& [on, name] : all) {
    if (on) out.emplace_back(name);
  }
  return out;
}

CpuFeatures parse_cpu_flags(const std::string& flags) {
  std::set<std::string> set;
  std::istringstream in(flags);
  for (std::string f; in >> f;) set.insert(f);
  auto has = [&](const char* f) { return set.count(f) > 0; };
  CpuFeatures c;
  c.avx2 = has("avx2");
  c.fma = has("fma");
  c.avx512f = has("avx512f");
  c.avx512bw = has("avx512bw");
  c.avx512vl = has("avx512vl");
  c.avx512dq = has("avx512dq");
  c.avx512cd = has("avx512cd");
  c.avx512_bf16 = has("avx512_bf16");
  c.avx512_fp16 = has("avx512_fp16");
  c.amx_tile = has("amx_tile");
  c.amx_bf16 = has("amx_bf16");
  c.amx_fp16 = has("amx_fp16");
  return c;
}

bool cpu_flags_overridden() { return std::getenv("ACCEL_CPU_FLAGS") != nullptr; }

std::string cpu_flags_line() {
  if (const char* over = std::getenv("ACCEL_CPU_FLAGS")) return over;
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) == 0) {
      const auto colon = line.find(':');
      return colon == std::string::npos ? "" : line.substr(colon + 1);
    }
  }
  return "";
}

CpuFeatures cpu_features() { return parse_cpu_flags(cpu_flags_line()); }

PrecisionSupport precision_support(const std::string& precision, const std::string& device_type,
                                   const CpuFeatures& cpu) {
  PrecisionSupport s;
  if (device_type != "cpu") return s;  // CUDA: bf16/fp16 tensor cores from sm_80 / sm_70
  const bool bf16 = precision.rfind("bf16", 0) == 0;
  const bool fp16 = precision.rfind("16-", 0) == 0;
  if (bf16 && !cpu.native_bf16()) {
    s.support = "emulated";
    s.warning = precision +
                " is emulated on this CPU (no AVX512-BF16 or AMX-BF16): expect steps about "
                "10x slower than 32-true, not faster; use runtime.precision=32-true for speed";
  } else if (fp16 && !cpu.native_fp16()) {
    s.support = "emulated";
    s.warning = precision +
                " is emulated on this CPU (no AVX512-FP16 or AMX-FP16): expect steps slower "
                "than 32-true; use runtime.precision=32-true for speed";
  }
  return s;
}

std::string openblas_core() {
  using CoreName = char* (*)();
  auto* fn = reinterpret_cast<CoreName>(::dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (fn == nullptr) return "";
  const char* name = fn();
  return name ? name : "";
}

std::string better_openblas_coretype(const std::string& core, const CpuFeatures& cpu) {
  // OpenBLAS's names for its oldest x86-64 kernels: what it falls back to.
  static const std::set<std::string> generic = {"Prescott", "Core2",  "Penryn",  "Dunnington",
                                                "Nehalem",  "Katmai", "Coppermine", "Northwood",
                                                "Banias",   "Unknown"};
  std::string lower;
  for (char ch : core) lower += char(std::tolower(static_cast<unsigned char>(ch)));
  bool fallback = false;
  for (const auto& g : generic) {
    std::string gl;
    for (char ch : g) gl += char(std::tolower(static_cast<unsigned char>(ch)));
    fallback = fallback || gl == lower;
  }
  if (!fallback) return "";
  if (cpu.skylakex_class()) return "SkylakeX";
  if (cpu.avx2 && cpu.fma) return "Haswell";
  return "";
}

}  // namespace accel::metrics
