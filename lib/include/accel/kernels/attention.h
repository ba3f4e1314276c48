// A fused softmax-attention kernel for CPUs, float32, one (sample, head) at a
// time, with no LibTorch dependency (lib/kernels/attention.cpp).
//
// Why it exists: LibTorch 1.13 (Debian 12's) has no fused attention on CPU
// (at::scaled_dot_product_attention arrived in 2.0), and its CPU bmm runs a
// head's 197x24x197 products one BLAS call at a time, at a fraction of the
// core's peak: attention's bmm was 39% of rung 03's step. This kernel reads q,
// k and v straight out of the in-projection's [S, 3D] rows (no head split
// copies), keeps a head's operands in cache, computes scores, softmax and the
// weighted sum with register-blocked FMA micro-kernels, and writes the output
// in the merged [S, D] layout out_proj reads. The softmax probabilities are
// kept for the backward pass (as eager keeps softmax's output).
//
// Layout for one sample: qkv is [S, 3D] row-major (q at columns [0, D), k at
// [D, 2D), v at [2D, 3D); head h at h*Dh within each), out and dout are
// [S, D], dqkv is [S, 3D], probs is [S, attention_padded(S)].
//
// Key padding (text batches padded to their longest row): a sample attends to
// its first `keys` keys only (1 <= keys <= S); the probabilities of the keys
// after them are exactly 0, so the backward pass, which reads the saved
// probabilities, gives their k and v rows zero gradient without knowing the
// lengths. Queries at padded positions are computed like any other (their
// rows are discarded by the model), as eager masked attention computes them.
//
// Causal (decoder models): query i also attends to keys 0..i only; the
// probabilities above the diagonal are exactly 0, like padded keys', and the
// float32 kernels skip the blocks of the products that hold only those zeros.
// No [S, S] mask is made.
//
// Deterministic: each (sample, head) is computed by one thread in a fixed
// order, so results do not depend on the thread count. The code is compiled
// for AVX-512F, for AVX2+FMA and for the baseline ISA and picks the best the
// CPU has at run time (attention_isa()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace accel::kernels {

// Floats per vector on the ISA in use (16 with AVX-512, else 8), and n rounded
// up to a multiple of it: the row length of the probabilities.
int64_t attention_lanes();
inline int64_t attention_padded(int64_t n) {
  const int64_t w = attention_lanes();
  return (n + w - 1) / w * w;
}

// std::logic_error unless 1 <= keys <= seq.
void attention_check_keys(int64_t keys, int64_t seq);

// Scratch floats one thread needs for one head.
std::size_t attention_forward_scratch(int64_t seq, int64_t head_dim);
std::size_t attention_backward_scratch(int64_t seq, int64_t head_dim);

// out[:, h*Dh:(h+1)*Dh] = softmax(scale * q_h k_h[:keys]^T) v_h[:keys]; probs =
// the softmax, rows of probs_ld = attention_padded(seq) floats, 0 from column
// `keys` on (std::logic_error for another probs_ld or keys outside [1, seq]).
void attention_forward_head(const float* qkv, float* out, float* probs, int64_t probs_ld,
                            int64_t seq, int64_t keys, int64_t dim, int64_t head_dim,
                            int64_t head, float scale, float* scratch, bool causal = false);

// The gradients of q_h, k_h and v_h into dqkv's head-h columns, from dout and
// the forward's probs (`causal` as the forward's: it only skips zeros).
void attention_backward_head(const float* qkv, const float* probs, int64_t probs_ld,
                             const float* dout, float* dqkv, int64_t seq, int64_t dim,
                             int64_t head_dim, int64_t head, float scale, float* scratch,
                             bool causal = false);

// A whole batch, the (sample, head) pairs spread over LibTorch's intra-op
// threads (at::parallel_for; lib/kernels/attention_parallel.cpp). qkv [B, S, 3D],
// out [B, S, D], probs [B, H, S, probs_ld], dout [B, S, D], dqkv [B, S, 3D];
// key_lengths [B]: each sample's `keys` (nullptr: every key).
void attention_forward(const float* qkv, float* out, float* probs, int64_t probs_ld,
                       int64_t batch, int64_t seq, int64_t dim, int64_t heads, float scale,
                       const int32_t* key_lengths = nullptr, bool causal = false);
void attention_backward(const float* qkv, const float* probs, int64_t probs_ld,
                        const float* dout, float* dqkv, int64_t batch, int64_t seq, int64_t dim,
                        int64_t heads, float scale, bool causal = false);

// ---- bfloat16 data on CPUs with AVX512-BF16 (lib/kernels/attention_bf16.cpp)
// The same attention on bf16 qkv/dout (uint16_t bits), products on vdpbf16ps
// with float32 accumulation; probabilities kept in bf16, rows of
// attention_bf16_padded(seq). Only where attention_bf16_supported().
bool attention_bf16_native();  // the CPU has AVX512-BF16 and no cap forbids it
bool attention_bf16_supported(int64_t dim, int64_t head_dim);  // ... and even dims
int64_t attention_bf16_padded(int64_t seq);
std::size_t attention_bf16_forward_scratch(int64_t seq, int64_t head_dim);   // bytes
std::size_t attention_bf16_backward_scratch(int64_t seq, int64_t head_dim);  // bytes
void attention_bf16_forward_head(const uint16_t* qkv, uint16_t* out, uint16_t* probs,
                                 int64_t probs_ld, int64_t seq, int64_t keys, int64_t dim,
                                 int64_t head_dim, int64_t head, float scale, void* scratch,
                                 bool causal = false);
void attention_bf16_backward_head(const uint16_t* qkv, const uint16_t* probs, int64_t probs_ld,
                                  const uint16_t* dout, uint16_t* dqkv, int64_t seq, int64_t dim,
                                  int64_t head_dim, int64_t head, float scale, void* scratch);
void attention_bf16_forward(const uint16_t* qkv, uint16_t* out, uint16_t* probs,
                            int64_t probs_ld, int64_t batch, int64_t seq, int64_t dim,
                            int64_t heads, float scale, const int32_t* key_lengths = nullptr,
                            bool causal = false);
void attention_bf16_backward(const uint16_t* qkv, const uint16_t* probs, int64_t probs_ld,
                             const uint16_t* dout, uint16_t* dqkv, int64_t batch, int64_t seq,
                             int64_t dim, int64_t heads, float scale);

// Whether attention_forward/backward run their heads in parallel in this
// build: at::parallel_for is an inline OpenMP loop in LibTorch's headers, so
// it is parallel only in a translation unit compiled with -fopenmp, which
// CMakeLists.txt does where LibTorch uses the system's libgomp (Debian's
// builds), and not with pip's bundled one (two OpenMP runtimes).
bool attention_parallel();

// The code path the kernels take on this CPU: "avx512+bf16" (float32 on
// AVX-512, bf16 on AVX512-BF16), "avx512", "avx2+fma" or "baseline"; and every
// path this CPU can run, best first.
const char* attention_isa();
std::vector<std::string> attention_isas();

// Tests: cap the path at the named ISA ("" = the best the CPU has).
void attention_force_isa(const std::string& name);

}  // namespace accel::kernels
