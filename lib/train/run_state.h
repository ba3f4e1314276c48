// Private to lib/train: one run on one rank, the state its two files share.
// run.cpp sets it up and finishes it (Fabric, data, model, resume, outputs);
// loop.cpp is the epoch loop around the TrainStep (steps.h): batches,
// pending step metrics, evaluation, checkpoints, stops, --profile.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <tuple>
#include <optional>
#include <string>
#include <vector>

#include "accel/util/json.h"

#include "accel/config/run_config.h"
#include "accel/data/dataset.h"
#include "accel/data/loader.h"
#include "accel/metrics/energy.h"
#include "accel/metrics/profiler.h"
#include "accel/models/family.h"
#include "accel/models/weights.h"
#include "accel/train/device.h"
#include "accel/train/fabric.h"
#include "accel/train/result.h"
#include "accel/train/run.h"
#include "accel/train/task_row.h"
#include "console.h"
#include "steps.h"

namespace accel::train::detail {

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

inline std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

// Running totals of the epoch in progress (part of a mid-epoch checkpoint).
struct EpochState {
  double metric_sum = 0;  // the task's metric summed over the samples seen (checkpoint key "correct")
  int64_t seen = 0, batches = 0;
  double loss_sum = 0, elapsed_s = 0;
};

struct EvalResult {
  Opt acc, loss;
};

// What the evaluations of one split did (result.json's "work"): passes, the
// real samples of every rank together, and their time.
struct EvalCount {
  int64_t passes = 0, samples = 0;
  double time_s = 0;
};

// A trained step whose loss and metric still sit on the device: read back
// together at the next flush (every step on a CPU, where reading is free;
// on a GPU at log steps, epoch ends, checkpoints and stops only, so the host
// does not stall the device each step).
struct PendingStep {
  torch::Tensor loss;     // this rank's, float64, a copy (graph outputs are reused)
  torch::Tensor metric;   // float64 [2]: the task's metric summed over the batch's real samples, and their units
  int64_t valid = 0, step = 0, batch_index = 0;
  int epoch = 0;
  bool log = false;
};

class Run {
 public:
  Run(const config::RunConfig& cfg, const nlohmann::json& resolved, const RunOptions& opts)
      : cfg_(cfg), resolved_(resolved), opts_(opts), console_(nullptr), task_(&task_row(cfg.train.task)) {}
  RunResult execute();

 private:
  void say(const std::string& line) { console_.line(line); }
  void setup();
  models::DataFacts data_facts() const;
  void init_weights(models::Model& model);
  void resume();
  void resume_best(const nlohmann::json& extra);
  void train_epochs();
  bool train_batch(const data::Batch& batch, int epoch, EpochState& es, int64_t batches);
  bool flush_pending(EpochState& es, int64_t batches);
  EvalResult evaluate(data::Loader& loader, EvalCount& count);
  // train.test_weights "best_val": after each validation, keep the weights
  // when its accuracy beats the best so far (strictly, as Lightning's
  // ModelCheckpoint mode "max"); returns whether it did. The caller writes
  // best.ckpt outside the timed segment (write_best).
  bool track_best(const EvalResult& val, int epoch);
  void write_best(int epochs_done, const EpochState& es);
  void persist_best_before_exit(int epochs_done, const EpochState& es);
  void load_weights(const models::NamedTensors& weights);
  bool best_val() const { return cfg_.train.test_weights == "best_val"; }
  // train.target: after each validation, whether it is the first to reach
  // the target (recorded with the training time so far, `elapsed_s`, and the
  // samples trained); true when the run should stop there
  // (train.stop_at_target).
  bool check_target(const EvalResult& val, int epoch, double elapsed_s);
  nlohmann::json target_json() const;
  bool writes_checkpoints() const {
    return cfg_.train.save_checkpoint || cfg_.train.checkpoint_every > 0;
  }
  void save(const std::filesystem::path& file, int epochs_done, const EpochState& es);
  void finish();
  void gather_rank_results();
  void profile_step_begin();
  void profile_step_end();
  void write_profile();
  void record_step_split();
  void write_outputs();

  const config::RunConfig& cfg_;
  const nlohmann::json& resolved_;
  const RunOptions& opts_;
  Console console_;
  const TaskRow* task_;  // train.task's row: the loss, the metric and its direction

  std::unique_ptr<Fabric> fabric_;
  bool zero_ = true;
  data::Splits splits_;
  models::BuiltModel built_;
  std::optional<Fabric::Setup> fsetup_;
  std::unique_ptr<TrainStep> step_fn_;
  std::unique_ptr<data::Loader> train_loader_, val_loader_, test_loader_;
  std::unique_ptr<StepClock> clock_;
  bool defer_ = false;  // read step metrics at flushes only (GPU)
  std::vector<PendingStep> pending_;
  std::unique_ptr<metrics::OpProfiler> profiler_;  // --profile
  int64_t profile_first_ = -1, profiled_ = 0;
  // The step whose work is counted exactly (result.json's "counters"):
  // train::counted_step (train/work.h) of this run's steps and of the steps
  // its step function runs eagerly (a graphed step: its warm-up calls).
  int64_t counted_step() const;
  void inject_delay();
  Clock::time_point step_host_begin_;  // the current step's start on the host (train.inject_delay)
  void record_counts(const metrics::StepCounts& c,
                     const std::optional<metrics::AllocationCounts>& allocations,
                     const data::Batch& batch);

  RunResult result_;
  std::vector<double> step_ms_;  // this rank's, after warm-up
  int64_t step_ = 0;             // batches trained
  int64_t opt_steps_ = 0;        // optimizer steps taken
  int64_t total_opt_steps_ = 0;  // for the LR schedule
  double train_time_s_ = 0;
  // What this rank trained since it started (not carried by checkpoints):
  // the means behind flops_per_sample and tokens_per_s.
  double flops_sum_ = 0, samples_sum_ = 0, tokens_sum_ = 0;
  double positions_sum_ = 0;  // a token stream's positions computed ([B, S] a batch), padding included
  // The measured steps on the host's clock (wall_samples_per_s): seconds
  // from each one's batch fetch to its return, and their samples (this rank's).
  double wall_s_ = 0, wall_samples_ = 0;
  // The energy of those steps (their windows closed, after a device sync, at
  // every evaluation and checkpoint) and of training up to the target.
  metrics::EnergyMeter energy_;
  int64_t energy_steps_ = 0;  // the measured steps (this rank's)
  std::optional<double> energy_to_target_;
  void start_energy();
  void pause_energy();  // syncs the device and closes the open window
  void record_energy();
  // The evaluations run so far (a resumed run's earlier ones included).
  EvalCount val_count_, test_count_;
  nlohmann::json work_json() const;
  // This rank's measured steps (after warm-up) split by phase, and the
  // collectives they ran (op, primitive, bytes -> calls): result.json's
  // step_split_ms and comm_per_step.
  double phase_sum_ms_[kStepPhases] = {0, 0, 0, 0};
  double other_sum_ms_ = 0, split_total_ms_ = 0;
  int64_t split_steps_ = 0, comm_steps_ = 0;
  std::map<std::tuple<std::string, std::string, int64_t>, int64_t> comm_calls_;
  int start_epoch_ = 1;
  int nonfinite_ = 0;
  static constexpr int kMaxNonFiniteWithScaler = 10;
  EpochState resumed_epoch_;
  // train.test_weights "best_val": the best validation so far and its
  // weights (full parameters and buffers, on the device, every rank).
  Opt best_acc_;
  int best_epoch_ = 0;
  int64_t best_step_ = 0;
  models::NamedTensors best_weights_;
  bool best_on_disk_ = false;              // OUT/best.ckpt holds them
  std::filesystem::path best_copy_from_;   // resumed into another out dir: copy its best.ckpt
  nlohmann::json best_json() const;
  // train.target: the first validation that reached it, as target_json writes it.
  bool target_reached_ = false, stopped_at_target_ = false;
  int64_t target_step_ = 0, target_evaluations_ = 0, target_samples_ = 0;
  // Training samples so far, every rank's: those before a resume (at the rank
  // count that trained them) and this run's steps at its own global batch.
  int64_t samples_before_ = 0, steps_before_ = 0;
  int64_t samples_trained() const {
    return samples_before_ + (step_ - steps_before_) * cfg_.train.batch_size * fabric_->world_size();
  }
  int target_epoch_ = 0;
  double target_time_s_ = 0, target_val_acc_ = 0;
};

}  // namespace accel::train::detail
