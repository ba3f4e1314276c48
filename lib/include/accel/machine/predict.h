// `accel-bench predict`: what more devices or nodes would buy, from one
// measured one-device run (or an article's one-device rung) and a
// communication model, with the assumptions stated.
//
// The model. A step on N devices with the same batch per device costs the
// one-device run's compute (forward, backward, optimizer; per device,
// optionally scaled to another device kind by a stated peak ratio) plus the
// communication its strategy's schedule does not hide. The schedule is the
// one the strategies in lib/dist run: DDP's buckets (the same bucketing, from
// the run's recorded parameter layout) all-reduced as backward produces them;
// FSDP's all-gather of each unit before its forward (and again before its
// backward under FULL_SHARD), the next unit's prefetched, and its
// reduce-scatter after its backward; ZeRO-1/2's all-reduce or reduce-scatter
// per unit during backward and the all-gather of the stepped shards after the
// optimizer. Collectives queue on one channel, in the order they are issued.
// Each costs an alpha-beta time, alpha + bytes * beta, either fitted on this
// machine (`calibrate --comm`) or from a link's published latency and
// bandwidth (results/reference/links.json), as a ring does it: all-reduce
// 2(N-1) hops of bytes/N, all-gather and reduce-scatter N-1. On a GPU a
// collective overlaps compute; on a CPU rank that owns its cores it does not
// (the core that computes also moves the data), so there every collective is
// exposed. Optimizer time divides by N where the strategy shards the
// optimizer state. Validation passes (the run's time outside its steps)
// divide by N. Left out: data loading that does not keep up, stragglers and
// skew between ranks, launch and start-up, the network's contention.
// Torch-free; the CLI builds the model for an article's rung.
#pragma once

#include <array>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "accel/util/json.h"

#include "accel/dist/catalog.h"
#include "accel/train/result.h"
#include "accel/util/json_doc.h"

namespace accel::machine {

// seconds = alpha + bytes * beta.
struct AlphaBeta {
  double alpha_s = 0;
  double beta_s_per_byte = 0;
  double operator()(double bytes) const { return alpha_s + bytes * beta_s_per_byte; }
};

// t = alpha + bytes * beta over (bytes, seconds) points, robust to the
// hiccups of a shared machine: beta by least squares over the larger half of
// the sizes, alpha the median of what it leaves of the smaller half's times;
// both clamped at 0. Throws ConfigError with fewer than two distinct sizes.
AlphaBeta fit_alpha_beta(const std::vector<std::pair<double, double>>& bytes_seconds);

// One hop of a ring: its latency and the bandwidth a collective achieves.
struct Link {
  std::string name;
  double latency_s = 0;
  double bytes_per_s = 0;
  std::string note;  // where the figures come from
};

enum class Collective { AllReduce, AllGather, ReduceScatter };
Collective collective_from_name(const std::string& name);  // "all_reduce", ...
std::string collective_name(Collective c);

// A ring over `ranks` ranks on `link`; `bytes` is the whole buffer (the
// all-reduced tensor, the gathered output, the reduce-scatter's input).
double ring_seconds(Collective c, const Link& link, int ranks, double bytes);
// The hop a collective's fit at `ranks` ranks implies (the ring formula inverted).
Link link_from_fit(Collective c, const AlphaBeta& fit, int ranks, const std::string& name);

// CPU ranks of one host share its caches and memory bandwidth: how much
// slower one computes while `ranks` compute at once than alone (calibrate
// --comm's "colocation"): a matmul loop (forward and backward) and a stream
// over large buffers (the optimizer). ranks 0: not measured, no slowdown.
struct Colocation {
  int ranks = 0;
  double compute = 1.0, memory = 1.0;
  double stream_bytes_per_s = 0;  // the stream's bytes read and written a second, one rank alone (0: not measured)
};

// A collective's times as calibrate measured them at `ranks` ranks: (bytes,
// seconds), each the best of its timing loops, kept by size as their lower
// envelope (no message faster than a larger one: a slower smaller point is
// the machine's noise).
struct MeasuredCollective {
  int ranks = 0;
  std::vector<std::pair<double, double>> envelope;  // by bytes, ascending
  static MeasuredCollective from_points(int ranks, std::vector<std::pair<double, double>> points);
  // Inside the measured sizes at the measured rank count: linear between the
  // neighbouring sizes; nothing (nullopt) elsewhere.
  std::optional<double> seconds(int ranks, double bytes) const;
};

// How collectives cost on the devices of a prediction.
struct CommModel {
  Link all_reduce, all_gather, reduce_scatter;  // one link each (the same for a published link)
  // A calibration's own points by Collective (none for a published link):
  // where they reach, they price a collective instead of the fitted link.
  std::array<MeasuredCollective, 3> measured;
  Colocation colocation;  // CPU ranks on one host (a calibration's), else none
  bool overlaps_compute = true;    // GPU: yes; CPU ranks that own their cores: no
  bool native_reduce_scatter = true;  // Gloo: an all-reduce of the whole buffer instead
  bool bf16_reductions = true;        // Gloo sums bf16 payloads in fp32
  std::string description;
  const Link& link(Collective c) const;
  // Seconds for one call on `ranks` ranks: the measured points where they
  // reach, else the ring over the link.
  double seconds(Collective c, int ranks, double bytes) const;
};
// From links.json by id (ConfigError listing the ids otherwise), for GPUs on NCCL.
CommModel comm_model_from_links(const Json& links, const std::string& id);
// From a calibration's "comm" block (calibrate --comm): Gloo on CPU ranks.
CommModel comm_model_from_calibration(const Json& comm, const std::string& file);

// One collective a step issues: when (ms into the step's compute timeline),
// what and how large.
struct Call {
  Collective kind;       // what the backend runs
  std::string op;        // what was asked (Gloo's reduce-scatter runs as an all-reduce)
  double bytes = 0;
  std::string phase;     // "forward", "backward", "optimizer", "metrics"
  int unit = -1;         // FSDP/ZeRO: the wrap unit it serves
  double per_step = 1;   // calls a step (a GPU's metrics all-reduce: at log steps only)
};

// What a prediction starts from: one device's step and the run around it.
struct PredictBase {
  std::string name;            // the run or the article's rung
  std::string precision;       // 32-true, bf16-mixed, ...
  std::string device_kind;     // "cpu" | "cuda"
  int threads = 0;             // a CPU rank's threads (0: unknown)
  double forward_ms = 0, backward_ms = 0, optimizer_ms = 0, other_ms = 0;
  double measured_step_ms = 0;  // mean, for the 1-device row's check
  int64_t batch_per_device = 1;
  int64_t train_samples = 0;    // per epoch
  int64_t val_samples = 0;      // per epoch
  int epochs = 1;
  int64_t steps = 0;            // the base run's (one device)
  double outside_steps_s = 0;   // validation and the rest outside steps, all epochs, one device
  double memory_bytes_per_s = 0;  // the device's usable memory bandwidth where known (an article's GPU)
  double train_time_s = 0;
  // models::layout_json
  std::vector<int64_t> param_numels;
  int64_t element_bytes = 4;
  struct Unit {
    std::string name;
    int64_t numel = 0, compute_numel = 0;
  };
  std::vector<Unit> units;
  int64_t param_bytes = 0, grad_bytes = 0, optimizer_bytes = 0;  // one device's model state
  // The run's own settings, the defaults of a prediction's.
  int64_t limit_train_batches = 0, max_steps = 0;  // 0: none
  // > 0: a sweep's --budget cut every run to this share of its batches per
  // epoch, so the base's train.limit_train_batches is that share of its own
  // world's batches, not a count for every world: N devices keep the same
  // share of theirs (the sweep's floor(fraction x batches), at least 1).
  double budget_fraction = 0;
  int log_every = 300;
  double grad_clip = 0;
  dist::StrategyKnobs knobs;  // the run plan's (sharding, prefetch, bucket size)
  std::vector<std::string> assumptions;  // how the base itself was made (an article's rung)
};

// A base from a measured one-device run's result.json (ConfigError naming
// what it lacks: a run of several ranks, no step split, no model layout).
PredictBase base_from_result(const train::RunRecord& result, const std::string& file);

// A base from an article's one-device rung (results/reference/*.json with a
// "workload" block: samples, batch, the GPU's memory bandwidth), the rung's
// resolved config and the model it builds (`layout`, models::layout_json): the rung's minutes
// become a step time, split by stated assumptions (assumptions lists them).
PredictBase base_from_article(const Json& reference, const std::string& rung, const Json& layout,
                              const Json& config, const std::string& file);

struct PredictOptions {
  std::string strategy = "ddp";  // a multi-rank row of accel/dist/catalog.h
  // The strategy's knobs as lib/dist runs them (small_first_bucket: DDP's
  // 1 MiB first bucket, on a device's ranks).
  dist::StrategyKnobs knobs;
  int nodes = 1;
  CommModel intra, inter;  // inter: the hops between nodes (nodes > 1)
  double compute_scale = 1.0;   // per-device compute time x this (another device kind)
  std::string compute_note;
  // The device's memory bandwidth for the strategies' own copies (gradients
  // into and out of buckets and flat buffers, dtype conversions), bytes read
  // and written a second; 0: unknown, the copies are not charged.
  double copy_bytes_per_s = 0;
  std::string copy_note;
  bool metrics_every_step = true;  // the loss all-reduce each step (CPU) or at log steps only
  std::optional<double> price_per_device_hour;
};

// A prediction's options for a base as its own run was set up: its FSDP
// sharding, prefetch and DDP bucket size; on a GPU DDP's small first bucket
// and the loss all-reduce at log steps only.
PredictOptions options_for(const PredictBase& base, const std::string& strategy);

// The strategy's step under these options, from its registry row
// (accel/dist/catalog.h); ConfigError naming --strategy for a strategy that
// runs one rank or is unknown.
dist::StepSchedule schedule_of(const PredictOptions& o);

// The collectives one step issues on `devices` ranks, in issue order.
std::vector<Call> step_calls(const PredictBase& base, const PredictOptions& o, int devices);

// The bytes the strategy's own copies read and write in one step on
// `devices` ranks, by when they run (lib/dist/ddp.cpp, fsdp.cpp): DDP copies
// each gradient into its bucket, divides the bucket by N and copies it back
// into .grad; FSDP and ZeRO copy gradients into a unit's flat buffer and
// divide it, convert gathered 16-bit parameters into the fp32 ones, and ZeRO
// copies each stepped shard before gathering it. One device: none.
struct CopyTraffic {
  double forward = 0, backward = 0, after_backward = 0, optimizer = 0;
  double total() const { return forward + backward + after_backward + optimizer; }
};
CopyTraffic copy_traffic(const PredictBase& base, const PredictOptions& o, int devices);

struct Prediction {
  int devices = 1;
  double step_ms = 0, compute_ms = 0, exposed_comm_ms = 0, comm_ms = 0;
  double copy_ms = 0;  // of compute_ms: the strategy's own copies (copy_traffic)
  double bytes_per_step = 0;
  double calls_per_step = 0;
  int64_t steps = 0;
  double train_time_s = 0;
  double samples_per_s = 0;   // all devices
  double efficiency = 1;      // samples/s over devices x one device's
  double state_bytes_per_rank = 0;
  std::optional<double> cost;  // price x devices x time
};

std::vector<Prediction> predict(const PredictBase& base, const PredictOptions& o,
                                const std::vector<int>& device_counts);

// The assumptions a prediction makes, one per line, for the console and README.
std::vector<std::string> prediction_assumptions(const PredictBase& base, const PredictOptions& o);
// A Markdown table of the rows (with cost when priced), and a JSON document.
std::string prediction_table(const PredictBase& base, const std::vector<Prediction>& rows);
// One double through a printf format ("%.1f"), for predict's tables and notes.
std::string format_double(const char* format, double v);
Json prediction_json(const PredictBase& base, const PredictOptions& o,
                     const std::vector<Prediction>& rows);

}  // namespace accel::machine

namespace accel::machine {

// `accel-bench predict`, whole: the base, the models and the options from
// files and flags; the printed text and the JSON document.
struct PredictRequest {
  std::string result;                 // RESULT.json of a one-device run, or
  std::string article, rung;          // an article's reference file and one-device rung
  std::vector<int> devices;           // device counts (default 1..8)
  int nodes = 1;
  std::string strategy = "ddp";
  std::string link, inter_link;       // ids in links.json
  std::string links_file = "results/reference/links.json";
  std::string calibration;            // peaks.json with "comm" (calibrate --comm) and cpu peaks
  std::string published_peaks = "results/reference/dense-peaks.json";
  int threads_per_device = 0;         // CPU: another thread count per rank (calibrated peaks)
  std::string gpu;                    // another GPU kind (dense-peaks.json name)
  double compute_scale = 0;           // an explicit factor (0: none)
  std::string measured;               // a measured multi-device result.json to set beside
  std::string fsdp_sharding;          // "" = the base run's
  int fsdp_prefetch = -1;             // -1 = the base run's, 0 / 1
  double bucket_mb = 0;               // 0 = the base run's
  std::optional<double> price_per_device_hour;
  // The CLI's: builds the model a resolved config names on data of these
  // facts and returns models::layout_json (torch lives there, not here).
  std::function<Json(const Json& resolved_config, const Json& data_facts)> model_layout;
  // The CLI's: loads and resolves a config file (extends, defaults).
  std::function<Json(const std::string& file)> load_config;
};

struct PredictOutput {
  std::string text;  // assumptions, table, comparisons
  Json json;
};

// Throws ConfigError (exit 2) for what it cannot model, naming the flag or file.
PredictOutput run_predict(const PredictRequest& request);

}  // namespace accel::machine
