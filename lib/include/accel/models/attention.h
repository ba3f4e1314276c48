// Which softmax attention the models run, and the fused CPU kernel as an
// autograd op (lib/models/attention.cpp over lib/kernels/attention.cpp).
// Every path takes an optional key-padding mask (text batches padded to
// their longest row): SDPA and the explicit form as a boolean mask, the
// fused kernel as per-sample key counts; and `causal` (decoders: query i
// attends to keys 0..i): SDPA's is_causal (with key padding, one combined
// mask), the explicit form's lower-triangular mask, the fused kernel's own
// rule (no mask made).
//
// Auto (the default) picks, per call:
//   - LibTorch's at::scaled_dot_product_attention where it exists (2.0+),
//     except for bf16 on a CPU (slower there than the explicit form, 1.42x on
//     the ViT step: attention.cpp) and, on a CPU in training with attention
//     dropout, the explicit form with models::dropout (SDPA's math path there);
//   - else, on a CPU float32 or bfloat16 tensor with no attention dropout,
//     accel-bench's fused kernel (accel/kernels/attention.h; bf16 on the
//     AVX512-BF16 kernel where the CPU has it, else computed in float32): the
//     case of Debian's 1.13;
//   - else the explicit form (matmul, softmax, dropout, matmul).
// Explicit forces the explicit form on every version (benchmarks compare the
// two; tests use it as the reference).
#pragma once

#include <cstdint>
#include <string>

#include <torch/torch.h>

namespace accel::models {

enum class AttentionImpl { Auto, Explicit };

// Key padding of a batch, from its attention_mask (int64 [B, S], 1 for a real
// token, each row's ones first: right padding, as every accel-bench collator
// pads). `mask` is bool [B, 1, 1, S] on the mask's device (true = attend);
// `lengths` is int32 [B] on the CPU, for the fused kernel, made only for a
// CPU mask (where the kernel runs). std::invalid_argument for a mask that is
// not right-padded or has a row without a real token.
struct KeyPadding {
  torch::Tensor mask, lengths;
  bool defined() const { return mask.defined(); }
};
KeyPadding key_padding(const torch::Tensor& attention_mask);

// Process-wide, like LibTorch's own kernel switches; set before a run.
// Dropout as the models run it: in training, with 0 < p < 1, on a CPU
// float32 or bfloat16 tensor, the counter-based mask of kernels/dropout.h (a
// 64-bit seed drawn from torch's default generator per call, so
// torch::manual_seed and the checkpointed generator state decide it; the
// backward pass recomputes the mask from the seed, nothing is stored);
// anywhere else torch::dropout. Not torch's mask stream: the same keep
// probability and scaling, other elements dropped.
torch::Tensor dropout(const torch::Tensor& x, double p, bool training);

void set_attention_impl(AttentionImpl impl);
AttentionImpl attention_impl();

// What Auto runs here for a model on `device` without attention dropout. On
// a CPU: "fused-cpu (avx512+bf16)", "fused-cpu (avx512)", "fused-cpu
// (avx2+fma)", "fused-cpu (baseline)", "sdpa (explicit for bf16 on a CPU)"
// or "explicit"; on a GPU: "sdpa (ATen picks flash, memory-efficient, cuDNN
// or math)" or "explicit". Recorded in every result's env block.
std::string attention_kernel_name(c10::DeviceType device = c10::DeviceType::CPU);

// True when the fused kernel takes this in-projection output: CPU, float32 or
// bfloat16, [B, S, 3D] with D divisible by heads, and no dropout to apply.
bool fused_attention_applies(const torch::Tensor& qkv, int64_t heads, bool dropout_active);

// The choice Auto makes for this in-projection output (see above).
bool takes_fused_attention(const torch::Tensor& qkv, int64_t heads, bool dropout_active);

// The same attention without the fused kernel: heads split out of qkv
// [B, S, 3D] into contiguous [B, H, S, Dh] operands, LibTorch's SDPA (2.x) or
// the explicit form (1.13, or always with `explicit_form`), heads merged back
// into [B, S, D]. The model's path when the fused kernel does not apply, and
// the reference tests and benchmarks compare the kernel with.
torch::Tensor unfused_attention(const torch::Tensor& qkv, int64_t heads, double dropout_p,
                                bool training, bool explicit_form,
                                const KeyPadding& padding = {}, bool causal = false);

// softmax(q k^T / sqrt(Dh)) v for every head, from the in-projection's output
// qkv [B, S, 3D] (q, k, v each [B, S, H*Dh]) to the merged-head [B, S, D] that
// out_proj reads. Differentiable (once) with respect to qkv.
torch::Tensor fused_attention(const torch::Tensor& qkv, int64_t heads,
                              const KeyPadding& padding = {}, bool causal = false);

// The attention a model runs for its in-projection output: the fused kernel
// where takes_fused_attention, else unfused_attention (SDPA on 2.x).
torch::Tensor self_attention(const torch::Tensor& qkv, int64_t heads, double dropout_p,
                             bool training, const KeyPadding& padding = {}, bool causal = false);

}  // namespace accel::models
