// accel/models/checkpoint.h: recompute a stretch of the model in the backward.
#include "accel/models/checkpoint.h"

#include <mutex>
#include <optional>

#include <ATen/core/ivalue.h>

#include "accel/precision/precision.h"
#include "accel/util/torch_compat.h"

namespace accel::models {
namespace checkpoint_detail {

// What the backward needs to run the stretch again as the forward ran it.
struct Recompute : torch::CustomClassHolder {
  Stretch fn;
  c10::Device device = c10::Device(c10::DeviceType::CPU);
  torch::Tensor rng_state;  // the device's default generator before the forward; undefined: no draws
  std::optional<c10::ScalarType> autocast;  // the forward's autocast dtype, where it was on
};

at::Generator generator_of(const c10::Device& device) { return at::globalContext().defaultGenerator(device); }

torch::Tensor rng_state(const c10::Device& device) {
  auto gen = generator_of(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_rng_state(const c10::Device& device, const torch::Tensor& state) {
  auto gen = generator_of(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

// The device's generator set to STATE for a scope, then put back as it was
// (however the scope ends), so the rest of the run draws what it would have.
// An undefined STATE leaves the generator alone.
class GeneratorStateGuard {
 public:
  GeneratorStateGuard(const c10::Device& device, const torch::Tensor& state) : device_(device) {
    if (!state.defined()) return;
    saved_ = rng_state(device);
    set_rng_state(device, state);
  }
  ~GeneratorStateGuard() {
    if (!saved_.defined()) return;
    try {
      set_rng_state(device_, saved_);
    } catch (...) {
      // A destructor may not throw (it may run while an exception unwinds);
      // a state the generator took once it takes again.
    }
  }
  GeneratorStateGuard(const GeneratorStateGuard&) = delete;
  GeneratorStateGuard& operator=(const GeneratorStateGuard&) = delete;

 private:
  c10::Device device_;
  torch::Tensor saved_;
};

class CheckpointFn : public torch::autograd::Function<CheckpointFn> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               c10::intrusive_ptr<Recompute> r) {
    ctx->save_for_backward({x});
    auto out = r->fn(x);  // grad mode is off in a custom function's forward: nothing kept
    ctx->saved_data["recompute"] = c10::IValue::make_capsule(std::move(r));
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto r = c10::static_intrusive_pointer_cast<Recompute>(ctx->saved_data["recompute"].toCapsule());
    const auto x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    torch::Tensor out;
    {
      // The forward's random draws again (dropout's masks) and its autocast.
      GeneratorStateGuard draws(r->device, r->rng_state);
      torch::AutoGradMode grad(true);
      precision::AutocastGuard autocast(r->device.type(), r->autocast.value_or(c10::ScalarType::BFloat16),
                                        r->autocast.has_value());
      out = r->fn(x);
    }
    // Reentrant: the stretch's parameters receive their gradients here (their
    // hooks fire as in any backward), x's comes back to the outer graph.
    torch::autograd::backward({out}, {grads[0]});
    return {x.grad(), torch::Tensor()};
  }
};

}  // namespace checkpoint_detail

torch::Tensor checkpoint(const Stretch& fn, const torch::Tensor& x, bool draws) {
  if (!torch::GradMode::is_enabled() || !x.requires_grad()) return fn(x);
  auto r = c10::make_intrusive<checkpoint_detail::Recompute>();
  r->fn = fn;
  r->device = x.device();
  if (draws) r->rng_state = checkpoint_detail::rng_state(x.device());
  r->autocast = compat::active_autocast_dtype(x.device().type());
  return checkpoint_detail::CheckpointFn::apply(x, std::move(r));
}

}  // namespace accel::models
