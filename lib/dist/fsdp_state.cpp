// FSDP's full state for checkpoints, gradient clipping over shards and the
// state it holds. The full state: the module's parameters gathered, and a
// single-device optimizer (built by the same factory over the module's
// parameters, so its layout is exactly what the single and ddp strategies
// checkpoint) whose per-parameter state is this rank's shard state gathered,
// un-padded and un-flattened. Scatter is the reverse, without communication:
// every rank read the same checkpoint into the full state.
#include <algorithm>
#include <sstream>

#include "accel/util/errors.h"
#include "accel/util/torch_compat.h"
#include "fsdp_internal.h"

namespace accel::dist::fsdp {
namespace {

namespace optim = torch::optim;

enum class Kind { Adam, AdamW, Sgd };

Kind kind_of(const optim::Optimizer& opt) {
  if (dynamic_cast<const optim::Adam*>(&opt) != nullptr) return Kind::Adam;
  if (dynamic_cast<const optim::AdamW*>(&opt) != nullptr) return Kind::AdamW;
  if (dynamic_cast<const optim::SGD*>(&opt) != nullptr) return Kind::Sgd;
  throw ConfigError(
      "optim.name: the fsdp and deepspeed strategies shard the state of adam, adamw and sgd only");
}

// A parameter's optimizer state as a step count and tensors (Adam, AdamW:
// exp_avg, exp_avg_sq, max_exp_avg_sq; SGD: momentum_buffer), undefined
// where unused.
struct StateView {
  int64_t step = 0;
  std::vector<torch::Tensor> tensors;
};

size_t field_count(Kind k) { return k == Kind::Sgd ? 1 : 3; }

template <typename S>
StateView adam_like(const S& s) {
  return {s.step(), {s.exp_avg(), s.exp_avg_sq(), s.max_exp_avg_sq()}};
}

StateView read_state(Kind k, const optim::OptimizerParamState& s) {
  switch (k) {
    case Kind::Adam: return adam_like(static_cast<const optim::AdamParamState&>(s));
    case Kind::AdamW: return adam_like(static_cast<const optim::AdamWParamState&>(s));
    case Kind::Sgd: return {0, {static_cast<const optim::SGDParamState&>(s).momentum_buffer()}};
  }
  return {};
}

template <typename S>
std::unique_ptr<optim::OptimizerParamState> make_adam_like(const StateView& v) {
  auto s = std::make_unique<S>();
  s->step(v.step);
  s->exp_avg(v.tensors[0]);
  s->exp_avg_sq(v.tensors[1]);
  s->max_exp_avg_sq(v.tensors[2]);
  return s;
}

std::unique_ptr<optim::OptimizerParamState> make_state(Kind k, const StateView& v) {
  switch (k) {
    case Kind::Adam: return make_adam_like<optim::AdamParamState>(v);
    case Kind::AdamW: return make_adam_like<optim::AdamWParamState>(v);
    case Kind::Sgd: {
      auto s = std::make_unique<optim::SGDParamState>();
      s->momentum_buffer(v.tensors[0]);
      return s;
    }
  }
  return nullptr;
}

compat::OptimizerStateMap::key_type state_key(const torch::Tensor& p) {
  return compat::optimizer_state_key(p);
}

// lr, betas, ... follow the optimizer (a scheduler changes lr).
void copy_group_options(const optim::Optimizer& from, optim::Optimizer& to) {
  if (from.param_groups().size() != to.param_groups().size()) return;
  for (size_t g = 0; g < from.param_groups().size(); ++g) {
    to.param_groups()[g].set_options(from.param_groups()[g].options().clone());
  }
}

}  // namespace

int64_t FsdpStrategy::shard_offset(const Unit& u) const {
  return sharding_ == Sharding::None ? 0 : int64_t(ctx_.rank) * u.shard_numel;
}

// A shard-sized tensor of every rank, concatenated in rank order (padded size).
torch::Tensor FsdpStrategy::gather_flat(const Unit& u, const torch::Tensor& part) {
  if (sharding_ == Sharding::None || !ctx_.comm) return part;
  auto whole = torch::empty({u.padded}, part.options());
  ctx_.comm->all_gather(part.contiguous(), whole).wait();
  return whole;
}

Strategy::FullState FsdpStrategy::gather_full_state(optim::Optimizer& optimizer) {
  if (!module_) throw RunError("fsdp: gather_full_state before setup");
  for (size_t u = 0; u < units_.size(); ++u) ensure_gathered(int(u));
  FullState full;
  full.owned = make_optimizer_(module_->parameters());
  copy_group_options(optimizer, *full.owned);
  const Kind kind = kind_of(optimizer);
  torch::NoGradGuard no_grad;
  for (const auto& unit : units_) {
    if (unit.padded == 0) continue;
    // Every rank stepped the same shards: state exists on all or on none.
    const auto it = optimizer.state().find(state_key(unit.shard));
    if (it == optimizer.state().end()) continue;
    const StateView mine = read_state(kind, *it->second);
    std::vector<torch::Tensor> whole;
    for (const auto& t : mine.tensors) whole.push_back(t.defined() ? gather_flat(unit, t) : t);
    for (const auto& s : unit.slots) {
      StateView v{mine.step, {}};
      for (const auto& w : whole) {
        v.tensors.push_back(
            w.defined() ? w.narrow(0, s.offset, s.numel).view(s.param.sizes()).clone() : w);
      }
      full.owned->state()[state_key(s.param)] = make_state(kind, v);
    }
  }
  full.optimizer = full.owned.get();
  return full;
}

void FsdpStrategy::scatter_full_state(FullState& full, optim::Optimizer& optimizer) {
  if (full.optimizer == nullptr) throw RunError("fsdp: scatter_full_state without a full state");
  torch::NoGradGuard no_grad;
  for (auto& unit : units_) {
    // NO_SHARD and ZeRO: the shard views the parameters, which hold the state read.
    if (unit.padded == 0 || sharding_ == Sharding::None || replicated()) continue;
    if (!unit.gathered) throw RunError("fsdp: scatter_full_state without gather_full_state");
    unit.shard.detach().copy_(unit.full.narrow(0, shard_offset(unit), unit.shard_numel));
  }
  copy_group_options(*full.optimizer, optimizer);
  const Kind kind = kind_of(optimizer);
  const auto& states = full.optimizer->state();
  for (auto& unit : units_) {
    if (unit.padded == 0) continue;
    std::vector<StateView> per_param;
    std::vector<const Slot*> with_state;
    for (const auto& s : unit.slots) {
      const auto it = states.find(state_key(s.param));
      if (it == states.end()) continue;
      per_param.push_back(read_state(kind, *it->second));
      with_state.push_back(&s);
    }
    if (per_param.empty()) {
      optimizer.state().erase(state_key(unit.shard));
      continue;
    }
    // Parameters without state (never stepped) get zeros in the flat state.
    StateView mine;
    for (const auto& v : per_param) mine.step = std::max(mine.step, v.step);
    for (size_t f = 0; f < field_count(kind); ++f) {
      torch::Tensor flat;
      for (size_t i = 0; i < per_param.size(); ++i) {
        const auto& t = per_param[i].tensors[f];
        if (!t.defined()) continue;
        if (!flat.defined()) flat = torch::zeros({unit.padded}, t.options());
        flat.narrow(0, with_state[i]->offset, with_state[i]->numel).copy_(t.reshape(-1));
      }
      if (flat.defined() && flat.numel() != unit.shard_numel) {
        flat = flat.narrow(0, shard_offset(unit), unit.shard_numel).clone();
      }
      mine.tensors.push_back(flat);
    }
    optimizer.state()[state_key(unit.shard)] = make_state(kind, mine);
  }
}

void FsdpStrategy::release_full_state(FullState& full) {
  free_all();
  full = FullState{};
}

// ---- clipping and accounting ----------------------------------------------------

torch::Tensor FsdpStrategy::clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  auto sq = squared_norm(grads, ctx_.device);
  // Shards hold disjoint slices (padding is zero): the global square sum is
  // the sum over ranks. NO_SHARD ranks hold the same gradients.
  if (sharding_ != Sharding::None && ctx_.comm) ctx_.comm->all_reduce(sq, ReduceOp::Sum).wait();
  return scale_to_max_norm(grads, sq, max_norm);
}

StateBytes FsdpStrategy::state_bytes(const torch::optim::Optimizer& optimizer) const {
  auto bytes = [](const torch::Tensor& t) {
    return t.defined() ? t.numel() * int64_t(t.element_size()) : int64_t(0);
  };
  StateBytes b;
  for (const auto& unit : units_) {
    if (unit.padded == 0) continue;
    b.params += bytes(replicated() ? unit.full : unit.shard);  // ZeRO: whole, the shard a view
    b.grads += bytes(unit.shard.grad());
    // Full-size gradients accumulating under no_backward_sync.
    for (const auto& s : unit.slots) b.grads += bytes(s.param.grad());
  }
  b.optimizer = optimizer_state_bytes(optimizer);
  return b;
}

}  // namespace accel::dist::fsdp
