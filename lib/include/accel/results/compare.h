// Compare result sets (machines, GPU models, commits) rung by rung: time
// ratio, accuracy delta, memory ratio, each set's hardware and versions; and
// per rung and measure the change OTHER/BASE with its 95% interval (or another level)
// (results/stats.h) and a verdict from the interval, not the point: a gate
// fails on a rung only when the whole interval lies beyond its bound, and a
// gate whose interval straddles a bound is "unresolved" (its own exit status,
// kUnresolvedExitCode), with the repeats per side that would resolve it.
// Only like with like: rungs whose resolved configs differ are "not
// comparable", except for the fields that describe where a run happens
// rather than what it computes (comparable_config).
#pragma once

#include <map>
#include <optional>
#include <utility>
#include <string>

#include "accel/results/result_set.h"
#include "accel/results/stats.h"

namespace accel::results {

struct CompareBounds {
  std::optional<double> slower_pct;         // --fail-slower PCT: time ratio > 1 + PCT/100
  std::optional<double> acc_drop_points;    // --fail-accuracy-drop POINTS (percentage points of a share)
  // --fail-loss-rise DELTA: a metric that is not a share (a language model's
  // test loss, lower better) worse by DELTA in its own units. Each metric has
  // its own bound: a point of accuracy is no unit of loss.
  std::optional<double> loss_rise;
  std::optional<double> memory_growth_pct;  // --fail-memory-growth PCT (largest rank)
  std::optional<double> acc_band_points;    // --accuracy-band POINTS: |delta| beyond it fails
  bool require_same_config = false;         // a "not comparable" rung fails
  // --fail-counters: any change in a rung's exact work counters (op calls by
  // op, counted and analytic FLOPs, collectives by kind and size, state bytes
  // per rank) fails, each named with both values. No statistics: two runs of
  // one config on one LibTorch count the same.
  bool fail_counters = false;
  // This machine's measured noise (measure_noise, stored by calibrate
  // --noise beside the peaks), or null: a side with one run then takes its
  // spread from it rather than from within the run.
  Json noise;
  // With any bound above, a rung of BASE that could not be judged against it
  // (configs differ, a side lacks the measure a bound needs, BASE's run
  // failed) fails the comparison: a gate that compared nothing must not pass.
  // --allow-uncompared lets such rungs through, said in the summary.
  bool allow_uncompared = false;
  // The intervals' two-sided level (--confidence). OTHER made by adaptive
  // repeats is judged at the level its looks were judged at (adaptive_level)
  // where that is higher: its runs were added while its verdict was open,
  // and a 95% interval after several looks is not 95%.
  double confidence = stats::kConfidence;
  // The bound of a task metric's kind: a share's --fail-accuracy-drop,
  // another's (a loss) --fail-loss-rise.
  std::optional<double> metric_drop(const train::MetricFacts& m) const {
    return m.proportion ? acc_drop_points : loss_rise;
  }
  bool gates() const {
    return slower_pct || acc_drop_points || loss_rise || memory_growth_pct || acc_band_points ||
           require_same_config || fail_counters;
  }
};

// The resolved config without the machine-defining runtime facts and
// locations: runtime.threads and runtime.accelerator (what the machine has),
// model.init_path and data.root (where its files are), name and description.
// Everything else -- devices, strategy, precision, batch, epochs, seed, data
// -- defines the experiment and must match.
Json comparable_config(const Json& config);
// Two runs' configs as compared: both resolved again by today's schema
// (fields added since a run was made take their defaults, so older result
// sets stay comparable), or both as written when either no longer
// resolves; then comparable_config.
std::pair<Json, Json> comparable_configs(const Json& a, const Json& b);

// The paths where two configs differ ("train.epochs: 10 vs 3"), at most `limit`.
std::string config_difference(const Json& a, const Json& b, size_t limit = 3);

// One rung's measure, both sides, and what its interval says.
struct MeasureRow {
  std::string rung;
  std::string measure;   // "step time", "training time", "test accuracy" (the task's metric), "peak memory"
  std::string unit;      // of base/other: "ms", "s", "%", "GB"
  OptNum base, other;    // the sides' medians (accuracy: means), in `unit`
  int base_runs = 0, other_runs = 0;  // the samples of each side: its runs and timing runs
  int base_timing = 0, other_timing = 0;  // of those, timing runs (results::timing_factors)
  bool difference = false;  // change is OTHER - BASE in points (accuracy), else OTHER / BASE
  std::optional<stats::Interval> change;
  // slower / faster / same / unresolved (time); less accurate / more accurate /
  // outside band (a share such as accuracy); worse <metric> / better <metric>
  // (another metric: "worse loss"); larger / smaller (memory); "" when no bound applies.
  std::string verdict;
  std::string note;              // why unresolved or not judged
  std::optional<int> repeats_needed;  // per side, to resolve a change of the bound's size
  bool gated = false;            // a bound judged this row
};

// One exact counter that differs between the sides of a rung.
struct CounterChange {
  std::string rung, counter;
  OptNum base, other;  // nullopt: the side does not have it
};

// A run's exact counters, flattened to "name -> value": "op calls",
// "op calls: aten::mm", "flops counted", "flops counted: aten::addmm",
// "flops analytic", "collective all_reduce/allreduce 1048576 B: calls per
// step", "collective bytes per step", "rank 0 param bytes", ... Empty when the
// run recorded none.
std::map<std::string, double> run_counters(const RunRecord& run);
// A counter's value as compare and the HTML report print it: a whole number
// without decimals, else 6 significant digits; "(none)" when absent.
std::string counter_value(OptNum v);

struct CompareOutcome {
  std::string base_dir, other_dir, base_machine, other_machine;
  std::string markdown;
  std::vector<MeasureRow> rows;  // every compared rung's measures
  std::vector<CounterChange> counter_changes;  // every compared rung's
  int unresolved = 0;       // rungs whose gated verdict straddles a bound (none beyond one)
  int regressions = 0;      // rungs beyond a bound, failed or missing where base was ok,
                            // or not judged under a gate (CompareBounds::allow_uncompared)
  int not_comparable = 0;
  int compared = 0;
  int uncompared = 0;       // rungs of BASE not judged: not comparable, no measure, no ok run
  double confidence = stats::kConfidence;  // the intervals' level (CompareBounds::confidence or a set's)
  std::string summary;      // the verdict line, also the markdown's first and last line
};

CompareOutcome compare_sets(const ResultSet& base, const ResultSet& other,
                            const CompareBounds& bounds);

// Adaptive repeats (sweep --repeats auto --against BASE): from a compare of
// BASE with the set being made, the rungs whose time gate (step or training
// time) is still unresolved, none of their gated measures beyond a bound.
// `run`: those with fewer than `max_runs` ok runs, to run once more each;
// `at_cap`: those that have `max_runs` already. More runs of a rung that is
// resolved, failed or not comparable cannot change what compare says of it.
struct AdaptiveRound {
  struct Open {
    std::string rung;
    int runs = 0;                       // the set's samples of its time now
    std::optional<int> repeats_needed;  // per side, as compare estimates from the spread so far
  };
  std::vector<Open> run, at_cap;
};
AdaptiveRound adaptive_round(const CompareOutcome& outcome, int max_runs);

// The level adaptive repeats judge each look at: kConfidence's error split
// evenly over the looks a rung can take, from `first_runs` runs to
// `max_runs` (Bonferroni: whatever look a verdict comes from, the chance that
// any look's interval missed the true change is at most 1 - kConfidence).
// 3 to 6 runs: 4 looks, each at 98.75%. The bound holds per measure: a
// rung's gate reads step time and training time, two intervals a look.
int adaptive_looks(int first_runs, int max_runs);
double adaptive_confidence(int first_runs, int max_runs);
// The level a set made by adaptive repeats was judged at: its sweep.json's
// adaptive.confidence, or for a set made before the looks were split, the
// level its first_runs and max_repeats give; nullopt for any other set.
// ConfigError naming the file for a value it cannot have had.
std::optional<double> adaptive_level(const ResultSet& set);
// An interval's level as the tables print it: "95%", "98.75%".
std::string confidence_text(double confidence);

// A machine's noise from a set whose rungs ran unchanged several times
// (`sweep --repeats K`): per rung and measure (step time, training time,
// peak memory: the standard deviation of the log; test accuracy: of the
// points) and machine-wide (the median over rungs), with the smallest change
// 1, 3 and 5 runs a side resolve. ConfigError when no rung has 3 ok repeats.
// Below kNoiseFloorLog (0.5%, a third of the smallest spread the committed
// measurement results/bench/gate-check/intel-xeon-processor-2c-amx-lt1.13.0
// .noise.json found: 1.5% in peak memory, 3.1-3.2% in times) a time's or
// memory's machine-wide spread is floored, with a warning.
inline constexpr double kNoiseFloorLog = 0.005;
Json measure_noise(const ResultSet& set);

struct HistoryOutcome;  // results/history.h: the set judged against a history's window

// The exit status of comparisons (and of the judgement against a history,
// where `history` is given): 1 with a regression, else kUnresolvedExitCode
// with an unresolved gate, else 0.
int compare_exit_status(const std::vector<CompareOutcome>& outcomes, const HistoryOutcome* history = nullptr);

// For CI: the verdict first (the history's outcome in it), then one table
// (rung, measure, base, other, change and interval, verdict), for a job
// summary or a pull-request comment, then the history's table.
std::string compare_ci_markdown(const std::vector<CompareOutcome>& outcomes, const HistoryOutcome* history = nullptr);
// For a terminal: each comparison's summary and tables, then the history's;
// with a history, a first line with the verdict word, every summary and the
// history's outcome (as compare_ci_markdown's first line).
std::string compare_text(const std::vector<CompareOutcome>& outcomes, const HistoryOutcome* history = nullptr);
// Everything, for tooling: {"exit_status", "comparisons": [{base, other,
// summary, counts, rows: [...]}], "history": {regressions, suspicious,
// verdicts: [...]}}.
Json compare_json(const std::vector<CompareOutcome>& outcomes, const HistoryOutcome* history = nullptr);
// One self-contained XHTML page: the CI verdict and table, then each
// comparison's full tables (results/report.h's report_html for a set), then
// the history's.
std::string compare_html(const std::vector<CompareOutcome>& outcomes, const HistoryOutcome* history = nullptr);

}  // namespace accel::results
