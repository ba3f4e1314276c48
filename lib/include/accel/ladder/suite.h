// A suite file: the ladder as an ordered list of rungs, the upstream runs
// they start from, the article's figures to show beside them and an optional
// target accuracy. `accel-bench sweep --suite FILE` runs it.
//
// {
//   "suite": "ladder-cpu",                      folder name of the result set
//   "description": "...",                      optional
//   "reference": "../../../results/reference/cvpr2023-vit.json",  optional, relative to this file
//   "target_accuracy": 0.85,                    optional, the rungs' validation metric for time-to-target
//                                               (an accuracy as a fraction; a loss as itself, reached below);
//                                               `sweep --to-target` stops every rung there
//   "convergence_reference": "01-finetune",     optional, the rung whose samples to the target
//                                               every rung's are checked against (MLPerf's t-test)
//   "results": "../../../results/ladder-cpu",   optional, its committed result sets (one
//                                               folder per machine): what `sweep --plan`
//                                               scales its estimate of this machine from
//   "set": ["train.limit_train_batches=3"],     optional, --set for every run of the suite
//   "upstream": [ {"id": "pretrain", "config": "pretrain.json", "changes": "...",
//                  "committed": "../../../results/upstream/NAME"} ],  committed: optional
//   "rungs": [
//     {"id": "00-scratch", "article": "00", "config": "00-scratch.json", "changes": "..."},
//     {"id": "01-finetune", "article": "01", "config": "01-finetune.json", "changes": "...",
//      "init_from": "pretrain", "set": ["train.limit_eval_batches=1"]},  set: optional,
//                                               --set for this rung's runs (after the suite's)
//     {"id": "05-ddp", ..., "where_emulated": {"set": ["runtime.precision=32-true"],
//                                              "note": "...", "comparable": true}},  optional
//     {"id": "02-compile", "article": "02", "changes": "torch.compile", "needs": "CUDA"},
//     {"id": "bf16", "config": "01-bf16.json", "changes": "bf16-mixed",
//      "batch_sizes": [16, 64, 128, 256]}      optional: a batch series (below)
//   ]
// }
//
// "batch_sizes" makes a rung a batch series: one rung per size, in the order
// given (increasing), with ids <id>-b<size>, `train.batch_size=<size>` added
// to its --set values and " at batch <size>" to what it changes; the article
// and "versus" stay with the first. Each is the rung before its next, so the report's
// ratios (steady steps per sample, where the rungs run a fixed few steps)
// say what each larger batch buys. When a run of the series ends out of
// memory (result.json's failure "out_of_memory"), the sweep runs no larger
// batch of it: those rungs are recorded as skipped, saying which batch ran
// out, and the report shows where the device's memory ended the series.
// With repeats, a batch that runs out in a later round (fragmentation) ends
// the series from there: the larger batches keep the runs they made.
//
// Config paths are relative to the suite file. A rung without "config" is
// listed (shown as "needs <needs>") but never run. "init_from" names an
// upstream run whose checkpoint the rung starts from: the sweep passes
// `--set model.init_path=<that run's folder>/checkpoint.ckpt`. A rung whose
// config inits from a checkpoint in a folder named like an upstream id
// (runs/ladder/pretrain/checkpoint.ckpt) gets the same without "init_from".
//
// "committed" names a folder (relative to the suite file) holding an upstream
// run made once by the same config and committed: its config.json,
// result.json, metrics.csv and model.safetensors (`accel-bench export`). When
// its config (resolved again by today's schema, so fields added since take
// their defaults) equals the resolved upstream config, the sweep does not
// rerun it: it copies the record into the result set and the rungs start from
// model.safetensors (`--set model.init=safetensors`). `sweep --rerun-upstream`
// runs it anyway.
//
// "where_emulated": where this machine only emulates the rung's precision
// (bf16 on a CPU without AVX512-BF16/AMX, see accel/metrics/hardware.h), the
// sweep adds these --set values to the rung's runs and the report shows the
// note; rungs that are not about the precision use it to stay fast there. On
// an upstream run it applies only when the run is made (not when a committed
// run is used: that is compared with the config as written).
// "comparable": false says the settings cut the run short (fewer steps, to
// measure the emulated precision's speed within the budget): the report then
// gives that rung no speedup and no time to target.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "accel/util/json.h"

namespace accel::ladder {

struct SuiteRung {
  std::string id;
  std::string article;
  std::filesystem::path config;  // absolute or relative to the cwd; empty = not runnable here
  std::string changes;
  std::string init_from;  // upstream id, or ""
  // The earlier rung this one's speedup and memory are taken against ("" =
  // the rung before it): where a rung starts a model of its own, as the
  // decoder ladder's pretrained rung against its scratch twin.
  std::string versus;
  std::string needs;      // "CUDA", ... or ""
  std::filesystem::path committed;            // upstream: committed run folder, or empty
  std::vector<std::string> sets;              // --set values for this rung's runs
  std::vector<std::string> where_emulated;    // --set values where the precision is emulated
  std::string where_emulated_note;
  bool where_emulated_comparable = true;  // false: the settings cut the run short
  // A batch series' rung: the series' id (the rung's as written) and its
  // batch size; "" and 0 elsewhere.
  std::string series;
  int64_t batch = 0;
};

struct Suite {
  std::filesystem::path file;
  std::string name, description;
  std::optional<double> target_accuracy;
  // The rung every other rung's convergence (samples to the target) is
  // checked against, as MLPerf checks a submission against its reference
  // convergence points ("" = none).
  std::string convergence_reference;
  nlohmann::json reference;  // the article's figures, or null
  std::filesystem::path results;  // committed result sets of the suite, or empty
  std::vector<std::string> sets;
  std::vector<SuiteRung> upstream, rungs;
};

// Reads and validates a suite file. Throws accel::ConfigError (file and
// field in the message) on unknown keys, missing fields, duplicate or
// unsafe ids, missing config files or an unknown init_from.
Suite load_suite(const std::filesystem::path& file);

}  // namespace accel::ladder
