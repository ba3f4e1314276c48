#include "accel/machine/calibrate.h"

#include <algorithm>
#include <functional>
#include <map>
#include <ostream>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <vector>

#include <torch/torch.h>

#include "accel/metrics/metrics.h"
#include "accel/machine/machine.h"
#include "accel/machine/predict.h"
#include "accel/util/errors.h"

namespace accel::machine {
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

int cuda_matmul_size(int size) { return std::max(size, kCudaMatmulMinSize); }

std::string matmul_method(int size, double min_seconds) {
  return "torch::matmul of two random " + std::to_string(size) + "x" + std::to_string(size) +
         " matrices, 2 n^3 FLOPs, best of >= 3 repeats over >= " + std::to_string(min_seconds) +
         " s, after one warm-up";
}

nlohmann::json calibrate(const CalibrateOptions& opts) {
  if (opts.size < 16) throw ConfigError("--size: must be at least 16");
  if (opts.max_threads < 0) throw ConfigError("--max-threads: must be at least 1");
  const auto machine = this_machine();
  nlohmann::json doc;
  doc["machine_id"] = machine["id"];
  doc["measured_at"] = metrics::utc_now();
  doc["size"] = opts.size;  // the CPU's; the GPU's is cuda.size
  doc["method"] = matmul_method(opts.size, opts.min_seconds) + " on the CPU";
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
    const int size = cuda_matmul_size(opts.size);
    doc["cuda"]["name"] = machine["env"].value("gpu_name", "");
    doc["cuda"]["size"] = size;
    doc["cuda"]["method"] = matmul_method(size, opts.min_seconds) + " on GPU 0";
    for (const auto& [name, dtype] : {std::pair{"fp32", torch::kFloat}, std::pair{"bf16", torch::kBFloat16},
                                      std::pair{"fp16", torch::kHalf}}) {
      const double g = matmul_gflops(size, dtype, torch::Device(torch::kCUDA, 0), opts.min_seconds);
      doc["cuda"][name] = g;
      if (opts.log) *opts.log << "calibrate: cuda " << name << ": " << g << " GFLOP/s" << std::endl;
    }
  }
  return doc;
}

namespace {

// Seconds per call of `op` on every rank: rank 0 times one call, picks the
// repetitions for about `seconds` and every rank follows; barriers fence it.
double time_once(dist::Comm& comm, const std::function<void()>& op, double seconds) {
  auto reps = torch::zeros({1}, torch::kDouble);
  if (comm.rank() == 0) {
    const auto t0 = Clock::now();
    op();
    const double one = std::chrono::duration<double>(Clock::now() - t0).count();
    reps[0] = std::max(3.0, std::min(1000.0, seconds / std::max(one, 1e-6)));
  } else {
    op();
  }
  comm.broadcast(reps, 0);
  const int n = int(reps[0].item<double>());
  comm.barrier();
  const auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) op();
  comm.barrier();
  return std::chrono::duration<double>(Clock::now() - t0).count() / n;
}

// Seconds per call of `work` on rank 0, the best of 3 timing loops of about
// `seconds`: alone (the other ranks wait in a barrier, off their cores after
// a short spin) or while every rank runs it at the same time.
double rank0_work_seconds(dist::Comm& comm, const std::function<void()>& work, bool together,
                          double seconds) {
  auto reps = torch::zeros({1}, torch::kDouble);
  if (comm.rank() == 0) {
    work();
    const auto t0 = Clock::now();
    work();
    const double one = std::chrono::duration<double>(Clock::now() - t0).count();
    reps[0] = std::max(3.0, std::min(100000.0, seconds / 3 / std::max(one, 1e-6)));
  }
  comm.broadcast(reps, 0);
  const int n = int(reps[0].item<double>());
  if (together && comm.rank() != 0) work();
  double best = 1e30;
  for (int round = 0; round < 3; ++round) {
    comm.barrier();
    if (together || comm.rank() == 0) {
      const auto t0 = Clock::now();
      for (int i = 0; i < n; ++i) work();
      best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count() / n);
    }
    comm.barrier();
  }
  return best;
}

// CPU ranks of one host share its caches and memory bandwidth: rank 0's time
// for a matmul loop (the shape of a transformer layer's projection, float32)
// and for a stream over buffers larger than the caches (an optimizer's
// traffic), with every rank running it against rank 0 alone.
nlohmann::json colocation(dist::Comm& comm, double seconds, std::ostream* log) {
  torch::NoGradGuard no_grad;
  const auto a = torch::randn({512, 384}), w = torch::randn({384, 1536});
  auto out = torch::empty({512, 1536});
  const int64_t big = int64_t(16) << 20;  // 64 MiB a buffer
  auto x = torch::ones({big}), y = torch::ones({big});
  const auto matmul = [&] { torch::mm_out(out, a, w); };
  const auto stream = [&] { x.mul_(0.999f).add_(y, 1e-3); };
  const double mm_alone = rank0_work_seconds(comm, matmul, false, seconds);
  const double mm_together = rank0_work_seconds(comm, matmul, true, seconds);
  const double st_alone = rank0_work_seconds(comm, stream, false, seconds);
  const double st_together = rank0_work_seconds(comm, stream, true, seconds);
  nlohmann::json c;
  c["ranks"] = comm.size();
  c["compute"] = mm_together / mm_alone;
  c["memory"] = st_together / st_alone;
  c["method"] = "rank 0's best-of-3 seconds per call with every rank running the same work at once over rank 0 "
                "alone (the others waiting in a barrier): compute, a 512x384 by 384x1536 float32 matmul; "
                "memory, x = 0.999 x + 0.001 y over two 64 MiB float32 buffers";
  c["seconds"] = {{"matmul_alone", mm_alone}, {"matmul_together", mm_together},
                  {"stream_alone", st_alone}, {"stream_together", st_together}};
  // Bytes a stream call reads and writes (x and y read, x written): with
  // stream_alone, the memory bandwidth predict charges a strategy's copies at.
  const double stream_bytes = 3.0 * double(big) * 4.0;
  c["stream_bytes"] = stream_bytes;
  if (log && comm.rank() == 0) {
    char line[240];
    std::snprintf(line, sizeof line,
                  "calibrate: %d ranks computing at once on this host: matmul x%.3f (%.3f -> %.3f ms), "
                  "memory stream x%.3f (%.2f -> %.2f ms; %.1f GB/s alone)",
                  comm.size(), mm_together / mm_alone, mm_alone * 1e3, mm_together * 1e3, st_together / st_alone,
                  st_alone * 1e3, st_together * 1e3, stream_bytes / st_alone / 1e9);
    *log << line << std::endl;
  }
  return c;
}

}  // namespace

// The best of five time_once timings, after two warm-up calls (buffers,
// connections). On a VM a whole timing loop can fall into a slow mode (every
// small collective waiting for a ~4 ms scheduler tick to wake a Gloo thread,
// seen here on 2 vCPUs); the collectives of a training step, issued while the
// rank computes, do not pay it each time, so the fastest loop is the one to fit.
double time_collective(dist::Comm& comm, const std::function<void()>& op, double seconds) {
  for (int i = 0; i < 2; ++i) op();
  double best = 1e30;
  for (int i = 0; i < 5; ++i) best = std::min(best, time_once(comm, op, seconds / 5));
  return best;
}

nlohmann::json calibrate_comm(dist::Comm& comm, const CommCalibrateOptions& opts) {
  const int N = comm.size();
  if (N < 2) throw ConfigError("calibrate --comm: needs at least 2 ranks (--ranks)");
  const auto topts = torch::TensorOptions().dtype(torch::kFloat).device(opts.device);
  std::map<std::string, std::vector<std::pair<double, double>>> points;
  for (int64_t bytes = opts.min_bytes; bytes <= opts.max_bytes; bytes *= 4) {
    const int64_t n = std::max<int64_t>(N, bytes / 4 / N * N);
    auto buf = torch::ones({n}, topts), shard = torch::ones({n / N}, topts), full = torch::ones({n}, topts);
    const double size = double(n) * 4;
    points["all_reduce"].emplace_back(size, time_collective(comm, [&] {
      comm.all_reduce(buf, dist::ReduceOp::Sum).wait();
    }, opts.seconds_per_point));
    points["all_gather"].emplace_back(size, time_collective(comm, [&] {
      comm.all_gather(shard, full).wait();
    }, opts.seconds_per_point));
    points["reduce_scatter"].emplace_back(size, time_collective(comm, [&] {
      comm.reduce_scatter(full, shard, dist::ReduceOp::Sum).wait();
    }, opts.seconds_per_point));
    if (opts.log && comm.rank() == 0) {
      char line[160];
      std::snprintf(line, sizeof line, "calibrate: %s %d ranks %9lld bytes: all-reduce %.3f ms, all-gather %.3f ms, reduce-scatter %.3f ms",
                    comm.backend().c_str(), N, static_cast<long long>(size), points["all_reduce"].back().second * 1e3,
                    points["all_gather"].back().second * 1e3, points["reduce_scatter"].back().second * 1e3);
      *opts.log << line << std::endl;
    }
  }
  // CPU ranks only: a GPU rank computes on its own device.
  nlohmann::json co = opts.device.is_cpu() ? colocation(comm, 3 * opts.seconds_per_point, opts.log) : nlohmann::json();
  comm.take_counts();
  if (comm.rank() != 0) return nullptr;
  nlohmann::json doc;
  if (!co.is_null()) doc["colocation"] = co;
  doc["backend"] = comm.backend();
  doc["ranks"] = N;
  doc["threads_per_rank"] = at::get_num_threads();
  doc["measured_at"] = metrics::utc_now();
  doc["method"] = "float32 buffers of 4 KiB to 64 MiB (x4), each collective timed over about " +
                  std::to_string(opts.seconds_per_point) + " s (the best of 5 timing loops) after 2 warm-up calls between barriers; "
                  "bytes = the whole buffer (all-reduce: the tensor; all-gather: the output; reduce-scatter: "
                  "the input); seconds = alpha + bytes * beta: beta by least squares over the larger half of the sizes, alpha the median of what it leaves of the smaller half's times" +
                  std::string(comm.native_reduce_scatter() ? "" : "; Gloo has no reduce-scatter: accel-bench's is an all-reduce of the whole buffer and a slice");
  for (const auto& [name, pts] : points) {
    const auto fit = fit_alpha_beta(pts);
    double worst = 0;
    nlohmann::json list = nlohmann::json::array();
    for (const auto& [b, t] : pts) {
      worst = std::max(worst, std::abs(fit(b) / t - 1.0));
      list.push_back({b, t});
    }
    doc["collectives"][name] = {{"alpha_s", fit.alpha_s}, {"beta_s_per_byte", fit.beta_s_per_byte},
                                {"max_rel_error", worst}, {"points", list}};
    if (opts.log) {
      char line[160];
      std::snprintf(line, sizeof line, "calibrate: %s fit: %.1f us + bytes / %.3f GB/s (worst point %.0f%% off)",
                    name.c_str(), fit.alpha_s * 1e6, fit.beta_s_per_byte > 0 ? 1e-9 / fit.beta_s_per_byte : 0.0,
                    worst * 100);
      *opts.log << line << std::endl;
    }
  }
  return doc;
}

}  // namespace accel::machine
