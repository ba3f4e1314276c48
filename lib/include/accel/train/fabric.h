// A small C++ facade shaped like Lightning Fabric: the training loop stays a
// plain loop and Fabric supplies device placement, precision (autocast,
// GradScaler, true-precision casts), the parallel strategy, checkpointing and
// rank-aware printing. The article's 03 script is its 01 script with four
// lines changed; train::run's fabric loop is the plain loop with the same four.
//
//   Fabric fabric({.accelerator = "cpu", .precision = "bf16-mixed"});
//   fabric.launch();
//   auto [model, optimizer] = fabric.setup(vit, make_optimizer(...));
//   auto loader = fabric.setup_dataloader(train_set, opts);
//   ... logits = model.forward(x); loss = ...;
//   optimizer.zero_grad(); fabric.backward(loss); optimizer.step();
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "accel/data/loader.h"
#include "accel/dist/strategy.h"
#include "accel/models/vit.h"
#include "accel/precision/grad_scaler.h"
#include "accel/precision/precision.h"
#include "accel/train/checkpoint.h"

namespace accel::train {

struct FabricOptions {
  std::string accelerator = "cpu";  // cpu | cuda | auto
  int devices = 1;
  int num_nodes = 1;
  std::string strategy = "auto";    // auto | single | ddp | fsdp
  std::string precision = "32-true";
  int threads = 0;                  // intra-op threads; 0 = cores per local rank
};

class Fabric;

// The model as set up by Fabric: forward runs under the precision's autocast,
// inputs are cast for *-true precisions, outputs come back in float32.
class FabricModule {
 public:
  FabricModule(Fabric& fabric, models::VisionTransformer module)
      : fabric_(&fabric), module_(std::move(module)) {}
  torch::Tensor forward(const torch::Tensor& x);
  models::VisionTransformer& module() { return module_; }
  void train() { module_->train(); }
  void eval() { module_->eval(); }

 private:
  Fabric* fabric_;
  models::VisionTransformer module_;
};

// The optimizer as set up by Fabric: step() goes through the strategy (wait
// for gradient reduction) and the GradScaler (skip on inf/NaN, update scale).
class FabricOptimizer {
 public:
  FabricOptimizer(Fabric& fabric, std::unique_ptr<torch::optim::Optimizer> inner)
      : fabric_(&fabric), inner_(std::move(inner)) {}
  void zero_grad() { inner_->zero_grad(); }
  // Returns false when the GradScaler skipped the step.
  bool step();
  torch::optim::Optimizer& inner() { return *inner_; }

 private:
  Fabric* fabric_;
  std::unique_ptr<torch::optim::Optimizer> inner_;
};

class Fabric {
 public:
  // Validates the options (ConfigError naming the runtime.* field) and checks
  // the precision is possible on the device before anything runs.
  explicit Fabric(FabricOptions options, std::ostream* log = nullptr);

  // Single process: sets the thread count. (The distributed issue spawns or
  // joins ranks here.)
  void launch();
  void seed_everything(uint64_t seed);

  // Moves and casts the model, lets the strategy wrap it, wraps the optimizer.
  // The optimizer must have been built over `model`'s parameters after any
  // dtype cast: pass a factory so Fabric can build it at the right moment.
  struct Setup {
    FabricModule model;
    FabricOptimizer optimizer;
  };
  using OptimizerFactory =
      std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>;
  Setup setup(models::VisionTransformer model, const OptimizerFactory& make_optimizer);

  // A loader sharded for this rank (rank, world size), batches on the device.
  std::unique_ptr<data::Loader> setup_dataloader(std::shared_ptr<const data::ImageSet> set,
                                                 data::LoaderOptions options);
  torch::Tensor to_device(const torch::Tensor& t) const;

  // loss -> (scaled) backward.
  void backward(const torch::Tensor& loss);
  // Unscales (if a GradScaler runs) and clips the global gradient norm;
  // returns the norm before clipping.
  double clip_gradients(FabricModule& model, FabricOptimizer& optimizer, double max_norm);
  // RAII autocast for code outside FabricModule::forward.
  std::unique_ptr<precision::AutocastGuard> autocast() const;

  // Checkpoints: model, optimizer, GradScaler, progress, RNG, config.
  void save(const std::filesystem::path& file, FabricModule& model, FabricOptimizer& optimizer,
            const TrainProgress& progress, const nlohmann::json& config, bool overwrite);
  // Restores model, optimizer, GradScaler and RNG from `file`; returns the
  // checkpoint for its progress and config.
  Checkpoint load(const std::filesystem::path& file, FabricModule& model,
                  FabricOptimizer& optimizer);

  torch::Tensor all_reduce(torch::Tensor t, dist::ReduceOp op = dist::ReduceOp::Mean);
  void barrier();
  // Rank 0 prints; other ranks stay silent.
  void print(const std::string& line) const;

  int global_rank() const { return strategy_->global_rank(); }
  int world_size() const { return strategy_->world_size(); }
  bool is_global_zero() const { return global_rank() == 0; }
  torch::Device device() const { return strategy_->device(); }
  int threads() const { return threads_; }
  const precision::Policy& precision() const { return policy_; }
  precision::GradScaler& scaler() { return scaler_; }
  dist::Strategy& strategy() { return *strategy_; }
  const FabricOptions& options() const { return options_; }
  // The module set up last (what the strategy reduces gradients of).
  torch::nn::Module* strategy_module() const { return module_.get(); }

 private:
  std::shared_ptr<torch::nn::Module> module_;
  FabricOptions options_;
  std::ostream* log_;
  precision::Policy policy_;
  precision::GradScaler scaler_;
  std::unique_ptr<dist::Strategy> strategy_;
  int threads_ = 1;
};

// Which device a runtime section asks for on this build (ConfigError when it
// cannot be had).
torch::Device resolve_device(const std::string& accelerator);

}  // namespace accel::train
