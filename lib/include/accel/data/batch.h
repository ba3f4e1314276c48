// What the loader hands the training loop: a model's inputs by name, the
// labels, and which rows are real samples of this rank.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <torch/torch.h>

namespace accel::data {

// A model's inputs by name:
//   images: "pixels"          float [B, C, H, W]
//   text:   "input_ids"       int64 [B, S]
//           "attention_mask"  int64 [B, S], 1 for a real token, 0 for padding
using Inputs = std::map<std::string, torch::Tensor>;

// The input called `name`; std::invalid_argument naming it and the inputs
// there are (a model given the wrong kind of data).
const torch::Tensor& input(const Inputs& inputs, const std::string& name);

// Every input moved to `device` (non-blocking from pinned memory).
Inputs inputs_to(const Inputs& inputs, const torch::Device& device);

// The batch size (dim 0 of the first input); 0 for no inputs.
int64_t batch_rows(const Inputs& inputs);

// The label that has no target: a token stream's next token past a row's
// real tokens, which every loss and metric skips (PyTorch's cross_entropy
// ignore_index default, so a model's labels mean what a Hugging Face
// model's `labels=` mean).
inline constexpr int64_t kNoTarget = -100;

struct Batch {
  Inputs inputs;
  torch::Tensor y;  // int64 [B]; a token stream's next tokens [B, S] (set by its collator), kNoTarget where none
  // The leading rows that are real samples of this rank; the rest pad the
  // rank's share to the common length (DistributedSampler's wrap-around), so
  // metrics count every sample once over all ranks.
  int64_t valid = 0;
  // Text: the real (not padding) tokens of all B rows; 0 for images.
  int64_t tokens = 0;
};

}  // namespace accel::data
