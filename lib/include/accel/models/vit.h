// A Vision Transformer with torchvision's VisionTransformer structure and
// parameter names (conv_proj, class_token, encoder.pos_embedding,
// encoder.layers.encoder_layer_N.{ln_1,self_attention,ln_2,mlp}, encoder.ln,
// heads.head), so state dicts map one to one onto torchvision's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "accel/models/family.h"
#include "accel/models/model.h"

namespace accel::models {

struct ViTSpec {
  int image_size = 224;
  int in_channels = 3;
  int patch_size = 16;
  int dim = 768;
  int depth = 12;
  int heads = 12;
  int mlp_dim = 3072;
  int num_classes = 1000;
  double dropout = 0.0;
  double attention_dropout = 0.0;

  int num_patches() const { return (image_size / patch_size) * (image_size / patch_size); }
  int seq_length() const { return num_patches() + 1; }
};

// Named architectures. "vit_b_16" etc. are torchvision's; "vit_tiny_fmnist" is
// the CPU ladder's preset (Fashion-MNIST at 56x56, patch 4: 196 patches, the
// sequence length of ViT-B/16 at 224).
ViTSpec vit_preset(const std::string& name);
std::vector<std::string> vit_preset_names();

// Throws accel::ConfigError naming the field when the spec is inconsistent.
void validate_spec(const ViTSpec& spec);

// The spec a config's model section asks for: the preset, overridden by
// every non-zero model field, with in_channels and num_classes taken from
// the data when 0. Throws ConfigError naming the field on a mismatch with
// the data.
ViTSpec resolve_vit_spec(const config::ModelConfig& model, int data_channels, int data_classes);

// Analytic forward FLOPs per sample (2 per multiply-add; matmuls and the patch
// projection; norms, softmax and activations ignored). A training step costs
// about 3x this.
double vit_forward_flops(const ViTSpec& spec);

// Parameter count without building the model.
int64_t vit_param_count(const ViTSpec& spec);

class SelfAttentionImpl : public torch::nn::Module {
 public:
  SelfAttentionImpl(int dim, int heads, double dropout);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor in_proj_weight, in_proj_bias;
  torch::nn::Linear out_proj{nullptr};

 private:
  int heads_;
  double dropout_;
};
TORCH_MODULE(SelfAttention);

// torchvision's MLPBlock is a Sequential: children "0" (Linear) and "3" (Linear).
class MlpBlockImpl : public torch::nn::Module {
 public:
  MlpBlockImpl(int dim, int mlp_dim, double dropout);
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};

 private:
  double dropout_;
};
TORCH_MODULE(MlpBlock);

class EncoderBlockImpl : public torch::nn::Module {
 public:
  EncoderBlockImpl(const ViTSpec& spec);
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  SelfAttention self_attention{nullptr};
  MlpBlock mlp{nullptr};

 private:
  double dropout_;
};
TORCH_MODULE(EncoderBlock);

class EncoderImpl : public torch::nn::Module {
 public:
  explicit EncoderImpl(const ViTSpec& spec);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor pos_embedding;
  std::vector<EncoderBlock> blocks;
  torch::nn::LayerNorm ln{nullptr};

 private:
  double dropout_;
};
TORCH_MODULE(Encoder);

// Wrap units (for FSDP): 0 = stem (conv_proj, class_token,
// encoder.pos_embedding), 1..depth = encoder blocks, depth+1 = head
// (encoder.ln, heads.head). Reads the input "pixels".
class VisionTransformerImpl : public Model {
 public:
  explicit VisionTransformerImpl(const ViTSpec& spec);
  // x: [B, C, H, W] float -> logits [B, num_classes]
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor forward(const data::Inputs& inputs) override;
  std::string arch() const override { return "vit"; }
  int num_classes() const override { return spec_.num_classes; }
  // Replaces heads.head by a new zero-initialised Linear with num_classes.
  void replace_head(int num_classes) override;
  std::vector<std::string> head_tensors() const override {
    return {"heads.head.weight", "heads.head.bias"};
  }
  double forward_flops(const data::Inputs& inputs) const override;
  std::string shape_hint(const std::string& name) const override;
  const ViTSpec& spec() const { return spec_; }

  std::vector<dist::WrapUnit> wrap_units() override;
  void set_unit_hooks(const dist::UnitHooks* hooks) override { hooks_ = hooks; }

  torch::nn::Conv2d conv_proj{nullptr};
  torch::Tensor class_token;
  Encoder encoder{nullptr};
  torch::nn::Linear head{nullptr};

 private:
  torch::Tensor unit_begin(int unit, torch::Tensor x) {
    if (hooks_) hooks_->before(unit);
    return x;
  }
  torch::Tensor unit_end(int unit, torch::Tensor out) {
    return hooks_ ? hooks_->after(unit, std::move(out)) : out;
  }

  ViTSpec spec_;
  std::shared_ptr<torch::nn::Module> heads_;
  const dist::UnitHooks* hooks_ = nullptr;
};
TORCH_MODULE(VisionTransformer);

// The family's registry row (lib/models/registry.cpp lists it).
ModelFamily vit_family();

}  // namespace accel::models
