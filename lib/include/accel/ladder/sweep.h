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
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "accel/results/result_set.h"

namespace accel::ladder {

struct SweepOptions {
  std::filesystem::path suite;
  int repeats = 0;                // 0: one, or one per seed
  // > 0 (with one run a rung): after every rung's full run, this many short
  // timing runs of each comparable rung (its config, steps capped to its
  // warm-up and kTimingSteps more, one evaluation batch, no checkpoint), run
  // round-robin into <rung>/timing/t<i>/ and recorded in sweep.json's
  // "timing_runs": between-run samples of its speed, for the report's and
  // compare's intervals (results::timing_factors).
  int timing_runs = 0;
  // Adaptive repeats (sweep --repeats auto --against BASE): every rung runs
  // kAdaptiveFirstRuns times round-robin; then, round by round, one more run
  // of each rung whose time verdict against BASE under --fail-slower
  // (results::adaptive_round) is still unresolved, until none is, a rung has
  // max_repeats runs, or max_minutes have gone by since the first extra
  // round; sweep.json's "adaptive" says what it spent, what stayed open and
  // the level every look was judged at (its "confidence": 95% split over the
  // looks, so that a verdict from any of them holds at 95%).
  bool adaptive = false;
  std::filesystem::path against;   // BASE: a result set of the same suite
  double against_slower_pct = 7;   // the bound a verdict is resolved against
  int max_repeats = 6;             // runs a rung at most
  double max_minutes = 0;          // > 0: no extra round starts after this many minutes
  std::filesystem::path noise;     // this machine's noise (calibrate --noise); "": BASE's calibration
  std::vector<uint64_t> seeds;    // repeat i runs with seeds[i % n] (train.seed)
  std::filesystem::path out = "runs/sweep";
  bool resume = false;            // reuse ok runs whose resolved config is unchanged
  bool rerun_upstream = false;    // run upstream runs even where a committed one matches
  std::vector<std::string> sets;  // --set for every run (after the suite's own)
  std::filesystem::path peaks;    // this machine's calibration, for the estimate (optional)
  std::vector<std::string> only;  // run these rungs alone (ids); the upstream runs as always
  // > 0: when the estimate of all the command's runs exceeds it, every run
  // whose steps are not capped trains the same share of its batches per
  // epoch so that they fit (never below 30%); said before anything runs and
  // recorded in sweep.json ("budget", each rung's "budget_sets").
  double budget_minutes = 0;
  // Every rung trains to the suite's target_accuracy and stops there
  // (train.target, train.stop_at_target); ConfigError without one.
  bool to_target = false;
  // > 0: a rung's run still going after this many seconds is stopped
  // (SIGTERM, then SIGKILL) and recorded as failed ("timed out"); the sweep
  // goes on with the next rung.
  double run_timeout_s = 0;
  std::filesystem::path exe;      // the accel-bench binary; empty = /proc/self/exe
  std::ostream* log = nullptr;    // progress; nullptr = silent
  bool terminal = false;          // progress bars instead of log lines
};

// The steps a timing run times after its warm-up (fewer where the full run
// has fewer).
inline constexpr int kTimingSteps = 12;

// Adaptive repeats' first round-robin: three runs a rung before the first
// look. Two were once too few: on a 2-core VM both of an unchanged rung's
// first two runs fell in one spell of a neighbour's load, 35% slower than
// BASE's five, and the first look called it slower beyond a 7% bound (a
// noise the machine's calibration had not shown). Every look is judged at
// results::adaptive_confidence(kAdaptiveFirstRuns, max_repeats).
inline constexpr int kAdaptiveFirstRuns = 3;

struct SweepSummary {
  std::filesystem::path set_dir;
  int ok = 0, reused = 0, failed = 0, skipped = 0;
  // Runs of a batch series that ran out of memory: where the series ends,
  // as asked (suite.h), so not failures; counted apart.
  int out_of_memory = 0;
  // A SIGINT/SIGTERM/SIGUSR1 stopped the sweep: passed on to the running
  // rung (recorded "interrupted", with its checkpoint; `sweep --resume`
  // continues it from there), and no later rung was started.
  int stop_signal = 0;
  std::string stopped_rung;
};

// What a sweep would run on this machine, without running or writing
// anything: per upstream run and rung (in order) a record {id, status: run |
// committed | skipped | failed | excluded, runs, precision, emulated, ranks,
// threads, scalable, scaled, work {steps, batches_per_epoch, train_samples,
// val_passes, val_samples, test_passes_max, test_samples_per_pass,
// forward_units}, estimate_s, estimate {fixed_s, train_s, eval_s}}.
struct SweepPlan {
  std::string suite, machine_id;
  std::string basis;  // where the estimate comes from, or ""
  std::vector<Json> rungs;
  int runs = 0, unestimated = 0;  // runs: timing runs included
  std::optional<double> total_s;  // the estimated runs' seconds; nullopt: none estimated
  int timing_runs = 0;            // the timing runs planned, in all (within `runs`)
  double timing_s = 0;            // their estimated seconds (within total_s)
  std::string adaptive;           // --repeats auto: what may run beyond the first runs, or ""
  // The command's budget (SweepOptions::budget_minutes): the seconds, the
  // share of its training batches each scalable run keeps, and every suite's
  // runs before scaling.
  double budget_s = 0, fraction = 1;
  std::optional<double> unscaled_s;
  std::vector<std::string> cuts;  // what the budget cut beyond its floor (SweepPlans::cuts)
};

// The plans of the suites of one command, and their totals.
struct SweepPlans {
  std::vector<SweepPlan> suites;
  int runs = 0, unestimated = 0;
  std::optional<double> total_s, unscaled_s;
  double budget_s = 0, fraction = 1;
  // Where even the floor's share of the batches did not fit: that plan's
  // seconds, and what was cut beyond it, in order (each said in the plan,
  // and per rung in sweep.json's "budget_cuts" and the report).
  std::optional<double> floor_s;
  std::vector<std::string> cuts;
};

// Throws accel::ConfigError for a bad suite or options (before running
// anything); a failing run is recorded as failed and the sweep goes on.
// Before the first run it plans every rung (what it will train and evaluate
// here, about how long: estimate.h; with a budget, scaled to fit it),
// records each rung's plan in sweep.json ("planned") and prints the total;
// after each run, the runs done and the time left. Several suites run one
// after the other with one plan, budget and ETA; a signal stops them all.
std::vector<SweepSummary> run_sweeps(const SweepOptions& opts,
                                     const std::vector<std::filesystem::path>& suites);
SweepSummary run_sweep(const SweepOptions& opts);  // opts.suite alone

SweepPlans plan_sweeps(const SweepOptions& opts, const std::vector<std::filesystem::path>& suites);
std::string plan_summary(const SweepPlan& p);                     // one line
std::vector<std::string> plans_summary(const SweepPlans& plans);  // a line per suite, budget, total
std::string plans_text(const SweepPlans& plans);  // each suite's table, then the summary lines
Json plans_json(const SweepPlans& plans);

// The output folder a sweep of `suite` would use on this machine.
std::filesystem::path sweep_set_dir(const std::filesystem::path& out, const std::string& suite,
                                    const std::string& machine_id);

// Parses "1,2,3" into seeds; ConfigError on anything else.
std::vector<uint64_t> parse_seeds(const std::string& text);

}  // namespace accel::ladder
