// The attention the models run (accel/models/attention.h): LibTorch's SDPA
// on 2.x, the fused CPU kernel as an autograd op on 1.13, the explicit form
// otherwise.
#include "accel/models/attention.h"

#include <atomic>
#include <cmath>
#include <sstream>
#include <vector>

#include <ATen/record_function.h>

#include "accel/kernels/attention.h"
#include "accel/kernels/dropout.h"
#include "accel/util/torch_compat.h"

namespace accel::models {

namespace {

std::atomic<AttentionImpl> g_attention_impl{AttentionImpl::Auto};

// The fused kernel as an autograd op: forward saves qkv and the softmax
// probabilities. A bfloat16 qkv (bf16-mixed: autocast ran the in-projection
// in bf16) takes the AVX512-BF16 kernel where the CPU has it (bf16 products,
// float32 accumulation and softmax); elsewhere it is computed in float32 and
// returned in bf16. Each (sample, head) is computed whole by one thread, so
// results do not depend on the thread count.
struct FusedAttentionFn : torch::autograd::Function<FusedAttentionFn> {
  // lengths: int32 [B] keys per sample, or empty (every key; never undefined:
  // LibTorch 1.13's Function::apply reads every tensor argument's device).
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& qkv_in,
                               int64_t heads, const torch::Tensor& lengths, bool causal) {
    // The input's shape is what a step counter reads its FLOPs from.
    RECORD_FUNCTION("accel::fused_attention", std::vector<c10::IValue>{qkv_in});
    const int64_t B = qkv_in.size(0), S = qkv_in.size(1), D = qkv_in.size(2) / 3;
    const int64_t Dh = D / heads;
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(Dh)));
    const auto dtype = qkv_in.scalar_type();
    const int32_t* keys = lengths.numel() > 0 ? lengths.data_ptr<int32_t>() : nullptr;
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["causal"] = causal;
    ctx->saved_data["dtype"] = static_cast<int64_t>(dtype);
    if (dtype == torch::kBFloat16 && kernels::attention_bf16_supported(D, Dh)) {
      auto qkv = qkv_in.contiguous();
      const int64_t Sp = kernels::attention_bf16_padded(S);
      auto out = torch::empty({B, S, D}, qkv.options());
      auto probs = torch::empty({B, heads, S, Sp}, qkv.options());
      kernels::attention_bf16_forward(bf16_bits(qkv), bf16_bits(out), bf16_bits(probs), Sp, B,
                                      S, D, heads, scale, keys, causal);
      ctx->save_for_backward({qkv, probs});
      return out;
    }
    auto qkv = qkv_in.to(torch::kFloat).contiguous();
    const int64_t Sp = kernels::attention_padded(S);
    auto out = torch::empty({B, S, D}, qkv.options());
    auto probs = torch::empty({B, heads, S, Sp}, qkv.options());
    kernels::attention_forward(qkv.data_ptr<float>(), out.data_ptr<float>(),
                               probs.data_ptr<float>(), Sp, B, S, D, heads, scale, keys, causal);
    ctx->save_for_backward({qkv, probs});
    return out.to(dtype);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    RECORD_FUNCTION("accel::fused_attention_backward", std::vector<c10::IValue>{saved[0]});
    const auto& qkv = saved[0];
    const auto& probs = saved[1];
    const int64_t heads = ctx->saved_data["heads"].toInt();
    const bool causal = ctx->saved_data["causal"].toBool();
    const auto dtype = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    const int64_t B = qkv.size(0), S = qkv.size(1), D = qkv.size(2) / 3, Dh = D / heads;
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(Dh)));
    if (probs.scalar_type() == torch::kBFloat16) {  // the forward took the bf16 kernel
      auto dout = grads[0].to(torch::kBFloat16).contiguous();
      auto dqkv = torch::empty_like(qkv);
      kernels::attention_bf16_backward(bf16_bits(qkv), bf16_bits(probs), probs.size(3),
                                       bf16_bits(dout), bf16_bits(dqkv), B, S, D, heads, scale);
      return {dqkv, torch::Tensor(), torch::Tensor(), torch::Tensor()};
    }
    auto dout = grads[0].to(torch::kFloat).contiguous();
    auto dqkv = torch::empty_like(qkv);
    kernels::attention_backward(qkv.data_ptr<float>(), probs.data_ptr<float>(), probs.size(3),
                                dout.data_ptr<float>(), dqkv.data_ptr<float>(), B, S, D, heads,
                                scale, causal);
    return {dqkv.to(dtype), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }

  static uint16_t* bf16_bits(const torch::Tensor& t) {
    return reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>());
  }
};

// Counter-based dropout as an autograd op: forward keeps the seed, backward
// applies the same mask to the gradient.
struct DropoutFn : torch::autograd::Function<DropoutFn> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               double p) {
    RECORD_FUNCTION("accel::dropout", std::vector<c10::IValue>{});
    // A 64-bit seed from the default generator (two 32-bit draws: portable
    // across LibTorch versions, and it advances the generator as a draw should).
    const auto draw = torch::randint(int64_t(1) << 32, {2}, torch::kLong);
    const auto* d = draw.data_ptr<int64_t>();
    const uint64_t seed = (static_cast<uint64_t>(d[0]) << 32) | static_cast<uint64_t>(d[1]);
    ctx->saved_data["seed"] = static_cast<int64_t>(seed);
    ctx->saved_data["p"] = p;
    return masked(x, p, seed);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    RECORD_FUNCTION("accel::dropout_backward", std::vector<c10::IValue>{});
    const auto seed = static_cast<uint64_t>(ctx->saved_data["seed"].toInt());
    const double p = ctx->saved_data["p"].toDouble();
    return {masked(grads[0], p, seed), torch::Tensor()};
  }
  static torch::Tensor masked(const torch::Tensor& in, double p, uint64_t seed) {
    const auto x = in.contiguous();
    auto out = torch::empty_like(x, torch::MemoryFormat::Contiguous);
    const auto mask = kernels::dropout_mask(p, seed);
    const int threads = std::max(1, at::get_num_threads());
    if (x.scalar_type() == torch::kBFloat16) {
      kernels::dropout_apply_bf16(reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>()),
                                  reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>()),
                                  x.numel(), mask, threads);
    } else {
      kernels::dropout_apply(x.data_ptr<float>(), out.data_ptr<float>(), x.numel(), mask, threads);
    }
    return out;
  }
};

}  // namespace

torch::Tensor dropout(const torch::Tensor& x, double p, bool training) {
  if (!training || p <= 0.0) return x;
  const auto t = x.scalar_type();
  if (p < 1.0 && x.device().is_cpu() && x.layout() == torch::kStrided &&
      (t == torch::kFloat || t == torch::kBFloat16)) {
    return DropoutFn::apply(x, p);
  }
  return torch::dropout(x, p, /*train=*/true);
}

void set_attention_impl(AttentionImpl impl) { g_attention_impl.store(impl); }
AttentionImpl attention_impl() { return g_attention_impl.load(); }

std::string attention_kernel_name(c10::DeviceType device) {
  if (attention_impl() == AttentionImpl::Explicit) return "explicit";
  // Off the CPU neither the fused CPU kernel nor the explicit bf16 form is
  // taken (self_attention): LibTorch's own kernel, or the explicit ops.
  if (device != c10::DeviceType::CPU) {
    return compat::kHasSdpa ? "sdpa (ATen picks flash, memory-efficient, cuDNN or math)" : "explicit";
  }
  if (compat::kHasSdpa) return "sdpa (explicit for bf16 on a CPU)";
  return std::string("fused-cpu (") + kernels::attention_isa() + ")";
}

bool takes_fused_attention(const torch::Tensor& qkv, int64_t heads, bool dropout_active) {
  return attention_impl() == AttentionImpl::Auto && !compat::kHasSdpa &&
         fused_attention_applies(qkv, heads, dropout_active);
}

torch::Tensor unfused_attention(const torch::Tensor& qkv, int64_t heads, double dropout_p,
                                bool training, bool explicit_form, const KeyPadding& padding,
                                bool causal) {
  const auto B = qkv.size(0), S = qkv.size(1), D = qkv.size(2) / 3;
  // [B,S,3D] -> [3,B,H,S,Dh], contiguous so every matmul operand is too.
  auto parts = qkv.view({B, S, 3, heads, D / heads}).permute({2, 0, 3, 1, 4}).contiguous().unbind(0);
  auto out = explicit_form
                 ? compat::attention_explicit(parts[0], parts[1], parts[2], dropout_p, training,
                                              padding.mask, &models::dropout, causal)
                 : compat::attention(parts[0], parts[1], parts[2], dropout_p, training,
                                     padding.mask, &models::dropout, causal);
  return out.transpose(1, 2).reshape({B, S, D});
}

KeyPadding key_padding(const torch::Tensor& attention_mask) {
  const auto& m = attention_mask;
  if (!m.defined() || m.dim() != 2) {
    throw std::invalid_argument("attention_mask: expected [batch, seq] 0/1");
  }
  KeyPadding p;
  const auto real = m.ne(0);
  p.mask = real.view({m.size(0), 1, 1, m.size(1)});
  if (!m.device().is_cpu()) return p;  // the fused kernel (and its lengths) is CPU only
  const auto lengths = real.sum(1);
  const auto prefix = torch::arange(m.size(1), lengths.options()).unsqueeze(0) < lengths.unsqueeze(1);
  if (!torch::equal(prefix, real) || lengths.min().item<int64_t>() < 1) {
    throw std::invalid_argument("attention_mask: every row must be ones then zeros (right padding) "
                                "with at least one real token");
  }
  p.lengths = lengths.to(torch::kInt).contiguous();
  return p;
}

torch::Tensor self_attention(const torch::Tensor& qkv, int64_t heads, double dropout_p,
                             bool training, const KeyPadding& padding, bool causal) {
  const bool dropout_active = training && dropout_p > 0.0;
  if (takes_fused_attention(qkv, heads, dropout_active)) {
    return fused_attention(qkv, heads, padding, causal);
  }
  // 2.x's CPU SDPA in bf16 runs the ViT ladder's training step 1.42x slower
  // than the explicit form (245 vs 172 ms, PyPI torch 2.11, 2 threads,
  // AVX512-BF16 Xeon; its flash backward alone 4x its float32 time), while in
  // float32 it is the faster one (92 vs 111 ms): bf16 on a CPU takes the
  // explicit form (bench/bench_train_step.cpp, TrainStep ..._explicit_attention).
  const bool cpu_bf16 = qkv.device().is_cpu() && qkv.scalar_type() == torch::kBFloat16;
  return unfused_attention(qkv, heads, dropout_p, training,
                           attention_impl() == AttentionImpl::Explicit || cpu_bf16, padding, causal);
}

bool fused_attention_applies(const torch::Tensor& qkv, int64_t heads, bool dropout_active) {
  const auto t = qkv.scalar_type();
  return !dropout_active && qkv.device().is_cpu() && (t == torch::kFloat || t == torch::kBFloat16) &&
         qkv.dim() == 3 && heads > 0 && qkv.size(2) % (3 * heads) == 0 && qkv.size(1) > 0 &&
         !qkv.is_sparse();
}

torch::Tensor fused_attention(const torch::Tensor& qkv, int64_t heads, const KeyPadding& padding,
                              bool causal) {
  if (!fused_attention_applies(qkv, heads, false)) {
    std::ostringstream msg;
    msg << "fused_attention: needs a CPU float32 or bfloat16 [B, S, 3D] tensor with D divisible "
           "by heads ("
        << heads << "); got " << qkv.scalar_type() << " " << qkv.sizes() << " on "
        << qkv.device();
    throw std::invalid_argument(msg.str());
  }
  if (padding.defined() && (!padding.lengths.defined() || padding.lengths.size(0) != qkv.size(0))) {
    throw std::invalid_argument("fused_attention: the key padding has no lengths for this batch "
                                "(a CPU attention_mask of the same batch makes them)");
  }
  return FusedAttentionFn::apply(
      qkv, heads, padding.defined() ? padding.lengths : torch::empty({0}, torch::kInt), causal);
}

}  // namespace accel::models
