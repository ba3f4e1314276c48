// ViT in torchvision's layout; see vit.h. Initialisation follows
// torchvision.models.vision_transformer so a scratch run starts where
// torchvision's would.
#include "accel/models/vit.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <vector>

#include "accel/models/attention.h"
#include "accel/models/pretrained.h"
#include "accel/util/errors.h"

namespace accel::models {
namespace F = torch::nn::functional;

namespace {

ViTSpec make_spec(int image, int channels, int patch, int dim, int depth,
                  int heads, int mlp, int classes) {
  ViTSpec s;
  s.image_size = image;
  s.in_channels = channels;
  s.patch_size = patch;
  s.dim = dim;
  s.depth = depth;
  s.heads = heads;
  s.mlp_dim = mlp;
  s.num_classes = classes;
  return s;
}

const std::map<std::string, ViTSpec>& presets() {
  static const std::map<std::string, ViTSpec> table = {
      {"vit_b_16", make_spec(224, 3, 16, 768, 12, 12, 3072, 1000)},
      {"vit_b_32", make_spec(224, 3, 32, 768, 12, 12, 3072, 1000)},
      {"vit_l_16", make_spec(224, 3, 16, 1024, 24, 16, 4096, 1000)},
      // CPU ladder: 56x56 Fashion-MNIST, patch 4 -> 196 patches + class token.
      {"vit_tiny_fmnist", make_spec(56, 1, 4, 96, 4, 4, 192, 10)},
  };
  return table;
}

}  // namespace

ViTSpec vit_preset(const std::string& name) {
  auto it = presets().find(name);
  if (it == presets().end()) {
    std::string names;
    for (const auto& n : vit_preset_names()) names += (names.empty() ? "" : ", ") + n;
    throw ConfigError("model.preset: unknown preset \"" + name + "\"; known: " + names);
  }
  return it->second;
}

std::vector<std::string> vit_preset_names() {
  std::vector<std::string> names;
  for (const auto& kv : presets()) names.push_back(kv.first);
  return names;
}

void validate_spec(const ViTSpec& s) {
  auto fail = [](const std::string& msg) { throw ConfigError(msg); };
  if (s.image_size < 1) fail("model.image_size: must be >= 1");
  if (s.patch_size < 1) fail("model.patch_size: must be >= 1");
  if (s.image_size % s.patch_size != 0) {
    fail("model.patch_size: " + std::to_string(s.patch_size) +
         " does not divide model.image_size " + std::to_string(s.image_size));
  }
  if (s.in_channels < 1) fail("model.in_channels: must be >= 1");
  if (s.dim < 1 || s.depth < 1 || s.heads < 1 || s.mlp_dim < 1) {
    fail("model: dim, depth, heads and mlp_dim must be >= 1");
  }
  if (s.dim % s.heads != 0) {
    fail("model.heads: " + std::to_string(s.heads) + " does not divide model.dim " +
         std::to_string(s.dim));
  }
  if (s.num_classes < 1) fail("model.num_classes: must be >= 1");
}

double vit_forward_flops(const ViTSpec& s) {
  const double P = s.num_patches(), S = s.seq_length(), D = s.dim, M = s.mlp_dim;
  const double patch = 2.0 * P * D * (s.in_channels * s.patch_size * s.patch_size);
  const double per_layer = 2.0 * S * D * 3.0 * D  // qkv projection
                           + 2.0 * 2.0 * S * S * D  // scores and weighted sum
                           + 2.0 * S * D * D        // output projection
                           + 2.0 * 2.0 * S * D * M;  // MLP
  return patch + s.depth * per_layer + 2.0 * D * s.num_classes;
}

int64_t vit_param_count(const ViTSpec& s) {
  const int64_t D = s.dim, M = s.mlp_dim;
  const int64_t patch = D * s.in_channels * s.patch_size * s.patch_size + D;
  const int64_t layer = 2 * (2 * D)             // two LayerNorms
                        + 3 * D * D + 3 * D     // in_proj
                        + D * D + D             // out_proj
                        + D * M + M + M * D + D;  // MLP
  return patch + D /*class token*/ + int64_t(s.seq_length()) * D + s.depth * layer +
         2 * D /*final ln*/ + D * s.num_classes + s.num_classes;
}

// ---------------------------------------------------------------------------

SelfAttentionImpl::SelfAttentionImpl(int dim, int heads, double dropout)
    : heads_(heads), dropout_(dropout) {
  // nn.MultiheadAttention's names and init: xavier_uniform in_proj, zero biases.
  in_proj_weight = register_parameter("in_proj_weight", torch::empty({3 * dim, dim}));
  in_proj_bias = register_parameter("in_proj_bias", torch::zeros({3 * dim}));
  out_proj = register_module("out_proj", torch::nn::Linear(dim, dim));
  torch::NoGradGuard guard;
  torch::nn::init::xavier_uniform_(in_proj_weight);
  torch::nn::init::zeros_(out_proj->bias);
}

torch::Tensor SelfAttentionImpl::forward(const torch::Tensor& x) {
  auto proj = torch::linear(x, in_proj_weight, in_proj_bias);
  const bool dropout_active = is_training() && dropout_ > 0.0;
  if (takes_fused_attention(proj, heads_, dropout_active)) {
    return out_proj->forward(fused_attention(proj, heads_));
  }
  return out_proj->forward(unfused_attention(proj, heads_, dropout_, is_training(),
                                             attention_impl() == AttentionImpl::Explicit));
}

MlpBlockImpl::MlpBlockImpl(int dim, int mlp_dim, double dropout) : dropout_(dropout) {
  fc1 = register_module("0", torch::nn::Linear(dim, mlp_dim));
  fc2 = register_module("3", torch::nn::Linear(mlp_dim, dim));
  torch::NoGradGuard guard;
  for (auto* lin : {&fc1, &fc2}) {
    torch::nn::init::xavier_uniform_((*lin)->weight);
    (*lin)->bias.normal_(0.0, 1e-6);
  }
}

torch::Tensor MlpBlockImpl::forward(const torch::Tensor& x) {
  auto h = torch::gelu(fc1->forward(x));
  h = models::dropout(h, dropout_, is_training());
  h = fc2->forward(h);
  return models::dropout(h, dropout_, is_training());
}

static torch::nn::LayerNorm make_ln(int dim) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim}).eps(1e-6));
}

EncoderBlockImpl::EncoderBlockImpl(const ViTSpec& s) : dropout_(s.dropout) {
  ln_1 = register_module("ln_1", make_ln(s.dim));
  self_attention =
      register_module("self_attention", SelfAttention(s.dim, s.heads, s.attention_dropout));
  ln_2 = register_module("ln_2", make_ln(s.dim));
  mlp = register_module("mlp", MlpBlock(s.dim, s.mlp_dim, s.dropout));
}

torch::Tensor EncoderBlockImpl::forward(const torch::Tensor& input) {
  auto x = self_attention->forward(ln_1->forward(input));
  x = models::dropout(x, dropout_, is_training()) + input;
  return x + mlp->forward(ln_2->forward(x));
}

EncoderImpl::EncoderImpl(const ViTSpec& s) : dropout_(s.dropout) {
  pos_embedding = register_parameter(
      "pos_embedding", torch::empty({1, s.seq_length(), s.dim}).normal_(0.0, 0.02));
  auto layers = register_module("layers", std::make_shared<torch::nn::Module>());
  for (int i = 0; i < s.depth; ++i) {
    blocks.push_back(layers->register_module("encoder_layer_" + std::to_string(i),
                                             EncoderBlock(s)));
  }
  ln = register_module("ln", make_ln(s.dim));
}

torch::Tensor EncoderImpl::forward(const torch::Tensor& input) {
  auto x = input + pos_embedding;
  x = models::dropout(x, dropout_, is_training());
  for (auto& block : blocks) x = block->forward(x);
  return ln->forward(x);
}

VisionTransformerImpl::VisionTransformerImpl(const ViTSpec& s) : spec_(s) {
  validate_spec(s);
  conv_proj = register_module(
      "conv_proj", torch::nn::Conv2d(torch::nn::Conv2dOptions(s.in_channels, s.dim, s.patch_size)
                                         .stride(s.patch_size)));
  {
    // torchvision: trunc_normal_(std=sqrt(1/fan_in)) with cut-offs at +-2
    // (absolute), which a std this small never reaches; zero bias.
    torch::NoGradGuard guard;
    const double fan_in = double(s.in_channels) * s.patch_size * s.patch_size;
    conv_proj->weight.normal_(0.0, std::sqrt(1.0 / fan_in)).clamp_(-2.0, 2.0);
    conv_proj->bias.zero_();
  }
  class_token = register_parameter("class_token", torch::zeros({1, 1, s.dim}));
  encoder = register_module("encoder", Encoder(s));
  heads_ = register_module("heads", std::make_shared<torch::nn::Module>());
  replace_head(s.num_classes);
}

void VisionTransformerImpl::replace_head(int num_classes) {
  auto fresh = torch::nn::Linear(spec_.dim, num_classes);
  {
    torch::NoGradGuard guard;
    fresh->weight.zero_();
    fresh->bias.zero_();
  }
  if (head) {
    fresh->to(head->weight.device(), head->weight.scalar_type());
    heads_->replace_module("head", fresh);
  } else {
    heads_->register_module("head", fresh);
  }
  head = fresh;
  spec_.num_classes = num_classes;
}

torch::Tensor VisionTransformerImpl::forward(const torch::Tensor& x) {
  const auto B = x.size(0);
  // Unit 0, the stem: [B,C,H,W] -> [B,D,H/p,W/p] -> [B,P,D], class token,
  // position embedding (EncoderImpl::forward's first lines, inlined so the
  // stem's parameters form one unit).
  unit_begin(0, x);
  auto tokens = conv_proj->forward(x).flatten(2).transpose(1, 2);
  tokens = torch::cat({class_token.expand({B, -1, -1}), tokens}, 1);
  tokens = tokens + encoder->pos_embedding;
  tokens = models::dropout(tokens, spec_.dropout, is_training());
  tokens = unit_end(0, tokens);
  int unit = 1;
  for (auto& block : encoder->blocks) {
    unit_begin(unit, tokens);
    tokens = unit_end(unit, block->forward(tokens));
    ++unit;
  }
  unit_begin(unit, tokens);
  auto logits = head->forward(encoder->ln->forward(tokens).select(1, 0));
  return unit_end(unit, logits);
}

std::vector<dist::WrapUnit> VisionTransformerImpl::wrap_units() {
  std::vector<dist::WrapUnit> units;
  units.push_back({"stem",
                   {{"conv_proj.weight", conv_proj->weight},
                    {"conv_proj.bias", conv_proj->bias},
                    {"class_token", class_token},
                    {"encoder.pos_embedding", encoder->pos_embedding}}});
  for (size_t i = 0; i < encoder->blocks.size(); ++i) {
    const std::string prefix = "encoder.layers.encoder_layer_" + std::to_string(i) + ".";
    dist::WrapUnit u{"encoder_layer_" + std::to_string(i), {}};
    for (const auto& kv : encoder->blocks[i]->named_parameters()) {
      u.params.emplace_back(prefix + kv.key(), kv.value());
    }
    units.push_back(std::move(u));
  }
  dist::WrapUnit head_unit{"head", {}};
  for (const auto& kv : encoder->ln->named_parameters()) {
    head_unit.params.emplace_back("encoder.ln." + kv.key(), kv.value());
  }
  for (const auto& kv : head->named_parameters()) {
    head_unit.params.emplace_back("heads.head." + kv.key(), kv.value());
  }
  units.push_back(std::move(head_unit));
  return units;
}

}  // namespace accel::models

// ---- the model interface ---------------------------------------------------------------

namespace accel::models {

torch::Tensor VisionTransformerImpl::forward(const data::Inputs& inputs) {
  return forward(data::input(inputs, "pixels"));
}

double VisionTransformerImpl::forward_flops(const data::Inputs& inputs) const {
  return double(data::batch_rows(inputs)) * vit_forward_flops(spec_);
}

std::string VisionTransformerImpl::shape_hint(const std::string& name) const {
  if (name != "encoder.pos_embedding") return "";
  return "the weights were trained at another image or patch size; interpolating position "
         "embeddings is not supported, so set the model's image_size and patch_size to match "
         "the weights";
}

// ---- the family ------------------------------------------------------------------------

namespace {

// The order --explain and error messages list them in; the first is the default.
const std::vector<std::string>& vit_preset_order() {
  static const std::vector<std::string> names = {"vit_tiny_fmnist", "vit_b_16", "vit_b_32",
                                                 "vit_l_16"};
  return names;
}

// Config-time checks of the dims a model section gives (FamilyInfo::check).
void vit_check(const nlohmann::json& m, const FamilyInfo::Where& where) {
  if (m["preset"] == "custom") {
    for (const char* k : {"patch_size", "dim", "depth", "heads", "mlp_dim"})
      if (m[k] == 0)
        throw ConfigError(where({"model.preset"}) + "model." + k +
                          ": must be set (> 0) when model.preset is \"custom\"");
  }
  const int dim = m["dim"], heads = m["heads"], image = m["image_size"], patch = m["patch_size"];
  if (dim > 0 && heads > 0 && dim % heads != 0)
    throw ConfigError(where({"model.heads", "model.dim"}) + "model.heads: " + std::to_string(heads) +
                      " does not divide model.dim " + std::to_string(dim));
  if (image > 0 && patch > 0 && image % patch != 0)
    throw ConfigError(where({"model.patch_size", "model.image_size"}) + "model.patch_size: " +
                      std::to_string(patch) + " does not divide model.image_size " +
                      std::to_string(image));
}

}  // namespace

ViTSpec resolve_vit_spec(const config::ModelConfig& m, int data_channels, int data_classes) {
  ViTSpec s;
  if (m.preset != "custom") s = vit_preset(m.preset);
  auto take = [](int& field, int value) {
    if (value > 0) field = value;
  };
  take(s.image_size, m.image_size);
  take(s.patch_size, m.patch_size);
  take(s.dim, m.dim);
  take(s.depth, m.depth);
  take(s.heads, m.heads);
  take(s.mlp_dim, m.mlp_dim);
  if (m.preset == "custom") {
    for (auto [name, v] : {std::pair{"image_size", m.image_size}, {"patch_size", m.patch_size},
                          {"dim", m.dim}, {"depth", m.depth}, {"heads", m.heads},
                          {"mlp_dim", m.mlp_dim}}) {
      if (v <= 0) {
        throw ConfigError(std::string("model.") + name +
                          ": required when model.preset is \"custom\"");
      }
    }
  }
  if (m.in_channels > 0 && m.in_channels != data_channels) {
    throw ConfigError("model.in_channels: " + std::to_string(m.in_channels) +
                      " but the dataset has " + std::to_string(data_channels) +
                      " channel(s)");
  }
  s.in_channels = data_channels;
  if (m.num_classes > 0 && m.num_classes < data_classes) {
    throw ConfigError("model.num_classes: " + std::to_string(m.num_classes) +
                      " is fewer than the " + std::to_string(data_classes) +
                      " classes the data yields");
  }
  s.num_classes = m.num_classes > 0 ? m.num_classes : data_classes;
  s.dropout = m.dropout;
  s.attention_dropout = m.attention_dropout;
  validate_spec(s);
  return s;
}

namespace {

nlohmann::json spec_json(const ViTSpec& s) {
  return {{"arch", "vit"},
          {"image_size", s.image_size}, {"in_channels", s.in_channels},
          {"patch_size", s.patch_size}, {"dim", s.dim},
          {"depth", s.depth},           {"heads", s.heads},
          {"mlp_dim", s.mlp_dim},       {"num_classes", s.num_classes},
          {"seq_length", s.seq_length()}};
}

std::string spec_line(const ViTSpec& s, int64_t params, double flops) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%.3f GFLOP/sample fwd", flops / 1e9);
  return "== model: ViT " + std::to_string(s.image_size) + "px patch " +
         std::to_string(s.patch_size) + ", dim " + std::to_string(s.dim) + ", depth " +
         std::to_string(s.depth) + ", heads " + std::to_string(s.heads) + ", mlp " +
         std::to_string(s.mlp_dim) + ", " + std::to_string(s.num_classes) + " classes | " +
         std::to_string(params) + " parameters | " + buf;
}

BuiltModel vit_build(const config::ModelConfig& m, const DataFacts& data) {
  if (data.kind != "image") {
    throw ConfigError("model.arch: \"vit\" reads images, but the data is " + data.kind);
  }
  const ViTSpec spec = resolve_vit_spec(m, data.channels, data.classes);
  check_fits_memory(vit_param_count(spec),
                    "model.image_size " + std::to_string(spec.image_size) + " with patch_size " +
                        std::to_string(spec.patch_size) + " (" + std::to_string(spec.seq_length()) +
                        " tokens), dim " + std::to_string(spec.dim) + ", depth " +
                        std::to_string(spec.depth) + ", mlp_dim " + std::to_string(spec.mlp_dim));
  auto model = std::make_shared<VisionTransformerImpl>(spec);
  BuiltModel b;
  b.flops_per_sample = vit_forward_flops(spec);
  b.activation_bytes_per_sample =
      transformer_activation_bytes(spec.depth, spec.seq_length(), spec.dim, spec.heads);
  b.layers = spec.depth;
  b.dims = spec_json(spec);
  b.summary = spec_line(spec, count_parameters(*model), b.flops_per_sample);
  b.module = model;
  return b;
}

data::CollateOptions vit_collate(const BuiltModel& built, const config::DataConfig& d) {
  const int side = built.dims.at("image_size").get<int>();
  if (d.resize > 0 && d.resize != side) {
    throw ConfigError("data.resize: " + std::to_string(d.resize) +
                      " does not match model.image_size " + std::to_string(side) +
                      " (0 resizes to the model's size)");
  }
  data::CollateOptions o;
  o.resize = side;
  o.normalize = d.normalize;
  return o;
}

std::vector<PresetRow> vit_presets() {
  std::vector<PresetRow> rows;
  for (const auto& name : vit_preset_order()) {
    const auto s = vit_preset(name);
    char shape[128];
    std::snprintf(shape, sizeof shape, "%dpx patch %d, %d ch, dim %d, depth %d, heads %d, mlp %d, %d classes",
                  s.image_size, s.patch_size, s.in_channels, s.dim, s.depth, s.heads, s.mlp_dim,
                  s.num_classes);
    rows.push_back({name, shape, vit_param_count(s), vit_forward_flops(s), "image"});
  }
  return rows;
}

}  // namespace

ModelFamily vit_family() {
  ModelFamily f;
  f.info.arch = "vit";
  f.info.input = "image";
  f.info.summary = "Vision Transformer in torchvision's layout (ViT-B/16 and family)";
  f.info.presets = vit_preset_order();
  f.info.formats = {"torchvision", "timm", "hf"};
  f.info.check = vit_check;
  f.build = vit_build;
  f.collate = vit_collate;
  f.preset_rows = vit_presets;
  f.adapt = vit_adapt;
  return f;
}

}  // namespace accel::models
