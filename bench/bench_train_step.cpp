// Google Benchmark: one training step (forward, cross-entropy, backward, Adam
// step) of a ViT preset on synthetic data, with an images/s counter.
// Run: build/accel_bench --benchmark_filter=TrainStep
#include <benchmark/benchmark.h>

#include <torch/torch.h>

#include "accel/config/run_config.h"
#include "accel/metrics/metrics.h"
#include "accel/models/vit.h"
#include "accel/train/trainer.h"

namespace {

void BM_TrainStep(benchmark::State& state, const std::string& preset, int batch) {
  at::set_num_threads(accel::metrics::available_cores());
  torch::manual_seed(0);
  auto spec = accel::models::vit_preset(preset);
  if (preset == "vit_tiny_fmnist") spec.num_classes = 5;
  accel::models::VisionTransformer model(spec);
  accel::config::OptimConfig optim;
  auto optimizer = accel::train::make_optimizer(model->parameters(), optim);
  auto x = torch::randn({batch, spec.in_channels, spec.image_size, spec.image_size});
  auto y = torch::randint(spec.num_classes, {batch}, torch::kLong);
  for (auto _ : state) {
    auto loss = torch::cross_entropy_loss(model->forward(x), y);
    optimizer->zero_grad();
    loss.backward();
    optimizer->step();
    benchmark::DoNotOptimize(loss.item<float>());
  }
  state.counters["images_per_s"] =
      benchmark::Counter(double(state.iterations()) * batch, benchmark::Counter::kIsRate);
  state.counters["threads"] = at::get_num_threads();
  state.counters["GFLOP_per_s"] = benchmark::Counter(
      double(state.iterations()) * batch * 3.0 * accel::models::vit_forward_flops(spec) / 1e9,
      benchmark::Counter::kIsRate);
}

BENCHMARK_CAPTURE(BM_TrainStep, vit_tiny_fmnist_fp32_b16, std::string("vit_tiny_fmnist"), 16)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2.0);
BENCHMARK_CAPTURE(BM_TrainStep, vit_tiny_fmnist_fp32_b64, std::string("vit_tiny_fmnist"), 64)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2.0);

}  // namespace

BENCHMARK_MAIN();
