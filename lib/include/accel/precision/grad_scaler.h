// Dynamic loss scaling for 16-mixed, as PyTorch's torch.amp.GradScaler:
//
//   scaler.scale(loss).backward();
//   scaler.unscale_(optimizer);          // optional: before gradient clipping
//   clip_grad_norm_(...);
//   bool stepped = scaler.step(optimizer);  // skipped if any grad is inf/NaN
//   scaler.update();                        // adjust the scale for the next step
//
// update(): a step with inf/NaN gradients multiplies the scale by
// backoff_factor and resets the growth tracker; a clean step increments the
// tracker, and at growth_interval clean steps in a row the scale is
// multiplied by growth_factor (unless that overflows fp32) and the tracker
// resets. The scale is a host double (always a power of two with the default
// factors, so unscaling is exact); the inf check and unscaling run on the
// gradients' device (PyTorch's fused kernel where it exists, else isfinite
// reductions). Device-neutral and identical on every LibTorch version.
//
// Distributed: every rank must make the same skip decision. A strategy sets
// reduce_found_inf to an all-reduce MAX of the flag (a 1-element float tensor
// on the gradients' device, 1 = some gradient was not finite); it is called
// once per unscale_, on every rank, whether or not the local flag is set.
//
// Disabled (every policy but 16-mixed): scale() returns the loss, unscale_()
// and update() do nothing, step() just steps, state_dict() is {}.
#pragma once

#include <functional>

#include "accel/util/json.h"
#include <torch/torch.h>

namespace accel::precision {

class GradScaler {
 public:
  // Throws accel::ConfigError for init_scale <= 0, growth_factor <= 1,
  // backoff_factor outside (0, 1) or growth_interval < 1.
  explicit GradScaler(bool enabled, double init_scale = 65536.0, double growth_factor = 2.0,
                      double backoff_factor = 0.5, int64_t growth_interval = 2000);

  // loss * scale (the loss itself when disabled).
  torch::Tensor scale(const torch::Tensor& loss) const;

  // Multiplies every gradient of OPTIMIZER by 1/scale in place and records
  // whether any was inf/NaN (after reduce_found_inf). At most once per step:
  // a second call before update() throws accel::RunError. fp16 gradients
  // (fp16 parameters) throw accel::RunError, as PyTorch refuses them.
  void unscale_(torch::optim::Optimizer& optimizer);

  // Unscales if unscale_ was not called this step, then runs optimizer.step()
  // unless a gradient was inf/NaN. Returns whether it stepped.
  bool step(torch::optim::Optimizer& optimizer);

  // Adjusts the scale from this step's inf check (see above). Throws
  // accel::RunError if no check was recorded since the last update().
  void update();

  double get_scale() const { return enabled_ ? scale_ : 1.0; }
  bool enabled() const { return enabled_; }
  int64_t growth_tracker() const { return growth_tracker_; }
  // The inf/NaN decision of the current step (false before unscale_).
  bool found_inf() const { return found_inf_; }

  // {scale, growth_factor, backoff_factor, growth_interval, growth_tracker};
  // {} when disabled. Part of a checkpoint.
  nlohmann::json state_dict() const;
  // Ignored when disabled (as PyTorch). Throws accel::ConfigError for an
  // empty state (saved by a disabled scaler), a missing field, a wrong type or
  // an out-of-range value.
  void load_state_dict(const nlohmann::json& state);

  // Set by a distributed strategy: all-reduce MAX of the found-inf flag.
  std::function<void(torch::Tensor&)> reduce_found_inf;

 private:
  bool enabled_;
  double scale_;
  double growth_factor_;
  double backoff_factor_;
  int64_t growth_interval_;
  int64_t growth_tracker_ = 0;
  // Per-step state, reset by update().
  bool unscaled_ = false;
  bool stepped_ = false;
  bool found_inf_ = false;
};

}  // namespace accel::precision
