// The fused CPU attention kernel (see accel/kernels/attention.h). No LibTorch
// headers here: this file compiles in a second, without the precompiled header,
// at -O3 with FMA contraction (CMakeLists.txt).
#include "accel/kernels/attention.h"

#include <atomic>

namespace accel::kernels {

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define ACCEL_ATTENTION_AVX2 1
namespace avx2 {
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#include "attention_body.inc"
#pragma GCC pop_options
}  // namespace avx2
#else
#define ACCEL_ATTENTION_AVX2 0
#endif

namespace baseline {
#include "attention_body.inc"
}  // namespace baseline

namespace {

std::atomic<bool> force_baseline{false};

bool use_avx2() {
#if ACCEL_ATTENTION_AVX2
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has && !force_baseline.load(std::memory_order_relaxed);
#else
  return false;
#endif
}

}  // namespace

std::size_t attention_forward_scratch(int64_t seq, int64_t head_dim) {
  return static_cast<std::size_t>(head_dim * padded(seq) + 2 * seq * padded(head_dim));
}

std::size_t attention_backward_scratch(int64_t seq, int64_t head_dim) {
  return static_cast<std::size_t>(head_dim * padded(seq) + 4 * seq * padded(head_dim) +
                                  seq * padded(seq));
}

void attention_forward_head(const float* qkv, float* out, float* probs, int64_t seq,
                            int64_t dim, int64_t head_dim, int64_t head, float scale,
                            float* scratch) {
#if ACCEL_ATTENTION_AVX2
  if (use_avx2()) {
    avx2::forward_head(qkv, out, probs, seq, dim, head_dim, head, scale, scratch);
    return;
  }
#endif
  baseline::forward_head(qkv, out, probs, seq, dim, head_dim, head, scale, scratch);
}

void attention_backward_head(const float* qkv, const float* probs, const float* dout,
                             float* dqkv, int64_t seq, int64_t dim, int64_t head_dim,
                             int64_t head, float scale, float* scratch) {
#if ACCEL_ATTENTION_AVX2
  if (use_avx2()) {
    avx2::backward_head(qkv, probs, dout, dqkv, seq, dim, head_dim, head, scale, scratch);
    return;
  }
#endif
  baseline::backward_head(qkv, probs, dout, dqkv, seq, dim, head_dim, head, scale, scratch);
}

const char* attention_isa() { return use_avx2() ? "avx2+fma" : "baseline"; }

void attention_force_baseline(bool on) { force_baseline.store(on, std::memory_order_relaxed); }

}  // namespace accel::kernels
