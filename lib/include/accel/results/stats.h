// The statistics behind every compared number: summaries of a rung's repeats
// (median, spread, coefficient of variation, a 95% interval), an interval for
// one run's step time from its own correlated steps, the interval of a ratio
// OTHER/BASE, a verdict from an interval against a bound, and the repeats a
// side needs to resolve a change of a bound's size.
//
// Conventions (and why):
// - Times, rates and memory are compared as ratios, on the log scale: run
//   times are multiplicative (a 7% slowdown is the same change on a fast or a
//   slow rung) and their noise is closer to normal in logs.
// - Repeats give Student-t intervals (Welch's for two sides, so unequal
//   spreads are fine); the t and normal quantiles come from Boost.Math.
// - One run's step time gets a moving-block bootstrap interval of its median
//   from the steps after warm-up: consecutive steps are correlated (caches,
//   frequency, a neighbour's load), so resampling single steps would give an
//   interval too narrow; blocks of about n^(1/3) steps keep that correlation
//   (Kuensch 1989; Hall, Horowitz and Jing 1995 for the block length). It
//   measures the noise within the run only, not between runs: say so.
// - Every resampling uses a fixed seed, so a verdict is reproducible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace accel::results::stats {

inline constexpr double kConfidence = 0.95;
inline constexpr double kPower = 0.8;  // for the repeats a change needs

// Quantiles for the intervals (Boost.Math).
double normal_quantile(double p);
double t_quantile(double p, double dof);

// The p-quantile of sorted values, linear between order statistics (R's type 7).
double quantile_sorted(const std::vector<double>& sorted, double p);

struct Summary {
  int n = 0;
  double median = 0, q1 = 0, q3 = 0, iqr = 0;
  double mad = 0;             // median absolute deviation (raw, not scaled to sigma)
  double mean = 0, sd = 0;    // sd: sample standard deviation (n - 1), 0 for one value
  double cv = 0;              // sd / mean, 0 for one value
  // A 95% interval of the mean (Student t, n - 1 dof) for n >= 2; nullopt for one value.
  std::optional<double> ci_low, ci_high;
};
// nullopt for no values.
std::optional<Summary> summarize(std::vector<double> values);

struct Interval {
  double point = 0, low = 0, high = 0;
  std::string method;  // how it was made, for the reader
  double confidence = kConfidence;  // the interval's two-sided level
};

// The median of a correlated series with a 95% moving-block bootstrap
// interval (percentile method, `resamples` draws, blocks of
// max(1, round(n^(1/3))) values, a fixed seed). nullopt for fewer than 8 values.
std::optional<Interval> block_bootstrap_median(const std::vector<double>& series,
                                               int resamples = 2000, uint64_t seed = 0x5eed);

// What one side of a comparison knows of a measure.
struct Sample {
  std::vector<double> values;  // one per repeat (ok runs)
  // One value and this: the run's own interval of it (a block bootstrap of
  // its steps), as a standard error on the log scale; nullopt when none.
  std::optional<double> within_run_se_log;
  // This machine's run-to-run spread of the measure (calibrate --noise): the
  // standard deviation of one run's log, measured over `noise_runs` repeats.
  std::optional<double> noise_sd_log;
  int noise_runs = 0;
  // Where noise_sd_log comes from when it is not this machine's measurement
  // ("a 3% run-to-run floor"): named in the interval's method.
  std::string noise_source;
};

// OTHER/BASE for a positive measure, with a 95% interval (or `confidence`'s):
// - both sides with 2+ repeats: Welch's t on the logs' means; where this
//   machine's measured noise is known too (calibrate --noise, both sides of
//   that machine), a pooled t instead: the sides' log variance pooled with
//   the noise's (its repeats add their degrees of freedom), never below the
//   sides' own pooled variance;
// - one side with one value, the other with 2+: the repeats' log spread stands
//   for both (pooled, their dof);
// - one value a side and this machine's measured noise: t on the logs with
//   that spread (its repeats' dof);
// - one value a side, both with a within-run interval: normal on the logs
//   (within-run noise only, said in `method`);
// - otherwise: the point ratio alone (low == high == point, method says
//   "no spread"). nullopt when a side has no positive value.
// `confidence`: the interval's two-sided level (kConfidence unless a caller
// splits its error over several looks: adaptive repeats).
std::optional<Interval> ratio_interval(const Sample& base, const Sample& other,
                                       double confidence = kConfidence);

// The run-to-run spread (sd of the log) the report gives a one-run rung's
// speedup where this machine's noise was never measured: 3%, the spread between
// unchanged runs in the one committed measurement,
// results/bench/gate-check/intel-xeon-processor-2c-amx-lt1.13.0.noise.json
// (3.1% step time, 3.2% training time, 1.5% peak memory; 2 cores, shared).
inline constexpr double kRunToRunFloorLog = 0.03;

// OTHER - BASE for a fraction (test accuracy), in percentage points:
// - both sides with 2+ repeats (seeds): Welch's t on the means;
// - otherwise, where both sides name their test set's size: the binomial
//   standard error of each side's accuracy (the test set's sampling noise),
//   normal; else the point alone ("no spread").
std::optional<Interval> accuracy_difference(const std::vector<double>& base, double base_test_samples,
                                            const std::vector<double>& other, double other_test_samples,
                                            double confidence = kConfidence);

// OTHER - BASE for a metric that is not a share (a loss), in its own units:
// Welch's t on the means where both sides have 2+ repeats (seeds), else the
// point alone ("no spread": one run's loss carries no test-set interval here).
std::optional<Interval> mean_difference(const std::vector<double>& base, const std::vector<double>& other,
                                        double confidence = kConfidence);

// The standard deviation on the log scale that a side's values show (the
// larger of the two sides'), or nullopt with fewer than 2 values on both.
std::optional<double> log_spread(const Sample& base, const Sample& other);

// Repeats per side that resolve a change of `effect` (same units as `sd`:
// log(1 + bound) for ratios, points for accuracy) at this spread, an
// interval of level `confidence` (two-sided alpha 1 - confidence) and power
// 0.8: 2 (z_(1 - alpha/2) + z_0.8)^2 sd^2 / effect^2, rounded up, at least 2.
int repeats_needed(double sd, double effect, double confidence = kConfidence);

// The smallest change (as a fraction for ratios: exp(d) - 1) that `runs` runs
// a side resolve at this log spread, alpha 0.05 and power 0.8:
// d = (z_0.975 + z_0.8) sd sqrt(2 / runs).
double smallest_resolved_change(double sd_log, int runs);
// The same on an additive scale (test accuracy's points): d itself.
double smallest_resolved_difference(double sd, int runs);

// The median of values (nan for none).
double median(std::vector<double> v);

enum class Verdict { worse, better, same, unresolved };

// A ratio's verdict where a higher ratio is worse (time, memory), bound as a
// fraction (0.07):
// - worse: the whole interval above 1 + bound;
// - better: the whole interval below 1 / (1 + bound);
// - same: the whole interval at or below 1 + bound, not wholly better;
// - unresolved: the interval straddles 1 + bound.
Verdict judge_higher_is_worse(const Interval& ratio, double bound);
// A difference's verdict where lower is worse (accuracy points), bound in points:
// worse below -bound, better above +bound, unresolved straddling -bound.
Verdict judge_lower_is_worse(const Interval& difference, double bound);
// |difference| beyond a band (accuracy in both directions): worse when the
// whole interval lies outside [-band, band], unresolved when it straddles an edge.
Verdict judge_band(const Interval& difference, double band);

// MLPerf Training's scoring of time to a quality target (training_rules.adoc,
// "Benchmark Results" and "Reference Convergence Points"):
//
// Olympic score: of N runs (nullopt = a run that missed the target) drop the
// fastest and the slowest and average the rest; one miss may be the slowest
// dropped, two or more invalidate the score, as may fewer than 3 runs.
struct OlympicScore {
  bool valid = false;
  std::string why;          // invalid: the reason, one line
  int runs = 0, misses = 0;
  double mean = 0;          // of the kept runs
  std::vector<double> kept; // sorted
  double sd = 0;            // of the kept runs, population (ddof 0), as MLPerf's
  // A 95% t interval of the kept runs' mean on the log scale (2+ kept, all
  // positive; a time's interval never reaches below 0).
  std::optional<double> ci_low, ci_high;
};
OlympicScore olympic_score(const std::vector<std::optional<double>>& runs);

// The convergence check: a rung's samples (or epochs) to target against its
// reference rung's, each olympic-scored. MLPerf's one-sided two-sample
// Student t-test with equal variances at p = 0.05, the reference's
// population spread standing for both: the lowest mean a submission may
// show is ref_mean - t_{0.95, n_ref + n - 2} sd sqrt(1/n_ref + 1/n), with
// n_ref and n the kept runs of each. Below it the rung converges faster than
// the reference allows (a suspect evaluation, or a change that learned
// differently); the same bound above the mean flags a rung that converges
// significantly slower (a precision or schedule that changed learning),
// which MLPerf accepts and this harness names. MLPerf normalises a faster
// (but allowed) result by ref_mean / mean, never below 1.
// `resolution`: the samples between two validations (the larger of the two
// sides'): samples to target are known only to that grid, so where it is
// coarse against the runs' spread (every reference run reaching the target at
// the same validation gives a spread of 0, and any other mean would read
// significant) its rounding, a uniform error of one interval with variance
// resolution^2 / 12, is added to the reference's variance. 0: MLPerf's test
// exactly (its worked example).
struct ConvergenceCheck {
  double ref_mean = 0, ref_sd = 0, mean = 0;
  double resolution = 0, sd = 0;    // sd: the spread the test used (ref_sd with the rounding)
  int n_ref = 0, n = 0;
  double t = 0;                     // t_{0.95, n_ref + n - 2}
  double min_mean = 0, max_mean = 0;
  double max_speedup = 1;           // ref_mean / min_mean
  std::string verdict;              // "faster" | "slower" | "same"
  double normalisation = 1;         // max(1, ref_mean / mean)
};
// nullopt where either score is invalid, or where the kept runs of both
// leave the test no degrees of freedom (one each: 3 runs a side).
std::optional<ConvergenceCheck> convergence_check(const OlympicScore& reference, const OlympicScore& rung,
                                                  double resolution = 0);

}  // namespace accel::results::stats
