// The batch-level attention kernels: (sample, head) pairs over LibTorch's
// intra-op threads. Only ATen/Parallel.h from LibTorch, no precompiled header:
// this file is compiled with -fopenmp where LibTorch's OpenMP is the system's
// libgomp (see attention.h, attention_parallel()).
#include <ATen/Parallel.h>

#include <cstddef>
#include <vector>

#include "accel/kernels/attention.h"

namespace accel::kernels {

bool attention_parallel() {
#ifdef _OPENMP
  return true;
#else
  return false;
#endif
}

namespace {

// Runs fn(sample, head, scratch) for every (sample, head) pair, the pairs split
// over the intra-op threads; each thread gets its own scratch of `bytes`.
template <typename Fn>
void for_each_head(int64_t batch, int64_t heads, std::size_t bytes, const Fn& fn) {
  at::parallel_for(0, batch * heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<std::max_align_t> scratch(bytes / sizeof(std::max_align_t) + 1);
    for (int64_t i = begin; i < end; ++i) fn(i / heads, i % heads, scratch.data());
  });
}

}  // namespace

void attention_forward(const float* qkv, float* out, float* probs, int64_t probs_ld,
                       int64_t batch, int64_t seq, int64_t dim, int64_t heads, float scale,
                       const int32_t* key_lengths, bool causal) {
  const int64_t hd = dim / heads;
  for_each_head(batch, heads, sizeof(float) * attention_forward_scratch(seq, hd),
                [&](int64_t b, int64_t h, void* scratch) {
                  const int64_t keys = key_lengths ? key_lengths[b] : seq;
                  attention_forward_head(qkv + b * seq * 3 * dim, out + b * seq * dim,
                                         probs + (b * heads + h) * seq * probs_ld, probs_ld, seq,
                                         keys, dim, hd, h, scale, static_cast<float*>(scratch),
                                         causal);
                });
}

void attention_backward(const float* qkv, const float* probs, int64_t probs_ld,
                        const float* dout, float* dqkv, int64_t batch, int64_t seq, int64_t dim,
                        int64_t heads, float scale, bool causal) {
  const int64_t hd = dim / heads;
  for_each_head(batch, heads, sizeof(float) * attention_backward_scratch(seq, hd),
                [&](int64_t b, int64_t h, void* scratch) {
                  attention_backward_head(qkv + b * seq * 3 * dim,
                                          probs + (b * heads + h) * seq * probs_ld, probs_ld,
                                          dout + b * seq * dim, dqkv + b * seq * 3 * dim, seq, dim,
                                          hd, h, scale, static_cast<float*>(scratch), causal);
                });
}

void attention_bf16_forward(const uint16_t* qkv, uint16_t* out, uint16_t* probs,
                            int64_t probs_ld, int64_t batch, int64_t seq, int64_t dim,
                            int64_t heads, float scale, const int32_t* key_lengths,
                            bool causal) {
  const int64_t hd = dim / heads;
  for_each_head(batch, heads, attention_bf16_forward_scratch(seq, hd),
                [&](int64_t b, int64_t h, void* scratch) {
                  const int64_t keys = key_lengths ? key_lengths[b] : seq;
                  attention_bf16_forward_head(qkv + b * seq * 3 * dim, out + b * seq * dim,
                                              probs + (b * heads + h) * seq * probs_ld, probs_ld,
                                              seq, keys, dim, hd, h, scale, scratch, causal);
                });
}

void attention_bf16_backward(const uint16_t* qkv, const uint16_t* probs, int64_t probs_ld,
                             const uint16_t* dout, uint16_t* dqkv, int64_t batch, int64_t seq,
                             int64_t dim, int64_t heads, float scale) {
  const int64_t hd = dim / heads;
  for_each_head(batch, heads, attention_bf16_backward_scratch(seq, hd),
                [&](int64_t b, int64_t h, void* scratch) {
                  attention_bf16_backward_head(qkv + b * seq * 3 * dim,
                                               probs + (b * heads + h) * seq * probs_ld, probs_ld,
                                               dout + b * seq * dim, dqkv + b * seq * 3 * dim, seq,
                                               dim, hd, h, scale, scratch);
                });
}

}  // namespace accel::kernels
