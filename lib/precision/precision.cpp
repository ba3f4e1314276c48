// Precision policies, AutocastGuard and GradScaler (one translation unit:
// torch headers are heavy). Version-specific calls go through torch_compat.h.
#include "accel/precision/precision.h"

#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "accel/precision/catalog.h"
#include "accel/precision/grad_scaler.h"
#include "accel/util/errors.h"
#include "accel/util/torch_compat.h"

namespace accel::precision {

c10::ScalarType scalar_type(const std::string& dtype) {
  if (dtype == "fp32") return c10::ScalarType::Float;
  if (dtype == "bf16") return c10::ScalarType::BFloat16;
  if (dtype == "fp16") return c10::ScalarType::Half;
  if (dtype == "fp64") return c10::ScalarType::Double;
  throw RunError("precision: no dtype \"" + dtype + "\" (fp32, bf16, fp16, fp64)");
}

namespace {

std::string unsupported(const Policy& p, const std::string& why) {
  return "runtime.precision: \"" + p.name + "\" " + why;
}

}  // namespace

std::vector<std::string> policy_names() { return precision_names(); }

Policy make_policy(const std::string& lightning_name) {
  // One table (accel/precision/catalog.h): a mixed policy autocasts to its
  // compute dtype; a *-true one computes in its parameters' dtype.
  if (const auto* row = find_precision(lightning_name)) {
    return Policy{row->name, row->autocast, scalar_type(row->compute), scalar_type(row->params), row->scaler};
  }
  std::string known;
  for (const auto& n : policy_names()) known += (known.empty() ? "" : ", ") + n;
  throw ConfigError("runtime.precision: unknown precision \"" + lightning_name +
                    "\"; known: " + known + " (aliases: 16, bf16, 32, 64)");
}

void check_supported(const Policy& p, c10::DeviceType device) {
  // CUDA runs every policy (bf16 on pre-Ampere GPUs is not checked).
  if (device == c10::DeviceType::CUDA) return;
  if (device != c10::DeviceType::CPU) {
    throw ConfigError(unsupported(p, "is not supported on device type " +
                                         c10::DeviceTypeName(device, /*lower_case=*/true)));
  }
  if (p.name == "16-mixed") {
    throw ConfigError(unsupported(
        p, "(fp16 autocast with a GradScaler) needs cuda; on cpu use \"bf16-mixed\" (Lightning "
           "substitutes it for 16-mixed on cpu; LibTorch 1.13's cpu autocast has no fp16)"));
  }
  const std::string lt = "LibTorch " + compat::torch_version();
  if (p.param_dtype == c10::ScalarType::Half && !compat::cpu_half_kernels()) {
    throw ConfigError(unsupported(
        p, "needs fp16 kernels on cpu, which " + lt +
               " lacks (matmul, conv, layer_norm: \"not implemented for 'Half'\"); use "
               "\"bf16-true\" or \"bf16-mixed\""));
  }
}

void cast_module(const Policy& p, torch::nn::Module& module) {
  if (p.param_dtype != c10::ScalarType::Float) module.to(p.param_dtype);
}

torch::Tensor cast_input(const Policy& p, const torch::Tensor& x) {
  if (!x.defined() || !x.is_floating_point() || x.scalar_type() == p.param_dtype) return x;
  return x.to(p.param_dtype);
}

torch::Tensor cast_output(const Policy&, const torch::Tensor& y) {
  if (!y.defined()) return y;
  const auto t = y.scalar_type();
  if (t == c10::ScalarType::Half || t == c10::ScalarType::BFloat16) return y.to(torch::kFloat);
  return y;
}

// ---------------------------------------------------------------------------

AutocastGuard::AutocastGuard(const Policy& policy, c10::DeviceType device) {
  if (policy.autocast) enter(device, policy.autocast_dtype, true);
}

AutocastGuard::AutocastGuard(c10::DeviceType device, c10::ScalarType dtype, bool enabled) {
  enter(device, dtype, enabled);
}

void AutocastGuard::enter(c10::DeviceType device, c10::ScalarType dtype, bool enabled) {
  device_ = device;
  prev_enabled_ = compat::autocast_enabled(device);
  prev_dtype_ = compat::autocast_dtype(device);
  compat::set_autocast_dtype(device, dtype);  // may throw (1.13: cpu takes bf16 only)
  compat::set_autocast_enabled(device, enabled);
  compat::autocast_increment_nesting();
  active_ = true;
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  if (compat::autocast_decrement_nesting() == 0) compat::autocast_clear_cache();
  compat::set_autocast_enabled(device_, prev_enabled_);
  compat::set_autocast_dtype(device_, prev_dtype_);
}

// ---------------------------------------------------------------------------

GradScaler::GradScaler(bool enabled, double init_scale, double growth_factor,
                       double backoff_factor, int64_t growth_interval)
    : enabled_(enabled),
      scale_(init_scale),
      growth_factor_(growth_factor),
      backoff_factor_(backoff_factor),
      growth_interval_(growth_interval) {
  if (!(std::isfinite(init_scale) && init_scale > 0.0))
    throw ConfigError("GradScaler: init_scale must be finite and > 0");
  if (!(std::isfinite(growth_factor) && growth_factor > 1.0))
    throw ConfigError("GradScaler: growth_factor must be > 1");
  if (!(backoff_factor > 0.0 && backoff_factor < 1.0))
    throw ConfigError("GradScaler: backoff_factor must be in (0, 1)");
  if (growth_interval < 1) throw ConfigError("GradScaler: growth_interval must be >= 1");
}

torch::Tensor GradScaler::scale(const torch::Tensor& loss) const {
  if (!enabled_) return loss;
  return loss * scale_;
}

void GradScaler::unscale_(torch::optim::Optimizer& optimizer) {
  if (!enabled_) return;
  if (unscaled_) throw RunError("GradScaler: unscale_() was already called this step");
  if (stepped_) throw RunError("GradScaler: unscale_() called after step(); call update()");

  // Group dense gradients by (device, dtype), as PyTorch's _unscale_grads_.
  using Key = std::tuple<c10::DeviceType, c10::DeviceIndex, c10::ScalarType>;
  std::map<Key, std::vector<torch::Tensor>> groups;
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) {
      const auto& g = p.grad();
      if (!g.defined()) continue;
      if (g.is_sparse()) throw RunError("GradScaler: sparse gradients are not supported");
      if (g.scalar_type() == c10::ScalarType::Half)
        throw RunError("GradScaler: attempting to unscale fp16 gradients (keep parameters "
                       "in fp32 under 16-mixed)");
      groups[Key{g.device().type(), g.device().index(), g.scalar_type()}].push_back(g);
    }
  }

  const double inv_scale = 1.0 / scale_;
  const auto first_device = groups.empty() ? torch::Device(torch::kCPU)
                                           : torch::Device(std::get<0>(groups.begin()->first),
                                                           std::get<1>(groups.begin()->first));
  const auto fopts = torch::TensorOptions().dtype(torch::kFloat).device(first_device);
  auto found = torch::zeros({1}, fopts);
  for (auto& [key, grads] : groups) {
    const torch::Device dev(std::get<0>(key), std::get<1>(key));
    const auto t = std::get<2>(key);
    const bool fused = compat::has_amp_unscale_kernel(dev.type()) && t == torch::kFloat;
    if (fused) {
      auto f = torch::zeros({1}, fopts.device(dev));
      at::_amp_foreach_non_finite_check_and_unscale_(
          grads, f, torch::full({1}, inv_scale, fopts.device(dev)));
      found = torch::maximum(found, f.to(first_device));
    } else {
      std::vector<torch::Tensor> all_finite;
      all_finite.reserve(grads.size());
      for (auto& g : grads) {
        all_finite.push_back(torch::isfinite(g).all());
        g.mul_(inv_scale);
      }
      auto bad = torch::logical_not(torch::stack(all_finite).all()).to(torch::kFloat);
      found = torch::maximum(found, bad.reshape({1}).to(first_device));
    }
  }
  if (reduce_found_inf) reduce_found_inf(found);
  found_inf_ = found.item<float>() > 0.0f;
  unscaled_ = true;
}

bool GradScaler::step(torch::optim::Optimizer& optimizer) {
  if (!enabled_) {
    optimizer.step();
    return true;
  }
  if (stepped_) throw RunError("GradScaler: step() was already called this step; call update()");
  if (!unscaled_) unscale_(optimizer);
  stepped_ = true;
  if (found_inf_) return false;
  optimizer.step();
  return true;
}

void GradScaler::update() {
  if (!enabled_) return;
  if (!unscaled_) throw RunError("GradScaler: update() with no inf check recorded; call step()");
  if (found_inf_) {
    scale_ *= backoff_factor_;
    growth_tracker_ = 0;
  } else if (++growth_tracker_ == growth_interval_) {
    // As _amp_update_scale_: the scale is fp32 there; never grow it to inf.
    const double grown = scale_ * growth_factor_;
    if (grown <= std::numeric_limits<float>::max()) scale_ = grown;
    growth_tracker_ = 0;
  }
  unscaled_ = stepped_ = found_inf_ = false;
}

nlohmann::json GradScaler::state_dict() const {
  if (!enabled_) return nlohmann::json::object();
  return {{"scale", scale_},
          {"growth_factor", growth_factor_},
          {"backoff_factor", backoff_factor_},
          {"growth_interval", growth_interval_},
          {"growth_tracker", growth_tracker_}};
}

void GradScaler::load_state_dict(const nlohmann::json& state) {
  if (!enabled_) return;
  const std::string where = "GradScaler state: ";
  if (!state.is_object() || state.empty())
    throw ConfigError(where + "empty or not an object (saved by a disabled GradScaler?)");
  auto number = [&](const char* key) {
    if (!state.contains(key) || !state[key].is_number())
      throw ConfigError(where + "\"" + key + "\" missing or not a number");
    return state[key].get<double>();
  };
  auto integer = [&](const char* key) {
    if (!state.contains(key) || !state[key].is_number_integer())
      throw ConfigError(where + "\"" + key + "\" missing or not an integer");
    return state[key].get<int64_t>();
  };
  const double scale = number("scale"), growth = number("growth_factor"),
               backoff = number("backoff_factor");
  const int64_t interval = integer("growth_interval"), tracker = integer("growth_tracker");
  if (!(std::isfinite(scale) && scale > 0.0)) throw ConfigError(where + "scale must be > 0");
  if (!(std::isfinite(growth) && growth > 1.0))
    throw ConfigError(where + "growth_factor must be > 1");
  if (!(backoff > 0.0 && backoff < 1.0))
    throw ConfigError(where + "backoff_factor must be in (0, 1)");
  if (interval < 1) throw ConfigError(where + "growth_interval must be >= 1");
  if (tracker < 0 || tracker >= interval)
    throw ConfigError(where + "growth_tracker must be in [0, growth_interval)");
  scale_ = scale;
  growth_factor_ = growth;
  backoff_factor_ = backoff;
  growth_interval_ = interval;
  growth_tracker_ = tracker;
}

}  // namespace accel::precision
