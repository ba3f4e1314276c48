#include "accel/metrics/hardware.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "accel/precision/catalog.h"

namespace accel::metrics {

namespace {

// Each feature once: its member and its /proc/cpuinfo name, in names() order.
struct Flag {
  bool CpuFeatures::*member;
  const char* name;
};
constexpr Flag kFlags[] = {
    {&CpuFeatures::avx2, "avx2"},          {&CpuFeatures::fma, "fma"},
    {&CpuFeatures::avx512f, "avx512f"},    {&CpuFeatures::avx512bw, "avx512bw"},
    {&CpuFeatures::avx512vl, "avx512vl"},  {&CpuFeatures::avx512dq, "avx512dq"},
    {&CpuFeatures::avx512cd, "avx512cd"},  {&CpuFeatures::avx512_bf16, "avx512_bf16"},
    {&CpuFeatures::avx512_fp16, "avx512_fp16"}, {&CpuFeatures::amx_tile, "amx_tile"},
    {&CpuFeatures::amx_bf16, "amx_bf16"},  {&CpuFeatures::amx_fp16, "amx_fp16"}};

std::string lower(std::string s) {
  for (char& ch : s) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

}  // namespace

std::vector<std::string> CpuFeatures::names() const {
  std::vector<std::string> out;
  for (const auto& f : kFlags) {
    if (this->*f.member) out.emplace_back(f.name);
  }
  return out;
}

CpuFeatures parse_cpu_flags(const std::string& flags) {
  std::set<std::string> set;
  std::istringstream in(flags);
  for (std::string f; in >> f;) set.insert(f);
  CpuFeatures c;
  for (const auto& f : kFlags) c.*f.member = set.count(f.name) > 0;
  return c;
}

namespace {

// The value of a "key\t: value" line of /proc/cpuinfo, or nullopt for another key.
std::optional<std::string> cpuinfo_value(const std::string& line, const std::string& key) {
  if (line.compare(0, key.size(), key) != 0) return std::nullopt;
  size_t i = key.size();
  while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
  if (i >= line.size() || line[i] != ':') return std::nullopt;  // a longer key ("model name")
  ++i;
  while (i < line.size() && line[i] == ' ') ++i;
  return line.substr(i);
}

int cpuinfo_number(const std::string& v) {
  if (v.empty() || v.size() > 6 || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return -1;
  }
  return std::stoi(v);
}

}  // namespace

CpuIdentity parse_cpuinfo(const std::string& text) {
  CpuIdentity out;
  std::istringstream in(text);
  std::string line;
  bool seen_processor = false;
  while (std::getline(in, line)) {
    if (cpuinfo_value(line, "processor")) {
      if (seen_processor) break;  // the first processor's block only
      seen_processor = true;
    } else if (auto v = cpuinfo_value(line, "vendor_id")) {
      out.vendor = *v;
    } else if (auto v = cpuinfo_value(line, "cpu family")) {
      out.family = cpuinfo_number(*v);
    } else if (auto v = cpuinfo_value(line, "model name")) {
      out.model_name = *v;
    } else if (auto v = cpuinfo_value(line, "model")) {
      out.model = cpuinfo_number(*v);
    }
  }
  return out;
}

CpuIdentity cpu_identity() {
  static const CpuIdentity cpu = [] {
    std::ifstream in("/proc/cpuinfo");
    std::ostringstream text;
    text << in.rdbuf();
    return parse_cpuinfo(text.str());
  }();
  return cpu;
}

std::string cpu_class(const CpuIdentity& cpu) {
  if (cpu.family < 0) return "";
  const int m = cpu.model;
  auto in = [m](int lo, int hi) { return m >= lo && m <= hi; };
  if (cpu.vendor == "AuthenticAMD") {
    if (cpu.family == 0x17) return m >= 0x30 ? "zen2" : "zen";
    if (cpu.family == 0x19) return in(0x10, 0x1F) || in(0x60, 0x7F) || in(0xA0, 0xAF) ? "zen4" : "zen3";
    if (cpu.family == 0x1A) return "zen5";
  } else if (cpu.vendor == "GenuineIntel" && cpu.family == 6) {
    switch (m) {
      case 0x3F: return "haswell-x";
      case 0x4F: return "broadwell-x";
      case 0x55: return "skylake-x";  // Skylake, Cascade Lake and Cooper Lake servers
      case 0x6A: case 0x6C: return "icelake-x";
      case 0x8F: return "sapphirerapids";
      case 0xCF: return "emeraldrapids";
      case 0xAD: case 0xAE: return "graniterapids";
      case 0xAF: return "sierraforest";
      default: break;
    }
  }
  return "f" + std::to_string(cpu.family) + "m" + std::to_string(m);
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
  const auto* row = precision::find_precision(precision);
  const std::string low = row ? row->low() : "";
  const bool bf16 = low == "bf16";
  const bool fp16 = low == "fp16";
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
  // OpenBLAS's names for its oldest x86-64 kernels (lower case): what it falls back to.
  static const std::set<std::string> generic = {"prescott", "core2",      "penryn",
                                                "dunnington", "nehalem",  "katmai",
                                                "coppermine", "northwood", "banias",
                                                "unknown"};
  const bool fallback = generic.count(lower(core)) > 0;
  if (!fallback) return "";
  if (cpu.skylakex_class()) return "SkylakeX";
  if (cpu.avx2 && cpu.fma) return "Haswell";
  return "";
}

}  // namespace accel::metrics
