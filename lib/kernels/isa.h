// The x86-64 code paths the CPU kernels are compiled for, which one this CPU
// runs, and the cap tests lower so that every path a CPU can run is checked
// on it. One place for what the attention, Adam and dropout kernels each
// used to decide on their own. No LibTorch header (the kernels skip the PCH).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ACCEL_KERNELS_X86 1
#else
#define ACCEL_KERNELS_X86 0
#endif

namespace accel::kernels::isa {

// Best last. Avx2Fma: AVX2 with FMA. Avx512: AVX-512 F, BW, VL and DQ.
// Avx512Bf16: that and AVX512-BF16 (the bf16 attention's dot products).
enum class Level : int { Baseline = 0, Avx2Fma = 1, Avx512 = 2, Avx512Bf16 = 3 };

inline const char* name(Level l) {
  switch (l) {
    case Level::Avx512Bf16: return "avx512+bf16";
    case Level::Avx512: return "avx512";
    case Level::Avx2Fma: return "avx2+fma";
    case Level::Baseline: break;
  }
  return "baseline";
}

// The best level this CPU runs (Baseline off x86-64), at most the level
// ACCEL_KERNEL_ISA names ("avx2+fma", ...: every kernel as a CPU without the
// higher levels would run it; bench/avx2_proxy.sh).
inline Level cpu_best() {
#if ACCEL_KERNELS_X86
  static const Level best = [] {
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    Level l = Level::Baseline;
    if (avx512 && __builtin_cpu_supports("avx512bf16")) {
      l = Level::Avx512Bf16;
    } else if (avx512) {
      l = Level::Avx512;
    } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
      l = Level::Avx2Fma;
    }
    if (const char* cap = std::getenv("ACCEL_KERNEL_ISA")) {
      for (int i = 0; i < int(l); ++i) {
        if (std::string(cap) == name(Level(i))) l = Level(i);
      }
    }
    return l;
  }();
  return best;
#else
  return Level::Baseline;
#endif
}

// One kernel's choice: the best level it has code for (`top`) that the CPU
// runs, lowered by force() (tests; "" restores the best).
class Dispatch {
 public:
  constexpr Dispatch(const char* kernel, Level top) : kernel_(kernel), top_(top), cap_(int(top)) {}

  Level current() const {
    return Level(std::min({int(cpu_best()), int(top_), cap_.load(std::memory_order_relaxed)}));
  }
  // The levels this CPU runs for this kernel, best first.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (int i = std::min(int(cpu_best()), int(top_)); i >= 0; --i) out.push_back(name(Level(i)));
    return out;
  }
  void force(const std::string& level) {
    if (level.empty()) {
      cap_.store(int(top_));
      return;
    }
    std::string known;
    for (const auto& n : names()) {
      if (n == level) {
        for (int i = 0; i <= int(top_); ++i) {
          if (level == name(Level(i))) cap_.store(i);
        }
        return;
      }
      known += (known.empty() ? "" : ", ") + n;
    }
    throw std::invalid_argument(std::string(kernel_) + "_force_isa: \"" + level +
                                "\" is not a path this CPU runs (" + known + ", or empty for the best)");
  }

 private:
  const char* kernel_;
  Level top_;
  std::atomic<int> cap_;
};

}  // namespace accel::kernels::isa
