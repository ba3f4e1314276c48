// The ladder report of one result set: per rung what changed, devices x
// threads, precision, strategy, epochs, train time (median and min-max over
// repeats), speedup vs scratch and vs the rung before, test accuracy, peak
// memory per rank, images/s per device and in total, MFU, time to the
// suite's target accuracy, status, and the article's figures beside them.
// Only ok repeats enter the figures; a missing figure is "n/a", never 0.
#pragma once

#include <filesystem>
#include <optional>
#include <cstdint>
#include <string>
#include <vector>

#include "accel/machine/peaks.h"
#include "accel/machine/predict.h"
#include "accel/results/result_set.h"
#include "accel/results/stats.h"

namespace accel::results {

struct Stat {
  OptNum median, min, max;
  int n = 0;
};
Stat stat_of(std::vector<double> values);

// Time until the validation metric first reaches `target` (at or above it
// for accuracy, at or below for a loss: the run's metric's direction): the run's own record
// where it trained with that train.target (training and validations up to
// the validation that reached it, at its step), else the sum of epoch times
// to the first epoch whose validation reached it (as MLPerf times to a
// target); nullopt when never reached.
OptNum time_to_target(const RunRecord& run, double target);
// The training samples to that validation: from the run's own record only
// (nullopt otherwise, or when not reached).
OptNum samples_to_target(const RunRecord& run, double target);

// A rung's time to the suite's target scored as MLPerf scores it, over its
// ok runs (a run that did not reach it is a miss), and its convergence
// (samples to the target) checked against the suite's reference rung.
struct TargetScore {
  std::string id;
  int runs = 0, reached = 0;
  stats::OlympicScore time_s, samples;
  std::optional<stats::ConvergenceCheck> convergence;  // nullopt: no reference, or a score invalid
  OptNum normalised_time_s;  // time_s.mean x the convergence's normalisation
  OptNum ref_time_min, ref_acc_pct;  // the article's
  double eval_interval = 0;  // training samples between two validations (the runs' largest; 0 unknown)
};
// Every rung with a run, where the set has a target (empty otherwise).
std::vector<TargetScore> score_to_target(const ResultSet& set);
std::string target_markdown(const ResultSet& set, const std::vector<TargetScore>& scores);

// What a set's speedups divide: each rung's training time, or, where every
// rung ran a fixed small number of steps (at most kFixedStepsMax, as a GPU
// check's 40), its steady step: the median step after warm-up per sample
// (step time / (batch x ranks)). Such a run's training time is mostly its
// warm-up, setup and first-step compilation, so the ratio of training times
// says little of what a precision or a CUDA Graph buys per step.
inline constexpr int64_t kFixedStepsMax = 100;
inline constexpr const char* kSpeedTrainingTime = "training time";
inline constexpr const char* kSpeedSteadyStep = "steady step";

struct RungRow {
  std::string id, article, changes, status;
  bool upstream = false;
  int ok_runs = 0, runs = 0;
  // The model family (model.arch, else its preset's; "" when unknown):
  // speedups are never taken across two families (a BERT rung is no
  // faster or slower than a ViT rung, only different work), nor across two
  // presets of one family (gpt_tiny against SmolLM2-135M's shape).
  std::string family;
  std::string preset;  // model.preset ("" when unknown)
  int64_t most_steps = 0;  // the most training steps an ok run took
  std::string devices_threads, precision, strategy;
  OptNum epochs;
  Stat time_s, acc, ips_total, ips_device, mfu, ttt_s;
  // The energy of the timed steps (result.json's energy_*; n = 0 where no
  // run measured it) and what measured it ("nvml"), over the ok repeats.
  Stat energy_j_per_step, energy_j_per_sample, energy_to_target_j;
  std::string energy_source;
  // The metric `acc` holds: its first present run's (the set's where it has
  // none). A set may hold rungs of several tasks (the smoke suite's
  // accuracy and loss rungs): each row is shown by its own metric.
  train::MetricFacts metric;
  Stat tokens_total;  // text: real tokens per second, all ranks
  int ttt_reached = 0;
  std::vector<double> mem_per_rank;  // median over ok repeats, per rank
  OptNum speedup_scratch, speedup_prev;
  // Each ok repeat's steady step per sample (s): step_ms_median / (batch x
  // ranks) / 1000; empty where a run has no step median or batch size.
  std::vector<double> steady_values;
  // The values the speedups divide (Report::speed_measure): each ok
  // repeat's training time (s), or steady_values; with one ok run and
  // timing runs, that run's and, per timing factor, it scaled by the factor
  // (between-run samples of its speed). `speed` is the ok runs' median alone.
  std::vector<double> speed_values;
  OptNum speed;
  // One ok run's timing factors (results::timing_factors); empty otherwise.
  std::vector<double> timing_factors;
  // The rungs "vs scratch" and "vs prev" are taken against ("" when none).
  std::string scratch_id, prev_id;
  std::string versus;  // the suite's "versus": the rung "vs prev" must be ("" = the last earlier one)
  // Each speedup's 95% interval (base speed / this rung's, from the runs'
  // speed_values) and its verdict: "faster", "slower" or "same within noise".
  struct SpeedupInterval {
    stats::Interval iv;
    std::string verdict;
  };
  std::optional<SpeedupInterval> speedup_scratch_iv, speedup_prev_iv, speedup_base_iv;
  // Training time relative to the ladder's first pretrained rung (the
  // reference's "speedup_base" rung, else the first rung not from random
  // init): the ladder's shape, comparable across machines of any speed.
  OptNum speedup_base;
  bool pretrained = false;   // the rung's model does not start from random init
  // What a run is billed by: its GPUs, or a CPU run's machines (its ranks share them).
  int billed_units = 1;
  OptNum cost, cost_per_point;  // report --price-per-hour: the median run's, and per test-accuracy point
  bool comparable = true;  // false: cut short on this machine; no speedup, no time to target
  std::string peak_source;
  // The article's figures for the same rung (nullopt when it has none), and
  // its speedups between the same two rungs as ours: the article's time of
  // our scratch / prev / base rung's article rung over this one's (nullopt
  // where either rung is not one of the article's).
  OptNum ref_time_min, ref_acc_pct, ref_mem_gb, ref_speedup_scratch, ref_speedup_prev, ref_speedup_base;
  // A reference of published figures per technique (each from its own
  // source, results/reference/lm-techniques.json) gives them as ratios over
  // the rung before, not as times: its speedup (ref_speedup_prev takes it)
  // and memory ratio, and where each comes from (its source, setup and
  // hardware, for the report's notes).
  OptNum ref_mem_ratio_prev;
  std::string ref_figure_note;
  // The rung before's largest per-rank peak memory over this rung's (how
  // many times less memory this rung took); nullopt where either is unknown.
  OptNum mem_ratio_prev;
  // Each measure over the ok repeats: median, IQR, CV, the 95% interval of
  // the mean; with one run, its step time's interval from its own steps.
  struct Spread {
    std::string measure, unit;
    stats::Summary summary;
    std::optional<stats::Interval> within_run;
  };
  std::vector<Spread> spread;
};

// A multi-rank rung predicted from the one-device rung before it.
struct ScalingLine {
  std::string rung, base, strategy;
  int measured_devices = 0;
  OptNum measured_samples_per_s, measured_step_ms, measured_time_s;
  std::vector<machine::Prediction> rows;  // 1..8 devices
  std::vector<std::string> assumptions;
};
// Needs the set's comm fit (calibration's "comm"); notes say why a rung has none.
std::vector<ScalingLine> predict_scaling(const ResultSet& set, const Json& calibration,
                                         std::vector<std::string>& notes);
std::string scaling_markdown(const std::vector<ScalingLine>& lines);

struct Report {
  ResultSet set;
  std::vector<RungRow> upstream, rungs;
  std::string speedup_base;  // the rung speedup_base is relative to ("" when none)
  std::string speed_measure = kSpeedTrainingTime;  // what the speedups divide (kSpeedSteadyStep)
  // Rungs (or upstream runs) of more than one metric: the tables' metric
  // column is "test metric" and each cell names a metric that is not a share.
  bool mixed_metrics = false;
  std::vector<std::string> notes;  // peaks used, failures, machine facts
  std::vector<std::string> unreadable;  // result.json files that exist but do not read: why
  std::vector<ScalingLine> scaling;     // predicted scaling of the multi-rank rungs
  std::vector<TargetScore> targets;     // time to the suite's target, MLPerf-scored
  // This machine's measured noise (calibrate --noise, in the calibration
  // file), when it is of the set's machine; null otherwise.
  Json noise;
  OptNum price_per_hour;                // of one billed unit (a GPU, or a CPU machine)
  std::string price_note;
};

// report --price-per-hour: each rung's cost (price x units x median hours)
// and cost per point of test accuracy.
void add_costs(Report& r, double price_per_hour, const std::string& note);

Report build_report(const ResultSet& set, const machine::PeakTable& peaks);

// report.md: a compact table first (what each rung changed, its time, its
// speedups with their intervals and verdicts, the article's beside, accuracy,
// memory), then under kEveryColumn the full table, the notes and sections.
inline constexpr const char* kEveryColumn = "## Every column";
std::string report_markdown(const Report& r);
std::string report_csv(const Report& r);
// Text from a result set as a Markdown table cell or line (no line break,
// no raw HTML, '|' escaped), and as a report.csv cell (quoted where needed,
// never a live spreadsheet formula: OWASP's leading ' before = + - @).
std::string markdown_text(const std::string& s);
std::string csv_text(const std::string& s);

// report.html: one self-contained page (no script, no external style or
// image; well-formed XHTML): the report's tables and sections, the SVG charts
// among `charts` (the files write_charts just wrote; none other is read,
// each a regular file opened without following links, at most 4 MiB, an SVG
// document) inline as images, the machine and versions, and every run of
// every rung (resolved config, step split, memory per rank, counters,
// collectives, warnings). Every text from the set is escaped.
std::string report_html(const Report& r, const std::vector<std::filesystem::path>& charts);
// The Markdown accel-bench writes (headings, tables, lists, paragraphs,
// `code`, **strong**) as XHTML, "# " becoming h`top`; and text as XHTML.
std::string markdown_html(const std::string& md, int top);
std::string html_text(const std::string& s);

// "12.3 s" / "4.56 min" / "n/a"; "77.08%"; "0.64 GB"; used by compare too.
std::string fmt_time(OptNum seconds);
std::string fmt_pct(OptNum fraction);
// The task's metric: a share as a percent ("77.08%"), another as itself
// ("7.0512"); "n/a" when missing.
std::string fmt_metric(const train::MetricFacts& metric, OptNum v);
std::string fmt_gb(OptNum bytes);
std::string fmt_num(OptNum v, const char* format);
// A number for a CSV cell: "%.6g", empty when missing.
std::string csv_num(OptNum v);

}  // namespace accel::results

namespace accel::results {

// `accel-bench report DIR`: for each result set under DIR, report.md,
// report.csv and charts/ (runtime and accuracy: CSV, and SVG + PNG with
// gnuplot) written into the set's folder (or `out` when given, for one set).
struct ReportOptions {
  std::filesystem::path out;
  // Published GPU peaks; and a CPU calibration file (default: SET/peaks.json,
  // else results/peaks/<machine-id>.json).
  std::filesystem::path published_peaks = "results/reference/dense-peaks.json";
  std::filesystem::path calibration;
  // The article's figures for a set whose manifest has none (a plain folder of runs).
  std::filesystem::path reference;
  std::string gnuplot = "gnuplot";
  // What a GPU (or a CPU machine) costs an hour: one price, or a JSON file of
  // {"<machine-id>": price} for sets of several machines.
  std::optional<double> price_per_hour;
  std::filesystem::path prices;
  bool html = false;  // also report.html (report_html)
};

struct ReportFiles {
  std::filesystem::path set_dir;
  std::string markdown;
  std::vector<std::filesystem::path> files;
  std::string notice;  // charts without images, ...
  std::vector<std::string> failed;  // charts not written (the previous ones kept)
};

std::vector<ReportFiles> write_reports(const std::filesystem::path& dir, const ReportOptions& opts);

}  // namespace accel::results
