// One run of a config on this rank: the shared training core (the article's
// plain loop, or the same lines through the Fabric-style facade, or captured
// in a CUDA Graph), timed as the articles time it (training + per-epoch
// validation; the test pass not), with step-time statistics, throughput,
// peak memory and the outputs (rank 0): config.json, metrics.csv,
// result.json and checkpoints.
#pragma once

#include <filesystem>
#include <iosfwd>
#include <string>
#include <vector>

#include "accel/util/json.h"

#include "accel/config/run_config.h"
#include "accel/train/result.h"

namespace accel::train {

struct RunOptions {
  std::filesystem::path out_dir;  // result.json, config.json, metrics.csv, checkpoint.ckpt
  bool dry_run = false;           // validate, print the banner, train nothing
  bool overwrite = false;         // replace results and checkpoints already in out_dir
  std::filesystem::path resume;   // continue the run saved in this checkpoint
  std::ostream* log = nullptr;    // progress lines (rank 0); nullptr = silent
  // Record the ops of profile_steps steps after train.warmup_steps and write
  // ops.txt, ops.csv, trace.json and summary.txt here (rank 0); "" = off.
  std::filesystem::path profile_dir;
  int profile_steps = 10;
  // Said before the run and recorded in result.json's warnings: what the
  // layers above know of this machine (the calibration's limits).
  std::vector<std::string> warnings;
};

// Runs one config end to end on this rank (several ranks: each process calls
// it; rank 0 writes) and writes out_dir/{config.json, metrics.csv,
// result.json}. A failure after the outputs folder was created writes
// result.json with status "failed" and rethrows as RunError; a stop request
// writes a checkpoint and status "interrupted" and throws Interrupted.
RunResult run(const config::RunConfig& cfg, const nlohmann::json& resolved,
              const RunOptions& opts);

}  // namespace accel::train
