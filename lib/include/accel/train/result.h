// The typed record of one run, filled by the training core and turned into
// result.json, metrics.csv and console lines by the reporters below (one
// place each). A value that was not measured is std::nullopt and is written
// as null / printed as "n/a", never as 0.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "accel/util/json.h"

#include "accel/metrics/energy.h"
#include "accel/metrics/metrics.h"
#include "accel/train/task.h"

namespace accel::train {

using Opt = std::optional<double>;

// One row of metrics.csv: a logged step or an epoch summary.
struct MetricRow {
  std::string kind;  // "step" | "epoch"
  int64_t step = 0;
  int epoch = 0;
  Opt loss, train_acc, val_acc, step_time_ms;
};

struct EpochResult {
  int epoch = 0;
  Opt train_acc, val_acc, val_loss, loss;
  int64_t steps = 0;
  double time_s = 0;
};

// What each rank holds and measured.
struct RankResult {
  int rank = 0;
  int64_t peak_memory_bytes = 0;  // of peak_memory_kind: CUDA max allocated, or peak RSS
  int64_t param_bytes = 0, grad_bytes = 0, optimizer_bytes = 0;
  int64_t host_peak_rss_bytes = 0;
  // The CUDA caching allocator's peaks over the timed region (0 off CUDA).
  int64_t cuda_max_allocated_bytes = 0, cuda_max_reserved_bytes = 0;
};

struct RunResult {
  // 3: samples_per_s and tokens_per_s (images_per_s kept for image runs),
  // model.arch, data.kind.
  static constexpr int kSchemaVersion = 3;
  std::string name;
  std::string status = "running";  // running | ok | failed | interrupted | dry-run
  std::string error;
  // What kind of failure a failed run's was: "out_of_memory"
  // (train::is_out_of_memory), or "" (any other).
  std::string failure;
  std::string started_at, finished_at;
  nlohmann::json config;  // resolved
  nlohmann::json env;     // metrics::environment + distributed layout
  nlohmann::json init;    // model.init report (null for random)
  nlohmann::json resumed_from;
  nlohmann::json model;   // resolved dims
  nlohmann::json model_layout;  // models::layout_json: what predict lays out communication by
  nlohmann::json data;    // split sizes, classes, batches per epoch
  nlohmann::json plan;    // the run plan (plan::plan_json): accelerator, world, strategy and knobs, precision
  std::string loop;
  std::string strategy;   // the strategy that ran (auto resolved)
  std::string device;     // e.g. "cpu", "cuda:0"
  // "native" | "emulated": whether this hardware has kernels for the precision
  // (bf16 on a CPU without AVX512-BF16/AMX is emulated), and the warnings
  // printed before the run.
  std::string precision_support = "native";
  std::vector<std::string> warnings;
  int world_size = 1;
  int threads = 1;
  std::vector<EpochResult> epochs;
  Opt test_acc, test_loss;        // of the weights train.test_weights chose
  std::string test_weights = "last";
  nlohmann::json best_val;        // best_val: {val_acc, epoch, step} of the tested weights
  Opt test_acc_last;              // best_val: the last weights' test accuracy
  // train.target: {metric, value, reached, step, samples, time_s, epoch,
  // val_acc, evaluations, stopped}; null without a target.
  nlohmann::json target;
  double train_time_s = 0;
  double init_time_s = 0;
  int64_t steps = 0;
  // What the run trained and evaluated: {train: {steps, samples}, val and
  // test: {passes, samples, time_s}} (train/work.h plans the same counts).
  nlohmann::json work;
  metrics::Spread step_time_ms;  // the slowest rank's per-step times after warm-up
  // Those times, step by step (ms): an interval for one run's step time
  // (results/stats.h), and the series a change is read from.
  std::vector<double> step_ms_after_warmup;
  // Rank 0's steps after warm-up, split by phase (means in ms: forward,
  // backward, comm_wait, optimizer, other, total, steps); null when a step
  // was not split (a replayed CUDA Graph) or none was measured.
  nlohmann::json step_split_ms;
  // The collectives of rank 0's steps after warm-up, per step ({steps,
  // bytes, collectives: [{op, primitive, bytes, per_step}]}); null on one rank.
  nlohmann::json comm_per_step;
  // The exact work of one step (metrics::StepCounter), rank 0's: {step,
  // op_calls, op_calls_by_op, flops_counted, flops_counted_by_op,
  // flops_analytic, flops_counted_over_analytic, allocations: {count, bytes,
  // peak_bytes, source}}; null when no step was
  // counted (a run resumed past it, or profiled then).
  nlohmann::json counters;
  std::string data_kind = "image";  // "image" | "text" (the dataset's kind)
  Opt samples_per_s;             // all ranks together
  Opt samples_per_s_per_device;
  // Wall clock: the measured steps' samples (all ranks) over the host's
  // seconds from the end of the warm-up to the last step's end, loader waits
  // and host overhead included (samples_per_s times the steps alone).
  Opt wall_samples_per_s;
  Opt tokens_per_s;              // text: real (not padding) tokens, all ranks together
  Opt model_flops_per_s;
  double flops_per_sample = 0;   // forward, mean over the trained batches' shapes
  int64_t params = 0;
  // "process_rss" (CPU) or "cuda_max_allocated" (torch.cuda.max_memory_allocated,
  // as the article reports memory)
  std::string peak_memory_kind = "process_rss";
  // The update rank 0's optimizer ran at its last step (train/optimizer.h's
  // optimizer_implementation): "accel-fused-cpu", "aten-fused-cuda",
  // "torch-per-param" or "capturable"; "" (null) when no step ran.
  std::string optimizer_implementation;
  std::vector<RankResult> ranks;  // one per rank, in rank order
  // The energy of the steps wall_samples_per_s times, all ranks' devices
  // together (accel/metrics/energy.h): energy_source "nvml" where NVML's
  // counter answered on every rank, else "not measured" with energy_note
  // saying why, and the joules null.
  metrics::EnergyFigures energy;
  nlohmann::json grad_scaler;     // final GradScaler state (16-mixed)
  std::vector<MetricRow> rows;    // metrics.csv
};

nlohmann::json to_json(const RunResult& r);

// result.json as every reader sees it (result sets and their report, compare,
// summary, predict, the sweep's estimate): one name, one type and one
// fallback per field, here beside the writer. Read defensively: a field that
// is missing, null or of another type is nullopt ("n/a"), never 0, so the
// results of older schemas (images_per_s before samples_per_s, no
// step_split_ms) and failed runs read too.
struct RunRecord {
  std::filesystem::path dir;       // the run's folder
  bool present = false;            // a result.json was found
  std::string status = "missing";  // ok | failed | interrupted | ... | missing | unreadable
  std::string error;
  std::string failure;             // a failed run's kind: "out_of_memory", or ""
  nlohmann::json config;           // the resolved config (an object, or null)
  nlohmann::json env, data, model_layout, step_split_ms, comm_per_step, work;  // or null
  nlohmann::json plan;             // the run plan (plan::plan_json); null in results written before it
  std::string name;
  std::string strategy;            // as the run resolved it ("auto" -> "single", ...)
  std::string device = "cpu";      // "cpu", "cuda:0"
  std::string accelerator = "cpu";  // its accelerator row's kind: the plan's, else the device's
  // The task's metric that val_acc, test_acc and the target hold: its name,
  // direction and whether it is a share, as the plan recorded them, else its
  // config's task row's, else classification's (records before tasks).
  train::MetricFacts metric;
  std::string data_kind = "image";  // schema 3's data_kind; earlier sets are all images
  std::string precision_support = "native";  // "emulated": the CPU has no kernels for it
  int world_size = 1;
  int threads = 0;                 // per rank; 0 = not recorded
  int64_t steps = 0;
  std::optional<int64_t> batch_size;  // train.batch_size of the resolved config, per device
  // samples_per_s (schema 3), or images_per_s in results written before it.
  Opt test_acc, test_loss, train_time_s, init_time_s, samples_per_s, samples_per_s_per_device,
      tokens_per_s, flops_per_sample, model_flops_per_s, step_ms_median, step_ms_mean;
  int epochs_done = 0;
  nlohmann::json counters;  // null in results written before them
  double inject_delay = 0;  // fault_injection: each step slowed by this fraction (0 = none)
  // The optimizer update that ran ("" in results written before it, or when none ran).
  std::string optimizer_implementation;
  // energy_source ("" in results written before it), and the joules where measured.
  std::string energy_source;
  Opt energy_j, energy_j_per_step, energy_j_per_sample, energy_to_target_j;
  // train.target, where the run had one: the value, whether the run reached
  // it, and at which step, training samples and time (training with its
  // validations) it first did.
  struct Target {
    double value = 0;
    bool reached = false;
    bool stopped = false;  // train.stop_at_target ended the run there
    Opt step, samples, time_s, val_acc;
  };
  std::optional<Target> target;
  std::string started_at, finished_at;  // UTC, ISO 8601; empty when not recorded
  std::vector<double> step_ms_after_warmup;  // per step (ms); empty in results written before it
  std::vector<double> peak_memory_bytes;  // one per rank; empty = n/a
  std::vector<double> epoch_time_s, epoch_val_acc;
  std::vector<RankResult> ranks;          // what each rank held (where recorded)
  std::vector<std::string> warnings;      // printed before the run (e.g. emulated precision)
  bool ok() const { return present && status == "ok"; }
  // samples/s of one device: the field when present, else total / world size.
  Opt per_device_samples_per_s() const;
};

// DIR/result.json ("missing" when there is none, "unreadable" with the
// reason when it is not a regular file or not JSON).
RunRecord read_run_record(const std::filesystem::path& dir);
// The times a run can measure: a microsecond to 10^9 s (31 years), a step's
// in ms likewise; samples or tokens a second from 10^-9 to 10^12.
inline constexpr double kMinTimeS = 1e-6, kMaxTimeS = 1e9, kMaxRate = 1e12;
// A metric that is not a share (a loss) lies within +-10^6: no loss a run
// logs is larger, and its differences and intervals stay finite.
inline constexpr double kMaxMetric = 1e6;
// What makes an ok run's figures impossible ("train_time_s is -5: it must be
// > 0"), "" when none: times, rates and memory not finite and > 0, times and
// rates beyond [kMinTimeS, kMaxTimeS], a share (accuracy) outside [0, 1] or another
// metric beyond kMaxMetric, counts that
// are not integers in range, a target's time or samples below 0. read_run_record reads such a run as
// "unreadable", so no report, compare or gate ever uses its numbers.
std::string impossible_figure(const RunRecord& r, const nlohmann::json& doc);
// A result.json's document as a record of the run in `dir`.
RunRecord run_record_of(const nlohmann::json& doc, const std::filesystem::path& dir);
std::string metrics_csv(const std::vector<MetricRow>& rows);

// For checkpoints: the running record (rows, epochs) as JSON and back.
nlohmann::json rows_to_json(const std::vector<MetricRow>& rows);
std::vector<MetricRow> rows_from_json(const nlohmann::json& j);
nlohmann::json epochs_to_json(const std::vector<EpochResult>& epochs);
std::vector<EpochResult> epochs_from_json(const nlohmann::json& j);

// "12.34%" or "n/a".
std::string percent_or_na(const Opt& v);

}  // namespace accel::train
