// Putting named tensors into a model: from a checkpoint of another run or
// from pretrained files of the ecosystem (safetensors under the family's
// names, accel/models/pretrained.h), with strict key checking and head
// replacement. Works on any family's Model.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace accel::models {

class Model;

using NamedTensors = std::map<std::string, torch::Tensor>;

struct LoadReport {
  std::vector<std::string> missing;     // model parameters/buffers not in the source
  std::vector<std::string> unexpected;  // source tensors the model has no place for
  std::vector<std::string> dropped;     // source tensors the family knows to leave out
  bool head_replaced = false;           // source head had another class count
  bool head_new = false;                // source had no head: the model's fresh one stays
  int source_classes = 0;
  int model_classes = 0;                // the model's class count (its head)
  int64_t loaded = 0;                   // tensors copied
  std::string source;                   // source_name given to apply_named_tensors
  std::string summary() const;          // one line for the log
};

// Copies `tensors` (the model's own names) into `model`. If the head's class
// count differs, the model's head is kept freshly initialised (replaced) and
// that is reported; a source with none of the head's tensors leaves the
// model's fresh head (head_new). Any other shape mismatch throws ConfigError
// naming the tensor. strict: missing or unexpected keys throw ConfigError
// listing them; otherwise they are only reported.
LoadReport apply_named_tensors(Model& model, const NamedTensors& tensors, bool strict,
                               const std::string& source_name);

}  // namespace accel::models
