// The optimizers a run config names and the learning-rate schedule.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "accel/config/run_config.h"

namespace accel::train {

// capturable: an Adam/AdamW whose step a CUDA Graph can hold (train/device.h);
// ConfigError for other optimizers. Otherwise adam/adamw with
// optim.implementation "fused" (the default) is a torch::optim::Adam/AdamW
// whose step is kernels::adam_step (accel/kernels/adam.h) where the
// parameters are CPU float32, ATen's multi-tensor fused kernel where they are
// CUDA float32 (compat::fused_adam_step), torch's op-by-op step elsewhere.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(
    const std::vector<torch::Tensor>& params, const config::OptimConfig& optim,
    bool capturable = false);

// Whether `optimizer` is the fused Adam/AdamW (it fuses CPU or CUDA float32
// parameters).
bool fused_adam_applies(const torch::optim::Optimizer& optimizer);

// The update `optimizer`'s last step ran (result.json's
// "optimizer_implementation"): "accel-fused-cpu" (kernels::adam_step),
// "aten-fused-cuda" (ATen's multi-tensor kernel), "torch-per-param"
// (torch::optim's op-by-op step: optim.implementation "torch", sgd, or what
// the fused Adam cannot fuse), "capturable" (runtime.cuda_graphs' Adam); ""
// for a fused Adam that has not stepped yet.
std::string optimizer_implementation(const torch::optim::Optimizer& optimizer);

// The kernel optim.implementation "fused" runs for float32 Adam (AdamW when
// `decoupled`) parameters on `device` (result.json's env "adam_kernel"):
// "fused-cpu (<isa>)" (kernels::adam_step on the ISA it picked),
// "aten-fused-cuda (aten::_fused_adam_)" or "(aten::_fused_adamw_)" where the
// version has it, else "torch-per-param".
std::string fused_adam_kernel_name(c10::DeviceType device, bool decoupled = false);

// The learning rate of optimizer step `step` (0-based) of `total`:
// optim.lr for scheduler "none"; "cosine": linear warm-up over
// optim.warmup_steps from lr/warmup, then cosine decay to optim.min_lr.
double scheduled_lr(const config::OptimConfig& optim, int64_t step, int64_t total);
// Sets every param group's lr to scheduled_lr (nothing for "none").
void set_learning_rate(torch::optim::Optimizer& optimizer, const config::OptimConfig& optim,
                       int64_t step, int64_t total);

// Optimizer steps in the whole run (for the LR schedule).
int64_t total_optimizer_steps(const config::TrainConfig& train, int64_t batches_per_epoch);

}  // namespace accel::train
