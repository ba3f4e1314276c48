// FSDP strategy internals (fsdp.cpp: sharding, gathering, gradient
// reduction; fsdp_state.cpp: full state for checkpoints). See fsdp.cpp.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "accel/dist/strategy.h"

namespace accel::dist::fsdp {

// FULL_SHARD, SHARD_GRAD_OP, NO_SHARD; and DeepSpeed's ZeRO stages 1 and 2,
// whose parameters stay whole on every rank (see fsdp.cpp).
enum class Sharding { Full, GradOp, None, Zero1, Zero2 };

// One parameter's place in its unit's flat buffer.
struct Slot {
  std::string name;
  torch::Tensor param;  // the module's own parameter (its data views the unit's full buffer)
  int64_t offset = 0, numel = 0;
};

// A wrap unit: its parameters flattened in order into `full` (padded to a
// multiple of the world size); this rank's 1/N of it is `shard`, the leaf the
// optimizer steps. NO_SHARD: shard and full are one tensor, never freed.
struct Unit {
  std::string name;
  std::vector<Slot> slots;
  int64_t padded = 0;       // elements of full
  int64_t shard_numel = 0;  // elements of shard (padded / N; NO_SHARD: padded)
  torch::Tensor full;       // storage freed (0 bytes) while not gathered
  torch::Tensor shard;      // master parameters: leaf, requires_grad
  bool gathered = false;
  Handle gather;            // all-gather in flight
  torch::Tensor gather_send, gather_recv;  // comm-dtype staging when it differs

  // This backward's gradients.
  int expected = 0;         // parameters that take gradients
  int arrived = 0;
  std::vector<char> ready;  // per slot
  bool done = false;        // every expected gradient arrived
  torch::Tensor grad_flat;  // comm dtype, padded, pre-divided by N once complete
};

// A reduction in flight: unit u's flat gradient into `out`.
struct Reduction {
  int unit = 0;
  Handle handle;
  torch::Tensor flat, out;
};

// Frees a tensor's memory but keeps its storage object, so every tensor that
// views it (the module's parameters, autograd's saved tensors) sees the memory
// allocate_storage puts back. StorageImpl's calls are the same in 1.13 and
// 2.x and on every device (the storage's own allocator: CUDA's caching one).
void free_storage(const torch::Tensor& t);
void allocate_storage(const torch::Tensor& t);  // t's full extent, contents undefined

class FsdpStrategy final : public Strategy {
 public:
  FsdpStrategy(const StrategyOptions& options, DistContext ctx);
  // ZeRO stage 1 or 2 (Lightning's names deepspeed_stage_1, deepspeed_stage_2).
  FsdpStrategy(const StrategyOptions& options, DistContext ctx, int zero_stage);
  ~FsdpStrategy() override;
  std::string name() const override { return name_; }

  std::unique_ptr<torch::optim::Optimizer> setup(std::shared_ptr<torch::nn::Module> model,
                                                 const OptimizerFactory& make_optimizer) override;
  void pre_backward() override;
  void finish_gradient_sync() override;
  void after_optimizer_step() override;
  torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm) override;
  FullState gather_full_state(torch::optim::Optimizer& optimizer) override;
  void scatter_full_state(FullState& full, torch::optim::Optimizer& optimizer) override;
  void release_full_state(FullState& full) override;
  StateBytes state_bytes(const torch::optim::Optimizer& optimizer) const override;

 private:
  // setup
  void build_units();
  void shard_unit(Unit& u);
  void register_grad_hooks();
  // forward / backward hooks
  void before_unit(int u);
  torch::Tensor after_unit(int u, torch::Tensor out);
  void before_unit_backward(int u);
  void on_grad(int u, int slot, const torch::Tensor& grad);
  void unit_backward_done(int u);
  // gathering
  void start_gather(int u);
  void ensure_gathered(int u);
  void free_unit(int u);
  void free_all();
  // gradient reduction
  void launch_reduction(int u);
  void complete_oldest_reduction();
  void release_reduced_grads();
  void reset_backward_state();
  // full state (fsdp_state.cpp)
  int64_t shard_offset(const Unit& u) const;
  torch::Tensor gather_flat(const Unit& u, const torch::Tensor& shard_part);

  // ZeRO: parameters whole on every rank, never freed; the master shard is
  // this rank's slice of them.
  bool replicated() const { return sharding_ == Sharding::Zero1 || sharding_ == Sharding::Zero2; }

  std::string name_ = "fsdp";
  Sharding sharding_;
  bool prefetch_;
  c10::ScalarType comm_dtype_;    // all-gathers
  c10::ScalarType reduce_dtype_;  // gradient reductions
  bool gather_as_bits_ = false;   // all-gather comm_dtype_ bits as fp16 (a copy: no arithmetic)
  OptimizerFactory make_optimizer_;
  Wrappable* wrappable_ = nullptr;
  UnitHooks hooks_;
  std::vector<Unit> units_;
  std::deque<Reduction> reductions_;
  std::vector<torch::Tensor> reduced_params_;  // .grad to drop once autograd stored it
  bool sync_ = true;                           // this backward reduces (set by pre_backward)
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);  // hooks check it
};

}  // namespace accel::dist::fsdp
