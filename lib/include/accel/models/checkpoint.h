// Activation checkpointing (recomputation): a stretch of a model, typically
// one transformer block, run in the forward without keeping its activations
// for the backward; the backward runs it again from its saved input, with
// the random state and autocast state the forward had, and differentiates
// that. The activations of a block then cost its input alone until its
// backward, for one more forward of the block (torch.utils.checkpoint's
// reentrant form; Chen et al. 2016, "Training Deep Nets with Sublinear
// Memory Cost").
#pragma once

#include <functional>

#include <torch/torch.h>

namespace accel::models {

using Stretch = std::function<torch::Tensor(const torch::Tensor&)>;

// fn(x), recomputed in the backward. Where grad mode is off or x needs no
// gradient, simply fn(x). fn must be a function of x and of parameters that
// keep their values until the backward (a training step's), and must return
// a new tensor. Where DRAWS, fn may draw random numbers from x's device's
// default generator (dropout): its state is kept (a few KB) and the backward
// makes the same draws again; where not (no dropout), fn must draw none.
torch::Tensor checkpoint(const Stretch& fn, const torch::Tensor& x, bool draws = true);

}  // namespace accel::models
