// Training checkpoints: model tensors, optimizer state, GradScaler state,
// progress, RNG states and the resolved config in one file, written atomically.
//
// File layout (all integers little-endian):
//   0  char[8]  magic "ACCELCKP"
//   8  u32      format version (kCheckpointFormatVersion)
//   12 u32      reserved, 0
//   16 u64      payload length N
//   24 N bytes  payload: a torch::serialize archive (see checkpoint.cpp for keys)
//   24+N u32    CRC-32 (zlib) of the payload
// A reader checks magic, version, size and CRC before parsing the payload, so a
// truncated or damaged file is a ConfigError naming the file, never a fresh start.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <map>
#include <string>
#include <vector>

#include "accel/util/json.h"
#include <torch/torch.h>

#include "accel/models/weights.h"  // NamedTensors

namespace accel::train {

constexpr uint32_t kCheckpointFormatVersion = 1;

struct TrainProgress {
  int epoch = 0;               // epochs fully done
  int64_t step = 0;            // optimizer steps done
  int64_t batch_in_epoch = 0;  // batches of the current epoch done; 0 at an epoch boundary
  nlohmann::json extra;        // trainer-owned (running counters, epoch results, ...): opaque here
};
nlohmann::json progress_to_json(const TrainProgress& progress);
// Throws accel::ConfigError naming `source` when a field is missing or mistyped.
TrainProgress progress_from_json(const nlohmann::json& doc, const std::string& source);

// Writes FILE atomically (temp file in the same folder, fsync, rename, fsync of
// the folder); creates the parent folder. Captures the RNG states at the time of
// the call, so call it right after an optimizer step, before the next forward.
// Throws accel::ConfigError "FILE: checkpoint exists; pass --force/overwrite"
// when FILE exists and !overwrite (nothing is written then), accel::RunError on
// I/O or serialization failure (no temp file is left behind).
void save_checkpoint(const std::filesystem::path& file, torch::nn::Module& model,
                     torch::optim::Optimizer& optimizer,
                     const nlohmann::json& grad_scaler_state, const TrainProgress& progress,
                     const nlohmann::json& resolved_config, bool overwrite);

// A checkpoint read and verified by read_checkpoint. Model tensors are on the CPU.
struct Checkpoint {
  std::filesystem::path file;
  // {"format_version", "accel_version", "git_sha", "torch_version", "optimizer"
  //  (adam|adamw|sgd|rmsprop|adagrad|lbfgs|other), "model_tensors", "cuda_rng_states"}
  nlohmann::json meta;
  TrainProgress progress;
  nlohmann::json grad_scaler;  // as given to save_checkpoint
  nlohmann::json config;       // the resolved config of the run that wrote it

  // Parameters and buffers by their module names (torchvision names for the
  // ViT), CPU tensors shared with this object: copy, do not modify in place.
  models::NamedTensors model_tensors() const { return tensors_; }

  // Replaces the optimizer's state and param-group options (lr, betas, ...) by
  // the saved ones, on the device of the optimizer's parameters. Throws
  // ConfigError naming the file when the optimizer type or its parameter groups
  // (count, sizes) differ, or the state was written by an incompatible LibTorch.
  // Pair it with a strict copy of model_tensors() (see restore_for_resume).
  void restore_optimizer(torch::optim::Optimizer& optimizer) const;

  // Sets the default CPU generator's state and each saved device's default
  // generator state, by accelerator kind, where this build has its runtime
  // (devices beyond the ones this machine has are skipped).
  void restore_rng() const;

  // Internals, filled by read_checkpoint.
  models::NamedTensors tensors_;
  torch::Tensor cpu_rng_;
  std::map<std::string, std::vector<torch::Tensor>> device_rng_;  // by accelerator kind
  std::shared_ptr<const std::string> payload_;  // re-parsed per restore_optimizer
  bool hex_state_keys_ = false;                 // optimizer state saved by LibTorch 1.x
};

// Throws accel::ConfigError naming FILE when it is missing, not a checkpoint,
// of a newer format version, truncated ("truncated checkpoint: expected N
// bytes, found M"), damaged ("corrupt checkpoint (CRC mismatch)") or unparsable.
Checkpoint read_checkpoint(const std::filesystem::path& file);

// Resume: copies every model tensor strictly (same names, shapes and dtypes,
// else ConfigError naming the tensor and the model is left untouched), then
// restores the optimizer state and the RNG states. Progress, grad scaler state
// and config are for the caller.
void restore_for_resume(const Checkpoint& ckpt, torch::nn::Module& model,
                        torch::optim::Optimizer& optimizer);

// Writes the model tensors of CHECKPOINT (weights and buffers only, as
// trained, under the family's names: torchvision's for the ViT, transformers'
// for the text families) to OUT as safetensors, with the source run's
// resolved config and the checkpoint's progress in the metadata, so that a
// run can start from them with model.init {"safetensors": OUT}. A text
// family's export also writes transformers' config.json beside OUT, so the
// folder loads with from_pretrained. An existing OUT (or config.json) is a
// ConfigError unless overwrite. Returns the number of tensors.
int64_t export_weights(const std::filesystem::path& checkpoint, const std::filesystem::path& out,
                       bool overwrite, std::filesystem::path* config_written = nullptr);

}  // namespace accel::train
