#include "accel/train/fabric.h"

#include "accel/dist/launcher.h"
#include "accel/metrics/metrics.h"
#include "accel/models/attention.h"
#include "accel/plan/accelerator.h"
#include "accel/train/device_runtime.h"
#include "accel/util/torch_compat.h"
#include "accel/util/errors.h"

namespace accel::train {

namespace {

// The devices this process sees, by accelerator kind: each device runtime
// this build has but the host's, asked (which starts its driver).
void add_device_counts(plan::MachineFacts& f) {
  for (const auto* rt : device_runtimes()) {
    if (rt->type() != c10::DeviceType::CPU) f.devices[rt->kind()] = rt->device_count();
  }
}

}  // namespace

plan::MachineFacts this_machine_facts(const std::string& accelerator) {
  plan::MachineFacts f;
  f.cores = std::max(1, int(metrics::available_cores()));
  f.cpu = metrics::cpu_features();
  // Named, the host needs no device facts (asking would start a driver).
  const auto* named = plan::find_accelerator(accelerator);
  if (named == nullptr || !named->host) add_device_counts(f);
  return f;
}

torch::Device resolve_device(const std::string& accelerator, int local_rank) {
  if (const auto* named = plan::find_accelerator(accelerator); named != nullptr && named->host) {
    return torch::Device(torch::kCPU);
  }
  plan::MachineFacts facts;
  add_device_counts(facts);
  const auto& row = plan::resolve_accelerator(accelerator, facts);  // the one rule for "auto"
  if (row.host) return torch::Device(torch::kCPU);
  const auto* rt = find_device_runtime(row.kind);
  if (rt == nullptr) {
    throw ConfigError("runtime.accelerator: \"" + row.kind + "\" has no device code in this build " +
                      "(LibTorch " + compat::torch_version() + "); use \"cpu\" or \"auto\"");
  }
  const int n = facts.devices_of(row.kind);
  if (n == 0) {
    throw ConfigError("runtime.accelerator: \"" + row.kind + "\" but this process sees no " + row.kind +
                      " device (none visible, or its driver failed); use \"cpu\" or \"auto\"");
  }
  const auto device = [&](int index) { return torch::Device(rt->type(), c10::DeviceIndex(index)); };
  if (accelerator == "auto") return device(local_rank % n);
  if (local_rank >= n) {
    throw ConfigError("runtime.devices: local rank " + std::to_string(local_rank) + " needs " +
                      row.kind + ":" + std::to_string(local_rank) + " but only " + std::to_string(n) +
                      " " + row.kind + " device(s) are visible");
  }
  return device(local_rank);
}

plan::RunPlan plan_here(const config::RunConfig& cfg) {
  return plan::plan_run(cfg, this_machine_facts(cfg.runtime.accelerator));
}

int resolve_devices(const config::RuntimeConfig& rt) {
  if (rt.devices > 0) return rt.devices;
  return plan::plan_runtime(rt, this_machine_facts(rt.accelerator)).dims.ranks_per_node;
}

std::string resolve_backend(const plan::RunPlan& plan, const std::string& requested) {
  std::string b = plan.backend;
  if (requested == "auto" && !dist::backend_available(b)) b = "gloo";
  if (!dist::backend_available(b)) {
    throw ConfigError("runtime.backend: \"" + b + "\" is not in this build (LibTorch " +
                      "without the NCCL process group); use \"gloo\" or \"auto\"");
  }
  if (b == "nccl" && plan.accelerator->host) {
    throw ConfigError("runtime.backend: \"nccl\" needs runtime.accelerator \"cuda\"");
  }
  return b;
}

// ---------------------------------------------------------------------------

torch::Tensor FabricModule::forward(const data::Inputs& inputs) {
  const auto& policy = fabric_->precision();
  data::Inputs cast;
  for (const auto& [name, t] : inputs) {
    cast.emplace(name, precision::cast_input(policy, fabric_->to_device(t)));
  }
  torch::Tensor out;
  {
    const auto autocast = fabric_->autocast();
    out = forward_(cast);
  }
  return precision::cast_output(policy, out);
}

bool FabricOptimizer::step() {
  auto& scaler = fabric_->scaler();
  bool stepped = true;
  if (!scaler.enabled()) {
    inner_->step();
  } else {
    stepped = scaler.step(*inner_);
    scaler.update();
  }
  fabric_->strategy().after_optimizer_step();
  return stepped;
}

std::vector<torch::Tensor> FabricOptimizer::params() const {
  std::vector<torch::Tensor> out;
  for (const auto& g : inner_->param_groups()) {
    for (const auto& p : g.params()) out.push_back(p);
  }
  return out;
}

// ---------------------------------------------------------------------------

Fabric::Fabric(config::RuntimeConfig runtime, std::ostream* log)
    : Fabric(plan::plan_runtime(runtime, this_machine_facts(runtime.accelerator)), runtime, log) {}

Fabric::Fabric(plan::RunPlan plan, config::RuntimeConfig runtime, std::ostream* log)
    : plan_(std::move(plan)),
      runtime_(std::move(runtime)),
      log_(log),
      policy_(precision::make_policy(runtime_.precision)),
      scaler_(policy_.use_grad_scaler) {
  // The device type is known before launch (the index comes with the rank).
  precision::check_supported(policy_, resolve_device(runtime_.accelerator).type());
}

Fabric::~Fabric() = default;

const dist::DistContext& Fabric::context() const { return ctx_; }

dist::Strategy& Fabric::strategy() {
  if (!strategy_) throw RunError("Fabric: call launch() first");
  return *strategy_;
}

void Fabric::launch(const std::string& config_hash) {
  const auto env = dist::launch_env_from_environment();
  const int want = plan_.world();
  if (env.present()) {
    if (env.world_size != want) {
      throw ConfigError("runtime.devices x runtime.num_nodes is " + std::to_string(want) +
                        " but the launcher (" + env.source + ") started WORLD_SIZE=" +
                        std::to_string(env.world_size) + " ranks");
    }
    ctx_.rank = env.rank;
    ctx_.local_rank = env.local_rank;
    ctx_.world_size = env.world_size;
    ctx_.local_world_size = env.local_world_size;
    ctx_.node_rank = env.node_rank;
    ctx_.num_nodes = env.num_nodes;
  } else if (want > 1) {
    throw ConfigError("runtime.devices x runtime.num_nodes asks for " + std::to_string(want) +
                      " ranks but this process was started as one: run it through "
                      "`accel-bench run` (it starts the local ranks) or torchrun/srun");
  }
  ctx_.device = resolve_device(runtime_.accelerator, ctx_.local_rank);
  // The plan's threads, unless a launcher laid out other local ranks than it planned.
  threads_ = ctx_.local_world_size == plan_.dims.ranks_per_node || runtime_.threads > 0
                 ? plan_.threads
                 : metrics::default_threads(ctx_.local_world_size);
  at::set_num_threads(threads_);
  at::globalContext().setFloat32MatmulPrecision(runtime_.matmul_precision);
  models::set_attention_impl(runtime_.attention == "explicit" ? models::AttentionImpl::Explicit
                                                              : models::AttentionImpl::Auto);
  if (ctx_.world_size > 1) {
    dist::CommOptions o;
    o.backend = resolve_backend(plan_, runtime_.backend);
    o.master_addr = !runtime_.master_addr.empty() ? runtime_.master_addr : env.master_addr;
    o.master_port = runtime_.master_port > 0 ? runtime_.master_port : env.master_port;
    o.rank = ctx_.rank;
    o.world_size = ctx_.world_size;
    o.timeout = std::chrono::seconds(runtime_.timeout_s);
    // One node under our launcher: its private FileStore folder, no socket.
    if (!env.store_dir.empty() && ctx_.num_nodes == 1) o.store_dir = env.store_dir;
    o.agent_store = env.agent_store;
    o.agent_attempt = env.agent_attempt;
    o.store_token = env.store_token;
    o.num_nodes = ctx_.num_nodes;
    o.device = ctx_.device;
    // runtime.comm_wait: spin while the ranks own their cores (every local
    // rank's threads fit them), as MPI libraries do when not oversubscribed.
    const bool fits = int64_t(threads_) * ctx_.local_world_size <= metrics::available_cores();
    const bool spin = runtime_.comm_wait == "spin" || (runtime_.comm_wait == "auto" && fits);
    o.spin = spin ? std::chrono::milliseconds(20) : std::chrono::microseconds(0);
    ctx_.comm = dist::connect(o);
    const auto hashes = ctx_.comm->all_gather_strings(config_hash);
    for (int r = 1; r < ctx_.world_size; ++r) {
      if (hashes[size_t(r)] != hashes[0]) {
        throw ConfigError("rank " + std::to_string(r) +
                          " runs another resolved config than rank 0 (hash " + hashes[size_t(r)] +
                          " vs " + hashes[0] + "): every rank must get the same config and --set");
      }
    }
    scaler_.reduce_found_inf = [this](torch::Tensor& flag) {
      strategy_->all_reduce(flag, dist::ReduceOp::Max);
    };
  }
  dist::StrategyOptions so;
  so.name = plan_.strategy->name;
  so.knobs = plan_.knobs;
  strategy_ = dist::make_strategy(so, ctx_);
}

void Fabric::seed_everything(uint64_t seed) { torch::manual_seed(seed); }

Fabric::Setup Fabric::setup_module(std::shared_ptr<torch::nn::Module> module,
                                   FabricModule::Forward forward,
                                   const dist::OptimizerFactory& make_optimizer) {
  module->to(device());
  precision::cast_module(policy_, *module);
  auto optimizer = strategy().setup(module, make_optimizer);
  return Setup{FabricModule(*this, std::move(module), std::move(forward)),
               FabricOptimizer(*this, std::move(optimizer))};
}

std::unique_ptr<data::Loader> Fabric::setup_dataloader(std::shared_ptr<const data::ExampleSet> set,
                                                       data::LoaderOptions options) {
  options.rank = global_rank();
  options.world_size = world_size();
  options.pin_memory = plan_.accelerator->pinned_memory;
  return std::make_unique<data::Loader>(std::move(set), options);
}

torch::Tensor Fabric::to_device(const torch::Tensor& t) const {
  return t.device() == device() ? t : t.to(device(), /*non_blocking=*/true);
}

data::Inputs Fabric::to_device(const data::Inputs& inputs) const {
  return data::inputs_to(inputs, device());
}

void Fabric::backward(const torch::Tensor& loss, const std::function<void()>& local_done) {
  auto& s = strategy();
  s.pre_backward();
  scaler_.scale(loss).backward();
  if (local_done) local_done();
  s.finish_gradient_sync();
}

Fabric::NoBackwardSync::NoBackwardSync(Fabric& f, bool enabled)
    : f_(&f), prev_(f.strategy().backward_sync()) {
  if (enabled) f_->strategy().set_backward_sync(false);
}
Fabric::NoBackwardSync::~NoBackwardSync() { f_->strategy().set_backward_sync(prev_); }

torch::Tensor Fabric::clip_gradients(FabricModule& /*model*/, FabricOptimizer& optimizer,
                                     double max_norm) {
  if (scaler_.enabled()) scaler_.unscale_(optimizer.inner());
  return strategy().clip_grad_norm(optimizer.params(), max_norm);
}

std::unique_ptr<precision::AutocastGuard> Fabric::autocast() const {
  return std::make_unique<precision::AutocastGuard>(policy_, device().type());
}

void Fabric::save(const std::filesystem::path& file, FabricModule& model,
                  FabricOptimizer& optimizer, const TrainProgress& progress,
                  const nlohmann::json& config, bool overwrite) {
  auto& s = strategy();
  auto full = s.gather_full_state(optimizer.inner());
  std::exception_ptr error;
  if (is_global_zero()) {
    try {
      save_checkpoint(file, model.module(), *full.optimizer, scaler_.state_dict(), progress,
                      config, overwrite);
    } catch (...) {
      error = std::current_exception();
    }
  }
  s.release_full_state(full);
  // Every rank learns whether rank 0's write worked, so none runs on alone.
  auto failed = torch::full({1}, error ? 1.0f : 0.0f);
  s.all_reduce(failed, dist::ReduceOp::Max);
  if (error) std::rethrow_exception(error);
  if (failed.item<float>() > 0) throw RunError("rank 0 failed to write checkpoint " + file.string());
}

Checkpoint Fabric::load(const std::filesystem::path& file, FabricModule& model,
                        FabricOptimizer& optimizer) {
  auto ckpt = read_checkpoint(file);
  auto& s = strategy();
  auto full = s.gather_full_state(optimizer.inner());
  restore_for_resume(ckpt, model.module(), *full.optimizer);
  s.scatter_full_state(full, optimizer.inner());
  s.release_full_state(full);
  if (scaler_.enabled() && !ckpt.grad_scaler.empty()) scaler_.load_state_dict(ckpt.grad_scaler);
  return ckpt;
}

torch::Tensor Fabric::all_reduce(torch::Tensor t, dist::ReduceOp op) {
  strategy().all_reduce(t, op);
  return t;
}

void Fabric::barrier() { strategy().barrier(); }

void Fabric::print(const std::string& line) const {
  if (log_ && is_global_zero()) *log_ << line << std::endl;
}

}  // namespace accel::train
