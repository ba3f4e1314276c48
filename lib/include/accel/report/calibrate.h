// `accel-bench calibrate`: this machine's dense matmul rate, the peak a CPU
// run's MFU is measured against (no vendor publishes one figure for a CPU
// at a thread count). fp32 and bf16 at 1..N threads (N = the cores this
// process may use; beyond 8, powers of two and N), and on a GPU the same in
// fp32/tf32-off, bf16 and fp16. Stored by machine id, by default at
// results/peaks/<machine-id>.json:
// {"machine_id", "measured_at", "method", "size", "env",
//  "cpu": {"fp32": {"1": GFLOP/s, "2": ...}, "bf16": {...}},
//  "cuda": {"name", "fp32": GFLOP/s, "bf16": ..., "fp16": ...}}   (cuda only with a GPU)
#pragma once

#include <filesystem>
#include <ostream>

#include <nlohmann/json.hpp>

namespace accel::report {

struct CalibrateOptions {
  int max_threads = 0;        // 0 = every core this process may use
  int size = 1024;            // square matmul side (n x n times n x n, 2 n^3 FLOPs)
  double min_seconds = 0.3;   // measure each case at least this long (best repeat counts)
  bool cuda = true;           // also the GPU when torch::cuda::is_available()
  std::ostream* log = nullptr;
};

nlohmann::json calibrate(const CalibrateOptions& opts);

// results/peaks/<machine-id>.json (relative to the cwd).
std::filesystem::path default_peaks_file(const std::string& machine_id);

}  // namespace accel::report
