#include "accel/train/fabric.h"

#include "accel/metrics/metrics.h"
#include "accel/util/errors.h"

namespace accel::train {

torch::Device resolve_device(const std::string& accelerator) {
  if (accelerator == "cpu" || accelerator == "auto") return torch::Device(torch::kCPU);
  if (accelerator == "cuda") {
    // The CUDA path (device placement, NCCL, CUDA memory stats) is its own
    // issue; until it lands a cuda request must not silently train on CPU.
    throw ConfigError(std::string("runtime.accelerator: \"cuda\" is not in this build yet") +
                      (torch::cuda::is_available() ? "" : " (and this LibTorch sees no CUDA device)") +
                      "; use \"cpu\" or \"auto\"");
  }
  throw ConfigError("runtime.accelerator: unknown accelerator \"" + accelerator + "\"");
}

namespace {

std::unique_ptr<dist::Strategy> make_strategy(const FabricOptions& o) {
  if (o.devices != 1 || o.num_nodes != 1 || o.strategy == "ddp" || o.strategy == "fsdp") {
    throw ConfigError("runtime.strategy: \"" + o.strategy + "\" on " +
                      std::to_string(o.devices) + " device(s) x " + std::to_string(o.num_nodes) +
                      " node(s) is not in this build yet; use one device with \"auto\"/\"single\"");
  }
  return std::make_unique<dist::SingleDeviceStrategy>(resolve_device(o.accelerator));
}

}  // namespace

// ---------------------------------------------------------------------------

torch::Tensor FabricModule::forward(const torch::Tensor& x) {
  const auto& policy = fabric_->precision();
  auto input = precision::cast_input(policy, fabric_->to_device(x));
  torch::Tensor out;
  {
    precision::AutocastGuard autocast(policy, fabric_->device().type());
    out = module_->forward(input);
  }
  return precision::cast_output(policy, out);
}

bool FabricOptimizer::step() {
  fabric_->strategy().before_optimizer_step(*fabric_->strategy_module());
  auto& scaler = fabric_->scaler();
  if (!scaler.enabled()) {
    inner_->step();
    return true;
  }
  const bool stepped = scaler.step(*inner_);
  scaler.update();
  return stepped;
}

// ---------------------------------------------------------------------------

Fabric::Fabric(FabricOptions options, std::ostream* log)
    : options_(std::move(options)),
      log_(log),
      policy_(precision::make_policy(options_.precision)),
      scaler_(policy_.use_grad_scaler),
      strategy_(make_strategy(options_)) {
  precision::check_supported(policy_, strategy_->device().type());
}

void Fabric::launch() {
  threads_ = options_.threads > 0
                 ? options_.threads
                 : metrics::default_threads(options_.devices);
  at::set_num_threads(threads_);
}

void Fabric::seed_everything(uint64_t seed) { torch::manual_seed(seed); }

Fabric::Setup Fabric::setup(models::VisionTransformer model,
                            const OptimizerFactory& make_optimizer) {
  model->to(device());
  precision::cast_module(policy_, *model);
  strategy_->setup_module(*model);
  module_ = model.ptr();
  auto optimizer = make_optimizer(model->parameters());
  return Setup{FabricModule(*this, std::move(model)),
               FabricOptimizer(*this, std::move(optimizer))};
}

std::unique_ptr<data::Loader> Fabric::setup_dataloader(std::shared_ptr<const data::ImageSet> set,
                                                       data::LoaderOptions options) {
  options.rank = global_rank();
  options.world_size = world_size();
  return std::make_unique<data::Loader>(std::move(set), options);
}

torch::Tensor Fabric::to_device(const torch::Tensor& t) const {
  return t.device() == device() ? t : t.to(device(), /*non_blocking=*/true);
}

void Fabric::backward(const torch::Tensor& loss) { scaler_.scale(loss).backward(); }

double Fabric::clip_gradients(FabricModule& model, FabricOptimizer& optimizer, double max_norm) {
  if (scaler_.enabled()) scaler_.unscale_(optimizer.inner());
  return torch::nn::utils::clip_grad_norm_(model.module()->parameters(), max_norm);
}

std::unique_ptr<precision::AutocastGuard> Fabric::autocast() const {
  return std::make_unique<precision::AutocastGuard>(policy_, device().type());
}

void Fabric::save(const std::filesystem::path& file, FabricModule& model,
                  FabricOptimizer& optimizer, const TrainProgress& progress,
                  const nlohmann::json& config, bool overwrite) {
  if (is_global_zero()) {
    save_checkpoint(file, *model.module(), optimizer.inner(), scaler_.state_dict(), progress,
                    config, overwrite);
  }
  barrier();
}

Checkpoint Fabric::load(const std::filesystem::path& file, FabricModule& model,
                        FabricOptimizer& optimizer) {
  auto ckpt = read_checkpoint(file);
  restore_for_resume(ckpt, *model.module(), optimizer.inner());
  if (scaler_.enabled() && !ckpt.grad_scaler.empty()) scaler_.load_state_dict(ckpt.grad_scaler);
  return ckpt;
}

torch::Tensor Fabric::all_reduce(torch::Tensor t, dist::ReduceOp op) {
  strategy_->all_reduce(t, op);
  return t;
}

void Fabric::barrier() { strategy_->barrier(); }

void Fabric::print(const std::string& line) const {
  if (log_ && is_global_zero()) *log_ << line << std::endl;
}

}  // namespace accel::train
