// torch first: glog (through torch) defines CHECK, doctest must win.
#include <torch/torch.h>

#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <string>


#include "accel/kernels/attention.h"
#include "accel/kernels/dropout.h"
#include "accel/models/attention.h"
#include "accel/models/vit.h"
#include "accel/util/errors.h"
#include "accel/util/torch_compat.h"

using accel::models::ViTSpec;
using accel::models::VisionTransformer;

namespace {
// The explicit attention on the fused kernel's [B, S, 3D] input, as the
// model's own explicit path computes it.
torch::Tensor explicit_attention(const torch::Tensor& qkv, int64_t heads) {
  return accel::models::unfused_attention(qkv, heads, 0.0, false, /*explicit_form=*/true);
}

// Forward output and qkv's gradient under a fixed upstream gradient.
std::pair<torch::Tensor, torch::Tensor> attention_and_grad(
    const torch::Tensor& qkv0, int64_t heads, const torch::Tensor& upstream, bool fused) {
  auto qkv = qkv0.clone().requires_grad_(true);
  auto out = fused ? accel::models::fused_attention(qkv, heads) : explicit_attention(qkv, heads);
  out.backward(upstream);
  return {out.detach(), qkv.grad()};
}

// Restores the kernels' ISA choice and the thread count after a test.
struct KernelStateGuard {
  int threads = torch::get_num_threads();
  ~KernelStateGuard() {
    accel::kernels::attention_force_isa("");
    accel::kernels::dropout_force_isa("");
    accel::models::set_attention_impl(accel::models::AttentionImpl::Auto);
    torch::set_num_threads(threads);
  }
};

ViTSpec tiny(int classes = 5) {
  auto s = accel::models::vit_preset("vit_tiny_fmnist");
  s.num_classes = classes;
  return s;
}
}  // namespace

TEST_CASE("model: vit_b_16 has torchvision's 86567656 parameters") {
  const auto spec = accel::models::vit_preset("vit_b_16");
  CHECK(accel::models::vit_param_count(spec) == 86567656);
  torch::NoGradGuard guard;
  VisionTransformer model(spec);
  CHECK(accel::models::count_parameters(*model) == 86567656);
}

TEST_CASE("model: parameter names follow torchvision's VisionTransformer") {
  auto spec = tiny();
  spec.depth = 2;
  VisionTransformer model(spec);
  std::set<std::string> names;
  for (const auto& item : model->named_parameters()) names.insert(item.key());
  const char* expected[] = {
      "conv_proj.weight",
      "conv_proj.bias",
      "class_token",
      "encoder.pos_embedding",
      "encoder.layers.encoder_layer_0.ln_1.weight",
      "encoder.layers.encoder_layer_0.ln_1.bias",
      "encoder.layers.encoder_layer_0.self_attention.in_proj_weight",
      "encoder.layers.encoder_layer_0.self_attention.in_proj_bias",
      "encoder.layers.encoder_layer_0.self_attention.out_proj.weight",
      "encoder.layers.encoder_layer_0.self_attention.out_proj.bias",
      "encoder.layers.encoder_layer_0.ln_2.weight",
      "encoder.layers.encoder_layer_0.mlp.0.weight",
      "encoder.layers.encoder_layer_0.mlp.0.bias",
      "encoder.layers.encoder_layer_0.mlp.3.weight",
      "encoder.layers.encoder_layer_1.mlp.3.bias",
      "encoder.ln.weight",
      "encoder.ln.bias",
      "heads.head.weight",
      "heads.head.bias",
  };
  for (const char* name : expected) {
    INFO(name);
    CHECK(names.count(name) == 1);
  }
  // conv w/b + class token, pos, final ln w/b, 12 per layer, head w/b
  CHECK(names.size() == 3 + 1 + 2 + 12 * 2 + 2);
}

TEST_CASE("model: forward maps images to one logit row per image") {
  const auto spec = tiny(5);
  VisionTransformer model(spec);
  auto x = torch::randn({3, 1, 56, 56});
  auto y = model->forward(x);
  CHECK(y.sizes() == torch::IntArrayRef({3, 5}));
  CHECK(spec.seq_length() == 197);  // same sequence length as ViT-B/16 at 224
}

TEST_CASE("model: replace_head changes the class count and starts at zero") {
  VisionTransformer model(tiny(10));
  model->replace_head(3);
  CHECK(model->spec().num_classes == 3);
  CHECK(model->head->weight.sizes() == torch::IntArrayRef({3, model->spec().dim}));
  CHECK(model->head->weight.abs().sum().item<double>() == 0.0);
  auto y = model->forward(torch::randn({2, 1, 56, 56}));
  CHECK(y.sizes() == torch::IntArrayRef({2, 3}));
  // the new head is registered under its torchvision name, once
  int heads = 0;
  for (const auto& item : model->named_parameters()) heads += item.key() == "heads.head.weight";
  CHECK(heads == 1);
  CHECK(model->named_parameters().find("heads.head.weight")->size(0) == 3);
}

TEST_CASE("model: forward FLOPs of vit_b_16 match its published 17.6 GMACs") {
  const double flops = accel::models::vit_forward_flops(accel::models::vit_preset("vit_b_16"));
  CHECK(flops / 2.0 / 1e9 == doctest::Approx(17.56).epsilon(0.01));
}

TEST_CASE("model: the attention kernel matches the explicit softmax attention") {
  torch::manual_seed(1);
  auto q = torch::randn({2, 4, 197, 24});
  auto k = torch::randn({2, 4, 197, 24});
  auto v = torch::randn({2, 4, 197, 24});
  auto fast = accel::compat::attention(q, k, v, 0.0, false);
  auto ref = accel::compat::attention_reference(q, k, v);
  CHECK(torch::allclose(fast, ref, 1e-5, 1e-5));
}

TEST_CASE("model: the fused attention kernel matches the explicit attention and its gradients") {
  KernelStateGuard restore;
  struct Shape { int64_t B, S, H, Dh; };
  // The CPU ladder's heads, vit_b_16's, a single token, and sizes that are
  // not multiples of the kernel's 8-float vectors or its 4- and 6-row blocks.
  const Shape shapes[] = {{2, 197, 4, 24}, {1, 50, 12, 64}, {3, 1, 1, 8},
                          {1, 5, 2, 3},    {2, 33, 3, 20},  {1, 13, 1, 17}};
  // Every code path this CPU can run (AVX-512, AVX2+FMA, baseline).
  for (const auto& name : accel::kernels::attention_isas()) {
    accel::kernels::attention_force_isa(name);
    for (const auto& sh : shapes) {
      CAPTURE(sh.S);
      CAPTURE(sh.Dh);
      const std::string isa = accel::kernels::attention_isa();
      CAPTURE(isa);
      torch::manual_seed(sh.S * 100 + sh.Dh);
      auto qkv = torch::randn({sh.B, sh.S, 3 * sh.H * sh.Dh}) * 2.0;  // peaked softmax rows
      auto up = torch::randn({sh.B, sh.S, sh.H * sh.Dh});
      auto [out, grad] = attention_and_grad(qkv, sh.H, up, true);
      auto [ref_out, ref_grad] = attention_and_grad(qkv, sh.H, up, false);
      REQUIRE(out.sizes() == ref_out.sizes());
      CHECK(torch::allclose(out, ref_out, 1e-4, 1e-5));
      CHECK(torch::allclose(grad, ref_grad, 1e-4, 1e-5));
      CHECK((out - ref_out).abs().max().item<double>() < 5e-5);
    }
  }
  accel::kernels::attention_force_isa("");
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    CHECK(std::string(accel::kernels::attention_isa()) == "avx512+bf16");
    CHECK(accel::kernels::attention_bf16_native());
  } else if (__builtin_cpu_supports("avx512f")) {
    CHECK(std::string(accel::kernels::attention_isa()) == "avx512");
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    CHECK(std::string(accel::kernels::attention_isa()) == "avx2+fma");
  }
#endif
  CHECK(accel::kernels::attention_isas().back() == "baseline");
  CHECK_THROWS_AS(accel::kernels::attention_force_isa("sse9"), std::invalid_argument);
}

TEST_CASE("model: the masked fused kernel matches the explicit masked attention and its gradients on every ISA") {
  KernelStateGuard restore;
  struct Case { int64_t B, S, H, Dh; std::vector<int64_t> keys; };
  const Case cases[] = {{3, 23, 12, 32, {10, 23, 1}}, {2, 17, 2, 24, {17, 9}}, {1, 5, 1, 3, {2}}};
  for (const auto& isa : accel::kernels::attention_isas()) {
    accel::kernels::attention_force_isa(isa);
    for (const auto& c : cases) {
      CAPTURE(isa);
      CAPTURE(c.S);
      torch::manual_seed(c.S);
      const auto qkv0 = torch::randn({c.B, c.S, 3 * c.H * c.Dh}) * 2.0;
      const auto up = torch::randn({c.B, c.S, c.H * c.Dh});
      auto mask = torch::zeros({c.B, c.S}, torch::kLong);
      for (int64_t b = 0; b < c.B; ++b) mask[b].narrow(0, 0, c.keys[size_t(b)]).fill_(1);
      const auto pad = accel::models::key_padding(mask);
      auto run = [&](bool fused) {
        auto qkv = qkv0.clone().requires_grad_(true);
        auto out = fused ? accel::models::fused_attention(qkv, c.H, pad)
                         : accel::models::unfused_attention(qkv, c.H, 0.0, false, /*explicit_form=*/true, pad);
        out.backward(up);
        return std::make_pair(out.detach(), qkv.grad());
      };
      const auto [out, grad] = run(true);
      const auto [ref, ref_grad] = run(false);
      CHECK(torch::allclose(out, ref, 1e-4, 1e-5));
      CHECK(torch::allclose(grad, ref_grad, 1e-4, 1e-5));
      // Masked keys get exactly no gradient (their probabilities are 0).
      for (int64_t b = 0; b < c.B; ++b) {
        const int64_t n = c.keys[size_t(b)];
        if (n < c.S) {
          const int64_t D = c.H * c.Dh;
          CHECK(grad[b].narrow(0, n, c.S - n).narrow(1, D, 2 * D).abs().max().item<float>() == 0.0F);
        }
      }
      // bf16 on the AVX512-BF16 kernel (or float32, rounded once, elsewhere),
      // against the explicit form on the same bf16-exact values.
      auto x = qkv0.to(torch::kBFloat16).requires_grad_(true);
      auto out16 = accel::models::fused_attention(x, c.H, pad);
      out16.backward(up.to(torch::kBFloat16));
      torch::NoGradGuard g;
      const auto ref16 = accel::models::unfused_attention(qkv0.to(torch::kBFloat16).to(torch::kFloat), c.H, 0.0, false,
                                           /*explicit_form=*/true, pad);
      CHECK(torch::allclose(out16.to(torch::kFloat), ref16, 2e-2, 2e-2));
    }
  }
  // A mask that is not right-padded, or a row with no token, is refused.
  CHECK_THROWS_AS(accel::models::key_padding(torch::tensor({{0L, 1L, 1L}})), std::invalid_argument);
  CHECK_THROWS_AS(accel::models::key_padding(torch::tensor({{1L, 1L}, {0L, 0L}})), std::invalid_argument);
  CHECK_THROWS_AS(accel::kernels::attention_check_keys(0, 4), std::logic_error);
}

namespace {
// The causal reference made by hand: key padding and the lower triangle as one
// [B, 1, S, S] boolean mask, through the explicit form without its causal flag.
accel::models::KeyPadding causal_mask_by_hand(int64_t B, int64_t S, const std::vector<int64_t>& keys) {
  auto allowed = torch::ones({S, S}, torch::kBool).tril().unsqueeze(0).repeat({B, 1, 1});
  for (int64_t b = 0; b < B; ++b) allowed[b].narrow(1, keys[size_t(b)], S - keys[size_t(b)]).fill_(false);
  accel::models::KeyPadding p;
  p.mask = allowed.unsqueeze(1);
  return p;
}
}  // namespace

TEST_CASE("model: causal fused attention matches the explicit causal attention and its gradients on every ISA in full windows and padded documents") {
  KernelStateGuard restore;
  // Sequences below, at and across the kernel's 64-row causal blocks, odd head sizes.
  struct Case { int64_t B, S, H, Dh; std::vector<int64_t> keys; };
  const Case cases[] = {{2, 150, 2, 16, {150, 150}}, {3, 64, 3, 8, {64, 40, 1}},
                        {2, 65, 2, 12, {65, 33}},    {1, 1, 1, 4, {1}},
                        {2, 7, 2, 3, {7, 5}},        {1, 130, 1, 20, {97}}};
  for (const auto& isa : accel::kernels::attention_isas()) {
    accel::kernels::attention_force_isa(isa);
    for (const auto& c : cases) {
      CAPTURE(isa);
      CAPTURE(c.S);
      torch::manual_seed(c.S * 7 + c.Dh);
      const auto qkv0 = torch::randn({c.B, c.S, 3 * c.H * c.Dh}) * 2.0;
      const auto up = torch::randn({c.B, c.S, c.H * c.Dh});
      const bool padded = std::any_of(c.keys.begin(), c.keys.end(), [&](int64_t k) { return k < c.S; });
      auto mask = torch::zeros({c.B, c.S}, torch::kLong);
      for (int64_t b = 0; b < c.B; ++b) mask[b].narrow(0, 0, c.keys[size_t(b)]).fill_(1);
      const auto pad = padded ? accel::models::key_padding(mask) : accel::models::KeyPadding{};
      enum class Path { Fused, ExplicitCausal, ByHand };
      auto run = [&](Path path) {
        auto qkv = qkv0.clone().requires_grad_(true);
        torch::Tensor out;
        if (path == Path::Fused) {
          out = accel::models::fused_attention(qkv, c.H, pad, /*causal=*/true);
        } else if (path == Path::ExplicitCausal) {
          out = accel::models::unfused_attention(qkv, c.H, 0.0, false, /*explicit_form=*/true, pad, /*causal=*/true);
        } else {
          out = accel::models::unfused_attention(qkv, c.H, 0.0, false, /*explicit_form=*/true,
                                                 causal_mask_by_hand(c.B, c.S, c.keys));
        }
        out.backward(up);
        return std::make_pair(out.detach(), qkv.grad());
      };
      const auto [out, grad] = run(Path::Fused);
      const auto [ref, ref_grad] = run(Path::ByHand);
      const auto [expl, expl_grad] = run(Path::ExplicitCausal);
      CHECK((out - ref).abs().max().item<double>() < 1e-5);
      CHECK(torch::allclose(grad, ref_grad, 1e-4, 1e-5));
      CHECK(torch::equal(expl, ref));
      CHECK(torch::equal(expl_grad, ref_grad));
      // Query 0 sees key 0 alone: its output is v_0 exactly.
      const int64_t D = c.H * c.Dh;
      CHECK(torch::allclose(out.select(1, 0), qkv0.select(1, 0).narrow(-1, 2 * D, D), 0.0, 1e-6));
      // Masked keys get exactly no gradient.
      for (int64_t b = 0; b < c.B; ++b) {
        const int64_t n = c.keys[size_t(b)];
        if (n < c.S) CHECK(grad[b].narrow(0, n, c.S - n).narrow(1, D, 2 * D).abs().max().item<float>() == 0.0F);
      }
      // No query sees a later key: changing the last token's q, k and v
      // leaves every earlier output bitwise as it was.
      if (c.S > 1) {
        auto changed = qkv0.clone();
        changed.select(1, c.S - 1).normal_();
        torch::NoGradGuard g;
        const auto out2 = accel::models::fused_attention(changed, c.H, pad, true);
        CHECK(torch::equal(out2.narrow(1, 0, c.S - 1), out.narrow(1, 0, c.S - 1)));
      }
      // bf16: the AVX512-BF16 kernel (or float32 rounded once) against the
      // explicit causal form on the same bf16-exact values.
      auto x = qkv0.to(torch::kBFloat16).requires_grad_(true);
      auto out16 = accel::models::fused_attention(x, c.H, pad, true);
      out16.backward(up.to(torch::kBFloat16));
      torch::NoGradGuard g;
      const auto ref16 = accel::models::unfused_attention(qkv0.to(torch::kBFloat16).to(torch::kFloat), c.H, 0.0,
                                                          false, /*explicit_form=*/true, pad, true);
      CHECK(torch::allclose(out16.to(torch::kFloat), ref16, 2e-2, 2e-2));
      CHECK(torch::allclose(out16.to(torch::kFloat).select(1, 0),
                            qkv0.to(torch::kBFloat16).to(torch::kFloat).select(1, 0).narrow(-1, 2 * D, D), 0.0, 1e-2));
    }
  }
}

TEST_CASE("model: causal attention is the same through SDPA or the explicit form with and without key padding") {
  torch::manual_seed(11);
  auto q = torch::randn({2, 3, 37, 16});
  auto k = torch::randn({2, 3, 37, 16});
  auto v = torch::randn({2, 3, 37, 16});
  auto lengths = torch::tensor({37L, 20L});
  auto mask = (torch::arange(37).unsqueeze(0) < lengths.unsqueeze(1)).view({2, 1, 1, 37});
  for (const bool padded : {false, true}) {
    CAPTURE(padded);
    const auto m = padded ? mask : torch::Tensor();
    auto fast = accel::compat::attention(q, k, v, 0.0, false, m, nullptr, /*causal=*/true);
    auto ref = accel::compat::attention_explicit(q, k, v, 0.0, false, m, nullptr, /*causal=*/true);
    CHECK(torch::allclose(fast, ref, 1e-5, 1e-5));
    // Query 0 attends to key 0 alone.
    CHECK(torch::allclose(fast.select(2, 0), v.select(2, 0), 0.0, 1e-6));
  }
}

TEST_CASE("model: fused attention on bfloat16 answers in bfloat16 on every code path") {
  KernelStateGuard restore;
  torch::manual_seed(5);
  auto qkv = torch::randn({2, 197, 3 * 96}).to(torch::kBFloat16);
  auto up = torch::randn({2, 197, 96}).to(torch::kBFloat16);
  for (const auto& name : accel::kernels::attention_isas()) {
    accel::kernels::attention_force_isa(name);
    CAPTURE(name);
    // The float32 kernel on the same (bf16-exact) values, same code path.
    auto [ref, ref_grad] =
        attention_and_grad(qkv.to(torch::kFloat), 4, up.to(torch::kFloat), true);
    auto x = qkv.clone().requires_grad_(true);
    auto out = accel::models::fused_attention(x, 4);
    out.backward(up);
    CHECK((out.scalar_type() == torch::kBFloat16));
    CHECK((x.grad().scalar_type() == torch::kBFloat16));
    if (accel::kernels::attention_bf16_native()) {
      // bf16 products (probabilities and dS rounded to bf16), float32 sums:
      // within a few bf16 roundings of the float32 result.
      const double out_err = (out.to(torch::kFloat) - ref).abs().max().item<double>();
      const double grad_err = (x.grad().to(torch::kFloat) - ref_grad).abs().max().item<double>();
      const double grad_scale = ref_grad.abs().max().item<double>();
      CAPTURE(out_err);
      CAPTURE(grad_err);
      CAPTURE(grad_scale);
      CHECK(out_err < 2e-2);
      CHECK(grad_err < 2e-2 * grad_scale);
      CHECK(torch::allclose(out.to(torch::kFloat), ref, 2e-2, 2e-2));
    } else {
      // Computed in float32, rounded to bf16 once.
      CHECK(torch::equal(out, ref.to(torch::kBFloat16)));
      CHECK(torch::equal(x.grad(), ref_grad.to(torch::kBFloat16)));
    }
  }
}

TEST_CASE("model: fused attention is bitwise the same on 1 and 2 threads") {
  KernelStateGuard restore;
  torch::manual_seed(3);
  auto qkv = torch::randn({4, 197, 3 * 96});
  auto up = torch::randn({4, 197, 96});
  torch::set_num_threads(1);
  auto [out1, grad1] = attention_and_grad(qkv, 4, up, true);
  torch::set_num_threads(2);
  auto [out2, grad2] = attention_and_grad(qkv, 4, up, true);
  CHECK(torch::equal(out1, out2));
  CHECK(torch::equal(grad1, grad2));
}

TEST_CASE("model: fused attention refuses what it cannot compute naming the tensor") {
  auto f64 = torch::randn({1, 4, 12}, torch::kDouble);
  CHECK_THROWS_WITH_AS(accel::models::fused_attention(f64, 2),
                       doctest::Contains("Double"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(accel::models::fused_attention(torch::randn({1, 4, 12}), 5),
                       doctest::Contains("divisible by heads (5)"), std::invalid_argument);
  CHECK_FALSE(accel::models::fused_attention_applies(torch::randn({1, 4, 12}), 2, true));
}

TEST_CASE("model: the ViT trains the same through the fused and the explicit attention") {
  KernelStateGuard restore;
  auto spec = tiny();
  spec.image_size = 16;  // 16 tokens + class token
  auto run = [&](accel::models::AttentionImpl impl) {
    accel::models::set_attention_impl(impl);
    torch::manual_seed(7);
    VisionTransformer model(spec);
    torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-3));
    auto x = torch::randn({4, 1, 16, 16});
    auto y = torch::tensor({0, 1, 2, 3});
    std::vector<double> losses;
    for (int i = 0; i < 3; ++i) {
      opt.zero_grad();
      auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
      loss.backward();
      opt.step();
      losses.push_back(loss.item<double>());
    }
    return losses;
  };
  const auto fused = run(accel::models::AttentionImpl::Auto);
  const auto ref = run(accel::models::AttentionImpl::Explicit);
  for (size_t i = 0; i < fused.size(); ++i) CHECK(fused[i] == doctest::Approx(ref[i]).epsilon(1e-5));
  accel::models::set_attention_impl(accel::models::AttentionImpl::Explicit);
  CHECK(accel::models::attention_kernel_name() == "explicit");
  accel::models::set_attention_impl(accel::models::AttentionImpl::Auto);
  if (accel::compat::kHasSdpa) {
    CHECK(accel::models::attention_kernel_name() == "sdpa (explicit for bf16 on a CPU)");
  } else {
    CHECK(accel::models::attention_kernel_name().rfind("fused-cpu (", 0) == 0);
  }
}

TEST_CASE("model: an inconsistent spec is a config error naming the field") {
  auto spec = tiny();
  spec.patch_size = 5;
  CHECK_THROWS_WITH_AS(accel::models::validate_spec(spec),
                       doctest::Contains("model.patch_size"), accel::ConfigError);
  spec = tiny();
  spec.heads = 5;
  CHECK_THROWS_WITH_AS(accel::models::validate_spec(spec), doctest::Contains("model.heads"),
                       accel::ConfigError);
  CHECK_THROWS_AS(accel::models::vit_preset("vit_huge_99"), accel::ConfigError);
}

TEST_CASE("model: the resolved spec takes channels and classes from the data") {
  accel::config::ModelConfig m;
  m.preset = "vit_tiny_fmnist";
  auto s = accel::models::resolve_vit_spec(m, 1, 5);
  CHECK(s.num_classes == 5);
  CHECK(s.in_channels == 1);
  m.dim = 64;
  m.heads = 2;
  s = accel::models::resolve_vit_spec(m, 3, 10);
  CHECK(s.dim == 64);
  CHECK(s.in_channels == 3);
  m.in_channels = 3;
  CHECK_THROWS_WITH_AS(accel::models::resolve_vit_spec(m, 1, 10),
                       doctest::Contains("model.in_channels"), accel::ConfigError);
  m = {};
  m.preset = "custom";
  CHECK_THROWS_WITH_AS(accel::models::resolve_vit_spec(m, 1, 10),
                       doctest::Contains("model.image_size"), accel::ConfigError);
}

TEST_CASE("model: dropout keeps 1 - p of the elements, scales them, and its gradient takes the same mask") {
  KernelStateGuard restore;
  const double p = 0.1;
  torch::manual_seed(3);
  auto x = torch::randn({12, 64, 384}).requires_grad_(true);
  auto y = accel::models::dropout(x, p, true);
  const auto kept = y.ne(0);
  const double frac = kept.to(torch::kDouble).mean().item<double>();
  CHECK(frac == doctest::Approx(1 - p).epsilon(0.005));
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  CHECK(torch::equal(y.masked_select(kept), x.detach().masked_select(kept) * scale));
  auto up = torch::randn_like(y);
  y.backward(up);
  // The backward pass recomputes the forward's mask from its seed.
  CHECK(torch::equal(x.grad(), torch::where(kept, up * scale, torch::zeros_like(up))));
  // Evaluation, p = 0: the input itself.
  CHECK(accel::models::dropout(x, p, false).is_same(x));
  CHECK(accel::models::dropout(x, 0.0, true).is_same(x));
  // torch::manual_seed decides the mask; another draw gives another.
  torch::manual_seed(3);
  (void)torch::randn({12, 64, 384});  // the generator where x's draw left it
  const auto again = accel::models::dropout(x.detach(), p, true);
  CHECK(torch::equal(again, y.detach()));
  CHECK(!torch::equal(accel::models::dropout(x.detach(), p, true), y.detach()));
}

TEST_CASE("model: dropout masks are the same on every ISA and thread count, in float32 and bfloat16") {
  KernelStateGuard restore;
  const int64_t n = (int64_t(1) << 19) + 5;  // split across threads (2^17 per range at least)
  torch::manual_seed(4);
  const auto x = torch::randn({n});
  const auto xb = x.to(torch::kBFloat16);
  const auto m = accel::kernels::dropout_mask(0.25, 0x0123456789abcdefull);
  torch::Tensor ref, refb;
  std::vector<std::pair<std::string, int>> cases;
  for (const auto& isa : accel::kernels::dropout_isas()) {
    for (int threads : {1, 2, 3}) cases.emplace_back(isa, threads);
  }
  CHECK(accel::kernels::dropout_isas().back() == "baseline");
  CHECK_THROWS_AS(accel::kernels::dropout_force_isa("sse9"), std::invalid_argument);
  for (const auto& [isa, threads] : cases) {
    CAPTURE(isa);
    CAPTURE(threads);
    accel::kernels::dropout_force_isa(isa);
    CHECK(std::string(accel::kernels::dropout_isa()) == isa);
    auto out = torch::empty_like(x);
    accel::kernels::dropout_apply(x.data_ptr<float>(), out.data_ptr<float>(), n, m, threads);
    auto outb = torch::empty_like(xb);
    accel::kernels::dropout_apply_bf16(reinterpret_cast<const uint16_t*>(xb.data_ptr<at::BFloat16>()),
                                       reinterpret_cast<uint16_t*>(outb.data_ptr<at::BFloat16>()), n,
                                       m, threads);
    if (!ref.defined()) {
      ref = out, refb = outb;
      // Element by element: kept where dropout_kept says, bf16 as float32 rounded to bf16.
      int64_t wrong = 0;
      const float* o = out.data_ptr<float>();
      const float* in = x.data_ptr<float>();
      for (int64_t i = 0; i < n; ++i) {
        const float want = accel::kernels::dropout_kept(m, i) ? in[i] * m.scale : 0.f;
        wrong += o[i] != want;
      }
      CHECK(wrong == 0);
      CHECK(torch::equal(outb, (xb.to(torch::kFloat) * xb.ne(0).logical_and(out.ne(0)).to(torch::kFloat) * m.scale)
                                   .to(torch::kBFloat16)));
      continue;
    }
    CHECK(torch::equal(out, ref));
    CHECK(torch::equal(outb, refb));
  }
  CHECK_THROWS_AS(accel::kernels::dropout_mask(1.0, 1), std::invalid_argument);
  CHECK_THROWS_AS(accel::kernels::dropout_mask(0.0, 1), std::invalid_argument);
}
