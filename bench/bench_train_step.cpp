// Google Benchmark: one training step (forward, cross-entropy, backward, Adam
// step) of the CPU ladder's ViT preset on random data, through the Fabric
// facade in each precision, with images/s and achieved GFLOP/s counters; the
// attention kernel alone; one Adam step over the text model (torch's, fused).
// The ratio of two precisions' images/s, measured in one run, is the speedup.
//   build/accel_bench --benchmark_filter=TrainStep
// ACCEL_BENCH_THREADS=N sets runtime.threads (unset: 0, the cores available);
// bench/eager_vs_cpp.sh uses it to compare with PyTorch eager at equal threads.
#include <benchmark/benchmark.h>

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
