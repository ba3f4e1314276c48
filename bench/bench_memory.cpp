// Google Benchmark: the model state each of 2 Gloo ranks holds (parameters,
// gradients, optimizer state: Strategy::state_bytes) under DDP and each FSDP
// sharding mode, after one Adam step at batch 1 on synthetic data (FSDP
// must hold about 1/N of DDP's). The benchmark starts this
// binary twice as the ranks; its time is the whole 2-rank measurement, the
// figures are its counters (MB per rank, and each mode's fraction of DDP's).
//   build/accel_bench --benchmark_filter=StateBytes
#include <benchmark/benchmark.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "accel/dist/comm.h"
#include "accel/dist/strategy.h"
#include "accel/models/vit.h"

namespace {

const char* const kModes[] = {"ddp", "FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD"};

// Inside a rank: one step under each strategy, "mode bytes" lines to out.
void run_rank(int rank, int world, int port, const std::string& preset, const std::string& out) {
  accel::dist::CommOptions o;
  o.rank = rank;
  o.world_size = world;
  o.master_port = port;
  std::shared_ptr<accel::dist::Comm> comm = accel::dist::connect(o);
  const auto spec = accel::models::vit_preset(preset);
  torch::manual_seed(0);
  const auto x = torch::randn({1, spec.in_channels, spec.image_size, spec.image_size});
  const auto y = torch::zeros({1}, torch::kLong);
  std::ofstream file(out);
  for (const std::string mode : kModes) {
    accel::dist::StrategyOptions so;
    so.name = mode == "ddp" ? "ddp" : "fsdp";
    if (mode != "ddp") so.knobs.fsdp_sharding = mode;
    accel::dist::DistContext ctx;
    ctx.rank = ctx.local_rank = rank;
    ctx.world_size = ctx.local_world_size = world;
    ctx.comm = comm;
    auto strategy = accel::dist::make_strategy(so, ctx);
    auto model = std::make_shared<accel::models::VisionTransformerImpl>(spec);
    auto opt = strategy->setup(model, [](std::vector<torch::Tensor> p) {
      return std::make_unique<torch::optim::Adam>(p, torch::optim::AdamOptions(1e-4));
    });
    auto loss = torch::cross_entropy_loss(model->forward(x), y);
    strategy->pre_backward();
    loss.backward();
    strategy->finish_gradient_sync();
    opt->step();
    file << mode << " " << strategy->state_bytes(*opt).total() << "\n";
  }
}

// A rank of the measurement runs here, before main, and exits.
[[maybe_unused]] const bool kIsRank = [] {
  const char* r = std::getenv("ACCEL_BENCH_STATE_RANK");
  if (r == nullptr) return false;
  try {
    run_rank(std::atoi(r), 2, std::atoi(std::getenv("ACCEL_BENCH_STATE_PORT")),
             std::getenv("ACCEL_BENCH_STATE_PRESET"), std::getenv("ACCEL_BENCH_STATE_OUT"));
  } catch (const std::exception& e) {
    std::cerr << "rank " << r << ": " << e.what() << "\n";
    std::_Exit(1);
  }
  std::_Exit(0);
}();

void BM_StateBytes(benchmark::State& state, const std::string& preset) {
  std::map<std::string, double> bytes;
  for (auto _ : state) {
    const int port = 30000 + int(::getpid() % 20000);
    const std::string out = "/tmp/accel-bench-state-" + std::to_string(::getpid()) + "-";
    std::vector<pid_t> pids;
    for (int r = 0; r < 2; ++r) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        ::setenv("ACCEL_BENCH_STATE_RANK", std::to_string(r).c_str(), 1);
        ::setenv("ACCEL_BENCH_STATE_PORT", std::to_string(port).c_str(), 1);
        ::setenv("ACCEL_BENCH_STATE_PRESET", preset.c_str(), 1);
        ::setenv("ACCEL_BENCH_STATE_OUT", (out + std::to_string(r)).c_str(), 1);
        ::setenv("OMP_NUM_THREADS", "1", 1);
        ::execl("/proc/self/exe", "accel_bench", nullptr);
        ::_exit(127);
      }
      pids.push_back(pid);
    }
    bool ok = true;
    for (pid_t pid : pids) {
      int st = 0;
      ::waitpid(pid, &st, 0);
      ok = ok && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    }
    if (!ok) {
      state.SkipWithError("a rank failed");
      return;
    }
    std::ifstream in(out + "0");  // both ranks hold the same (equal shards)
    std::string mode;
    double b = 0;
    while (in >> mode >> b) bytes[mode] = b;
    for (int r = 0; r < 2; ++r) std::remove((out + std::to_string(r)).c_str());
  }
  for (const std::string mode : kModes) {
    state.counters[mode + "_MB"] = bytes[mode] / 1e6;
    if (mode != "ddp") state.counters[mode + "_of_ddp"] = bytes[mode] / bytes["ddp"];
  }
}

BENCHMARK_CAPTURE(BM_StateBytes, vit_tiny_fmnist, std::string("vit_tiny_fmnist"))
    ->Unit(benchmark::kSecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(BM_StateBytes, vit_b_16, std::string("vit_b_16"))
    ->Unit(benchmark::kSecond)
    ->Iterations(1);

}  // namespace
