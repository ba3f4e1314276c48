// The fused CPU attention kernel (see accel/kernels/attention.h). No LibTorch
// headers here: this file compiles in seconds, without the precompiled header,
// at -O3 with FMA contraction (CMakeLists.txt). The body is compiled once per
// ISA and one is picked at run time.
#include "accel/kernels/attention.h"

#include <atomic>
#include <stdexcept>
#include <string>

namespace accel::kernels {

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define ACCEL_ATTENTION_X86 1
namespace avx512 {
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
#define ACCEL_VW 16
#include "attention_body.inc"
#undef ACCEL_VW
#pragma GCC pop_options
}  // namespace avx512
namespace avx2 {
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#define ACCEL_VW 8
#include "attention_body.inc"
#undef ACCEL_VW
#pragma GCC pop_options
}  // namespace avx2
#else
#define ACCEL_ATTENTION_X86 0
#endif

namespace baseline {
#define ACCEL_VW 8
#include "attention_body.inc"
#undef ACCEL_VW
}  // namespace baseline

namespace {

enum class Isa { Baseline = 0, Avx2 = 1, Avx512 = 2, Avx512Bf16 = 3 };
constexpr int kBestIsa = static_cast<int>(Isa::Avx512Bf16);

// The best the CPU has, capped by attention_force_isa (tests).
std::atomic<int> isa_cap{kBestIsa};

Isa cpu_best() {
#if ACCEL_ATTENTION_X86
  static const Isa best = __builtin_cpu_supports("avx512bf16") &&
                                  __builtin_cpu_supports("avx512bw") &&
                                  __builtin_cpu_supports("avx512vl") &&
                                  __builtin_cpu_supports("avx512dq")
                              ? Isa::Avx512Bf16
                          : __builtin_cpu_supports("avx512f")                                 ? Isa::Avx512
                          : (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) ? Isa::Avx2
                                                                                               : Isa::Baseline;
  return best;
#else
  return Isa::Baseline;
#endif
}

Isa current() {
  const int best = static_cast<int>(cpu_best());
  const int cap = isa_cap.load(std::memory_order_relaxed);
  return static_cast<Isa>(best < cap ? best : cap);
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Avx512Bf16: return "avx512+bf16";
    case Isa::Avx512: return "avx512";
    case Isa::Avx2: return "avx2+fma";
    case Isa::Baseline: break;
  }
  return "baseline";
}

void check_keys(int64_t keys, int64_t seq) { attention_check_keys(keys, seq); }

void check_probs_ld(int64_t probs_ld, int64_t seq) {
  if (probs_ld != attention_padded(seq)) {
    throw std::logic_error("attention kernel: probabilities laid out with rows of " +
                           std::to_string(probs_ld) + " floats, this ISA (" +
                           isa_name(current()) + ") needs " +
                           std::to_string(attention_padded(seq)));
  }
}

// The float32 kernels of one ISA.
struct Fp32Kernels {
  int64_t lanes;
  std::size_t (*forward_scratch)(int64_t, int64_t);
  std::size_t (*backward_scratch)(int64_t, int64_t);
  void (*forward)(const float*, float*, float*, int64_t, int64_t, int64_t, int64_t, int64_t, float,
                  float*);
  void (*backward)(const float*, const float*, const float*, float*, int64_t, int64_t, int64_t,
                   int64_t, float, float*);
};

#define ACCEL_FP32_KERNELS(ns, lanes)                                                       \
  Fp32Kernels {                                                                             \
    lanes, ns::forward_scratch, ns::backward_scratch, ns::forward_head, ns::backward_head \
  }

// Those the ISA in use runs; AVX-512 serves both AVX-512 levels.
const Fp32Kernels& fp32() {
  static const Fp32Kernels base = ACCEL_FP32_KERNELS(baseline, 8);
#if ACCEL_ATTENTION_X86
  static const Fp32Kernels a2 = ACCEL_FP32_KERNELS(avx2, 8);
  static const Fp32Kernels a512 = ACCEL_FP32_KERNELS(avx512, 16);
  switch (current()) {
    case Isa::Avx512Bf16:
    case Isa::Avx512: return a512;
    case Isa::Avx2: return a2;
    case Isa::Baseline: break;
  }
#endif
  return base;
}
#undef ACCEL_FP32_KERNELS

}  // namespace

bool attention_bf16_native() { return current() == Isa::Avx512Bf16; }

void attention_check_keys(int64_t keys, int64_t seq) {
  if (keys < 1 || keys > seq) {
    throw std::logic_error("attention kernel: " + std::to_string(keys) +
                           " unmasked keys for a sequence of " + std::to_string(seq) +
                           " (needs 1..sequence length)");
  }
}

int64_t attention_lanes() { return fp32().lanes; }

std::size_t attention_forward_scratch(int64_t seq, int64_t head_dim) {
  return fp32().forward_scratch(seq, head_dim);
}

std::size_t attention_backward_scratch(int64_t seq, int64_t head_dim) {
  return fp32().backward_scratch(seq, head_dim);
}

void attention_forward_head(const float* qkv, float* out, float* probs, int64_t probs_ld,
                            int64_t seq, int64_t keys, int64_t dim, int64_t head_dim,
                            int64_t head, float scale, float* scratch) {
  check_probs_ld(probs_ld, seq);
  check_keys(keys, seq);
  fp32().forward(qkv, out, probs, seq, keys, dim, head_dim, head, scale, scratch);
}

void attention_backward_head(const float* qkv, const float* probs, int64_t probs_ld,
                             const float* dout, float* dqkv, int64_t seq, int64_t dim,
                             int64_t head_dim, int64_t head, float scale, float* scratch) {
  check_probs_ld(probs_ld, seq);
  fp32().backward(qkv, probs, dout, dqkv, seq, dim, head_dim, head, scale, scratch);
}

const char* attention_isa() { return isa_name(current()); }

std::vector<std::string> attention_isas() {
  std::vector<std::string> out;
  for (int i = static_cast<int>(cpu_best()); i >= 0; --i) out.push_back(isa_name(static_cast<Isa>(i)));
  return out;
}

void attention_force_isa(const std::string& name) {
  if (name.empty()) {
    isa_cap.store(kBestIsa);
    return;
  }
  for (int i = 0; i <= kBestIsa; ++i) {
    if (name == isa_name(static_cast<Isa>(i))) {
      isa_cap.store(i);
      return;
    }
  }
  throw std::invalid_argument("attention_force_isa: unknown ISA \"" + name +
                              "\" (avx512+bf16, avx512, avx2+fma, baseline, or empty for the best)");
}

}  // namespace accel::kernels
