// ViT in torchvision's layout; see vit.h. Initialisation follows
// torchvision.models.vision_transformer so a scratch run starts where
// torchvision's would.
#include "accel/models/vit.h"

#include <atomic>
#include <cmath>
#include <map>
#include <sstream>
#include <vector>

#include <ATen/record_function.h>

#include "accel/kernels/attention.h"
#include "accel/models/attention.h"

#include "accel/util/errors.h"
#include "accel/util/torch_compat.h"

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

// ---- attention ---------------------------------------------------------------

namespace {

std::atomic<AttentionImpl> g_attention_impl{AttentionImpl::Auto};

// The fused kernel as an autograd op: forward saves qkv and the softmax
// probabilities. A bfloat16 qkv (bf16-mixed: autocast ran the in-projection
// in bf16) takes the AVX512-BF16 kernel where the CPU has it (bf16 products,
// float32 accumulation and softmax); elsewhere it is computed in float32 and
// returned in bf16. Each (sample, head) is computed whole by one thread, so
// results do not depend on the thread count.
struct FusedAttentionFn : torch::autograd::Function<FusedAttentionFn> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& qkv_in,
                               int64_t heads) {
    RECORD_FUNCTION("accel::fused_attention", std::vector<c10::IValue>{});
    const int64_t B = qkv_in.size(0), S = qkv_in.size(1), D = qkv_in.size(2) / 3;
    const int64_t Dh = D / heads;
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(Dh)));
    const auto dtype = qkv_in.scalar_type();
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["dtype"] = static_cast<int64_t>(dtype);
    if (dtype == torch::kBFloat16 && kernels::attention_bf16_supported(D, Dh)) {
      auto qkv = qkv_in.contiguous();
      const int64_t Sp = kernels::attention_bf16_padded(S);
      auto out = torch::empty({B, S, D}, qkv.options());
      auto probs = torch::empty({B, heads, S, Sp}, qkv.options());
      kernels::attention_bf16_forward(bf16_bits(qkv), bf16_bits(out), bf16_bits(probs), Sp, B,
                                      S, D, heads, scale);
      ctx->save_for_backward({qkv, probs});
      return out;
    }
    auto qkv = qkv_in.to(torch::kFloat).contiguous();
    const int64_t Sp = kernels::attention_padded(S);
    auto out = torch::empty({B, S, D}, qkv.options());
    auto probs = torch::empty({B, heads, S, Sp}, qkv.options());
    kernels::attention_forward(qkv.data_ptr<float>(), out.data_ptr<float>(),
                               probs.data_ptr<float>(), Sp, B, S, D, heads, scale);
    ctx->save_for_backward({qkv, probs});
    return out.to(dtype);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    RECORD_FUNCTION("accel::fused_attention_backward", std::vector<c10::IValue>{});
    const auto saved = ctx->get_saved_variables();
    const auto& qkv = saved[0];
    const auto& probs = saved[1];
    const int64_t heads = ctx->saved_data["heads"].toInt();
    const auto dtype = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    const int64_t B = qkv.size(0), S = qkv.size(1), D = qkv.size(2) / 3, Dh = D / heads;
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(Dh)));
    if (probs.scalar_type() == torch::kBFloat16) {  // the forward took the bf16 kernel
      auto dout = grads[0].to(torch::kBFloat16).contiguous();
      auto dqkv = torch::empty_like(qkv);
      kernels::attention_bf16_backward(bf16_bits(qkv), bf16_bits(probs), probs.size(3),
                                       bf16_bits(dout), bf16_bits(dqkv), B, S, D, heads, scale);
      return {dqkv, torch::Tensor()};
    }
    auto dout = grads[0].to(torch::kFloat).contiguous();
    auto dqkv = torch::empty_like(qkv);
    kernels::attention_backward(qkv.data_ptr<float>(), probs.data_ptr<float>(), probs.size(3),
                                dout.data_ptr<float>(), dqkv.data_ptr<float>(), B, S, D, heads,
                                scale);
    return {dqkv.to(dtype), torch::Tensor()};
  }

  static uint16_t* bf16_bits(const torch::Tensor& t) {
    return reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>());
  }
};

}  // namespace

void set_attention_impl(AttentionImpl impl) { g_attention_impl.store(impl); }
AttentionImpl attention_impl() { return g_attention_impl.load(); }

std::string attention_kernel_name() {
  if (attention_impl() == AttentionImpl::Explicit) return "explicit";
  if (compat::kHasSdpa) return "sdpa";
  return std::string("fused-cpu (") + kernels::attention_isa() + ")";
}

bool takes_fused_attention(const torch::Tensor& qkv, int64_t heads, bool dropout_active) {
  return attention_impl() == AttentionImpl::Auto && !compat::kHasSdpa &&
         fused_attention_applies(qkv, heads, dropout_active);
}

torch::Tensor unfused_attention(const torch::Tensor& qkv, int64_t heads, double dropout_p,
                                bool training, bool explicit_form) {
  const auto B = qkv.size(0), S = qkv.size(1), D = qkv.size(2) / 3;
  // [B,S,3D] -> [3,B,H,S,Dh], contiguous so every matmul operand is too.
  auto parts = qkv.view({B, S, 3, heads, D / heads}).permute({2, 0, 3, 1, 4}).contiguous().unbind(0);
  auto out = explicit_form
                 ? compat::attention_explicit(parts[0], parts[1], parts[2], dropout_p, training)
                 : compat::attention(parts[0], parts[1], parts[2], dropout_p, training);
  return out.transpose(1, 2).reshape({B, S, D});
}

bool fused_attention_applies(const torch::Tensor& qkv, int64_t heads, bool dropout_active) {
  const auto t = qkv.scalar_type();
  return !dropout_active && qkv.device().is_cpu() && (t == torch::kFloat || t == torch::kBFloat16) &&
         qkv.dim() == 3 && heads > 0 && qkv.size(2) % (3 * heads) == 0 && qkv.size(1) > 0 &&
         !qkv.is_sparse();
}

torch::Tensor fused_attention(const torch::Tensor& qkv, int64_t heads) {
  if (!fused_attention_applies(qkv, heads, false)) {
    std::ostringstream msg;
    msg << "fused_attention: needs a CPU float32 or bfloat16 [B, S, 3D] tensor with D divisible "
           "by heads ("
        << heads << "); got " << qkv.scalar_type() << " " << qkv.sizes() << " on "
        << qkv.device();
    throw std::invalid_argument(msg.str());
  }
  return FusedAttentionFn::apply(qkv, heads);
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
    return out_proj->forward(FusedAttentionFn::apply(proj, heads_));
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
  h = F::dropout(h, F::DropoutFuncOptions().p(dropout_).training(is_training()));
  h = fc2->forward(h);
  return F::dropout(h, F::DropoutFuncOptions().p(dropout_).training(is_training()));
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
  x = F::dropout(x, F::DropoutFuncOptions().p(dropout_).training(is_training())) + input;
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
  x = F::dropout(x, F::DropoutFuncOptions().p(dropout_).training(is_training()));
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
  tokens = F::dropout(tokens, F::DropoutFuncOptions().p(spec_.dropout).training(is_training()));
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

int64_t count_parameters(const torch::nn::Module& module) {
  int64_t n = 0;
  for (const auto& p : module.parameters()) n += p.numel();
  return n;
}

}  // namespace accel::models
