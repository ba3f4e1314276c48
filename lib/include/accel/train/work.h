// The work a run does, planned from its config and split sizes before it
// starts: training steps and samples, validation passes, test passes and
// the samples each evaluates. The sweep plans every rung with it (bounds
// checked by tests, the up-front estimate and ETA); the run records what it
// actually did in result.json's "work", which equals the plan (test passes:
// at most the plan's). Torch-free but for split_sizes, which loads the data.
#pragma once

#include <cstdint>
#include <limits>

#include "accel/config/run_config.h"

namespace accel::train {

struct SplitSizes {
  int64_t train = 0, val = 0, test = 0;
};

struct PlannedWork {
  int64_t batches_per_epoch = 0;  // per rank, after drop_last and train.limit_train_batches
  int64_t steps = 0;              // batches trained (per rank), as result.json's "steps"
  int64_t train_samples = 0;      // all ranks: steps x batch_size x ranks
  int64_t val_passes = 0;         // at epoch ends and every train.val_every_steps
  int64_t val_samples_per_pass = 0;
  int64_t test_passes = 0;        // at most: 2 when best_val weights may differ from the last
  int64_t test_samples_per_pass = 0;
  int64_t val_samples() const { return val_passes * val_samples_per_pass; }
  int64_t test_samples() const { return test_passes * test_samples_per_pass; }
  // Forward passes of one sample, a training sample counted as three (its
  // backward about twice the forward): what a run's time scales with.
  double forward_units() const {
    return 3.0 * double(train_samples) + double(val_samples()) + double(test_samples());
  }
};

// The evaluation batch size a split of `rows` rows gets (train.eval_batch_size,
// or the training batch size; never more than the split's rows).
int64_t eval_batch_size(const config::TrainConfig& t, int64_t rows);

// `world`: the ranks of the run (runtime.devices x num_nodes, "auto" resolved).
PlannedWork plan_work(const config::RunConfig& cfg, const SplitSizes& sizes, int world);

// The step of a run whose work is counted exactly (result.json's "counters"),
// of `total_steps` steps: the last warm-up step (train.warmup_steps - 1), or
// step 1 when the warm-up is shorter than two steps (that step is then left
// out of the step times); a run shorter than that counts its last step.
// `eager_steps`: how many leading steps run their step function eagerly, op
// by op. A step replayed from a CUDA Graph dispatches no op the counters could
// see, so a graphed run (GraphedStep: its warm-up calls, then capture and
// replays) counts its last eager step at the latest. Every step by default.
int64_t counted_step(const config::TrainConfig& train, int64_t total_steps,
                     int64_t eager_steps = std::numeric_limits<int64_t>::max());

// The sizes load_splits gives the data section (loads and splits the data,
// tokenizing text; no model is built).
SplitSizes split_sizes(const config::DataConfig& data, uint64_t seed);

}  // namespace accel::train
