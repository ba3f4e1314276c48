// What the hardware a run lands on can do natively: the CPU's
// precision-relevant instruction sets (from /proc/cpuinfo's flags) and, from
// them, whether a training precision runs on native kernels or is emulated.
// On CPUs without AVX512-BF16 or AMX, LibTorch computes bf16 matmuls by
// converting to fp32 and back (measured about 12x slower per step than
// 32-true on a 2-core AVX2 EPYC); users must be told before a run.
#pragma once

#include <string>
#include <vector>

namespace accel::metrics {

struct CpuFeatures {
  bool avx2 = false, fma = false, avx512f = false, avx512bw = false, avx512vl = false,
       avx512dq = false, avx512cd = false, avx512_bf16 = false, avx512_fp16 = false,
       amx_tile = false, amx_bf16 = false, amx_fp16 = false;
  // The flags above that are set, under /proc/cpuinfo's names, in the order declared.
  std::vector<std::string> names() const;
  bool native_bf16() const { return avx512_bf16 || amx_bf16; }
  bool native_fp16() const { return avx512_fp16 || amx_fp16; }
  // The AVX-512 subsets OpenBLAS's SkylakeX kernels use.
  bool skylakex_class() const { return avx512f && avx512bw && avx512vl && avx512dq && avx512cd; }
};

// Parses a /proc/cpuinfo "flags" value (space-separated names).
CpuFeatures parse_cpu_flags(const std::string& flags);

// The flags of this machine's first CPU. ACCEL_CPU_FLAGS, when set, replaces
// them (to see what a run would do on another CPU, e.g. "avx2 fma"; the tests
// use it); the result then records that the flags were overridden.
std::string cpu_flags_line();
bool cpu_flags_overridden();
CpuFeatures cpu_features();

// Which CPU this is, from /proc/cpuinfo's first processor: "vendor_id",
// "cpu family" and "model" (numbers; -1 where absent, as on some arm64
// kernels) and "model name". A cloud VM's model name is often generic ("AMD
// EPYC", "Intel Xeon Processor"), so the family and model are what tell a
// Zen 4 from a Zen 5 or a Sapphire Rapids from an Emerald Rapids, whose
// kernels and speeds differ.
struct CpuIdentity {
  std::string vendor, model_name;
  int family = -1, model = -1;
};
CpuIdentity parse_cpuinfo(const std::string& text);
CpuIdentity cpu_identity();  // this machine's (read once)

// The CPU's microarchitecture class: "zen2" ... "zen5" for AMD families 0x17
// to 0x1A, "skylake-x", "icelake-x", "sapphirerapids", "emeraldrapids",
// "graniterapids" and others for Intel family 6 server models (Linux's
// arch/x86/include/asm/intel-family.h; AMD's family/model ranges from its
// processor programming references), "f<family>m<model>" for one not in the
// table, "" when the family is not known.
std::string cpu_class(const CpuIdentity& cpu);

// How a precision runs on a device type ("cpu", "cuda"):
//   support "native" | "emulated"; warning is one line ("" when native) that
//   says what to expect and what to use instead.
struct PrecisionSupport {
  std::string support = "native";
  std::string warning;
  bool emulated() const { return support == "emulated"; }
};
PrecisionSupport precision_support(const std::string& precision, const std::string& device_type,
                                   const CpuFeatures& cpu);

// OpenBLAS picks its kernels from the CPU model at load time, and an OpenBLAS
// older than the CPU does not know the model and falls back to generic SSE3
// kernels ("Prescott"): Debian 12's 0.3.21 on an Emerald Rapids Xeon (family 6
// model 207) ran 1-thread fp32 matmuls at 29 GFLOP/s instead of 111 with the
// SkylakeX kernels, and the vit_tiny fp32 train step at 460 ms instead of 282.
// The core OpenBLAS chose in this process ("" when no OpenBLAS is loaded):
std::string openblas_core();
// What OPENBLAS_CORETYPE should be for this CPU when `core` is such a generic
// fallback: "SkylakeX" (AVX-512 F/BW/VL/DQ/CD), "Haswell" (AVX2 + FMA); ""
// when OpenBLAS chose a real core or nothing better is known.
std::string better_openblas_coretype(const std::string& core, const CpuFeatures& cpu);

}  // namespace accel::metrics
