#include "accel/train/work.h"

#include <algorithm>
#include <numeric>

#include "accel/data/dataset.h"
#include "accel/data/pass_shape.h"

namespace accel::train {

int64_t eval_batch_size(const config::TrainConfig& t, int64_t rows) {
  if (t.eval_batch_size <= 0) return t.batch_size;
  return std::min<int64_t>(t.eval_batch_size, std::max<int64_t>(1, rows));
}

int64_t counted_step(const config::TrainConfig& t, int64_t total_steps, int64_t eager_steps) {
  const int64_t wanted = t.warmup_steps >= 2 ? t.warmup_steps - 1 : 1;
  const int64_t last_eager = std::max<int64_t>(0, eager_steps - 1);
  return std::max<int64_t>(0, std::min({wanted, last_eager, total_steps - 1}));
}

PlannedWork plan_work(const config::RunConfig& cfg, const SplitSizes& n, int world) {
  const auto& t = cfg.train;
  PlannedWork w;
  w.batches_per_epoch =
      data::pass_shape(n.train, t.batch_size, /*drop_last=*/true, t.limit_train_batches, world)
          .batches;
  const int64_t nb = w.batches_per_epoch;
  if (nb <= 0) return w;  // the run refuses this (no training batch)
  int64_t steps = int64_t(t.epochs) * nb;
  if (t.max_steps > 0) steps = std::min(steps, t.max_steps);
  w.steps = steps;
  w.train_samples = steps * t.batch_size * world;
  // The loop validates at each completed epoch's end (a run train.max_steps
  // stops inside an epoch skips that epoch's), and after every
  // train.val_every_steps-th step that is not an epoch's last.
  w.val_passes = steps / nb;
  if (t.val_every_steps > 0) {
    const int64_t every = t.val_every_steps;
    const int64_t both = std::lcm(every, nb);
    w.val_passes += steps / every - steps / both;
  }
  w.val_samples_per_pass = data::pass_shape(n.val, eval_batch_size(t, n.val), false,
                                            t.limit_eval_batches, world)
                               .real_samples;
  w.test_samples_per_pass = data::pass_shape(n.test, eval_batch_size(t, n.test), false,
                                             t.limit_eval_batches, world)
                                .real_samples;
  // best_val tests the last weights, then the best ones where a validation
  // chose weights other than the last.
  w.test_passes = t.test_weights == "best_val" && w.val_passes > 0 && n.val > 0 ? 2 : 1;
  return w;
}

SplitSizes split_sizes(const config::DataConfig& data, uint64_t seed) {
  const auto s = data::load_splits(data, seed);
  return {int64_t(s.train.size()), int64_t(s.val.size()), int64_t(s.test.size())};
}

}  // namespace accel::train
