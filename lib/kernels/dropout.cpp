// Counter-based dropout masks (accel/kernels/dropout.h). No LibTorch headers;
// plain loops that GCC vectorizes at -O3 (CMakeLists.txt).
#include "accel/kernels/dropout.h"

#include "isa.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace accel::kernels {

namespace {

inline uint32_t fmix32(uint32_t h) {  // murmur3's finalizer (a bijection of 32 bits)
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}

// Element i's hash: the low 32 bits of the index, and its high bits folded into
// the seed, so tensors of more than 2^32 elements get distinct masks too.
inline uint32_t hash_of(uint32_t i, uint32_t lo, uint32_t hi) {
  return fmix32(fmix32(i ^ lo) + hi);
}

// One range [begin, end) of the tensor, within one 2^32 block of indices (the
// index's high 32 bits folded into `hi`); indices are global, so ranges agree.
// Compiled per ISA (integer hashing is exact on every one).
#define ACCEL_DROPOUT_BODY                                                                    \
  inline uint32_t fmix(uint32_t h) {                                                        \
    h ^= h >> 16;                                                                           \
    h *= 0x85ebca6bu;                                                                       \
    h ^= h >> 13;                                                                           \
    h *= 0xc2b2ae35u;                                                                       \
    h ^= h >> 16;                                                                           \
    return h;                                                                               \
  }                                                                                         \
  void apply_f32(const float* in, float* out, int64_t begin, int64_t end, uint32_t lo,     \
                 uint32_t hi, uint32_t t, float scale) {                                    \
    for (int64_t j = begin; j < end; ++j) {                                                 \
      const bool keep = fmix(fmix(static_cast<uint32_t>(j) ^ lo) + hi) >= t;                \
      out[j] = keep ? in[j] * scale : 0.f;                                                  \
    }                                                                                       \
  }                                                                                         \
  void apply_bf16(const uint16_t* in, uint16_t* out, int64_t begin, int64_t end,           \
                  uint32_t lo, uint32_t hi, uint32_t t, float scale) {                      \
    for (int64_t j = begin; j < end; ++j) {                                                 \
      const bool keep = fmix(fmix(static_cast<uint32_t>(j) ^ lo) + hi) >= t;                \
      float f;                                                                              \
      uint32_t u = static_cast<uint32_t>(in[j]) << 16;                                      \
      std::memcpy(&f, &u, sizeof f);                                                        \
      f = keep ? f * scale : 0.f;                                                           \
      std::memcpy(&u, &f, sizeof u);                                                        \
      const bool nan = (u & 0x7fffffffu) > 0x7f800000u;                                     \
      const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;                            \
      out[j] = static_cast<uint16_t>(nan ? ((u >> 16) | 0x40u) : r);                        \
    }                                                                                       \
  }

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define ACCEL_DROPOUT_X86 1
namespace avx512 {
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx2")
ACCEL_DROPOUT_BODY
#pragma GCC pop_options
}  // namespace avx512
namespace avx2 {
#pragma GCC push_options
#pragma GCC target("avx2")
ACCEL_DROPOUT_BODY
#pragma GCC pop_options
}  // namespace avx2
#else
#define ACCEL_DROPOUT_X86 0
#endif
namespace baseline {
ACCEL_DROPOUT_BODY
}  // namespace baseline
#undef ACCEL_DROPOUT_BODY

using F32Fn = void (*)(const float*, float*, int64_t, int64_t, uint32_t, uint32_t, uint32_t, float);
using Bf16Fn = void (*)(const uint16_t*, uint16_t*, int64_t, int64_t, uint32_t, uint32_t, uint32_t,
                        float);
struct Fns { F32Fn f32; Bf16Fn bf16; };
using isa::Level;

// The best path the CPU runs, capped by dropout_force_isa (tests).
isa::Dispatch dispatch("dropout", ACCEL_DROPOUT_X86 ? Level::Avx512 : Level::Baseline);

Fns fns() {
#if ACCEL_DROPOUT_X86
  switch (dispatch.current()) {
    case Level::Avx512Bf16:
    case Level::Avx512: return Fns{avx512::apply_f32, avx512::apply_bf16};
    case Level::Avx2Fma: return Fns{avx2::apply_f32, avx2::apply_bf16};
    case Level::Baseline: break;
  }
#endif
  return Fns{baseline::apply_f32, baseline::apply_bf16};
}

// Calls fn(begin, end, hi) over [b, e) cut at 2^32 index blocks.
template <typename Fn>
void by_block(int64_t b, int64_t e, const DropoutMask& m, Fn fn) {
  while (b < e) {
    const uint64_t hi_bits = static_cast<uint64_t>(b) >> 32;
    const int64_t block_end = std::min<int64_t>(e, static_cast<int64_t>((hi_bits + 1) << 32));
    fn(b, block_end, fmix32(m.seed_hi ^ static_cast<uint32_t>(hi_bits)));
    b = block_end;
  }
}

constexpr int64_t kMinPerThread = int64_t(1) << 17;

template <typename Fn>
void split(int64_t n, int threads, Fn fn) {
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(threads, n / kMinPerThread));
  if (parts == 1) {
    fn(0, n);
    return;
  }
  const int64_t chunk = ((n + parts - 1) / parts + 63) / 64 * 64;
  std::vector<std::thread> pool;
  for (int64_t k = 1; k < parts && k * chunk < n; ++k) {
    pool.emplace_back([=] { fn(k * chunk, std::min(n, (k + 1) * chunk)); });
  }
  fn(0, std::min(n, chunk));
  for (auto& t : pool) t.join();
}

}  // namespace

DropoutMask dropout_mask(double p, uint64_t seed) {
  if (!(p > 0.0 && p < 1.0)) {
    throw std::invalid_argument("dropout_mask: p must be in (0, 1), got " + std::to_string(p));
  }
  DropoutMask m;
  m.seed_lo = static_cast<uint32_t>(seed);
  m.seed_hi = static_cast<uint32_t>(seed >> 32);
  m.threshold = static_cast<uint32_t>(std::min(4294967295.0, std::round(p * 4294967296.0)));
  m.scale = static_cast<float>(1.0 / (1.0 - p));
  return m;
}

bool dropout_kept(const DropoutMask& m, int64_t i) {
  const uint64_t u = static_cast<uint64_t>(i);
  return hash_of(static_cast<uint32_t>(u), m.seed_lo, fmix32(m.seed_hi ^ static_cast<uint32_t>(u >> 32))) >=
         m.threshold;
}

void dropout_apply(const float* in, float* out, int64_t n, const DropoutMask& m, int threads) {
  const F32Fn fn = fns().f32;
  split(n, threads, [&](int64_t b, int64_t e) {
    by_block(b, e, m, [&](int64_t lo, int64_t hi_end, uint32_t hi) {
      fn(in, out, lo, hi_end, m.seed_lo, hi, m.threshold, m.scale);
    });
  });
}

void dropout_apply_bf16(const uint16_t* in, uint16_t* out, int64_t n, const DropoutMask& m,
                        int threads) {
  const Bf16Fn fn = fns().bf16;
  split(n, threads, [&](int64_t b, int64_t e) {
    by_block(b, e, m, [&](int64_t lo, int64_t hi_end, uint32_t hi) {
      fn(in, out, lo, hi_end, m.seed_lo, hi, m.threshold, m.scale);
    });
  });
}

const char* dropout_isa() { return isa::name(dispatch.current()); }

std::vector<std::string> dropout_isas() { return dispatch.names(); }

void dropout_force_isa(const std::string& name) { dispatch.force(name); }

}  // namespace accel::kernels
