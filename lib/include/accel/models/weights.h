// Putting named tensors into a model: from a checkpoint of another run or
// from pretrained files of the ecosystem (safetensors with torchvision, timm
// or Hugging Face ViT names), with strict key checking and head replacement.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "accel/models/vit.h"

namespace accel::models {

using NamedTensors = std::map<std::string, torch::Tensor>;

struct LoadReport {
  std::vector<std::string> missing;     // model parameters/buffers not in the source
  std::vector<std::string> unexpected;  // source tensors the model has no place for
  bool head_replaced = false;           // source head had another class count
  int source_classes = 0;
  int model_classes = 0;                // the model's class count (its head)
  int64_t loaded = 0;                   // tensors copied
  std::string source;                   // source_name given to apply_named_tensors
  std::string summary() const;          // one line for the log
};

// Copies `tensors` (torchvision names) into `model`. If heads.head's class count
// differs, the model's head is kept freshly initialised (replaced) and that is
// reported. Any other shape mismatch throws ConfigError naming the tensor.
// strict: missing or unexpected keys throw ConfigError listing them;
// otherwise they are only reported.
LoadReport apply_named_tensors(VisionTransformer& model, const NamedTensors& tensors,
                               bool strict, const std::string& source_name);

}  // namespace accel::models
