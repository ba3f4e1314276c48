// A one-pass Adam / AdamW update for float32 tensors on the CPU, with no
// LibTorch dependency (lib/kernels/adam.cpp; the optimizer that calls it is
// train::FusedAdam, accel/train/optimizer.h).
//
// Why it exists: torch::optim::Adam updates a parameter in about ten tensor
// ops (mul_, add_, mul_, addcmul_, sqrt, div, add_, addcdiv_, ...), each a
// pass over the parameter's size in memory, several with a temporary. With a
// 22.7M-parameter text encoder (half of it the word embedding, whose gradient
// is dense) that was 97-126 ms of a 340 ms bf16-mixed step on 2 cores, and it
// does not shrink with bf16. This kernel reads p, g, m, v once and writes p,
// m, v once.
//
// Per element, in float32, in this order (torch's formulas; Kingma & Ba, 2015,
// Algorithm 1, with PyTorch's eps placement):
//   g  = grad + weight_decay * p            (Adam's L2 term; not for AdamW)
//   p  = p * (1 - lr * weight_decay)        (AdamW's decoupled decay; not for Adam)
//   m  = beta1 * m + (1 - beta1) * g
//   v  = beta2 * v + ((1 - beta2) * g) * g
//   p  = p - step_size * (m / (sqrt(v) * inv_bc2_sqrt + eps))
// with step_size = lr / (1 - beta1^t) and inv_bc2_sqrt = 1 / sqrt(1 - beta2^t)
// computed in double by the caller and rounded to float once.
//
// Bitwise the same on every ISA and thread count: the file is compiled without
// FMA contraction (-ffp-contract=off), every operation above is an IEEE
// float32 add, multiply, divide or square root (each correctly rounded), and
// elements are independent. It is not bitwise torch::optim::Adam (whose ops
// round in a different order, and which fuses some multiply-adds where its
// vector kernels do); it agrees with it to float32 rounding (tests).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace accel::kernels {

struct AdamScalars {
  float beta1 = 0.9f, one_minus_beta1 = 0.1f;
  float beta2 = 0.999f, one_minus_beta2 = 0.001f;
  float step_size = 0.f;     // lr / (1 - beta1^t)
  float inv_bc2_sqrt = 1.f;  // 1 / sqrt(1 - beta2^t)
  float eps = 1e-8f;
  float weight_decay = 0.f;  // Adam's L2 term (0 for AdamW)
  float decay = 1.f;         // AdamW's 1 - lr * weight_decay (1 for Adam)
};

// The scalars of optimizer step t (1-based) from double hyperparameters.
AdamScalars adam_scalars(double lr, double beta1, double beta2, double eps, double weight_decay,
                         bool decoupled, int64_t t);

// Updates p, m and v (n floats each) in place from g. threads > 1 splits the
// elements into that many contiguous ranges on std::threads (only when each
// range is large enough to pay for a thread); the result does not depend on it.
void adam_step(float* p, const float* g, float* m, float* v, int64_t n, const AdamScalars& s,
               int threads);

// The code path the kernel takes on this CPU: "avx512", "avx2+fma" or "baseline";
// every path this CPU can run, best first; and (tests) cap it at one ("" = best).
const char* adam_isa();
std::vector<std::string> adam_isas();
void adam_force_isa(const std::string& name);

}  // namespace accel::kernels
