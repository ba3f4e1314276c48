// Numeric precision policies, named as Lightning's Trainer(precision=...):
//
//   name        weights / optimizer state   forward compute              scaler
//   32-true     fp32                        fp32                         -
//   bf16-mixed  fp32                        autocast to bf16 (cpu, cuda) -
//   16-mixed    fp32                        autocast to fp16 (cuda only) GradScaler
//   bf16-true   bf16                        bf16                         -
//   16-true     fp16                        fp16                         -
//   64-true     fp64                        fp64                         -
//
// *-mixed: the model keeps fp32 parameters, so gradients and the optimizer
// state (Adam moments) are fp32; autocast runs matmuls, convolutions and
// linear layers in the low dtype and keeps reductions (softmax/log_softmax,
// losses, norms) in fp32. Outputs of autocast ops are low precision.
// *-true: cast_module() converts parameters and buffers once, so gradients and
// optimizer state are in that dtype too; cast_input() casts the batch to it.
// Aliases (as Lightning): "16" = 16-mixed, "bf16" = bf16-mixed, "32" =
// 32-true, "64" = 64-true.
//
// Device support (check_supported throws accel::ConfigError before training):
//   - 16-mixed needs cuda. On cpu it is refused on every LibTorch: 1.13's CPU
//     autocast takes bf16 only, and Lightning itself does not run fp16 AMP on
//     cpu (it warns and substitutes bf16-mixed; we refuse instead).
//   - 16-true on cpu needs fp16 CPU kernels: absent in 1.13 (matmul, conv,
//     layer_norm, softmax, gelu "not implemented for 'Half'"), present in 2.6.
//   - everything else works on cpu and cuda. bf16 on a CUDA GPU older than
//     Ampere is not checked here.
//
// Pitfall (1.13, CPU autocast): torch::layer_norm on a bf16 autocast output
// with fp32 weights throws "expected scalar type BFloat16 but found Float"
// (2.6 accepts it). Models whose LayerNorms take fp32 residual sums (as the
// ViT here: x + attention(...) promotes to fp32) are unaffected.
#pragma once

#include <string>
#include <vector>

#include <torch/torch.h>

namespace accel::precision {

struct Policy {
  std::string name;                  // canonical Lightning name, e.g. "bf16-mixed"
  bool autocast = false;             // forward runs under AutocastGuard
  c10::ScalarType autocast_dtype = c10::ScalarType::Float;  // low dtype under autocast;
                                     // for *-true the compute dtype (= param_dtype)
  c10::ScalarType param_dtype = c10::ScalarType::Float;     // weights, grads, optimizer state
  bool use_grad_scaler = false;      // 16-mixed only
};

// Policy for a Lightning precision name or alias; ConfigError for others.
Policy make_policy(const std::string& lightning_name);

// The catalog's dtype names ("fp32", "bf16", "fp16", "fp64") as LibTorch's
// scalar types; RunError for any other name.
c10::ScalarType scalar_type(const std::string& dtype);

// The canonical names, in the table's order.
std::vector<std::string> policy_names();

// Throws accel::ConfigError ("runtime.precision: \"16-mixed\" ...") when the
// device type cannot run the policy with this LibTorch.
void check_supported(const Policy& policy, c10::DeviceType device);

// *-true: converts the module's parameters and buffers to param_dtype.
// Mixed and 32-true: leaves the module in fp32. Call before building the
// optimizer, so that its state is created in the parameters' dtype.
void cast_module(const Policy& policy, torch::nn::Module& module);

// Floating tensors to param_dtype under *-true (and fp32 for mixed/32-true);
// integer tensors (labels) unchanged.
torch::Tensor cast_input(const Policy& policy, const torch::Tensor& x);

// fp16/bf16 floating outputs to fp32 (for losses and metrics); fp32/fp64 and
// integer tensors unchanged.
torch::Tensor cast_output(const Policy& policy, const torch::Tensor& y);

// RAII autocast region, as torch.autocast(device_type, dtype): if
// policy.autocast, enables autocast for DEVICE with policy.autocast_dtype and
// increments the nesting level; the destructor restores the previous enabled
// state and dtype, decrements the nesting and clears the autocast cast-cache
// when the level reaches 0 (the cache holds low-precision copies of the
// weights, stale after an optimizer step). A no-op for policies without
// autocast. Wrap the forward and the loss, not backward or optimizer.step().
// Autocast state is per thread.
class AutocastGuard {
 public:
  AutocastGuard(const Policy& policy, c10::DeviceType device);
  AutocastGuard(c10::DeviceType device, c10::ScalarType dtype, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  void enter(c10::DeviceType device, c10::ScalarType dtype, bool enabled);

  bool active_ = false;
  c10::DeviceType device_ = c10::DeviceType::CPU;
  bool prev_enabled_ = false;
  c10::ScalarType prev_dtype_ = c10::ScalarType::BFloat16;
};

}  // namespace accel::precision
