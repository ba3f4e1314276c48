// Everything that can be refused before a run does any work, in one place:
// the config against the loops, strategies, precisions and captured steps
// (check_runnable), the output folder (check_out_dir), and a checkpoint
// against the run resuming it (resume_incompatibilities). All throw
// ConfigError naming the field or option.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "accel/util/json.h"

#include "accel/config/run_config.h"
#include "accel/train/run.h"

namespace accel::train {

// Checks everything that can be checked before any work: the model family
// and preset, the loop/precision pairing, what a CUDA Graph cannot hold, and
// (check_environment) what depends on this machine and build: accelerator,
// devices, strategy and precision support, and that the data and init files
// exist.
void check_runnable(const config::RunConfig& cfg, bool check_environment = true);

// The never-overwrite rule, checked before any work: out_dir must be a folder
// (or creatable: its nearest existing ancestor a writable folder), and unless
// overwrite or resume, hold no result.json, checkpoint.ckpt or
// checkpoints/step-*.ckpt of an earlier run.
void check_out_dir(const RunOptions& opts);

// `--force`: removes every file a run writes into out_dir (result.json,
// metrics.csv, config.json, checkpoint.ckpt, checkpoints/step-*.ckpt and the
// checkpoints folder if that leaves it empty) before the new run writes
// anything, so nothing of the replaced run survives to be resumed or mixed
// into the new result. Other files (a sweep's run.log, the user's own) stay.
// Returns the names removed. Call it under the out dir's lock.
std::vector<std::string> clear_replaced_run(const std::filesystem::path& out_dir);

// `--resume auto`: the newest checkpoint in out_dir that reads and verifies
// (checkpoint.ckpt or checkpoints/step-*.ckpt, the highest step first);
// empty when there is none.
std::filesystem::path find_resume_checkpoint(const std::filesystem::path& out_dir);

// OUT/checkpoints/step-NNNNNNNN.ckpt (train.checkpoint_every).
std::filesystem::path periodic_checkpoint_path(const std::filesystem::path& out, int64_t step);

// The resolved-config paths that must match between a checkpoint and the run
// resuming it (model, data, optimizer, seed, batch size, loop, precision).
// Returns the paths that differ, down to the field (model.dim); empty when
// the run may resume.
std::vector<std::string> resume_incompatibilities(const nlohmann::json& saved,
                                                  const nlohmann::json& current);

}  // namespace accel::train
