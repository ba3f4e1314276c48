// The output projection and the next-token cross-entropy as one op over
// chunks of tokens, so the [tokens, vocab] logits are never held whole: a
// chunk's logits are made, turned into its loss and its gradient (softmax
// minus the one-hot target), and dropped before the next. The gradients of
// the hidden states and of the weight are made in the forward (one matmul
// fewer than making the logits again in the backward, as Liger Kernel's
// fused linear cross-entropy does) and kept, in float32, until the backward
// scales them by its incoming gradient.
//
// Under autocast (bf16-mixed, 16-mixed) the matmuls run in the autocast
// dtype and the softmax in float32, as autocast runs a linear and a
// cross-entropy; a gradient is scaled by 1 / tokens only in float32, after
// its matmul, so a 16-bit product never underflows for a long batch.
#pragma once

#include <cstdint>

#include <torch/torch.h>

#include "accel/data/batch.h"

namespace accel::models {

// The mean cross-entropy of hidden [..., H] projected by weight [V, H]
// against labels [...] (int64; `ignore_index` where there is no target),
// over the labels that are not ignored: float32 scalar, NaN when every label
// is ignored (as cross_entropy's mean). `chunk` tokens at a time (<= 0: all
// at once). Differentiable in hidden and weight where grad mode is on.
torch::Tensor linear_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                   const torch::Tensor& labels, int64_t chunk,
                                   int64_t ignore_index = data::kNoTarget);

}  // namespace accel::models
