// Google Benchmark: one training step (forward, cross-entropy, backward, Adam
// step) of the CPU ladder's ViT preset on random data, through the Fabric
// facade in each precision, with images/s and achieved GFLOP/s counters; the
// attention kernel alone; the text step's GEMMs alone in each precision; one
// Adam step over the text model (torch's, fused).
// The ratio of two precisions' images/s, measured in one run, is the speedup.
//   build/accel_bench --benchmark_filter=TrainStep
// ACCEL_BENCH_THREADS=N sets runtime.threads (unset: 0, the cores available);
// bench/eager_vs_cpp.sh uses it to compare with PyTorch eager at equal threads.
#include <benchmark/benchmark.h>

#include <array>
#include <cstdlib>
#include <iostream>
#include <string>

#include <torch/torch.h>

#include "accel/config/run_config.h"
#include "accel/models/attention.h"
#include "accel/models/bert.h"
#include "accel/models/vit.h"
#include "accel/train/fabric.h"
#include "accel/train/optimizer.h"

namespace {

// runtime.threads from ACCEL_BENCH_THREADS: unset or empty = 0 (Fabric's default);
// anything but a positive integer is an error.
int threads_from_env() {
  const char* v = std::getenv("ACCEL_BENCH_THREADS");
  if (v == nullptr || *v == '\0') return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 1 || n > 4096) {
    std::cerr << "accel_bench: ACCEL_BENCH_THREADS=\"" << v
              << "\" is not a positive integer\n";
    std::exit(2);
  }
  return static_cast<int>(n);
}

void BM_TrainStep(benchmark::State& state, const std::string& precision, int batch,
                  accel::models::AttentionImpl attention) {
  accel::models::set_attention_impl(attention);
  accel::config::RuntimeConfig runtime;
  runtime.precision = precision;
  runtime.threads = threads_from_env();
  accel::train::Fabric fabric(runtime);
  fabric.launch();
  fabric.seed_everything(0);
  auto spec = accel::models::vit_preset("vit_tiny_fmnist");
  spec.num_classes = 5;
  accel::config::OptimConfig optim;
  auto setup = fabric.setup(accel::models::VisionTransformer(spec), [&](auto params) {
    return accel::train::make_optimizer(params, optim);
  });
  auto x = torch::randn({batch, spec.in_channels, spec.image_size, spec.image_size});
  auto y = torch::randint(spec.num_classes, {batch}, torch::kLong);
  for (auto _ : state) {
    auto loss = torch::cross_entropy_loss(setup.model.forward({{"pixels", x}}), y);
    setup.optimizer.zero_grad();
    fabric.backward(loss);
    setup.optimizer.step();
    benchmark::DoNotOptimize(loss.item<float>());
  }
  const double images = double(state.iterations()) * batch;
  state.counters["images_per_s"] = benchmark::Counter(images, benchmark::Counter::kIsRate);
  state.counters["GFLOP_per_s"] = benchmark::Counter(
      images * 3.0 * accel::models::vit_forward_flops(spec) / 1e9, benchmark::Counter::kIsRate);
  state.counters["threads"] = fabric.threads();
  accel::models::set_attention_impl(accel::models::AttentionImpl::Auto);
}

// Attention alone, forward and backward, on the CPU ladder's shape (batch 16,
// 197 tokens, 4 heads of 24), in float32 and bfloat16: the fused kernel (Auto,
// where it applies) vs the explicit matmul-softmax-matmul vs LibTorch's own
// (`library`: at::scaled_dot_product_attention on 2.x, the explicit form on 1.13).
void BM_Attention(benchmark::State& state, accel::models::AttentionImpl impl,
                  torch::Dtype dtype, bool library = false) {
  if (const int t = threads_from_env()) torch::set_num_threads(t);
  const int64_t B = 16, S = 197, H = 4, Dh = 24, D = H * Dh;
  auto qkv = torch::randn({B, S, 3 * D}).to(dtype).requires_grad_(true);
  auto up = torch::randn({B, S, D}).to(dtype);
  for (auto _ : state) {
    torch::Tensor out;
    if (library) {
      out = accel::models::unfused_attention(qkv, H, 0.0, false, /*explicit_form=*/false);
    } else if (impl == accel::models::AttentionImpl::Auto &&
        accel::models::fused_attention_applies(qkv, H, false)) {
      out = accel::models::fused_attention(qkv, H);
    } else {
      out = accel::models::unfused_attention(qkv, H, 0.0, false, /*explicit_form=*/true);
    }
    out.backward(up);
    qkv.mutable_grad().reset();
  }
  // Six S x S x Dh matmuls per head (2 forward, 4 backward), 2 FLOPs per MAC.
  const double flops = 6.0 * 2.0 * B * H * S * S * Dh;
  state.counters["GFLOP_per_s"] = benchmark::Counter(double(state.iterations()) * flops / 1e9,
                                                     benchmark::Counter::kIsRate);
}
#define ACCEL_ATTENTION(name, impl, dtype)                                                   \
  BENCHMARK_CAPTURE(BM_Attention, name, accel::models::AttentionImpl::impl, torch::dtype) \
      ->Unit(benchmark::kMillisecond)                                                      \
      ->UseRealTime()                                                                      \
      ->MinTime(2.0)
ACCEL_ATTENTION(fused_fp32, Auto, kFloat);
ACCEL_ATTENTION(explicit_fp32, Explicit, kFloat);
ACCEL_ATTENTION(fused_bf16, Auto, kBFloat16);
ACCEL_ATTENTION(explicit_bf16, Explicit, kBFloat16);
BENCHMARK_CAPTURE(BM_Attention, library_fp32, accel::models::AttentionImpl::Explicit, torch::kFloat, true)
    ->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
BENCHMARK_CAPTURE(BM_Attention, library_bf16, accel::models::AttentionImpl::Explicit, torch::kBFloat16, true)
    ->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);

// The matmuls of one text training step, alone: the MiniLM encoder's six
// layers over a batch of 12 x 45 tokens (the text ladder's typical padded
// batch), each as the step runs it. The projections (q/k/v as one 384 x 1152,
// the 384 x 384 output, the 384 x 1536 and 1536 x 384 feed-forward): the
// forward addmm with its bias, the input gradient (grad @ W) and the weight
// gradient (x^T @ grad, as AddmmBackward computes it). The attention's
// explicit form (1.13 in training, where attention dropout is on): q @ k^T
// (k^T made contiguous, as the explicit form does) and probs @ v, and their
// four gradients, over 12 heads of 32. Each projection's bias gradient (a sum
// over rows) in every variant. `bf16_casts` adds what autocast adds around
// them: each weight and bias cast to bf16 per forward, each weight and bias
// gradient cast back to float32, and the float32 LayerNorm outputs that feed
// q/k/v and the first feed-forward projection cast to bf16, their input
// gradients back (the residual adds' promotions stay out). The time bf16
// saves here is what bf16-mixed saves the step through its matmuls on this
// CPU (bench/bf16_step.sh turns it into the step speedup it accounts for;
// README "bf16 on this CPU").
void BM_TextGemms(benchmark::State& state, torch::Dtype dtype, bool casts) {
  if (const int t = threads_from_env()) torch::set_num_threads(t);
  const int64_t M = 12 * 45, H = 384, I = 1536;
  struct Proj {
    torch::Tensor w32, b32, w, b, x32, x, grad;
    bool from_norm;  // its input is a LayerNorm's float32 output (q/k/v, the first feed-forward)
  };
  std::vector<Proj> projs;
  double flops = 0;
  for (int layer = 0; layer < 6; ++layer) {
    for (auto [in, out] : {std::pair<int64_t, int64_t>{H, 3 * H}, {H, H}, {H, I}, {I, H}}) {
      Proj p;
      p.from_norm = out != H;
      p.w32 = torch::randn({out, in}) * 0.02;
      p.b32 = torch::zeros({out});
      p.w = p.w32.to(dtype);
      p.b = p.b32.to(dtype);
      p.x32 = torch::randn({M, in});
      p.x = p.x32.to(dtype);
      p.grad = torch::randn({M, out}).to(dtype);
      projs.push_back(p);
      flops += 3.0 * 2.0 * double(M) * double(in) * double(out);
    }
  }
  const int64_t B = 12, S = 45, heads = 12, Dh = H / heads;
  std::vector<std::array<torch::Tensor, 5>> attn;  // q, k, v, probs, grad of the context
  for (int layer = 0; layer < 6; ++layer) {
    attn.push_back({torch::randn({B, heads, S, Dh}).to(dtype), torch::randn({B, heads, S, Dh}).to(dtype),
                    torch::randn({B, heads, S, Dh}).to(dtype),
                    torch::softmax(torch::randn({B, heads, S, S}), -1).to(dtype),
                    torch::randn({B, heads, S, Dh}).to(dtype)});
    flops += 6.0 * 2.0 * double(B * heads) * double(S) * double(S) * double(Dh);
  }
  for (auto _ : state) {
    for (auto& [q, k, v, probs, dctx] : attn) {
      const auto kt = k.transpose(-2, -1).contiguous();
      auto scores = torch::matmul(q, kt);
      auto ctx = torch::matmul(probs, v);
      auto dprobs = torch::matmul(dctx, v.transpose(-2, -1));
      auto dv = torch::matmul(probs.transpose(-2, -1), dctx);
      auto dq = torch::matmul(dprobs, kt.transpose(-2, -1));  // the scores' gradient stands in for dprobs'
      auto dkt = torch::matmul(q.transpose(-2, -1), dprobs);
      for (const auto* t : {&scores, &ctx, &dv, &dq, &dkt}) benchmark::DoNotOptimize(t->data_ptr());
    }
    for (auto& p : projs) {
      const auto w = casts ? p.w32.to(dtype) : p.w;
      const auto b = casts ? p.b32.to(dtype) : p.b;
      const auto x = casts && p.from_norm ? p.x32.to(dtype) : p.x;
      auto y = torch::addmm(b, x, w.t());
      auto dx = torch::mm(p.grad, w);
      auto dw = torch::mm(x.t(), p.grad);
      auto db = p.grad.sum(0);
      if (casts) {
        dw = dw.t().to(torch::kFloat);
        db = db.to(torch::kFloat);
        if (p.from_norm) dx = dx.to(torch::kFloat);
      }
      benchmark::DoNotOptimize(db.data_ptr());
      benchmark::DoNotOptimize(y.data_ptr());
      benchmark::DoNotOptimize(dx.data_ptr());
      benchmark::DoNotOptimize(dw.data_ptr());
    }
  }
  state.counters["GFLOP_per_s"] = benchmark::Counter(double(state.iterations()) * flops / 1e9,
                                                     benchmark::Counter::kIsRate);
}
BENCHMARK_CAPTURE(BM_TextGemms, minilm_fp32, torch::kFloat, false)
    ->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
BENCHMARK_CAPTURE(BM_TextGemms, minilm_bf16, torch::kBFloat16, false)
    ->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
BENCHMARK_CAPTURE(BM_TextGemms, minilm_bf16_casts, torch::kBFloat16, true)
    ->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);

// One Adam step over the text ladder's model (all-MiniLM-L6-v2's BERT 6 x 384
// with its 2-class head: 22.7M float32 parameters, half of them the word
// embedding, whose gradient is dense), with gradients in place: torch::optim's
// op-by-op update vs accel-bench's one-pass kernel (optim.implementation).
void BM_AdamStep(benchmark::State& state, const std::string& implementation) {
  if (const int t = threads_from_env()) torch::set_num_threads(t);
  accel::models::TextClassifier model(accel::models::text_preset("bert", "minilm_l6_h384"));
  int64_t n = 0;
  for (auto& p : model->parameters()) {
    p.mutable_grad() = torch::randn_like(p) * 1e-3;
    n += p.numel();
  }
  accel::config::OptimConfig optim;
  optim.implementation = implementation;
  auto opt = accel::train::make_optimizer(model->parameters(), optim);
  for (auto _ : state) opt->step();
  // Bytes the one-pass update must move at least: read p, g, m, v; write p, m, v.
  state.counters["GB_per_s"] = benchmark::Counter(double(state.iterations()) * n * 7.0 * 4.0 / 1e9,
                                                  benchmark::Counter::kIsRate);
  state.counters["params"] = static_cast<double>(n);
}
BENCHMARK_CAPTURE(BM_AdamStep, minilm_torch, std::string("torch"))
    ->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
BENCHMARK_CAPTURE(BM_AdamStep, minilm_fused, std::string("fused"))
    ->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);

#define ACCEL_TRAIN_STEP(name, precision, batch)                                  \
  BENCHMARK_CAPTURE(BM_TrainStep, name, std::string(precision), batch,             \
                    accel::models::AttentionImpl::Auto)                            \
      ->Unit(benchmark::kMillisecond)                                              \
      ->UseRealTime()                                                              \
      ->MinTime(3.0);                                                              \
  BENCHMARK_CAPTURE(BM_TrainStep, name##_explicit_attention, std::string(precision), \
                    batch, accel::models::AttentionImpl::Explicit)                 \
      ->Unit(benchmark::kMillisecond)                                  \
      ->UseRealTime()                                                  \
      ->MinTime(3.0)

ACCEL_TRAIN_STEP(vit_tiny_fmnist_b16_32_true, "32-true", 16);
ACCEL_TRAIN_STEP(vit_tiny_fmnist_b16_bf16_mixed, "bf16-mixed", 16);
ACCEL_TRAIN_STEP(vit_tiny_fmnist_b16_bf16_true, "bf16-true", 16);
ACCEL_TRAIN_STEP(vit_tiny_fmnist_b64_32_true, "32-true", 64);
ACCEL_TRAIN_STEP(vit_tiny_fmnist_b64_bf16_mixed, "bf16-mixed", 64);

}  // namespace

BENCHMARK_MAIN();
