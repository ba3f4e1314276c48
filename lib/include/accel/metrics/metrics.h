// Measurement helpers: step-time statistics, peak memory, the environment
// fingerprint every result carries, and atomic file writes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace accel::metrics {

struct Spread {
  double median = 0, p10 = 0, p90 = 0, mean = 0;
  int64_t count = 0;
};
// Percentiles with linear interpolation between order statistics (numpy's
// default); all zeros for an empty sample.
Spread spread(std::vector<double> values);
double percentile(std::vector<double> sorted, double q);

// Peak resident set size of this process (VmHWM), in bytes; 0 if unknown.
int64_t peak_rss_bytes();

// CPU cores this process may run on (sched affinity), at least 1.
int available_cores();
// Intra-op threads when runtime.threads is 0: the cores per local rank.
int default_threads(int local_ranks);

// accel-bench version and git sha, LibTorch version, compiler, CPU model,
// cores, threads, BLAS library in use, GPU if any.
nlohmann::json environment(int threads);

// Writes via a temp file in the same folder and a rename, so a reader never
// sees a half-written file. Throws accel::RunError naming the path.
void write_file_atomic(const std::filesystem::path& path, const std::string& content);
void write_json_atomic(const std::filesystem::path& path, const nlohmann::json& doc);

}  // namespace accel::metrics
