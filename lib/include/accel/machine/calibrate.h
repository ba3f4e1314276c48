// `accel-bench calibrate`: this machine's dense matmul rate, the peak a CPU
// run's MFU is measured against (no vendor publishes one figure for a CPU
// at a thread count). fp32 and bf16 at 1..N threads (N = the cores this
// process may use; beyond 8, powers of two and N), and on a GPU the same in
// fp32/tf32-off, bf16 and fp16. Stored by machine id, by default at
// results/peaks/<machine-id>.json:
// {"machine_id", "measured_at", "method", "size", "env",   (method, size: the CPU's)
//  "cpu": {"fp32": {"1": GFLOP/s, "2": ...}, "bf16": {...}},
//  "cuda": {"name", "size", "method", "fp32": GFLOP/s, "bf16": ..., "fp16": ...}}
//  (cuda only with a GPU, at its own size: cuda_matmul_size)
#pragma once

#include <filesystem>
#include <functional>
#include <ostream>
#include <string>

#include "accel/util/json.h"

#include "accel/dist/comm.h"

namespace accel::machine {

struct CalibrateOptions {
  int max_threads = 0;        // 0 = every core this process may use
  int size = 1024;            // square matmul side (n x n times n x n, 2 n^3 FLOPs)
  double min_seconds = 0.3;   // measure each case at least this long (best repeat counts)
  bool cuda = true;           // also the GPU when torch::cuda::is_available()
  std::ostream* log = nullptr;
};

nlohmann::json calibrate(const CalibrateOptions& opts);

// A GPU's matmuls are timed at `size` or 4096, whichever is larger: at 1024
// the launch and the tail of a wave weigh on an H100-class GPU's rate.
inline constexpr int kCudaMatmulMinSize = 4096;
int cuda_matmul_size(int size);
// calibration.json's "method" for matmuls of side `size`.
std::string matmul_method(int size, double min_seconds);

// `accel-bench calibrate --comm`: the collectives accel-bench trains with
// (all-reduce, all-gather, reduce-scatter of float32 buffers, 4 KiB to
// 64 MiB) timed between this job's ranks over `comm` (Gloo on CPU ranks of
// one thread each, NCCL on GPUs), and an alpha-beta fit of each
// (accel/machine/predict.h): the "comm" block of the peaks file,
// {"backend", "ranks", "threads_per_rank", "method", "measured_at",
//  "collectives": {"all_reduce": {"alpha_s", "beta_s_per_byte",
//  "max_rel_error", "points": [[bytes, seconds], ...]}, ...},
//  "colocation": {"ranks", "compute", "memory", "method", "seconds",
//  "stream_bytes"}}: on CPU
// ranks, how much slower rank 0 runs a matmul loop and a memory stream while
// every rank runs them than alone (ranks of one host share caches and memory
// bandwidth; predict scales a one-rank run's compute by it).
// Every rank calls it; rank 0 gets the block, the others null.
struct CommCalibrateOptions {
  int64_t min_bytes = 4096;
  int64_t max_bytes = int64_t(64) << 20;
  double seconds_per_point = 0.3;
  std::ostream* log = nullptr;  // rank 0's progress
  torch::Device device = torch::kCPU;  // NCCL: this rank's GPU
};
nlohmann::json calibrate_comm(dist::Comm& comm, const CommCalibrateOptions& opts);

// Seconds per call of the collective `op`, which every rank runs: two
// warm-up calls, then the best of five timing loops of about seconds / 5
// each (rank 0 picks the repetitions, every rank follows, barriers fence each
// loop). What calibrate --comm fits and bench/comm/bench_comm.cpp prints.
double time_collective(dist::Comm& comm, const std::function<void()>& op, double seconds);

}  // namespace accel::machine
