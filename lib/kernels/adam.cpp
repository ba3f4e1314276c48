// The one-pass CPU Adam update (accel/kernels/adam.h). No LibTorch headers:
// compiled at -O3 without FMA contraction (CMakeLists.txt), once per ISA, one
// picked at run time; the loop is plain C++ that GCC vectorizes, given
// -fno-math-errno (without it std::sqrt, which may set errno, keeps the whole
// loop scalar).
#include "accel/kernels/adam.h"

#include "isa.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <stdexcept>
#include <thread>

namespace accel::kernels {

namespace {

// One range of elements. __restrict: p, g, m and v never alias (distinct tensors).
#define ACCEL_ADAM_BODY                                                                       \
  void update(float* __restrict p, const float* __restrict g, float* __restrict m,         \
              float* __restrict v, int64_t n, const AdamScalars& s) {                       \
    const float b1 = s.beta1, c1 = s.one_minus_beta1, b2 = s.beta2, c2 = s.one_minus_beta2;  \
    const float step = s.step_size, ib2 = s.inv_bc2_sqrt, eps = s.eps;                      \
    const float wd = s.weight_decay, decay = s.decay;                                        \
    for (int64_t i = 0; i < n; ++i) {                                                        \
      float pi = p[i];                                                                       \
      const float gi = g[i] + wd * pi;                                                       \
      pi = pi * decay;                                                                       \
      const float mi = b1 * m[i] + c1 * gi;                                                  \
      const float vi = b2 * v[i] + (c2 * gi) * gi;                                           \
      m[i] = mi;                                                                             \
      v[i] = vi;                                                                             \
      p[i] = pi - step * (mi / (std::sqrt(vi) * ib2 + eps));                                 \
    }                                                                                        \
  }

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define ACCEL_ADAM_X86 1
namespace avx512 {
#pragma GCC push_options
#pragma GCC target("avx512f,avx2")
ACCEL_ADAM_BODY
#pragma GCC pop_options
}  // namespace avx512
namespace avx2 {
#pragma GCC push_options
#pragma GCC target("avx2")
ACCEL_ADAM_BODY
#pragma GCC pop_options
}  // namespace avx2
#else
#define ACCEL_ADAM_X86 0
#endif
namespace baseline {
ACCEL_ADAM_BODY
}  // namespace baseline
#undef ACCEL_ADAM_BODY

using isa::Level;

// The best path the CPU runs, capped by adam_force_isa (tests).
isa::Dispatch dispatch("adam", ACCEL_ADAM_X86 ? Level::Avx512 : Level::Baseline);

using UpdateFn = void (*)(float*, const float*, float*, float*, int64_t, const AdamScalars&);

UpdateFn update_fn() {
#if ACCEL_ADAM_X86
  switch (dispatch.current()) {
    case Level::Avx512Bf16:
    case Level::Avx512: return avx512::update;
    case Level::Avx2Fma: return avx2::update;
    case Level::Baseline: break;
  }
#endif
  return baseline::update;
}

// Below this many elements per thread a thread costs more than it saves.
constexpr int64_t kMinPerThread = int64_t(1) << 18;

}  // namespace

AdamScalars adam_scalars(double lr, double beta1, double beta2, double eps, double weight_decay,
                         bool decoupled, int64_t t) {
  if (t < 1) throw std::invalid_argument("adam_scalars: step must be >= 1, got " + std::to_string(t));
  AdamScalars s;
  s.beta1 = static_cast<float>(beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  s.beta2 = static_cast<float>(beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  s.step_size = static_cast<float>(lr / (1.0 - std::pow(beta1, static_cast<double>(t))));
  s.inv_bc2_sqrt = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(beta2, static_cast<double>(t))));
  s.eps = static_cast<float>(eps);
  s.weight_decay = decoupled ? 0.f : static_cast<float>(weight_decay);
  s.decay = decoupled ? static_cast<float>(1.0 - lr * weight_decay) : 1.f;
  return s;
}

void adam_step(float* p, const float* g, float* m, float* v, int64_t n, const AdamScalars& s,
               int threads) {
  if (n <= 0) return;
  const UpdateFn fn = update_fn();
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(threads, n / kMinPerThread));
  if (parts == 1) {
    fn(p, g, m, v, n, s);
    return;
  }
  // Ranges rounded to 64 floats (a cache line's multiple), the last takes the rest.
  const int64_t chunk = ((n + parts - 1) / parts + 63) / 64 * 64;
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(parts - 1));
  for (int64_t k = 1; k < parts; ++k) {
    const int64_t lo = k * chunk;
    if (lo >= n) break;
    const int64_t len = std::min(chunk, n - lo);
    pool.emplace_back([=, &s] { fn(p + lo, g + lo, m + lo, v + lo, len, s); });
  }
  fn(p, g, m, v, std::min(chunk, n), s);
  for (auto& t : pool) t.join();
}

const char* adam_isa() { return isa::name(dispatch.current()); }

std::vector<std::string> adam_isas() { return dispatch.names(); }

void adam_force_isa(const std::string& name) { dispatch.force(name); }

}  // namespace accel::kernels
