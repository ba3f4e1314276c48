// Fully sharded data parallel on c10d, in the way of PyTorch's FSDP with one
// flat parameter per wrap unit (LibTorch has no FSDP).
//
// Setup: each wrap unit's parameters (rank 0's values) are flattened in order
// into one buffer padded to a multiple of N ranks; this rank keeps its 1/N
// slice as the master shard (a leaf the optimizer steps, so gradients and
// optimizer state are 1/N too). The module keeps its parameters (names,
// shapes, requires_grad: state dicts and FLOP counts work unchanged) but their
// data now view the unit's full buffer, whose memory exists only while the
// unit is gathered: freeing keeps the storage object and drops its bytes, so
// the parameters and autograd's saved references see the memory again when
// the next all-gather puts it back.
//
// FULL_SHARD (ZeRO-3): the model calls before(i) / after(i) around unit i.
// before gathers unit i (waiting for the prefetched all-gather) and starts
// unit i+1's; after frees unit i (not the last one: backward needs it first)
// and hooks the unit's output so that, in backward, unit i is gathered again
// (and unit i-1 prefetched) before unit i's backward runs. A gradient hook on
// every parameter copies its gradient (plus any gradient accumulated while
// backward sync was off) into the unit's flat gradient; once the unit's last
// gradient arrived, its reduce-scatter starts (pre-divided by N, summed, as
// DDP) into the shard's .grad (added to a .grad already there, like autograd
// accumulation until zero_grad), and the unit is freed. The full-size .grad
// autograd then stores is dropped once the next unit completes.
// SHARD_GRAD_OP (ZeRO-2): parameters stay gathered from forward to the end of
// the unit's backward. NO_SHARD: the master is the whole flat buffer (the
// parameters view it), gradients are all-reduced.
//
// ZeRO stages 1 and 2 (DeepSpeed's, as Lightning's deepspeed_stage_1/2 name
// them; built here on c10d, not DeepSpeed): the same flat units, but the
// parameters stay whole on every rank and are never freed, and the model
// needs no wrap units (one unit then). The master shard is this rank's slice
// of the whole buffer itself (a view: no second copy of the parameters), so
// each rank steps, and keeps optimizer state for, 1/N of every unit.
// Stage 2 reduce-scatters each unit's gradient the moment it is complete
// (overlapping the rest of the backward) into the shard's .grad; stage 1
// all-reduces it and keeps the shard's slice (the same bytes on Gloo, which
// has no reduce-scatter). After the optimizer step every unit's shard is
// all-gathered into the whole parameters (after_optimizer_step).
//
// Collectives run in the same order on every rank (the graph, hence the hook
// order, is the same); finish_gradient_sync reduces units whose gradients did
// not all arrive, waits, and frees every gathered unit, so the optimizer step
// never leaves a stale gathered copy behind. Under no_backward_sync nothing is
// reduced: gradients accumulate full-size in the module's parameters' .grad
// (as PyTorch's FSDP no_sync) and join the next synchronised backward.
//
// Mixed precision: all-gathers and reduce-scatters in comm_dtype (bf16 under
// bf16-mixed), upcast into the parameters' dtype, so the model sees the dtype
// it was set up in (LibTorch 1.13's CPU layer_norm rejects bf16 input with
// fp32 weights under autocast) and the master shards stay fp32. Gloo cannot
// sum bf16: there the reductions run in fp32 (the all-gathers stay bf16).
#include <algorithm>
#include <set>

#include "accel/precision/precision.h"
#include "accel/util/errors.h"
#include "fsdp_internal.h"
#include "strategies.h"

namespace accel::dist {
namespace fsdp {
namespace {

constexpr size_t kMaxReductionsInFlight = 2;  // bounds the full-size gradient buffers alive

Sharding parse_sharding(const std::string& s) {
  if (s == "FULL_SHARD") return Sharding::Full;
  if (s == "SHARD_GRAD_OP") return Sharding::GradOp;
  if (s == "NO_SHARD") return Sharding::None;
  throw ConfigError("runtime.fsdp.sharding: \"" + s +
                    "\" is not one of FULL_SHARD, SHARD_GRAD_OP, NO_SHARD");
}

}  // namespace

void free_storage(const torch::Tensor& t) {
  auto* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
  s->set_nbytes(0);
}

void allocate_storage(const torch::Tensor& t) {
  auto* s = t.storage().unsafeGetStorageImpl();
  const size_t nbytes = size_t(t.storage_offset() + t.numel()) * t.element_size();
  if (s->nbytes() >= nbytes && s->data_ptr().get() != nullptr) return;
  s->set_data_ptr_noswap(s->allocator()->allocate(nbytes));
  s->set_nbytes(nbytes);
}

FsdpStrategy::FsdpStrategy(const StrategyOptions& o, DistContext ctx)
    : Strategy(std::move(ctx)),
      sharding_(parse_sharding(o.knobs.fsdp_sharding)),
      prefetch_(o.knobs.fsdp_prefetch),
      comm_dtype_(precision::scalar_type(o.knobs.comm_dtype)) {
  if (!c10::isFloatingType(comm_dtype_)) {
    throw ConfigError("fsdp: communication dtype must be a floating type");
  }
  // Gloo has no bf16 (1.13: "Invalid scalar type"): its all-gathers carry
  // the bf16 bits as fp16 (a byte copy), its reductions sum in fp32. NCCL has bf16.
  const bool gloo_bf16 = ctx_.comm && ctx_.comm->backend() == "gloo" &&
                         comm_dtype_ == c10::ScalarType::BFloat16;
  gather_as_bits_ = gloo_bf16;
  reduce_dtype_ = gloo_bf16 ? c10::ScalarType::Float : comm_dtype_;
}

FsdpStrategy::FsdpStrategy(const StrategyOptions& o, DistContext ctx, int zero_stage)
    : FsdpStrategy(o, std::move(ctx)) {
  if (zero_stage != 1 && zero_stage != 2) throw RunError("zero: stage 1 or 2");
  sharding_ = zero_stage == 1 ? Sharding::Zero1 : Sharding::Zero2;
  name_ = "deepspeed_stage_" + std::to_string(zero_stage);
}

FsdpStrategy::~FsdpStrategy() {
  alive_.reset();
  if (wrappable_ != nullptr) wrappable_->set_unit_hooks(nullptr);
}

std::unique_ptr<torch::optim::Optimizer> FsdpStrategy::setup(
    std::shared_ptr<torch::nn::Module> model, const OptimizerFactory& make_optimizer) {
  module_ = std::move(model);
  make_optimizer_ = make_optimizer;
  build_units();
  register_grad_hooks();
  if (wrappable_ != nullptr && !replicated()) {
    hooks_.before = [this](int u) { before_unit(u); };
    hooks_.after = [this](int u, torch::Tensor out) { return after_unit(u, std::move(out)); };
    wrappable_->set_unit_hooks(&hooks_);
  }
  std::vector<torch::Tensor> shards;
  for (const auto& u : units_) {
    if (u.padded > 0) shards.push_back(u.shard);
  }
  return make_optimizer(shards);
}

void FsdpStrategy::build_units() {
  std::vector<WrapUnit> wrap;
  wrappable_ = dynamic_cast<Wrappable*>(module_.get());
  if (wrappable_ != nullptr) {
    wrap = wrappable_->wrap_units();
  } else {
    // No hooks around the forward: nothing could gather a sharded module.
    if (sharding_ != Sharding::None && !replicated()) {
      throw ConfigError(
          "runtime.fsdp.sharding: FULL_SHARD and SHARD_GRAD_OP need a model that exposes wrap "
          "units; this one does not (NO_SHARD works with any model)");
    }
    WrapUnit all{"module", {}};
    for (const auto& kv : module_->named_parameters()) {
      all.params.emplace_back(kv.key(), kv.value());
    }
    wrap.push_back(std::move(all));
  }
  std::set<const void*> seen;
  for (const auto& w : wrap) {
    Unit u;
    u.name = w.name;
    int64_t offset = 0;
    for (const auto& [name, p] : w.params) {
      if (!seen.insert(p.unsafeGetTensorImpl()).second) {
        throw RunError("fsdp: parameter " + name + " is in two wrap units");
      }
      if (!p.requires_grad()) {
        throw ConfigError("fsdp: parameter " + name +
                          " does not require grad; frozen parameters are not supported");
      }
      const auto& first = u.slots.empty() ? p : u.slots.front().param;
      if (p.scalar_type() != first.scalar_type() || p.device() != first.device()) {
        throw RunError("fsdp: unit " + w.name + " mixes dtypes or devices (" + name + ")");
      }
      u.slots.push_back({name, p, offset, p.numel()});
      offset += p.numel();
    }
    units_.push_back(std::move(u));
  }
  for (const auto& p : module_->parameters()) {
    if (seen.count(p.unsafeGetTensorImpl()) == 0) {
      throw RunError("fsdp: the model's wrap units miss one of its parameters");
    }
  }
  torch::NoGradGuard no_grad;
  for (auto& u : units_) shard_unit(u);
  if (ctx_.comm) {
    for (auto& b : module_->buffers()) {
      auto t = b.contiguous();
      ctx_.comm->broadcast(t, 0);
      if (!t.is_same(b)) b.copy_(t);
    }
  }
}

void FsdpStrategy::shard_unit(Unit& u) {
  u.ready.assign(u.slots.size(), 0);
  u.expected = int(u.slots.size());
  if (u.slots.empty()) return;
  const int64_t n = sharding_ == Sharding::None ? 1 : ctx_.world_size;
  int64_t numel = 0;
  for (const auto& s : u.slots) numel += s.numel;
  u.padded = (numel + n - 1) / n * n;
  u.shard_numel = u.padded / n;
  auto full = torch::zeros({u.padded}, u.slots.front().param.options().requires_grad(false));
  for (const auto& s : u.slots) {
    full.narrow(0, s.offset, s.numel).copy_(s.param.detach().reshape(-1));
  }
  if (ctx_.comm) ctx_.comm->broadcast(full, 0);  // every rank starts from rank 0's values
  if (sharding_ == Sharding::None) {
    u.shard = full;
    u.shard.requires_grad_(true);
    u.full = full.detach();
    u.gathered = true;
  } else if (replicated()) {
    u.full = full;
    u.shard = full.narrow(0, shard_offset(u), u.shard_numel);  // a view: steps update full
    u.shard.requires_grad_(true);
    u.gathered = true;
  } else {
    u.shard = full.narrow(0, shard_offset(u), u.shard_numel).clone();
    u.shard.requires_grad_(true);
    u.full = full;
  }
  for (auto& s : u.slots) {
    s.param.mutable_grad().reset();
    s.param.set_data(u.full.narrow(0, s.offset, s.numel).view(s.param.sizes()));
  }
  if (sharding_ != Sharding::None && !replicated()) free_storage(u.full);
}

void FsdpStrategy::register_grad_hooks() {
  std::weak_ptr<int> alive = alive_;
  for (size_t u = 0; u < units_.size(); ++u) {
    for (size_t j = 0; j < units_[u].slots.size(); ++j) {
      const int ui = int(u), ji = int(j);
      units_[u].slots[j].param.register_hook([alive, this, ui, ji](torch::Tensor grad) {
        if (alive.lock()) on_grad(ui, ji, grad);
      });
    }
  }
}

// ---- forward and backward -------------------------------------------------------

void FsdpStrategy::before_unit(int u) {
  if (sharding_ == Sharding::None) return;
  ensure_gathered(u);
  if (prefetch_ && u + 1 < int(units_.size())) start_gather(u + 1);
}

torch::Tensor FsdpStrategy::after_unit(int u, torch::Tensor out) {
  if (sharding_ == Sharding::None) return out;
  if (!torch::GradMode::is_enabled()) {  // no backward will need the parameters
    free_unit(u);
    return out;
  }
  if (sharding_ == Sharding::GradOp) return out;
  if (u + 1 < int(units_.size())) free_unit(u);
  if (out.requires_grad()) {
    // Runs when the gradient of the unit's output is complete, before the
    // unit's own backward nodes.
    std::weak_ptr<int> alive = alive_;
    out.register_hook([alive, this, u](torch::Tensor) {
      if (alive.lock()) before_unit_backward(u);
    });
  }
  return out;
}

void FsdpStrategy::before_unit_backward(int u) {
  ensure_gathered(u);
  if (prefetch_ && u > 0) start_gather(u - 1);
}

void FsdpStrategy::pre_backward() {
  sync_ = backward_sync_;
  reset_backward_state();
}

// Runs inside backward before autograd accumulates `grad` into the
// parameter's .grad.
void FsdpStrategy::on_grad(int u, int j, const torch::Tensor& grad) {
  torch::NoGradGuard no_grad;
  auto& unit = units_[size_t(u)];
  if (unit.ready[size_t(j)]) {
    if (!sync_) return;
    throw RunError("fsdp: a second backward through " + unit.slots[size_t(j)].name +
                   " before finish_gradient_sync");
  }
  if (sync_) {
    auto& s = unit.slots[size_t(j)];
    if (!unit.grad_flat.defined()) {
      unit.grad_flat = torch::zeros({unit.padded}, unit.full.options().dtype(reduce_dtype_));
    }
    auto view = unit.grad_flat.narrow(0, s.offset, s.numel);
    auto& acc = s.param.mutable_grad();
    if (acc.defined()) {
      view.copy_((grad + acc).reshape(-1));
      acc.reset();
    } else {
      view.copy_(grad.reshape(-1));
    }
  }
  unit.ready[size_t(j)] = 1;
  if (++unit.arrived == unit.expected) unit_backward_done(u);
}

void FsdpStrategy::unit_backward_done(int u) {
  auto& unit = units_[size_t(u)];
  unit.done = true;
  if (sync_) {
    release_reduced_grads();  // earlier units: autograd has stored their .grad by now
    launch_reduction(u);
    for (const auto& s : unit.slots) reduced_params_.push_back(s.param);
  }
  free_unit(u);
}

void FsdpStrategy::finish_gradient_sync() {
  torch::NoGradGuard no_grad;
  if (sync_) {
    // Units whose gradients did not all arrive (a parameter took no part in
    // this backward, or there was none): reduce what they have, an
    // accumulated gradient or zeros, so every rank runs the same collectives.
    for (int u = int(units_.size()) - 1; u >= 0; --u) {
      auto& unit = units_[size_t(u)];
      if (unit.done || unit.padded == 0) continue;
      if (!unit.grad_flat.defined()) {
        unit.grad_flat = torch::zeros({unit.padded}, unit.full.options().dtype(reduce_dtype_));
      }
      for (size_t j = 0; j < unit.slots.size(); ++j) {
        auto& acc = unit.slots[j].param.mutable_grad();
        if (unit.ready[j] || !acc.defined()) continue;
        unit.grad_flat.narrow(0, unit.slots[j].offset, unit.slots[j].numel).copy_(acc.reshape(-1));
        acc.reset();
      }
      launch_reduction(u);
    }
    while (!reductions_.empty()) complete_oldest_reduction();
    for (auto& unit : units_) {
      for (auto& s : unit.slots) s.param.mutable_grad().reset();
    }
    reduced_params_.clear();
  }
  free_all();
  reset_backward_state();
}

void FsdpStrategy::reset_backward_state() {
  for (auto& unit : units_) {
    unit.arrived = 0;
    std::fill(unit.ready.begin(), unit.ready.end(), 0);
    unit.done = false;
    unit.grad_flat = torch::Tensor();
  }
}

// ---- gathering ------------------------------------------------------------------

void FsdpStrategy::start_gather(int u) {
  auto& unit = units_[size_t(u)];
  if (sharding_ == Sharding::None || replicated() || unit.padded == 0 || unit.gathered ||
      unit.gather.pending()) {
    return;
  }
  torch::NoGradGuard no_grad;
  allocate_storage(unit.full);
  const auto shard = unit.shard.detach();
  if (!ctx_.comm) {  // one rank: the shard is the whole buffer
    unit.full.copy_(shard);
    unit.gathered = true;
  } else if (comm_dtype_ == unit.full.scalar_type()) {
    unit.gather = ctx_.comm->all_gather(shard, unit.full);
  } else {
    unit.gather_send = shard.to(comm_dtype_);
    unit.gather_recv = torch::empty({unit.padded}, unit.full.options().dtype(comm_dtype_));
    if (gather_as_bits_) {
      auto recv_bits = unit.gather_recv.view(torch::kHalf);
      unit.gather = ctx_.comm->all_gather(unit.gather_send.view(torch::kHalf), recv_bits);
    } else {
      unit.gather = ctx_.comm->all_gather(unit.gather_send, unit.gather_recv);
    }
  }
}

void FsdpStrategy::ensure_gathered(int u) {
  auto& unit = units_[size_t(u)];
  if (unit.gathered || unit.padded == 0) return;
  start_gather(u);
  if (unit.gathered) return;
  unit.gather.wait();
  if (unit.gather_recv.defined()) {
    torch::NoGradGuard no_grad;
    unit.full.copy_(unit.gather_recv);  // upcast into the parameters' dtype
    unit.gather_recv = unit.gather_send = torch::Tensor();
  }
  unit.gathered = true;
}

void FsdpStrategy::free_unit(int u) {
  auto& unit = units_[size_t(u)];
  if (sharding_ == Sharding::None || replicated() || unit.padded == 0) return;
  unit.gather.wait();  // a prefetch still writing into it
  unit.gather_recv = unit.gather_send = torch::Tensor();
  unit.gathered = false;
  free_storage(unit.full);
}

void FsdpStrategy::free_all() {
  for (size_t u = 0; u < units_.size(); ++u) free_unit(int(u));
}

// ---- gradient reduction ---------------------------------------------------------

void FsdpStrategy::launch_reduction(int u) {
  auto& unit = units_[size_t(u)];
  if (unit.padded == 0) return;
  Reduction r;
  r.unit = u;
  r.flat = unit.grad_flat.defined()
               ? unit.grad_flat
               : torch::zeros({unit.padded}, unit.full.options().dtype(reduce_dtype_));
  unit.grad_flat = torch::Tensor();
  if (!ctx_.comm) {
    r.out = r.flat;
  } else {
    r.flat.div_(double(ctx_.world_size));  // then a sum: the mean, as DDP
    if (sharding_ == Sharding::None) {
      r.handle = ctx_.comm->all_reduce(r.flat, ReduceOp::Sum);
      r.out = r.flat;
    } else if (sharding_ == Sharding::Zero1) {
      r.handle = ctx_.comm->all_reduce(r.flat, ReduceOp::Sum);
      r.out = r.flat.narrow(0, shard_offset(unit), unit.shard_numel);
    } else {
      r.out = torch::empty({unit.shard_numel}, r.flat.options());
      r.handle = ctx_.comm->reduce_scatter(r.flat, r.out, ReduceOp::Sum);
    }
  }
  reductions_.push_back(std::move(r));
  while (reductions_.size() > kMaxReductionsInFlight) complete_oldest_reduction();
}

void FsdpStrategy::complete_oldest_reduction() {
  Reduction r = std::move(reductions_.front());
  reductions_.pop_front();
  r.handle.wait();
  torch::NoGradGuard no_grad;
  auto& shard = units_[size_t(r.unit)].shard;
  auto g = r.out.to(shard.scalar_type());
  if (g.is_view()) g = g.clone();  // ZeRO-1's slice of the all-reduced buffer (zero_grad detaches)
  auto& grad = shard.mutable_grad();
  if (grad.defined()) {
    grad.add_(g);
  } else {
    grad = g;
  }
}

// ZeRO: every rank stepped its slice of each unit; the slices are
// all-gathered into the whole parameters, all units in flight at once. The
// shard views the whole buffer: what it sends is a copy, so no collective
// reads and writes the same memory.
void FsdpStrategy::after_optimizer_step() {
  if (!replicated() || !ctx_.comm) return;
  torch::NoGradGuard no_grad;
  std::vector<std::pair<Handle, torch::Tensor>> gathers;
  for (auto& unit : units_) {
    if (unit.padded == 0) continue;
    auto send = unit.shard.detach().clone();
    gathers.emplace_back(ctx_.comm->all_gather(send, unit.full), send);
  }
  for (auto& g : gathers) g.first.wait();
}

void FsdpStrategy::release_reduced_grads() {
  for (auto& p : reduced_params_) p.mutable_grad().reset();
  reduced_params_.clear();
}

}  // namespace fsdp

std::unique_ptr<Strategy> make_fsdp(const StrategyOptions& options, DistContext ctx) {
  return std::make_unique<fsdp::FsdpStrategy>(options, std::move(ctx));
}

std::unique_ptr<Strategy> make_zero(const StrategyOptions& options, DistContext ctx, int stage) {
  return std::make_unique<fsdp::FsdpStrategy>(options, std::move(ctx), stage);
}

}  // namespace accel::dist
