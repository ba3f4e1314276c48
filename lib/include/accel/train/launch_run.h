// What `accel-bench run` does around the training core before and after it:
// the out dir's lock with the never-overwrite rule under it, starting a run's
// local ranks where no launcher started this process, and the result a job
// leaves when its ranks failed before rank 0 could write one.
#pragma once

#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "accel/util/json.h"

#include "accel/config/run_config.h"
#include "accel/metrics/metrics.h"
#include "accel/train/run.h"

namespace accel::train {

// Takes the out dir's lock for this process's life (one run per folder),
// then applies the never-overwrite rule under it and, with opts.overwrite,
// removes the replaced run's files before anything is written (said on
// `log`). Ranks started by this binary's launcher run under their parent's
// lock; under an external launcher (torchrun, srun) global rank 0 takes it,
// the others get an empty lock.
metrics::DirLock lock_out_dir(const RunOptions& opts, std::ostream* log);

struct LaunchedJob {
  // 0; a rank's own 2 (input error) or 3 (interrupted); else 1 (a rank
  // failed or a signal stopped one).
  int exit_code = 0;
  std::string failure;  // the launcher's message when not 0
};

// Several ranks and no launcher around this process: starts runtime.devices
// copies of `argv` (this command line; each joins as its rank, as Fabric's
// launcher does) with the master address and port the config, else
// MASTER_ADDR/MASTER_PORT, else loopback and a free port give. ConfigError
// for several nodes (each needs its own launcher) or a MASTER_PORT that is
// no TCP port. The failure is also said on `log`.
LaunchedJob launch_ranks(const config::RunConfig& cfg, const std::vector<std::string>& argv, std::ostream* log);

// A job that failed after it started training (OUT/config.json written
// since `started`) always leaves a result: where rank 0 wrote none (it was
// stopped or killed), this writes status "failed" with the launcher's
// message, in result.json's own schema. A failure to write is said on `log`.
void record_launch_failure(const std::filesystem::path& out, const nlohmann::json& resolved,
                           const std::string& failure, std::filesystem::file_time_type started,
                           std::ostream* log);

}  // namespace accel::train
