// Strategy base behaviour, the single-device strategy and the factory.
#include "accel/dist/strategy.h"

#include "accel/util/errors.h"
#include "strategies.h"

namespace accel::dist {

double Strategy::clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm) {
  return torch::nn::utils::clip_grad_norm_(params, max_norm);
}

Strategy::FullState Strategy::gather_full_state(torch::optim::Optimizer& optimizer) {
  FullState full;
  full.optimizer = &optimizer;
  return full;
}

void Strategy::scatter_full_state(FullState& /*full*/, torch::optim::Optimizer& /*optimizer*/) {}

void Strategy::release_full_state(FullState& full) { full = FullState{}; }

StateBytes Strategy::state_bytes(const torch::optim::Optimizer& optimizer) const {
  StateBytes b;
  if (module_) {
    for (const auto& p : module_->parameters()) {
      b.params += p.numel() * int64_t(p.element_size());
      if (p.grad().defined()) b.grads += p.grad().numel() * int64_t(p.grad().element_size());
    }
  }
  b.optimizer = optimizer_state_bytes(optimizer);
  return b;
}

namespace {

// NCCL communicates device tensors only: host tensors (metrics, flags) make a
// round trip through the rank's device.
template <typename Collective>
void on_comm_device(const DistContext& ctx, torch::Tensor& t, Collective&& collective) {
  if (ctx.comm->backend() != "nccl" || t.is_cuda()) {
    collective(t);
    return;
  }
  auto on_device = t.to(ctx.device);
  collective(on_device);
  t.copy_(on_device);
}

}  // namespace

void Strategy::all_reduce(torch::Tensor& t, ReduceOp op) {
  if (!ctx_.comm) return;
  on_comm_device(ctx_, t, [&](torch::Tensor& x) { ctx_.comm->all_reduce(x, op).wait(); });
}

void Strategy::broadcast(torch::Tensor& t, int root) {
  if (!ctx_.comm) return;
  on_comm_device(ctx_, t, [&](torch::Tensor& x) { ctx_.comm->broadcast(x, root); });
}

void Strategy::barrier() {
  if (ctx_.comm) ctx_.comm->barrier();
}

std::unique_ptr<torch::optim::Optimizer> SingleDeviceStrategy::setup(
    std::shared_ptr<torch::nn::Module> model, const OptimizerFactory& make_optimizer) {
  module_ = std::move(model);
  return make_optimizer(module_->parameters());
}

int64_t optimizer_state_bytes(const torch::optim::Optimizer& optimizer) {
  int64_t bytes = 0;
  auto add = [&](const torch::Tensor& t) {
    if (t.defined()) bytes += t.numel() * int64_t(t.element_size());
  };
  for (const auto& kv : optimizer.state()) {
    const auto* st = kv.second.get();
    if (const auto* a = dynamic_cast<const torch::optim::AdamParamState*>(st)) {
      add(a->exp_avg());
      add(a->exp_avg_sq());
      add(a->max_exp_avg_sq());
    } else if (const auto* w = dynamic_cast<const torch::optim::AdamWParamState*>(st)) {
      add(w->exp_avg());
      add(w->exp_avg_sq());
      add(w->max_exp_avg_sq());
    } else if (const auto* s = dynamic_cast<const torch::optim::SGDParamState*>(st)) {
      add(s->momentum_buffer());
    }
  }
  return bytes;
}

std::unique_ptr<Strategy> make_strategy(const StrategyOptions& o, DistContext ctx) {
  const bool many = ctx.world_size > 1;
  std::string name = o.name;
  if (name == "auto") name = many ? "ddp" : "single";
  if (name == "single") {
    if (many) {
      throw ConfigError("runtime.strategy: \"single\" runs one process, but this run has " +
                        std::to_string(ctx.world_size) +
                        " ranks (runtime.devices x runtime.num_nodes); use \"ddp\", \"fsdp\" or "
                        "\"deepspeed_stage_2\"");
    }
    return std::make_unique<SingleDeviceStrategy>(std::move(ctx));
  }
  if (name == "ddp") return make_ddp(o, std::move(ctx));
  if (name == "fsdp") return make_fsdp(o, std::move(ctx));
  if (name == "deepspeed_stage_1") return make_zero(o, std::move(ctx), 1);
  if (name == "deepspeed_stage_2") return make_zero(o, std::move(ctx), 2);
  throw ConfigError("runtime.strategy: unknown strategy \"" + o.name + "\"");
}

}  // namespace accel::dist
