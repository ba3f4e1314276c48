// Parallel strategies (Lightning's names: single, ddp, fsdp, deepspeed_stage_1
// and deepspeed_stage_2, which are ZeRO built here on c10d, not DeepSpeed). A strategy owns
// the module once set up: it places and wraps it (DDP gradient hooks, FSDP
// sharding), says which tensors the optimizer steps (FSDP: the local shards),
// finishes gradient reduction before clipping and the optimizer step, and
// turns sharded state into a single-device view for checkpoints, so a
// checkpoint written by N ranks loads on 1 and on N.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "accel/dist/catalog.h"
#include "accel/dist/comm.h"

namespace accel::dist {

// Where this process sits: rank layout, its device, and the process group
// (null for a one-process run).
struct DistContext {
  int rank = 0, local_rank = 0, world_size = 1, local_world_size = 1;
  int node_rank = 0, num_nodes = 1;
  torch::Device device = torch::kCPU;
  std::shared_ptr<Comm> comm;  // null when world_size == 1
  bool is_global_zero() const { return rank == 0; }
};

// The parts of a model a sharding strategy gathers and frees one at a time
// (ViT: the patch stem, each encoder block, the final norm + head). The model
// runs `hooks` around each unit's forward: before(i) must make unit i's
// parameters usable; after(i, out) may release them and may wrap the unit's
// output (an autograd node whose backward gathers them again). A model that
// is not Wrappable is one unit: the whole module.
struct WrapUnit {
  std::string name;
  std::vector<std::pair<std::string, torch::Tensor>> params;  // full names, forward order
};
struct UnitHooks {
  std::function<void(int unit)> before;
  std::function<torch::Tensor(int unit, torch::Tensor out)> after;
};
class Wrappable {
 public:
  virtual ~Wrappable() = default;
  // Units in forward order; together they hold every parameter exactly once.
  virtual std::vector<WrapUnit> wrap_units() = 0;
  // Installed by the strategy; nullptr removes them.
  virtual void set_unit_hooks(const UnitHooks* hooks) = 0;
};

// Bytes of model state this rank holds (what FSDP divides by N).
struct StateBytes {
  int64_t params = 0, grads = 0, optimizer = 0;
  int64_t total() const { return params + grads + optimizer; }
};

using OptimizerFactory =
    std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>;

class Strategy {
 public:
  explicit Strategy(DistContext ctx) : ctx_(std::move(ctx)) {}
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;

  const DistContext& context() const { return ctx_; }
  int global_rank() const { return ctx_.rank; }
  int local_rank() const { return ctx_.local_rank; }
  int world_size() const { return ctx_.world_size; }
  torch::Device device() const { return ctx_.device; }

  // Takes the model (on its device, in its precision) and returns the
  // optimizer built over the tensors this rank steps. Called once.
  virtual std::unique_ptr<torch::optim::Optimizer> setup(std::shared_ptr<torch::nn::Module> model,
                                                         const OptimizerFactory& make_optimizer) = 0;
  // Before loss.backward(): arm gradient reduction for this backward
  // (unless backward sync is off).
  virtual void pre_backward() {}
  // After backward, before unscaling, clipping and the optimizer step: wait
  // until gradients are reduced. Must be called on every rank.
  virtual void finish_gradient_sync() {}
  // After every optimizer step (skipped or not), on every rank: ZeRO
  // all-gathers the stepped shards into the whole parameters.
  virtual void after_optimizer_step() {}
  // no_backward_sync (gradient accumulation): while off, backward
  // accumulates local gradients and reduces nothing.
  void set_backward_sync(bool on) { backward_sync_ = on; }
  bool backward_sync() const { return backward_sync_; }
  // Clips the global gradient norm of `params` (the optimizer's) to max_norm;
  // returns the norm before clipping (FSDP: over all shards) as a float64
  // scalar on the gradients' device, never read back here (on a GPU the
  // clip adds no host sync; .item() it only where the value is wanted).
  virtual torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm);

  // Checkpoints. gather_full_state makes `model` hold the full parameters on
  // every rank and returns a single-device optimizer equivalent to this
  // rank's (for single/ddp: `optimizer` itself, not owned). After a
  // checkpoint was read into them, scatter_full_state copies the full model
  // and optimizer state back into this rank's own. release_full_state frees
  // what gather made (FSDP). All ranks call each of them.
  struct FullState {
    torch::optim::Optimizer* optimizer = nullptr;
    std::unique_ptr<torch::optim::Optimizer> owned;
  };
  virtual FullState gather_full_state(torch::optim::Optimizer& optimizer);
  virtual void scatter_full_state(FullState& full, torch::optim::Optimizer& optimizer);
  virtual void release_full_state(FullState& full);

  // Bytes of parameters, gradients and optimizer state held by this rank.
  virtual StateBytes state_bytes(const torch::optim::Optimizer& optimizer) const;

  // Collectives over all ranks (identity on one).
  void all_reduce(torch::Tensor& t, ReduceOp op);
  void broadcast(torch::Tensor& t, int root);
  void barrier();
  Comm* comm() const { return ctx_.comm.get(); }

 protected:
  // The clip's two halves, kept on the gradients' device (no host sync):
  // the sum of the squared 2-norms of `grads` as a float64 scalar on
  // `device`, and the scaling of `grads` by min(1, max_norm / (norm + 1e-6))
  // as torch's clip_grad_norm_ scales them, given that sum; returns the norm.
  // FSDP all-reduces the sum between the two.
  static torch::Tensor squared_norm(const std::vector<torch::Tensor>& grads, const torch::Device& device);
  static torch::Tensor scale_to_max_norm(const std::vector<torch::Tensor>& grads, const torch::Tensor& squared,
                                         double max_norm);

  std::shared_ptr<torch::nn::Module> module_;
  DistContext ctx_;
  bool backward_sync_ = true;
};

// One process, one device (cpu or cuda:N).
class SingleDeviceStrategy : public Strategy {
 public:
  using Strategy::Strategy;
  std::string name() const override { return "single"; }
  std::unique_ptr<torch::optim::Optimizer> setup(std::shared_ptr<torch::nn::Module> model,
                                                 const OptimizerFactory& make_optimizer) override;
};

struct StrategyOptions {
  std::string name = "auto";  // "auto" or a registry row's name (accel/dist/catalog.h)
  StrategyKnobs knobs;        // the run plan's (accel/plan/run_plan.h)
};

// A row of the strategy registry: its facts (accel/dist/catalog.h) and its
// factory. A new strategy is one row (lib/dist/strategy.cpp).
struct StrategyRow {
  StrategyInfo info;
  std::unique_ptr<Strategy> (*make)(const StrategyOptions& options, DistContext ctx) = nullptr;
};
const std::vector<StrategyRow>& strategy_registry();

// "auto" is single on one rank and ddp on several. Throws ConfigError naming
// runtime.strategy for a strategy this context cannot run.
std::unique_ptr<Strategy> make_strategy(const StrategyOptions& options, DistContext ctx);

// Bytes of the tensors an optimizer holds as state (moments, momentum).
int64_t optimizer_state_bytes(const torch::optim::Optimizer& optimizer);

}  // namespace accel::dist
