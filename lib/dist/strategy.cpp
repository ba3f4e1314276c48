// Strategy base behaviour, the single-device strategy and the factory.
#include "accel/dist/strategy.h"

#include <cstdio>
#include <string>

#include "accel/util/errors.h"
#include "strategies.h"

namespace accel::dist {

torch::Tensor Strategy::clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  bool on_cpu = true;
  for (const auto& p : params) {
    if (!p.grad().defined()) continue;
    grads.push_back(p.grad());
    on_cpu = on_cpu && p.grad().device().is_cpu();
  }
  // On a CPU, torch's clip_grad_norm_ (its bits, as ever; reading the norm
  // back costs a CPU nothing).
  if (on_cpu) return torch::tensor(torch::nn::utils::clip_grad_norm_(params, max_norm), torch::kDouble);
  // Elsewhere the same clip with the norm and the scale kept on the device:
  // no host sync (torch's reads the norm back, and 1.13's compares it on the
  // host before scaling).
  return scale_to_max_norm(grads, squared_norm(grads, grads.front().device()), max_norm);
}

torch::Tensor Strategy::squared_norm(const std::vector<torch::Tensor>& grads, const torch::Device& device) {
  auto sq = torch::zeros({}, torch::TensorOptions(torch::kDouble).device(device));
  for (const auto& g : grads) sq.add_(g.norm(2).to(torch::kDouble).square());
  return sq;
}

torch::Tensor Strategy::scale_to_max_norm(const std::vector<torch::Tensor>& grads, const torch::Tensor& squared,
                                          double max_norm) {
  const auto norm = squared.sqrt();
  const auto coef = torch::clamp_max(max_norm / (norm + 1e-6), 1.0);
  for (const auto& g : grads) g.mul_(coef.to(g.scalar_type()));
  return norm;
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

namespace {

std::unique_ptr<Strategy> make_single(const StrategyOptions& /*options*/, DistContext ctx) {
  return std::make_unique<SingleDeviceStrategy>(std::move(ctx));
}
std::unique_ptr<Strategy> make_zero1(const StrategyOptions& options, DistContext ctx) {
  return make_zero(options, std::move(ctx), 1);
}
std::unique_ptr<Strategy> make_zero2(const StrategyOptions& options, DistContext ctx) {
  return make_zero(options, std::move(ctx), 2);
}

// What each strategy's step sends (lib/dist/ddp.cpp, fsdp.cpp, fsdp_state.cpp).
StepSchedule ddp_schedule(const StrategyKnobs& k) {
  StepSchedule s;
  s.grads = StepSchedule::Grads::Buckets;
  char mb[32];
  std::snprintf(mb, sizeof mb, "%.0f", k.bucket_mb);
  s.description = std::string("DDP buckets of ") + mb + " MB in reverse parameter order";
  return s;
}

StepSchedule fsdp_schedule(const StrategyKnobs& k) {
  StepSchedule s;
  const bool none = k.fsdp_sharding == "NO_SHARD";
  s.grads = none ? StepSchedule::Grads::UnitAllReduce : StepSchedule::Grads::UnitReduceScatter;
  s.gather_forward = !none;
  s.gather_backward = k.fsdp_sharding == "FULL_SHARD";
  s.split_units = !none;
  s.params_sharded = s.grads_sharded = s.optimizer_sharded = !none;
  s.description = "FSDP " + k.fsdp_sharding;
  return s;
}

StepSchedule zero_schedule(int stage) {
  StepSchedule s;
  s.grads = stage == 1 ? StepSchedule::Grads::UnitAllReduce : StepSchedule::Grads::UnitReduceScatter;
  s.gather_after_step = true;
  s.split_units = true;
  s.copy_out_slice = stage == 1;
  // Parameters whole; this rank's slice of the gradients and optimizer state
  // (stage 1 also drops the whole gradient after each step).
  s.grads_sharded = s.optimizer_sharded = true;
  s.description = "ZeRO";
  return s;
}
StepSchedule zero1_schedule(const StrategyKnobs& /*k*/) { return zero_schedule(1); }
StepSchedule zero2_schedule(const StrategyKnobs& /*k*/) { return zero_schedule(2); }

}  // namespace

const std::vector<StrategyRow>& strategy_registry() {
  static const std::vector<StrategyRow> rows = {
      {{"single", "one process, one device", true, {}, nullptr}, make_single},
      {{"ddp", "every rank holds the whole model; gradients all-reduced in buckets during backward",
        false, {{"runtime.bucket_mb", {"25", "5", "100"}}}, ddp_schedule},
       make_ddp},
      {{"fsdp", "parameters, gradients and optimizer state in 1/N shards per unit, gathered around each unit",
        false,
        {{"runtime.fsdp_sharding", {"\"FULL_SHARD\"", "\"SHARD_GRAD_OP\"", "\"NO_SHARD\""}},
         {"runtime.fsdp_prefetch", {"true", "false"}}},
        fsdp_schedule},
       make_fsdp},
      {{"deepspeed_stage_1", "ZeRO stage 1 on c10d: optimizer state in 1/N shards, gradients all-reduced",
        false, {}, zero1_schedule},
       make_zero1},
      {{"deepspeed_stage_2",
        "ZeRO stage 2 on c10d: optimizer state and gradients in 1/N shards (reduce-scattered), parameters whole",
        false, {}, zero2_schedule},
       make_zero2},
  };
  return rows;
}

const std::vector<StrategyInfo>& strategy_catalog() {
  static const std::vector<StrategyInfo> infos = [] {
    std::vector<StrategyInfo> out;
    for (const auto& r : strategy_registry()) out.push_back(r.info);
    return out;
  }();
  return infos;
}

const StrategyInfo* find_strategy(const std::string& name) {
  for (const auto& s : strategy_catalog()) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

std::vector<std::string> strategy_choices() {
  std::vector<std::string> out = {"auto"};
  for (const auto& s : strategy_catalog()) out.push_back(s.name);
  return out;
}

std::string multi_rank_strategy_list() {
  std::string out;
  for (const auto& s : strategy_catalog()) {
    if (!s.one_rank) out += (out.empty() ? "\"" : ", \"") + s.name + "\"";
  }
  return out;
}

std::string resolve_strategy(const std::string& name, int world) {
  if (name != "auto") return name;
  return world > 1 ? "ddp" : "single";
}

bool is_multi_rank_strategy(const std::string& name) {
  const auto* s = find_strategy(name);
  return s != nullptr && !s->one_rank;
}

const StrategyInfo& strategy_for_world(const std::string& requested, int world) {
  const std::string name = resolve_strategy(requested, world);
  const auto* row = find_strategy(name);
  if (row == nullptr) throw ConfigError("runtime.strategy: unknown strategy \"" + requested + "\"");
  if (row->one_rank && world > 1) {
    throw ConfigError("runtime.strategy: \"" + name + "\" runs one process, but this run has " +
                      std::to_string(world) + " ranks (runtime.devices x runtime.num_nodes); use " +
                      multi_rank_strategy_list());
  }
  return *row;
}

std::unique_ptr<Strategy> make_strategy(const StrategyOptions& o, DistContext ctx) {
  const auto& info = strategy_for_world(o.name, ctx.world_size);
  for (const auto& row : strategy_registry()) {
    if (row.info.name == info.name) return row.make(o, std::move(ctx));
  }
  throw ConfigError("runtime.strategy: unknown strategy \"" + o.name + "\"");
}

}  // namespace accel::dist
