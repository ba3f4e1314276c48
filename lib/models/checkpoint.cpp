// accel/models/checkpoint.h: recompute a stretch of the model in the backward.
#include "accel/models/checkpoint.h"

#include <mutex>

#include <ATen/core/ivalue.h>

#include "accel/precision/precision.h"
#include "accel/util/torch_compat.h"

namespace accel::models {
namespace checkpoint_detail {

// What the backward needs to run the stretch again as the forward ran it.
struct Recompute : torch::CustomClassHolder {
  Stretch fn;
  c10::Device device = c10::Device(c10::DeviceType::CPU);
  torch::Tensor rng_state;  // the device's default generator before the forward
  bool autocast = false;
  c10::ScalarType autocast_dtype = c10::ScalarType::BFloat16;
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
      // The forward's random draws again (dropout's masks), then the
      // generator as it was, so the rest of the run draws what it would have.
      const auto now = rng_state(r->device);
      set_rng_state(r->device, r->rng_state);
      try {
        torch::AutoGradMode grad(true);
        precision::AutocastGuard autocast(r->device.type(), r->autocast_dtype, r->autocast);
        out = r->fn(x);
      } catch (...) {
        set_rng_state(r->device, now);
        throw;
      }
      set_rng_state(r->device, now);
    }
    // Reentrant: the stretch's parameters receive their gradients here (their
    // hooks fire as in any backward), x's comes back to the outer graph.
    torch::autograd::backward({out}, {grads[0]});
    return {x.grad(), torch::Tensor()};
  }
};

}  // namespace checkpoint_detail

torch::Tensor checkpoint(const Stretch& fn, const torch::Tensor& x) {
  if (!torch::GradMode::is_enabled() || !x.requires_grad()) return fn(x);
  auto r = c10::make_intrusive<checkpoint_detail::Recompute>();
  r->fn = fn;
  r->device = x.device();
  r->rng_state = checkpoint_detail::rng_state(x.device());
  const auto type = x.device().type();
  if (type == c10::DeviceType::CPU || type == c10::DeviceType::CUDA) {
    r->autocast = compat::autocast_enabled(type);
    if (r->autocast) r->autocast_dtype = compat::autocast_dtype(type);
  }
  return checkpoint_detail::CheckpointFn::apply(x, std::move(r));
}

}  // namespace accel::models
