// A small C++ facade shaped like Lightning Fabric: the training loop stays a
// plain loop and Fabric supplies the process context (rank, device, process
// group), precision (autocast, GradScaler, true-precision casts), the
// parallel strategy (single, ddp, fsdp), checkpointing and rank-aware
// printing. The article's 03 script is its 01 script with four lines changed;
// train::run's loop is the same loop for both, with those four lines.
//
//   Fabric fabric(cfg.runtime, &std::cout);
//   fabric.launch();                     // joins the ranks the environment names
//   auto [model, optimizer] = fabric.setup(vit, make_optimizer);
//   auto loader = fabric.setup_dataloader(train_set, opts);
//   ... logits = model.forward(batch.inputs); loss = ...;
//   optimizer.zero_grad(); fabric.backward(loss); optimizer.step();
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "accel/util/json.h"
#include <torch/torch.h>

#include "accel/config/run_config.h"
#include "accel/data/loader.h"
#include "accel/dist/strategy.h"
#include "accel/plan/accelerator.h"
#include "accel/plan/run_plan.h"
#include "accel/precision/grad_scaler.h"
#include "accel/precision/precision.h"
#include "accel/train/checkpoint.h"
#include "accel/util/torch_compat.h"

namespace accel::train {

class Fabric;

// The model as set up by Fabric: forward moves the named inputs to the
// device, runs under the precision's autocast, casts floating inputs for
// *-true precisions (token ids stay integers), and returns outputs in
// float32. Works on any torch::nn::Module with a forward(data::Inputs).
class FabricModule {
 public:
  using Forward = std::function<torch::Tensor(const data::Inputs&)>;
  FabricModule(Fabric& fabric, std::shared_ptr<torch::nn::Module> module, Forward forward)
      : fabric_(&fabric), module_(std::move(module)), forward_(std::move(forward)) {}
  torch::Tensor forward(const data::Inputs& inputs);
  // The wrapped module (for FSDP, its parameters are views of gathered units).
  torch::nn::Module& module() { return *module_; }
  std::shared_ptr<torch::nn::Module> module_ptr() { return module_; }
  void train() { module_->train(); }
  void eval() { module_->eval(); }

 private:
  Fabric* fabric_;
  std::shared_ptr<torch::nn::Module> module_;
  Forward forward_;
};

// The optimizer as set up by Fabric: step() goes through the GradScaler
// (skip on inf/NaN, update scale). Built over what the strategy says this
// rank steps (FSDP: the local shards).
class FabricOptimizer {
 public:
  FabricOptimizer(Fabric& fabric, std::unique_ptr<torch::optim::Optimizer> inner)
      : fabric_(&fabric), inner_(std::move(inner)) {}
  // Gradients set to none on every LibTorch (compat::zero_grad_to_none).
  void zero_grad() { compat::zero_grad_to_none(*inner_); }
  // Returns false when the GradScaler skipped the step.
  bool step();
  torch::optim::Optimizer& inner() { return *inner_; }
  std::vector<torch::Tensor> params() const;

 private:
  Fabric* fabric_;
  std::unique_ptr<torch::optim::Optimizer> inner_;
};

class Fabric {
 public:
  // Validates the runtime section (ConfigError naming the runtime.* field)
  // and checks the precision is possible on the device before anything runs.
  // The plan is the runtime section's on this machine (plan::plan_runtime).
  explicit Fabric(config::RuntimeConfig runtime, std::ostream* log = nullptr);
  // The same with the run's plan (plan::plan_run of the config `runtime` is from).
  Fabric(plan::RunPlan plan, config::RuntimeConfig runtime, std::ostream* log = nullptr);
  ~Fabric();

  // Joins the job: reads the rank layout the environment names (torchrun,
  // Slurm, accel-bench's launcher; none: one process), sets the threads, and
  // with several ranks connects the process group (Gloo on cpu, NCCL on cuda)
  // and checks every rank runs the same config (config_hash; a rank whose
  // hash differs fails every rank, naming it). Builds the strategy.
  void launch(const std::string& config_hash = "");
  void seed_everything(uint64_t seed);

  struct Setup {
    FabricModule model;
    FabricOptimizer optimizer;
  };
  // Moves and casts the model, hands it to the strategy, wraps the optimizer
  // the strategy builds (through make_optimizer, over the tensors it steps).
  template <typename ModuleHolder>
  Setup setup(ModuleHolder model, const dist::OptimizerFactory& make_optimizer) {
    auto ptr = model.ptr();
    auto* raw = ptr.get();
    return setup_module(ptr, [raw](const data::Inputs& x) { return raw->forward(x); },
                        make_optimizer);
  }
  Setup setup_module(std::shared_ptr<torch::nn::Module> module, FabricModule::Forward forward,
                     const dist::OptimizerFactory& make_optimizer);

  // A loader sharded for this rank (rank, world size), batches on the device.
  std::unique_ptr<data::Loader> setup_dataloader(std::shared_ptr<const data::ExampleSet> set,
                                                 data::LoaderOptions options);
  torch::Tensor to_device(const torch::Tensor& t) const;
  data::Inputs to_device(const data::Inputs& inputs) const;

  // loss -> (scaled) backward; gradients reduced across ranks on return
  // (unless inside no_backward_sync). `local_done` (optional) runs between
  // the local backward and the wait for the reduction (the step's timing
  // marks there).
  void backward(const torch::Tensor& loss, const std::function<void()>& local_done = {});
  // RAII: while alive, backward() accumulates local gradients only (the
  // micro-batches of gradient accumulation before the last).
  class NoBackwardSync {
   public:
    NoBackwardSync(Fabric& f, bool enabled);
    ~NoBackwardSync();

   private:
    Fabric* f_;
    bool prev_;
  };
  NoBackwardSync no_backward_sync(bool enabled = true) { return NoBackwardSync(*this, enabled); }
  // Unscales (if a GradScaler runs) and clips the global gradient norm;
  // returns the norm before clipping, a device scalar (Strategy::clip_grad_norm).
  torch::Tensor clip_gradients(FabricModule& model, FabricOptimizer& optimizer, double max_norm);
  // RAII autocast for code outside FabricModule::forward.
  std::unique_ptr<precision::AutocastGuard> autocast() const;

  // Checkpoints: the full (single-device) model and optimizer state, written
  // by rank 0, readable by any number of ranks and any strategy.
  void save(const std::filesystem::path& file, FabricModule& model, FabricOptimizer& optimizer,
            const TrainProgress& progress, const nlohmann::json& config, bool overwrite);
  // Restores model, optimizer, GradScaler and RNG from `file` on every rank;
  // returns the checkpoint for its progress and config.
  Checkpoint load(const std::filesystem::path& file, FabricModule& model,
                  FabricOptimizer& optimizer);

  torch::Tensor all_reduce(torch::Tensor t, dist::ReduceOp op = dist::ReduceOp::Mean);
  void barrier();
  // Rank 0 prints; other ranks stay silent.
  void print(const std::string& line) const;

  const dist::DistContext& context() const;
  int global_rank() const { return context().rank; }
  int world_size() const { return context().world_size; }
  bool is_global_zero() const { return global_rank() == 0; }
  torch::Device device() const { return context().device; }
  int threads() const { return threads_; }
  const precision::Policy& precision() const { return policy_; }
  precision::GradScaler& scaler() { return scaler_; }
  dist::Strategy& strategy();
  const config::RuntimeConfig& runtime() const { return runtime_; }
  const plan::RunPlan& plan() const { return plan_; }

 private:
  plan::RunPlan plan_;
  config::RuntimeConfig runtime_;
  std::ostream* log_;
  precision::Policy policy_;
  precision::GradScaler scaler_;
  dist::DistContext ctx_;
  std::unique_ptr<dist::Strategy> strategy_;
  int threads_ = 1;
};

// The device a runtime section asks for on this build, for the given local
// rank (ConfigError when it cannot be had), by the accelerator rows' one rule
// (accel/plan/accelerator.h: "auto" = the GPU LibTorch sees, else cpu).
torch::Device resolve_device(const std::string& accelerator, int local_rank = 0);
// This process's facts for planning a run asking for `accelerator`: the cores
// it may use, the CPU's features, and the devices LibTorch sees, asked only
// where the accelerator is not named as the host (asking starts CUDA's driver).
plan::MachineFacts this_machine_facts(const std::string& accelerator);
// The run plan of cfg on this machine (plan::plan_run on this_machine_facts).
plan::RunPlan plan_here(const config::RunConfig& cfg);

// runtime.devices with "auto" (0) resolved by the run plan: the visible GPUs
// when the device is cuda (1 under strategy "single"), else 1.
int resolve_devices(const config::RuntimeConfig& runtime);

// The process-group backend of a plan on this build: the plan's, or gloo for
// runtime.backend "auto" where this build lacks it (ConfigError naming
// runtime.backend when a named one is missing or needs a device the plan has not).
std::string resolve_backend(const plan::RunPlan& plan, const std::string& requested);

}  // namespace accel::train
