// Dropout masks from a counter-based hash, for float32 and bfloat16 tensors on
// the CPU, with no LibTorch dependency (lib/kernels/dropout.cpp; the autograd
// op is models::dropout, accel/models/attention.h).
//
// Why it exists: LibTorch's CPU dropout draws its mask with bernoulli_, one
// Mersenne Twister draw per element on one thread (Debian's 1.13 has no MKL
// VSL): 45-70 ms of a 340-640 ms text training step on 2 cores, in every
// precision. Here element i of a tensor is kept when a 32-bit hash of (i, seed)
// is at least p * 2^32 (murmur3's finalizer, twice, over the index mixed with
// the two halves of a 64-bit seed drawn from torch's generator), so the mask
// is never stored: the backward pass recomputes it from the seed. One pass
// forward, one backward; results do not depend on the thread count or ISA
// (integer hashing, and one float multiply per element).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace accel::kernels {

struct DropoutMask {
  uint32_t seed_lo = 0, seed_hi = 0;
  uint32_t threshold = 0;  // drop element i where hash(i) < threshold (p * 2^32)
  float scale = 1.f;       // 1 / (1 - p), applied to kept elements
};

// The mask of probability p (0 < p < 1) for a 64-bit seed.
DropoutMask dropout_mask(double p, uint64_t seed);

// out[i] = kept(i) ? in[i] * scale : 0 for n elements (in may equal out);
// bf16 values are uint16 bit patterns, computed in float32, rounded to nearest
// even. threads > 1 splits large tensors into ranges on std::threads.
void dropout_apply(const float* in, float* out, int64_t n, const DropoutMask& m, int threads);
void dropout_apply_bf16(const uint16_t* in, uint16_t* out, int64_t n, const DropoutMask& m,
                        int threads);

// Whether element i is kept (tests).
bool dropout_kept(const DropoutMask& m, int64_t i);

// The code path in use ("avx512", "avx2+fma", "baseline"), the paths this CPU
// runs (best first), and a cap for tests ("" restores the best; a path the
// CPU lacks throws std::invalid_argument). Masks are the same on every path.
const char* dropout_isa();
std::vector<std::string> dropout_isas();
void dropout_force_isa(const std::string& name);

}  // namespace accel::kernels
