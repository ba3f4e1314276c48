// One run of a config as a child process (`accel-bench run -c CFG --out DIR
// ...`), as the sweep and tune run each of theirs: the one rule for what an
// earlier run in DIR is worth (an ok result of the same resolved config is
// reused; an interrupted one of the same config continues from its
// checkpoint), and the one way a child is started, waited for and read
// back. Torch-free.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "accel/train/result.h"
#include "accel/util/child_process.h"
#include "accel/util/json_doc.h"

namespace accel::ladder {

// What DIR holds for a run of `resolved`, under --resume.
enum class Earlier {
  None,      // nothing usable: a fresh run (--force replaces what is there)
  Reuse,     // an ok result.json of the same resolved config (and its checkpoint where needed)
  Continue,  // an interrupted run of the same config with its checkpoint: --resume auto
};

// Without `resume` always None. `need_checkpoint`: reuse only a run whose
// checkpoint.ckpt is there (an upstream run others start from). `prior`,
// when given, gets DIR's record as read (the one a reuse returns).
Earlier earlier_run(const std::filesystem::path& dir, const Json& resolved, bool resume,
                    bool need_checkpoint = false, train::RunRecord* prior = nullptr);

struct ChildRun {
  std::filesystem::path exe, config, dir;  // accel-bench, the config, the run's --out
  std::vector<std::string> sets;           // --set values, in order
  std::vector<std::string> args;           // more arguments ("-q", "--calibration", FILE)
  bool continue_run = false;               // --resume auto instead of --force
  double timeout_s = 0;                    // 0: none (util::run_child's)
  std::function<void(const std::string&)> on_event;  // the child's progress channel
};

struct ChildRunResult {
  // "ok" | "failed" | "interrupted" (a signal passed on to the child)
  std::string status;
  std::string error;          // failed: the run's own error, else its last line
  train::RunRecord record;    // DIR/result.json as it left it
  util::ChildOutcome child;
  double wall_s = 0;
};

// Starts the child with its output in DIR/run.log (DIR made; an older
// result.json removed first, so a crash leaves none in place) and reads its
// result back.
ChildRunResult run_child_run(const ChildRun& run);

}  // namespace accel::ladder
