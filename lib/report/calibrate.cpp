#include "accel/report/calibrate.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <vector>

#include <torch/torch.h>

#include "accel/metrics/metrics.h"
#include "accel/report/machine.h"
#include "accel/util/errors.h"

namespace accel::report {
namespace {

using Clock = std::chrono::steady_clock;

// Best-of-repeats GFLOP/s of an n x n x n matmul in `dtype` on `device`.
double matmul_gflops(int n, torch::Dtype dtype, torch::Device device, double min_seconds) {
  const auto opts = torch::TensorOptions().dtype(dtype).device(device);
  const auto a = torch::randn({n, n}, opts), b = torch::randn({n, n}, opts);
  auto sync = [&] {
    if (device.is_cuda()) torch::cuda::synchronize();
  };
  torch::NoGradGuard no_grad;
  auto c = torch::matmul(a, b);  // warm-up: allocations, kernel selection
  sync();
  double best = 1e30, spent = 0;
  int reps = 0;
  while (reps < 3 || (spent < min_seconds && reps < 200)) {
    const auto t0 = Clock::now();
    c = torch::matmul(a, b);
    sync();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::min(best, s);
    spent += s;
    ++reps;
  }
  return 2.0 * double(n) * n * n / best / 1e9;
}

std::vector<int> thread_counts(int max_threads) {
  std::vector<int> out;
  for (int t = 1; t <= max_threads; ++t) {
    if (t <= 8 || (t & (t - 1)) == 0 || t == max_threads) out.push_back(t);
  }
  return out;
}

}  // namespace

std::filesystem::path default_peaks_file(const std::string& machine_id) {
  return std::filesystem::path("results") / "peaks" / (machine_id + ".json");
}

nlohmann::json calibrate(const CalibrateOptions& opts) {
  if (opts.size < 16) throw ConfigError("--size: must be at least 16");
  if (opts.max_threads < 0) throw ConfigError("--max-threads: must be at least 1");
  const auto machine = this_machine();
  nlohmann::json doc;
  doc["machine_id"] = machine["id"];
  doc["measured_at"] = metrics::utc_now();
  doc["size"] = opts.size;
  doc["method"] = "torch::matmul of two random " + std::to_string(opts.size) + "x" +
                  std::to_string(opts.size) + " matrices, 2 n^3 FLOPs, best of >= 3 repeats "
                  "over >= " + std::to_string(opts.min_seconds) + " s, after one warm-up";
  doc["env"] = machine["env"];
  doc["cpu_flags_of_note"] = machine["cpu_flags_of_note"];
  const int previous = at::get_num_threads();
  const int max_threads = opts.max_threads > 0 ? opts.max_threads : metrics::available_cores();
  for (const auto& [name, dtype] : {std::pair{"fp32", torch::kFloat}, std::pair{"bf16", torch::kBFloat16}}) {
    for (const int t : thread_counts(max_threads)) {
      at::set_num_threads(t);
      const double g = matmul_gflops(opts.size, dtype, torch::kCPU, opts.min_seconds);
      doc["cpu"][name][std::to_string(t)] = g;
      if (opts.log) {
        char line[96];
        std::snprintf(line, sizeof(line), "calibrate: cpu %s %2d thread(s): %8.1f GFLOP/s", name, t, g);
        *opts.log << line << std::endl;
      }
    }
  }
  at::set_num_threads(previous);
  if (opts.cuda && torch::cuda::is_available()) {
    doc["cuda"]["name"] = machine["env"].value("gpu_name", "");
    for (const auto& [name, dtype] : {std::pair{"fp32", torch::kFloat}, std::pair{"bf16", torch::kBFloat16},
                                      std::pair{"fp16", torch::kHalf}}) {
      const double g = matmul_gflops(std::max(opts.size, 4096), dtype, torch::Device(torch::kCUDA, 0),
                                     opts.min_seconds);
      doc["cuda"][name] = g;
      if (opts.log) *opts.log << "calibrate: cuda " << name << ": " << g << " GFLOP/s" << std::endl;
    }
  }
  return doc;
}

}  // namespace accel::report
