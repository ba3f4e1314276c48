// A result set: the runs of one suite on one machine, as `accel-bench sweep`
// lays them out:
//   SET/sweep.json                 the manifest (suite, machine, rung order, statuses)
//   SET/<upstream>/result.json     upstream runs (pretrain), once
//   SET/<rung>/result.json         one repeat, or
//   SET/<rung>/r1/result.json ...  several repeats
//   SET/<rung>/timing/t1/result.json ... timing runs (sweep --timing-runs)
// Reading is defensive: a field that is missing or null is "n/a"
// (std::nullopt), never 0, so result.json files of older or newer schemas
// and failed runs still load.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "accel/util/json.h"

#include "accel/train/result.h"
#include "accel/util/json_doc.h"

namespace accel::results {

// One run's result.json, read by the one typed reader (train/result.h).
using RunRecord = train::RunRecord;
inline RunRecord read_run(const std::filesystem::path& dir) { return train::read_run_record(dir); }

// The run's step times (ms) after its warm-up steps: result.json's
// step_ms_after_warmup, or for runs written before it, the steps its
// metrics.csv logged after train.warmup_steps (5 when absent); empty when
// neither has any.
std::vector<double> step_times_after_warmup(const RunRecord& run);

// A rung (or upstream run) of a set: its manifest entry and its repeats.
struct RungRuns {
  std::string id;
  std::string article;   // the article's rung id ("00", "01", ...), may be empty
  std::string changes;   // what changed from the rung before
  std::string versus;    // the earlier rung its speedup is taken against ("" = the rung before)
  std::string needs;     // set when this machine cannot run it ("CUDA")
  std::string sweep_status;  // what the sweep recorded, "" when not in a manifest
  // Why the sweep did not run it (a batch series after an out-of-memory
  // run: "batch 256 ran out of memory (01-bf16-b256)"), or "".
  std::string skipped;
  bool upstream = false;
  // Set when the sweep changed the rung because this machine only emulates
  // its precision (suite "where_emulated"): the note and the --set values.
  std::string emulated_note;
  std::vector<std::string> emulated_sets;
  bool comparable = true;  // false: the where_emulated settings cut it short
  // What the sweep cut beyond its budget's floor for this rung ("bf16-mixed
  // is emulated on this CPU: shortened from 20 to 6 steps"); empty: nothing.
  std::vector<std::string> budget_cuts;
  std::string committed;  // upstream: the committed run folder it came from
  std::vector<RunRecord> repeats;
  // Timing runs (sweep --timing-runs): short runs of the rung's config after
  // its full run, read for their speed alone (timing_factors), never as repeats.
  std::vector<RunRecord> timing;
};

// A rung of one ok run and timing runs: for each ok timing run, its median
// step over its timed steps divided by the full run's median over the same
// steps (one config, one seed: the same batches), the factor by which that
// run's speed differed from the full run's. Empty unless the rung has exactly
// one ok run whose step series covers a timing run's steps (4 or more).
std::vector<double> timing_factors(const RungRuns& r);

// A rung's samples of a time: `values` (its ok runs') and, where that is
// one run, that run's value scaled by each timing factor.
std::vector<double> with_timing(std::vector<double> values, const std::vector<double>& factors);

struct ResultSet {
  std::filesystem::path dir;
  Json manifest;  // sweep.json, or null for a plain folder of runs
  std::string suite, machine_id;
  OptNum target_accuracy;  // of the task's metric on validation (the name is the file's)
  // The task's metric its runs' test_acc and val_acc hold (their first
  // present run's; classification's accuracy for records before tasks).
  train::MetricFacts metric;
  std::string convergence_reference;  // the suite's reference rung for the convergence check ("" = none)
  Json reference;  // the article's figures (manifest copy), or null
  std::vector<RungRuns> upstream, rungs;
  // The rung with this id, or nullptr.
  const RungRuns* find(const std::string& id) const;
  // The environment block of its first run that has one (rungs, then
  // upstream runs): the machine and versions; null when none has.
  Json env() const;
};

// The measure name of a set's (or run's) task metric on the test split:
// "test accuracy" for classification, as every report and compare has said.
inline std::string metric_measure(const train::MetricFacts& metric) { return "test " + metric.name; }

// Loads SET (a folder with sweep.json, or a folder of run folders with
// result.json, in name order). ConfigError when it holds neither, and when
// its sweep.json names a suite, machine or rung outside is_safe_id or a run
// folder outside the set (an absolute path, or one with "..").
ResultSet load_result_set(const std::filesystem::path& dir);

// Folders with a sweep.json at DIR, DIR/* or DIR/*/* (sorted); DIR itself
// when none but it holds run folders.
std::vector<std::filesystem::path> find_result_sets(const std::filesystem::path& dir);

// One set under DIR: ConfigError when there are none or several.
std::filesystem::path single_result_set(const std::filesystem::path& dir);

// Ids that become folder names and chart labels (suites, machines, rungs):
// letters, digits, '-', '_' and '.', not "." or "..". A suite file's and a
// result set's sweep.json are held to it.
bool is_safe_id(const std::string& id);


}  // namespace accel::results
