// `accel-bench tune`: on this machine, the setting of a run config that
// reaches a target validation accuracy soonest, among settings that change
// speed but should not change what is learned beyond MLPerf's convergence
// check: the global batch (learning rate scaled by a stated rule), the
// precision, the placement (ranks x threads per rank within the cores) with
// each multi-rank strategy of the registry and its knobs, the optimizer's
// implementation, and what a space file adds (data.prefetch, on a GPU
// runtime.cuda_graphs and runtime.matmul_precision, ...).
//
// 1. Candidates: the space's cross product. Pruned before any run, each with
//    its reason: more ranks x threads than cores, a global batch that does not
//    split over the ranks, a precision this hardware only emulates, a config
//    the schema or the run's own checks refuse (`run --dry-run`: the
//    memory-fit checks among them).
// 2. Measured: every single-rank survivor's throughput in a short run
//    (train.max_steps); a multi-rank one is first predicted (`predict`, from
//    the single-rank run of the same batch and precision and a calibration's
//    comm fit) and run only when predicted at least 80% as fast as that
//    single-rank run.
// 3. Confirmed: the fastest few and the base trained to the target, several
//    runs each (seeds shared), MLPerf-scored (results/stats.h): the olympic
//    mean time to target, and samples to target checked against the base's by
//    the one-sided t-test. A setting that converges faster than the base
//    allows (a suspect evaluation, or one that learned differently) is never
//    ranked; one that converges significantly slower is ranked, and named:
//    its time to target already pays for the extra samples, as MLPerf
//    accepts slower convergence.
// Within --budget: a run that would not fit is left out and said so.
// OUT/tune.json holds every candidate and run (what --resume continues from:
// runs whose result is ok and whose resolved config is unchanged are reused);
// OUT/tune.md the ranked table and what was pruned and why; OUT/winner.json
// a run config (`accel-bench run -c OUT/winner.json`) extending the base.
#pragma once

#include <filesystem>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "accel/plan/accelerator.h"
#include "accel/util/json.h"

#include "accel/results/stats.h"

namespace accel::ladder {

using Json = nlohmann::json;

struct TuneOptions {
  std::filesystem::path config;      // the base run config
  std::vector<std::string> sets;     // --set on the base
  double target = 0;                 // validation accuracy to reach, (0, 1]
  double budget_s = 0;               // 0 = no budget
  std::filesystem::path space;       // a space file (JSON); empty = the default space
  std::filesystem::path out;         // empty = runs/tune/<base config's name>
  std::filesystem::path calibration; // peaks.json with a comm fit (calibrate --comm); empty = none
  bool resume = false;
  int short_steps = 30;              // steps of a throughput run
  int confirm = 2;                   // settings confirmed to the target besides the base
  int runs = 5;                      // runs per confirmed setting (4 or more: MLPerf-scored, checked)
  int64_t eval_every_samples = 0;    // validation cadence; 0 = 25 base steps' samples
  std::filesystem::path exe;         // the accel-bench binary; empty = /proc/self/exe
  std::ostream* log = nullptr;       // progress; nullptr = silent
};

// A budget: "30m", "1h", "90s", "1h30m" or a number of minutes. ConfigError otherwise.
double parse_duration_s(const std::string& text);

// What tune needs to know of the machine.
struct TuneMachine {
  int cores = 1;
  std::string device = "cpu";                 // the accelerator row the base lands on ("cpu", "cuda")
  std::vector<std::string> emulated;          // precisions this hardware only emulates
  std::string emulated_note;                  // why, one line
};
// The base's runtime.accelerator resolved on a machine with these facts by
// the accelerator rows' one rule ("auto": its GPU where it has one), and the
// precisions that machine emulates.
TuneMachine this_tune_machine(const Json& base_resolved, const plan::MachineFacts& facts);

// One setting of the base: the --set values that make it, and what it is.
struct Setting {
  std::string id;     // short, stable (from the sets)
  std::string label;  // "global batch 24, bf16-mixed, 2 ranks x 1 thr, ddp (runtime.bucket_mb=5)"
  std::vector<std::string> sets;
  int64_t global_batch = 0;
  int ranks = 1, threads = 0;
  std::string precision, strategy;
  bool is_base = false;
  std::string pruned;  // why it is never run ("" = a candidate)
};

// The space's candidates for this base and machine, the base first, the
// static pruning applied (reasons in Setting::pruned). The space document:
// {"global_batch": [..], "lr_rule": "sqrt" | "linear" | "fixed", "ranks": [..],
//  "strategies": [..], "knobs": true, "fields": {"field": [values], ...}};
// every key optional (null document = the default space). ConfigError naming
// the key for a malformed one.
std::vector<Setting> tune_space(const Json& base_resolved, const Json& space, const TuneMachine& machine,
                                std::string* lr_rule = nullptr);

// A setting's measured and scored figures (tune.json's "rows").
struct TuneRow {
  std::string id, label;
  bool is_base = false;
  std::optional<double> predicted_samples_per_s, samples_per_s, memory_per_rank_bytes, test_acc;
  results::stats::OlympicScore time_to_target, samples_to_target;
  std::optional<results::stats::ConvergenceCheck> convergence;  // vs the base
  bool confirmed = false;  // trained to the target
  std::string verdict;     // filled by rank_rows
  int rank = 0;            // 1 = the winner; 0 = not ranked
};

// Ranks the confirmed rows by their olympic mean time to target; a row that
// converges faster than the base allows, or whose score is invalid, is not
// ranked, and its verdict says why; one significantly slower is ranked and its
// verdict names it; rows only
// measured are ordered after them by throughput. Returns the winner's index
// (nullopt: none confirmed).
std::optional<size_t> rank_rows(std::vector<TuneRow>& rows);

struct TuneOutcome {
  std::filesystem::path dir;
  bool interrupted = false;
  std::string winner;                 // the winning setting's label ("" = none)
  std::filesystem::path winner_config;
  int failed = 0;
};
TuneOutcome run_tune(const TuneOptions& options);

}  // namespace accel::ladder
