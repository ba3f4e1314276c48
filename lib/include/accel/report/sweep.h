// The sweep: runs a suite's upstream runs, then its rungs in order, each
// repeat as a child process (`accel-bench run -c CFG --out DIR --force
// --set ...`), so a crashing rung cannot take the sweep down. Results land in
// OUT/<suite>/<machine-id>/<rung>/ (or .../<rung>/r<i>/ with repeats), with
// the manifest OUT/<suite>/<machine-id>/sweep.json (rung order, what each
// changes, the article's figures, per-run status and config hash) and each
// run's console output in run.log beside its result.json.
#pragma once

#include <cstdint>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "accel/report/result_set.h"

namespace accel::report {

struct SweepOptions {
  std::filesystem::path suite;
  int repeats = 0;                // 0: one, or one per seed
  std::vector<uint64_t> seeds;    // repeat i runs with seeds[i % n] (train.seed)
  std::filesystem::path out = "runs/sweep";
  bool resume = false;            // reuse ok runs whose resolved config is unchanged
  bool rerun_upstream = false;    // run upstream runs even where a committed one matches
  std::vector<std::string> sets;  // --set for every run (after the suite's own)
  std::filesystem::path exe;      // the accel-bench binary; empty = /proc/self/exe
  std::ostream* log = nullptr;    // progress; nullptr = silent
  bool terminal = false;          // progress bars instead of log lines
};

struct SweepSummary {
  std::filesystem::path set_dir;
  int ok = 0, reused = 0, failed = 0, skipped = 0;
  // A SIGINT/SIGTERM/SIGUSR1 stopped the sweep: passed on to the running
  // rung (recorded "interrupted", with its checkpoint; `sweep --resume`
  // continues it from there), and no later rung was started.
  int stop_signal = 0;
  std::string stopped_rung;
};

// Throws accel::ConfigError for a bad suite or options (before running
// anything); a failing run is recorded as failed and the sweep goes on.
SweepSummary run_sweep(const SweepOptions& opts);

// The output folder a sweep of `suite` would use on this machine.
std::filesystem::path sweep_set_dir(const std::filesystem::path& out, const std::string& suite,
                                    const std::string& machine_id);

// Parses "1,2,3" into seeds; ConfigError on anything else.
std::vector<uint64_t> parse_seeds(const std::string& text);

}  // namespace accel::report
