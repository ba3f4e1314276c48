// Collective bandwidth over the process group accel-bench trains with:
// all-reduce, all-gather and reduce-scatter of float32 buffers from 4 KiB to
// 64 MiB between N local ranks (Gloo on CPU; NCCL with --backend nccl on
// GPUs). Bus bandwidth as nccl-tests defines it: all-reduce moves
// 2(N-1)/N of the buffer per rank, all-gather and reduce-scatter (N-1)/N.
//   build/accel_bench_comm [ranks=2] [backend=gloo]
// Run without RANK in the environment, it starts the ranks itself.
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <string>

#include <torch/torch.h>

#include "accel/dist/comm.h"
#include "accel/dist/launcher.h"
#include "accel/machine/calibrate.h"

int main(int argc, char** argv) {
  const int ranks = argc > 1 ? std::atoi(argv[1]) : 2;
  const std::string backend = argc > 2 ? argv[2] : "gloo";
  const auto env = accel::dist::launch_env_from_environment();
  if (!env.present()) {
    accel::dist::LaunchOptions o;
    o.nprocs = ranks;
    o.argv.assign(argv, argv + argc);
    o.argv[0] = "/proc/self/exe";
    o.log = &std::cerr;
    const auto outcome = accel::dist::launch_local(o);
    if (outcome.exit_code != 0) std::cerr << outcome.message << "\n";
    return outcome.exit_code;
  }
  at::set_num_threads(1);
  accel::dist::CommOptions o;
  o.backend = backend;
  o.rank = env.rank;
  o.world_size = env.world_size;
  o.master_addr = env.master_addr;
  o.master_port = env.master_port;
  if (backend == "nccl") o.device = torch::Device(torch::kCUDA, int8_t(env.local_rank));
  auto comm = accel::dist::connect(o);
  const int N = comm->size();
  const auto opts = torch::TensorOptions().dtype(torch::kFloat).device(o.device);
  if (comm->rank() == 0) {
    std::printf("| bytes per rank | all-reduce ms | busbw GB/s | all-gather ms | busbw GB/s | "
                "reduce-scatter ms | busbw GB/s |\n|---|---|---|---|---|---|---|\n");
  }
  for (int64_t bytes = 4096; bytes <= (int64_t(64) << 20); bytes *= 4) {
    const int64_t n = bytes / 4;
    auto buf = torch::ones({n}, opts);
    auto shard = torch::ones({n / N}, opts);
    auto full = torch::ones({(n / N) * N}, opts);
    // calibrate --comm's timing (the best of five loops), about 0.4 s a collective and size.
    const auto time = [&](const std::function<void()>& op) { return accel::machine::time_collective(*comm, op, 0.4); };
    const double ar = time([&] { comm->all_reduce(buf, accel::dist::ReduceOp::Sum).wait(); });
    const double ag = time([&] { comm->all_gather(shard, full).wait(); });
    const double rs = time([&] { comm->reduce_scatter(full, shard, accel::dist::ReduceOp::Sum).wait(); });
    if (comm->rank() == 0) {
      const double f = double(N - 1) / N, gb = double(bytes) / 1e9;
      std::printf("| %lld | %.3f | %.2f | %.3f | %.2f | %.3f | %.2f |\n",
                  static_cast<long long>(bytes), ar * 1e3, gb * 2 * f / ar, ag * 1e3,
                  gb * f / ag, rs * 1e3, gb * f / rs);
    }
  }
  return 0;
}
