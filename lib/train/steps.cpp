// The step variants of steps.h. The scopes name the parts of a step for
// --profile (free otherwise).
#include "steps.h"

#include <ATen/record_function.h>

#include "accel/train/device.h"
#include "accel/train/optimizer.h"
#include "accel/util/errors.h"

namespace accel::train {
namespace {

torch::Tensor scaled(const torch::Tensor& loss, int k) { return k > 1 ? loss / k : loss; }

void mark(const StepContext& c, StepPhase p) {
  if (c.clock != nullptr) c.clock->mark(p);
}

// The loops' first lines: forward and the task's loss (cross-entropy for
// classification), in the profile's forward scope; or, where the model makes
// the loss itself (train.loss_chunk_tokens), forward with the labels.
StepOutput forward_loss(TrainStep& step, const StepContext& c, const data::Batch& batch, const torch::Tensor& y) {
  RECORD_USER_SCOPE("accel::forward");
  StepOutput out;
  if (loss_in_model(c.cfg)) {
    out.loss = step.forward(with_labels(batch.inputs, y));
    return out;
  }
  out.logits = step.forward(batch.inputs);
  out.loss = c.task.loss(out.logits, y);
  return out;
}

// cvpr2023's 01_pytorch-vit.py: the model called directly, loss.backward(),
// optimizer.step().
class PlainStep : public TrainStep {
 public:
  explicit PlainStep(const StepContext& c) : c_(c) {}
  torch::Tensor forward(const data::Inputs& inputs) override {
    return c_.model.forward(c_.fabric.to_device(inputs));
  }
  StepOutput run(const data::Batch& batch, const torch::Tensor& y, const StepWindow& w) override {
    auto& opt = c_.setup.optimizer;
    StepOutput out = forward_loss(*this, c_, batch, y);
    mark(c_, StepPhase::Forward);
    {
      RECORD_USER_SCOPE("accel::backward");
      if (w.first) opt.zero_grad();
      scaled(out.loss, w.accumulate).backward();
    }
    mark(c_, StepPhase::Backward);
    if (w.last) {
      RECORD_USER_SCOPE("accel::optimizer");
      set_learning_rate(opt.inner(), c_.cfg.optim, w.opt_step, w.total_opt_steps);
      opt.inner().step();
    }
    mark(c_, StepPhase::Optimizer);
    return out;
  }

 private:
  StepContext c_;
};

// 03_fabric-vit.py: the same lines, forward through FabricModule (device,
// precision), backward and step through Fabric (strategy, GradScaler).
class FabricStep : public TrainStep {
 public:
  explicit FabricStep(const StepContext& c) : c_(c) {}
  torch::Tensor forward(const data::Inputs& inputs) override { return c_.setup.model.forward(inputs); }
  StepOutput run(const data::Batch& batch, const torch::Tensor& y, const StepWindow& w) override {
    auto& opt = c_.setup.optimizer;
    StepOutput out = forward_loss(*this, c_, batch, y);
    mark(c_, StepPhase::Forward);
    {
      RECORD_USER_SCOPE("accel::backward");
      if (w.first) opt.zero_grad();
      auto no_sync = c_.fabric.no_backward_sync(!w.last);
      c_.fabric.backward(scaled(out.loss, w.accumulate),
                         [this] { mark(c_, StepPhase::Backward); });
    }
    mark(c_, StepPhase::CommWait);
    if (w.last) {
      RECORD_USER_SCOPE("accel::optimizer");
      const double clip = c_.cfg.train.grad_clip;
      if (clip > 0) c_.fabric.clip_gradients(c_.setup.model, opt, clip);
      set_learning_rate(opt.inner(), c_.cfg.optim, w.opt_step, w.total_opt_steps);
      opt.step();
    }
    mark(c_, StepPhase::Optimizer);
    return out;
  }

 private:
  StepContext c_;
};

// runtime.cuda_graphs: the inner step's lines as one function of static
// inputs, captured once and replayed: gradients zeroed in place (a graph
// keeps their addresses), the learning rate read from the device.
class GraphedTrainStep : public TrainStep {
 public:
  GraphedTrainStep(const StepContext& c, std::unique_ptr<TrainStep> inner)
      : c_(c), inner_(std::move(inner)), plain_(c.cfg.train.loop == "plain"), loss_in_model_(loss_in_model(c.cfg)) {
    capturable_ = dynamic_cast<Capturable*>(&c_.setup.optimizer.inner());
    if (!capturable_) throw RunError("runtime.cuda_graphs: the optimizer is not capturable");
    graph_ = std::make_unique<GraphedStep>(
        c_.fabric.device(), [this](const data::Inputs& x, const torch::Tensor& yy) {
          auto& opt = c_.setup.optimizer;
          for (auto& p : opt.params()) {
            if (p.grad().defined()) p.grad().zero_();
          }
          torch::Tensor logits, loss;
          if (loss_in_model_) {
            loss = inner_->forward(with_labels(x, yy));
            logits = loss;  // a graph's second output; not read back as logits
          } else {
            logits = inner_->forward(x);
            loss = c_.task.loss(logits, yy);
          }
          if (plain_) {
            loss.backward();
            opt.inner().step();
          } else {
            c_.fabric.backward(loss);
            opt.step();
          }
          return std::make_pair(loss.detach(), logits.detach());
        });
  }
  torch::Tensor forward(const data::Inputs& inputs) override { return inner_->forward(inputs); }
  int64_t eager_steps() const override { return graph_->eager_calls(); }
  StepOutput run(const data::Batch& batch, const torch::Tensor& y, const StepWindow& w) override {
    RECORD_USER_SCOPE("accel::graph_replay");
    set_learning_rate(c_.setup.optimizer.inner(), c_.cfg.optim, w.opt_step, w.total_opt_steps);
    capturable_->before_step();
    StepOutput out;
    std::tie(out.loss, out.logits) = graph_->run(batch.inputs, y);
    if (loss_in_model_) out.logits = torch::Tensor();
    return out;
  }

 private:
  StepContext c_;
  std::unique_ptr<TrainStep> inner_;
  bool plain_;
  bool loss_in_model_;
  Capturable* capturable_ = nullptr;
  std::unique_ptr<GraphedStep> graph_;
};

}  // namespace

std::unique_ptr<TrainStep> make_train_step(const StepContext& ctx) {
  std::unique_ptr<TrainStep> step;
  if (ctx.cfg.train.loop == "plain") {
    step = std::make_unique<PlainStep>(ctx);
  } else {
    step = std::make_unique<FabricStep>(ctx);
  }
  if (ctx.cfg.runtime.cuda_graphs) step = std::make_unique<GraphedTrainStep>(ctx, std::move(step));
  return step;
}

}  // namespace accel::train
