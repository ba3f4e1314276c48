// Measurement helpers: step-time statistics, peak memory, the environment
// fingerprint every result carries, and atomic file writes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "accel/util/json.h"

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
// This machine's physical memory in bytes; 0 when unknown.
double physical_memory_bytes();
// Intra-op threads when runtime.threads is 0: the cores per local rank.
int default_threads(int local_ranks);

// accel-bench version and git sha, LibTorch version, compiler, CPU model,
// cores, threads, BLAS library in use, GPU if any.
nlohmann::json environment(int threads);

// Library switches the environment asks for, applied once before any work:
// ACCEL_ONEDNN=0 turns LibTorch's oneDNN (mkldnn) kernels off, as
// torch.backends.mkldnn.enabled = False does (LibTorch 1.13 then computes a
// bf16 matmul as a CPU without AVX-512 does, on its own loops: how
// bench/avx2_proxy.sh makes an AVX-512 machine stand in for an AVX2 one).
// environment() records it ("onednn"), and ACCEL_KERNEL_ISA ("kernel_isa").
void apply_library_switches();

// --- atomic output files (lib/metrics/files.cpp) --------------------------
// Every output goes through one helper: the bytes go to a temp file in the
// same folder, named <name>.tmp.<pid>.<random>, which is fsynced, renamed
// over `path` and then the folder is fsynced. A reader (or the run after a
// kill -9 or power cut) sees the old file or the whole new one, never a part.
// `pieces` are written one after the other (e.g. header, payload, trailer).
// With IfExists::Keep an existing `path` is left alone (no race: link(2),
// not rename) and false is returned; otherwise true. Throws accel::RunError
// naming `path`; the temp file never survives a failure.
enum class IfExists { Replace, Keep };
bool write_bytes_atomic(const std::filesystem::path& path,
                        const std::vector<std::string_view>& pieces,
                        IfExists if_exists = IfExists::Replace);
void write_file_atomic(const std::filesystem::path& path, const std::string& content);
void write_json_atomic(const std::filesystem::path& path, const nlohmann::json& doc);

// Deletes temp files left by killed writers under `dir` (and its
// subfolders): names <name>.tmp.<pid>[.<hex>] (also the checkpoint writer's
// ".<name>.tmp.<pid>.<n>") whose pid is not a live process. Files of live
// writers, of this process and anything else are kept. Returns what it
// removed; a missing `dir` is not an error. Pids are per host: do not call
// it on a folder that processes on other hosts write into at the same time.
std::vector<std::filesystem::path> remove_stale_temp_files(const std::filesystem::path& dir);

// --- one run per output folder (lib/metrics/files.cpp) ----------------------
// An exclusive flock(2) on DIR/.lock for as long as the object lives (the
// kernel drops it when the holder dies, however it dies); the file holds the
// holder's pid. The folder is made if missing. A second holder is refused at
// once with accel::ConfigError naming DIR and the holder's pid. The
// descriptor is close-on-exec: a child does not hold it. Folders on a file
// system without flock (some NFS setups) are locked per host only.
class DirLock {
 public:
  DirLock() = default;
  // `holder`: what holds such locks, for the refusal ("run", "sweep").
  explicit DirLock(const std::filesystem::path& dir, const std::string& holder = "run");
  DirLock(DirLock&& o) noexcept : fd_(o.fd_), dir_(std::move(o.dir_)), made_(o.made_) {
    o.fd_ = -1;
  }
  DirLock& operator=(DirLock&& o) noexcept;
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  ~DirLock();
  bool held() const { return fd_ >= 0; }
  // Drops the lock; removes the lock file and the folder when this lock made
  // the folder and nothing else was written into it (a run refused early).
  void release_and_tidy();

 private:
  int fd_ = -1;
  std::filesystem::path dir_;
  bool made_ = false;  // the folder did not exist before
};

// Now, as "2026-12-01T21:44:27Z" (UTC, seconds).
std::string utc_now();

}  // namespace accel::metrics
