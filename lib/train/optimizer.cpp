// Optimizers by name and the learning-rate schedule (accel/train/optimizer.h).
#include "accel/train/optimizer.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "accel/kernels/adam.h"
#include "accel/train/device.h"
#include "accel/util/errors.h"
#include "accel/util/torch_compat.h"

namespace accel::train {

namespace {

constexpr const char* kAccelFusedCpu = "accel-fused-cpu";
constexpr const char* kAtenFusedCuda = "aten-fused-cuda";
constexpr const char* kTorchPerParam = "torch-per-param";
constexpr const char* kCapturable = "capturable";

// torch::optim::Adam or AdamW whose step is one fused update where the
// tensors allow it, torch's own step elsewhere:
// - every parameter that has a gradient a contiguous CPU float32 tensor with
//   a dense contiguous float32 gradient (and state): kernels::adam_step, one
//   pass per parameter ("accel-fused-cpu", the CPU path on every version);
// - every one a contiguous CUDA float32 tensor (gradient and state alike):
//   ATen's multi-tensor kernel, compat::fused_adam_step, one launch per param
//   group and device ("aten-fused-cuda"), where the version has it;
// - anything else (a mix, other dtypes, sparse gradients, amsgrad): the base
//   class's step ("torch-per-param").
// The state is the base class's (AdamParamState / AdamWParamState: an int
// step, exp_avg, exp_avg_sq), so checkpoints, the strategies' state sharding
// and a resume with either implementation read it unchanged. The CUDA kernel
// reads the step from a float32 device scalar per parameter; those are kept
// beside the state, each with the int step it mirrors, and made afresh from
// the int step whenever that changed behind them (a checkpoint loaded, the
// base class or the CPU path stepped).
template <typename Base, typename Options, typename State>
class FusedAdamT : public Base {
 public:
  FusedAdamT(const std::vector<torch::Tensor>& params, Options options, bool decoupled)
      : Base(params, std::move(options)), decoupled_(decoupled) {}

  torch::Tensor step(torch::optim::Optimizer::LossClosure closure) override {
    const Path path = choose_path();
    if (path == Path::Torch) {
      implementation_ = kTorchPerParam;
      return Base::step(std::move(closure));
    }
    torch::NoGradGuard no_grad;
    torch::Tensor loss;
    if (closure) {
      torch::AutoGradMode enable_grad(true);
      loss = closure();
    }
    if (path == Path::AccelCpu) {
      cpu_step();
      implementation_ = kAccelFusedCpu;
    } else if (path == Path::AtenCuda) {
      aten_step();
      implementation_ = kAtenFusedCuda;
    }
    return loss;
  }

  // The update the last step() took (optimizer_implementation); "" before any.
  const char* implementation() const { return implementation_; }

 private:
  enum class Path { Nothing, AccelCpu, AtenCuda, Torch };

  static bool dense_float_on(const torch::Tensor& t, c10::DeviceType device) {
    return t.defined() && t.layout() == torch::kStrided && t.device().type() == device &&
           t.scalar_type() == torch::kFloat && t.is_contiguous();
  }

  // Whether p, its gradient and its state (where it has one) are dense
  // contiguous float32 tensors of p's size on p's device, of type `device`.
  bool fusable_on(const torch::Tensor& p, c10::DeviceType device) const {
    const auto& g = p.grad();
    if (!dense_float_on(p, device) || !dense_float_on(g, device) || g.numel() != p.numel() ||
        g.device() != p.device())
      return false;
    const auto it = this->state_.find(compat::optimizer_state_key(p));
    if (it == this->state_.end()) return true;
    const auto& st = static_cast<const State&>(*it->second);
    for (const torch::Tensor* t : {&st.exp_avg(), &st.exp_avg_sq()}) {
      if (!dense_float_on(*t, device) || t->numel() != p.numel() || t->device() != p.device())
        return false;
    }
    return true;
  }

  // One path for every parameter with a gradient; none has one: Nothing.
  Path choose_path() const {
    bool cpu = false, cuda = false;
    for (const auto& group : this->param_groups()) {
      if (static_cast<const Options&>(group.options()).amsgrad()) return Path::Torch;
      for (const torch::Tensor& p : group.params()) {
        if (!p.grad().defined()) continue;
        if (fusable_on(p, c10::DeviceType::CPU)) {
          cpu = true;
        } else if (fusable_on(p, c10::DeviceType::CUDA)) {
          cuda = true;
        } else {
          return Path::Torch;
        }
      }
    }
    if (cpu && cuda) return Path::Torch;
    if (cuda) return compat::has_fused_adam(c10::DeviceType::CUDA, decoupled_) ? Path::AtenCuda
                                                                                : Path::Torch;
    return cpu ? Path::AccelCpu : Path::Nothing;
  }

  void cpu_step() {
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
  }

  // Each param group's parameters with a gradient, by device, in one call
  // of ATen's kernel each.
  void aten_step() {
    struct Lists {
      std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
    };
    for (auto& group : this->param_groups()) {
      const auto& o = static_cast<const Options&>(group.options());
      std::map<c10::DeviceIndex, Lists> by_device;
      for (torch::Tensor& p : group.params()) {
        if (!p.grad().defined()) continue;
        State& st = state_of(p);
        Lists& l = by_device[p.device().index()];
        l.steps.push_back(device_step(p, st.step()));  // the kernel call advances it
        st.step(st.step() + 1);
        l.params.push_back(p);
        l.grads.push_back(p.grad());
        l.exp_avgs.push_back(st.exp_avg());
        l.exp_avg_sqs.push_back(st.exp_avg_sq());
      }
      for (auto& [index, l] : by_device) {
        (void)index;
        compat::fused_adam_step(l.params, l.grads, l.exp_avgs, l.exp_avg_sqs, l.steps, o.lr(),
                                std::get<0>(o.betas()), std::get<1>(o.betas()), o.weight_decay(),
                                o.eps(), decoupled_);
      }
    }
  }

  // p's float32 step scalar on p's device, holding `step` (the int step
  // before this update): made afresh where it is missing, elsewhere or
  // mirrors another step; recorded as mirroring step + 1, what the update
  // leaves in it.
  torch::Tensor device_step(const torch::Tensor& p, int64_t step) {
    DeviceStep& d = device_steps_[compat::optimizer_state_key(p)];
    if (!d.value.defined() || d.mirrors != step || d.value.device() != p.device()) {
      d.value = torch::full({}, double(step),
                            torch::TensorOptions().dtype(torch::kFloat).device(p.device()));
    }
    d.mirrors = step + 1;
    return d.value;
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

  struct DeviceStep {
    torch::Tensor value;  // float32 scalar on the parameter's device
    int64_t mirrors = -1;  // the int step it holds
  };
  bool decoupled_;
  const char* implementation_ = "";
  std::map<compat::OptimizerStateMap::key_type, DeviceStep> device_steps_;
};

using FusedAdam = FusedAdamT<torch::optim::Adam, torch::optim::AdamOptions, torch::optim::AdamParamState>;
using FusedAdamW =
    FusedAdamT<torch::optim::AdamW, torch::optim::AdamWOptions, torch::optim::AdamWParamState>;

}  // namespace

bool fused_adam_applies(const torch::optim::Optimizer& optimizer) {
  return dynamic_cast<const FusedAdam*>(&optimizer) != nullptr ||
         dynamic_cast<const FusedAdamW*>(&optimizer) != nullptr;
}

std::string optimizer_implementation(const torch::optim::Optimizer& optimizer) {
  if (const auto* f = dynamic_cast<const FusedAdam*>(&optimizer)) return f->implementation();
  if (const auto* f = dynamic_cast<const FusedAdamW*>(&optimizer)) return f->implementation();
  if (dynamic_cast<const Capturable*>(&optimizer) != nullptr) return kCapturable;
  return kTorchPerParam;
}

std::string fused_adam_kernel_name(c10::DeviceType device, bool decoupled) {
  if (device == c10::DeviceType::CPU) return std::string("fused-cpu (") + kernels::adam_isa() + ")";
  if (compat::has_fused_adam(device, decoupled)) {
    return std::string(kAtenFusedCuda) + (decoupled ? " (aten::_fused_adamw_)" : " (aten::_fused_adam_)");
  }
  return kTorchPerParam;
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
