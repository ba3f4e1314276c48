// Every difference between the LibTorch versions accel-bench supports lives
// here (Debian 12's 1.13, Debian 13's 2.6, pip/zip LibTorch 2.x with CUDA),
// guarded by TORCH_VERSION_MAJOR/MINOR. Nothing else checks versions.
#pragma once

#include <string>

#include <torch/torch.h>
#include <torch/version.h>

#define ACCEL_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||        \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace accel::compat {

inline std::string torch_version() { return TORCH_VERSION; }

// True where at::scaled_dot_product_attention exists (2.0+): flash and
// memory-efficient kernels on GPU, a fused kernel on CPU.
constexpr bool kHasSdpa = ACCEL_TORCH_AT_LEAST(2, 0);

// Softmax attention over [B, H, S, Dh] contiguous q, k, v.
// 2.x: at::scaled_dot_product_attention. 1.13: the explicit form, written with
// contiguous matmul operands (1.13's CPU bmm loops per batch on a transposed
// operand, ~10x slower).
inline torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, double dropout_p,
                               bool training) {
#if ACCEL_TORCH_AT_LEAST(2, 0)
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{},
                                          training ? dropout_p : 0.0,
                                          /*is_causal=*/false);
#else
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  auto scores = torch::matmul(q * scale, k.transpose(-2, -1).contiguous());
  auto weights = torch::softmax(scores, -1);
  if (training && dropout_p > 0.0) {
    weights = torch::dropout(weights, dropout_p, /*train=*/true);
  }
  return torch::matmul(weights, v);
#endif
}

// The explicit attention on every version: the reference SDPA is checked
// against in tests.
inline torch::Tensor attention_reference(const torch::Tensor& q,
                                         const torch::Tensor& k,
                                         const torch::Tensor& v) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  auto scores = torch::matmul(q * scale, k.transpose(-2, -1).contiguous());
  return torch::matmul(torch::softmax(scores, -1), v);
}

}  // namespace accel::compat
