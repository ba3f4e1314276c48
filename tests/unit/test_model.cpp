// torch first: glog (through torch) defines CHECK, doctest must win.
#include <torch/torch.h>

#include <doctest/doctest.h>

#include <set>
#include <string>


#include "accel/models/vit.h"
#include "accel/train/trainer.h"
#include "accel/util/errors.h"
#include "accel/util/torch_compat.h"

using accel::models::ViTSpec;
using accel::models::VisionTransformer;

namespace {
ViTSpec tiny(int classes = 5) {
  auto s = accel::models::vit_preset("vit_tiny_fmnist");
  s.num_classes = classes;
  return s;
}
}  // namespace

TEST_CASE("model: vit_b_16 has torchvision's 86567656 parameters") {
  const auto spec = accel::models::vit_preset("vit_b_16");
  CHECK(accel::models::vit_param_count(spec) == 86567656);
  torch::NoGradGuard guard;
  VisionTransformer model(spec);
  CHECK(accel::models::count_parameters(*model) == 86567656);
}

TEST_CASE("model: parameter names follow torchvision's VisionTransformer") {
  auto spec = tiny();
  spec.depth = 2;
  VisionTransformer model(spec);
  std::set<std::string> names;
  for (const auto& item : model->named_parameters()) names.insert(item.key());
  const char* expected[] = {
      "conv_proj.weight",
      "conv_proj.bias",
      "class_token",
      "encoder.pos_embedding",
      "encoder.layers.encoder_layer_0.ln_1.weight",
      "encoder.layers.encoder_layer_0.ln_1.bias",
      "encoder.layers.encoder_layer_0.self_attention.in_proj_weight",
      "encoder.layers.encoder_layer_0.self_attention.in_proj_bias",
      "encoder.layers.encoder_layer_0.self_attention.out_proj.weight",
      "encoder.layers.encoder_layer_0.self_attention.out_proj.bias",
      "encoder.layers.encoder_layer_0.ln_2.weight",
      "encoder.layers.encoder_layer_0.mlp.0.weight",
      "encoder.layers.encoder_layer_0.mlp.0.bias",
      "encoder.layers.encoder_layer_0.mlp.3.weight",
      "encoder.layers.encoder_layer_1.mlp.3.bias",
      "encoder.ln.weight",
      "encoder.ln.bias",
      "heads.head.weight",
      "heads.head.bias",
  };
  for (const char* name : expected) {
    INFO(name);
    CHECK(names.count(name) == 1);
  }
  // conv w/b + class token, pos, final ln w/b, 12 per layer, head w/b
  CHECK(names.size() == 3 + 1 + 2 + 12 * 2 + 2);
}

TEST_CASE("model: forward maps images to one logit row per image") {
  const auto spec = tiny(5);
  VisionTransformer model(spec);
  auto x = torch::randn({3, 1, 56, 56});
  auto y = model->forward(x);
  CHECK(y.sizes() == torch::IntArrayRef({3, 5}));
  CHECK(spec.seq_length() == 197);  // same sequence length as ViT-B/16 at 224
}

TEST_CASE("model: replace_head changes the class count and starts at zero") {
  VisionTransformer model(tiny(10));
  model->replace_head(3);
  CHECK(model->spec().num_classes == 3);
  CHECK(model->head->weight.sizes() == torch::IntArrayRef({3, model->spec().dim}));
  CHECK(model->head->weight.abs().sum().item<double>() == 0.0);
  auto y = model->forward(torch::randn({2, 1, 56, 56}));
  CHECK(y.sizes() == torch::IntArrayRef({2, 3}));
  // the new head is registered under its torchvision name, once
  int heads = 0;
  for (const auto& item : model->named_parameters()) heads += item.key() == "heads.head.weight";
  CHECK(heads == 1);
  CHECK(model->named_parameters().find("heads.head.weight")->size(0) == 3);
}

TEST_CASE("model: forward FLOPs of vit_b_16 match its published 17.6 GMACs") {
  const double flops = accel::models::vit_forward_flops(accel::models::vit_preset("vit_b_16"));
  CHECK(flops / 2.0 / 1e9 == doctest::Approx(17.56).epsilon(0.01));
}

TEST_CASE("model: the attention kernel matches the explicit softmax attention") {
  torch::manual_seed(1);
  auto q = torch::randn({2, 4, 197, 24});
  auto k = torch::randn({2, 4, 197, 24});
  auto v = torch::randn({2, 4, 197, 24});
  auto fast = accel::compat::attention(q, k, v, 0.0, false);
  auto ref = accel::compat::attention_reference(q, k, v);
  CHECK(torch::allclose(fast, ref, 1e-5, 1e-5));
}

TEST_CASE("model: an inconsistent spec is a config error naming the field") {
  auto spec = tiny();
  spec.patch_size = 5;
  CHECK_THROWS_WITH_AS(accel::models::validate_spec(spec),
                       doctest::Contains("model.patch_size"), accel::ConfigError);
  spec = tiny();
  spec.heads = 5;
  CHECK_THROWS_WITH_AS(accel::models::validate_spec(spec), doctest::Contains("model.heads"),
                       accel::ConfigError);
  CHECK_THROWS_AS(accel::models::vit_preset("vit_huge_99"), accel::ConfigError);
}

TEST_CASE("model: the resolved spec takes channels and classes from the data") {
  accel::config::ModelConfig m;
  m.preset = "vit_tiny_fmnist";
  auto s = accel::train::resolve_model_spec(m, 1, 5);
  CHECK(s.num_classes == 5);
  CHECK(s.in_channels == 1);
  m.dim = 64;
  m.heads = 2;
  s = accel::train::resolve_model_spec(m, 3, 10);
  CHECK(s.dim == 64);
  CHECK(s.in_channels == 3);
  m.in_channels = 3;
  CHECK_THROWS_WITH_AS(accel::train::resolve_model_spec(m, 1, 10),
                       doctest::Contains("model.in_channels"), accel::ConfigError);
  m = {};
  m.preset = "custom";
  CHECK_THROWS_WITH_AS(accel::train::resolve_model_spec(m, 1, 10),
                       doctest::Contains("model.image_size"), accel::ConfigError);
}
