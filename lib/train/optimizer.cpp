// Optimizers by name and the learning-rate schedule (accel/train/optimizer.h).
#include "accel/train/optimizer.h"

#include <algorithm>
#include <cmath>

#include "accel/train/device.h"
#include "accel/util/errors.h"

namespace accel::train {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(
    const std::vector<torch::Tensor>& params, const config::OptimConfig& o, bool capturable) {
  if (capturable) {
    if (o.name != "adam" && o.name != "adamw") {
      throw ConfigError("optim.name: \"" + o.name + "\" cannot run inside a CUDA Graph "
                        "(runtime.cuda_graphs supports adam and adamw)");
    }
    return make_capturable_adam(params, o.lr, o.beta1, o.beta2, o.eps, o.weight_decay,
                                o.name == "adamw");
  }
  if (o.name == "adam") {
    return std::make_unique<torch::optim::Adam>(
        params, torch::optim::AdamOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(
                    o.weight_decay));
  }
  if (o.name == "adamw") {
    return std::make_unique<torch::optim::AdamW>(
        params, torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(
                    o.weight_decay));
  }
  if (o.name == "sgd") {
    return std::make_unique<torch::optim::SGD>(
        params,
        torch::optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.weight_decay));
  }
  throw ConfigError("optim.name: unknown optimizer \"" + o.name + "\"");
}

double scheduled_lr(const config::OptimConfig& o, int64_t step, int64_t total) {
  if (o.scheduler != "cosine") return o.lr;
  const int64_t warm = o.warmup_steps;
  if (warm > 0 && step < warm) return o.lr * double(step + 1) / double(warm);
  const int64_t span = std::max<int64_t>(1, total - warm);
  const double t = std::min(1.0, double(step - warm) / double(span));
  const double pi = std::acos(-1.0);
  return o.min_lr + 0.5 * (o.lr - o.min_lr) * (1.0 + std::cos(pi * t));
}

void set_learning_rate(torch::optim::Optimizer& optimizer, const config::OptimConfig& o,
                       int64_t step, int64_t total) {
  if (o.scheduler == "none") return;
  const double lr = scheduled_lr(o, step, total);
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

int64_t total_optimizer_steps(const config::TrainConfig& t, int64_t batches_per_epoch) {
  const int64_t per_epoch = (batches_per_epoch + t.accumulate - 1) / t.accumulate;
  int64_t total = per_epoch * t.epochs;
  if (t.max_steps > 0) total = std::min(total, t.max_steps / t.accumulate);
  return std::max<int64_t>(1, total);
}

}  // namespace accel::train
