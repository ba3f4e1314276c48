// The fused CPU attention kernel (see accel/kernels/attention.h). No LibTorch
// headers here: this file compiles in seconds, without the precompiled header,
// at -O3 with FMA contraction (CMakeLists.txt). The body is compiled once per
// ISA and one is picked at run time.
#include "accel/kernels/attention.h"

#include "isa.h"

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

using isa::Level;

// The best path the CPU runs, capped by attention_force_isa (tests).
isa::Dispatch dispatch("attention", ACCEL_ATTENTION_X86 ? Level::Avx512Bf16 : Level::Baseline);

Level current() { return dispatch.current(); }

void check_keys(int64_t keys, int64_t seq) { attention_check_keys(keys, seq); }

void check_probs_ld(int64_t probs_ld, int64_t seq) {
  if (probs_ld != attention_padded(seq)) {
    throw std::logic_error("attention kernel: probabilities laid out with rows of " +
                           std::to_string(probs_ld) + " floats, this ISA (" +
                           isa::name(current()) + ") needs " +
                           std::to_string(attention_padded(seq)));
  }
}

// The float32 kernels of one ISA.
struct Fp32Kernels {
  int64_t lanes;
  std::size_t (*forward_scratch)(int64_t, int64_t);
  std::size_t (*backward_scratch)(int64_t, int64_t);
  void (*forward)(const float*, float*, float*, int64_t, int64_t, bool, int64_t, int64_t, int64_t,
                  float, float*);
  void (*backward)(const float*, const float*, const float*, float*, int64_t, bool, int64_t,
                   int64_t, int64_t, float, float*);
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
    case Level::Avx512Bf16:
    case Level::Avx512: return a512;
    case Level::Avx2Fma: return a2;
    case Level::Baseline: break;
  }
#endif
  return base;
}
#undef ACCEL_FP32_KERNELS

}  // namespace

bool attention_bf16_native() { return current() == Level::Avx512Bf16; }

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
                            int64_t head, float scale, float* scratch, bool causal) {
  check_probs_ld(probs_ld, seq);
  check_keys(keys, seq);
  fp32().forward(qkv, out, probs, seq, keys, causal, dim, head_dim, head, scale, scratch);
}

void attention_backward_head(const float* qkv, const float* probs, int64_t probs_ld,
                             const float* dout, float* dqkv, int64_t seq, int64_t dim,
                             int64_t head_dim, int64_t head, float scale, float* scratch,
                             bool causal) {
  check_probs_ld(probs_ld, seq);
  fp32().backward(qkv, probs, dout, dqkv, seq, causal, dim, head_dim, head, scale, scratch);
}

const char* attention_isa() { return isa::name(current()); }

std::vector<std::string> attention_isas() { return dispatch.names(); }

void attention_force_isa(const std::string& name) { dispatch.force(name); }

}  // namespace accel::kernels
