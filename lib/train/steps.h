// Private to lib/train: the ways one training step runs, behind one
// signature. The article's 01 script (plain PyTorch lines), its 03 script
// (the same lines through the Fabric-style facade), and either of them
// captured whole in a CUDA Graph and replayed (runtime.cuda_graphs, the
// article's rung 02).
#pragma once

#include <cstdint>
#include <limits>
#include <memory>

#include <torch/torch.h>

#include "accel/config/run_config.h"
#include "accel/data/batch.h"
#include "accel/models/model.h"
#include "accel/train/device.h"
#include "accel/train/fabric.h"
#include "accel/train/task_row.h"

namespace accel::train {

// Where a batch sits in its gradient-accumulation window, and the optimizer
// step the window ends in (for the learning-rate schedule).
struct StepWindow {
  bool first = true, last = true;
  int accumulate = 1;
  int64_t opt_step = 0, total_opt_steps = 1;
};

struct StepOutput {
  torch::Tensor loss;    // the batch's mean loss (a graph's output buffer when captured)
  torch::Tensor logits;  // the head's outputs [B, head] (the task's: classes, or one); undefined where the model made the loss
};

class TrainStep {
 public:
  virtual ~TrainStep() = default;
  // Forward, loss and backward of one batch (y already on the device) and,
  // at the window's end, clipping, the learning rate and the optimizer step.
  virtual StepOutput run(const data::Batch& batch, const torch::Tensor& y, const StepWindow& w) = 0;
  // The same forward for evaluation (the caller sets no_grad and eval mode).
  virtual torch::Tensor forward(const data::Inputs& inputs) = 0;
  // How many leading calls of run() dispatch their ops eagerly: every call,
  // but for a step captured in a CUDA Graph, whose replays dispatch none (the
  // step whose ops are counted must be one of these: train::counted_step).
  virtual int64_t eager_steps() const { return std::numeric_limits<int64_t>::max(); }
};

struct StepContext {
  Fabric& fabric;
  Fabric::Setup& setup;
  models::Model& model;  // the raw module (the plain loop calls it directly)
  const config::RunConfig& cfg;
  const TaskRow& task;  // the loss the step trains on
  StepClock* clock = nullptr;  // marks the end of each phase (result.json's step_split_ms)
};

// train.loss_chunk_tokens: the model computes the loss from the labels
// (models::Model::make_own_loss) and returns it instead of the logits.
inline bool loss_in_model(const config::RunConfig& cfg) { return cfg.train.loss_chunk_tokens > 0; }
// The inputs with the labels beside them, as such a model takes them.
inline data::Inputs with_labels(data::Inputs inputs, const torch::Tensor& y) {
  inputs["labels"] = y;
  return inputs;
}

// train.loop plain | fabric, and runtime.cuda_graphs around either.
std::unique_ptr<TrainStep> make_train_step(const StepContext& ctx);

}  // namespace accel::train
