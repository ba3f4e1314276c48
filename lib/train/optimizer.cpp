// Optimizers by name and the learning-rate schedule (accel/train/optimizer.h).
#include "accel/train/optimizer.h"

#include <algorithm>
#include <cmath>

#include "accel/kernels/adam.h"
#include "accel/train/device.h"
#include "accel/util/errors.h"
#include "accel/util/torch_compat.h"

namespace accel::train {

namespace {

// torch::optim::Adam or AdamW whose step runs kernels::adam_step, one pass per
// parameter, where every parameter that has a gradient is a contiguous CPU
// float32 tensor with a dense contiguous float32 gradient, and amsgrad is off;
// anywhere else it is the base class's step. The state is the base class's
// (AdamParamState / AdamWParamState: step, exp_avg, exp_avg_sq), so
// checkpoints, the strategies' state sharding and a resume with either
// implementation read it unchanged.
template <typename Base, typename Options, typename State>
class FusedAdamT : public Base {
 public:
  FusedAdamT(const std::vector<torch::Tensor>& params, Options options, bool decoupled)
      : Base(params, std::move(options)), decoupled_(decoupled) {}

  torch::Tensor step(torch::optim::Optimizer::LossClosure closure) override {
    if (!fusable()) return Base::step(std::move(closure));
    torch::NoGradGuard no_grad;
    torch::Tensor loss;
    if (closure) {
      torch::AutoGradMode enable_grad(true);
      loss = closure();
    }
    const int threads = std::max(1, at::get_num_threads());
    for (auto& group : this->param_groups()) {
      const auto& o = static_cast<const Options&>(group.options());
      for (torch::Tensor& p : group.params()) {
        if (!p.grad().defined()) continue;
        State& st = state_of(p);
        st.step(st.step() + 1);
        const auto s = kernels::adam_scalars(o.lr(), std::get<0>(o.betas()), std::get<1>(o.betas()),
                                             o.eps(), o.weight_decay(), decoupled_, st.step());
        const torch::Tensor& m = st.exp_avg();
        const torch::Tensor& v = st.exp_avg_sq();
        const torch::Tensor g = p.grad();
        kernels::adam_step(p.data_ptr<float>(), g.data_ptr<float>(), m.data_ptr<float>(),
                           v.data_ptr<float>(), p.numel(), s, threads);
      }
    }
    return loss;
  }

 private:
  static bool dense_cpu_float(const torch::Tensor& t) {
    return t.defined() && t.layout() == torch::kStrided && t.device().is_cpu() &&
           t.scalar_type() == torch::kFloat && t.is_contiguous();
  }

  bool fusable() const {
    for (const auto& group : this->param_groups()) {
      if (static_cast<const Options&>(group.options()).amsgrad()) return false;
      for (const torch::Tensor& p : group.params()) {
        if (!p.grad().defined()) continue;
        if (!dense_cpu_float(p) || !dense_cpu_float(p.grad()) || p.grad().numel() != p.numel())
          return false;
        const auto it = this->state_.find(compat::optimizer_state_key(p));
        if (it == this->state_.end()) continue;
        const auto& st = static_cast<const State&>(*it->second);
        if (!dense_cpu_float(st.exp_avg()) || !dense_cpu_float(st.exp_avg_sq()) ||
            st.exp_avg().numel() != p.numel() || st.exp_avg_sq().numel() != p.numel())
          return false;
      }
    }
    return true;
  }

  // The parameter's state, made as the base class makes it on its first step.
  State& state_of(const torch::Tensor& p) {
    const auto key = compat::optimizer_state_key(p);
    auto it = this->state_.find(key);
    if (it == this->state_.end()) {
      auto st = std::make_unique<State>();
      st->step(0);
      st->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Contiguous));
      st->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Contiguous));
      it = this->state_.emplace(key, std::move(st)).first;
    }
    return static_cast<State&>(*it->second);
  }

  bool decoupled_;
};

using FusedAdam = FusedAdamT<torch::optim::Adam, torch::optim::AdamOptions, torch::optim::AdamParamState>;
using FusedAdamW =
    FusedAdamT<torch::optim::AdamW, torch::optim::AdamWOptions, torch::optim::AdamWParamState>;

}  // namespace

bool fused_adam_applies(const torch::optim::Optimizer& optimizer) {
  return dynamic_cast<const FusedAdam*>(&optimizer) != nullptr ||
         dynamic_cast<const FusedAdamW*>(&optimizer) != nullptr;
}

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
  const bool fused = o.implementation == "fused";
  if (o.name == "adam") {
    auto opts =
        torch::optim::AdamOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(o.weight_decay);
    if (fused) return std::make_unique<FusedAdam>(params, opts, false);
    return std::make_unique<torch::optim::Adam>(params, opts);
  }
  if (o.name == "adamw") {
    auto opts =
        torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(o.weight_decay);
    if (fused) return std::make_unique<FusedAdamW>(params, opts, true);
    return std::make_unique<torch::optim::AdamW>(params, opts);
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
