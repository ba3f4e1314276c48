// What the training core knows of a model: named inputs in, class logits out,
// a classification head it can replace, analytic FLOPs, and (for FSDP) its
// wrap units. Every family's module implements it (ViT, BERT, DistilBERT);
// the core never names a family.
#pragma once

#include <string>
#include <vector>

#include "accel/util/json.h"
#include <torch/torch.h>

#include "accel/data/batch.h"
#include "accel/dist/strategy.h"  // Wrappable

namespace accel::models {

class Model : public torch::nn::Module, public dist::Wrappable {
 public:
  // model.arch of the family that built it ("vit", "bert", "distilbert").
  virtual std::string arch() const = 0;
  // logits [B, num_classes] from a batch's inputs (accel/data/batch.h names).
  virtual torch::Tensor forward(const data::Inputs& inputs) = 0;
  virtual int num_classes() const = 0;
  // A new, freshly initialised classification head with num_classes outputs
  // (on the old head's device and dtype).
  virtual void replace_head(int num_classes) = 0;
  // The head's tensors by module name: a source whose head has another class
  // count, or that has none, leaves the model's own (fresh) head in place.
  virtual std::vector<std::string> head_tensors() const = 0;
  // Forward FLOPs of a batch of these inputs, 2 per multiply-add (matmuls and
  // projections; norms, softmax and activations ignored). A training step
  // costs about 3x this.
  virtual double forward_flops(const data::Inputs& inputs) const = 0;
  // Why a source tensor of another shape cannot load, where there is more to
  // say than the shapes (ViT's position embeddings); "" otherwise.
  virtual std::string shape_hint(const std::string& /*name*/) const { return ""; }
  // Asks forward(inputs) to compute the task's loss itself where the inputs
  // carry "labels" (the next tokens, as a Hugging Face model's labels=),
  // `chunk_tokens` tokens at a time (<= 0: all at once): it then returns the
  // mean loss, a float32 scalar, and never holds the whole head's outputs
  // (train.loss_chunk_tokens). Whether the model can: a family that cannot
  // answers false, changes nothing, and the core computes the loss from the
  // logits.
  virtual bool make_own_loss(int64_t /*chunk_tokens*/) { return false; }
  // Asks forward to keep no activations of its transformer blocks for the
  // backward but each block's input, and to run each block again in the
  // backward (activation checkpointing, accel/models/checkpoint.h;
  // train.activation_checkpointing "full"). Whether the model can: a family
  // that cannot answers false and changes nothing.
  virtual bool recompute_blocks(bool /*on*/) { return false; }
};

int64_t count_parameters(const torch::nn::Module& module);

// What `accel-bench predict` needs of a model to lay out its strategies'
// communication without building it (result.json's model_layout):
// {"param_numels": [...] (trainable parameters in module order; DDP buckets
// them in reverse), "element_bytes", "units": [{"name", "numel",
// "compute_numel"}] (the wrap units FSDP and ZeRO shard by, in forward order;
// compute_numel leaves out embedding tables, which are looked up, not
// multiplied, so a unit's share of the compute follows it)}.
nlohmann::json layout_json(Model& model);

}  // namespace accel::models
