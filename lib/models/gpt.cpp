// Decoder-only language models in Hugging Face's GPT-2 or Llama layout
// (gpt.h), initialised as nanoGPT and transformers do: normal(0, init_std)
// linear and embedding weights, zero biases, unit norms, and GPT-2's residual
// output projections (attn.c_proj, mlp.c_proj) at init_std / sqrt(2 layers).
#include "accel/models/gpt.h"

#include <cmath>
#include <cstdio>

#include "accel/models/checkpoint.h"
#include "accel/models/family.h"
#include "accel/models/linear_cross_entropy.h"
#include "accel/util/errors.h"
#include "name_utils.h"

namespace accel::models {

// Helpers in a named namespace: the library is a unity build, where the
// anonymous namespaces of a batch's files are one.
namespace gpt_detail {

DecoderSpec gpt2_like(int64_t vocab, int64_t positions, int hidden, int layers, int heads,
                      int intermediate) {
  DecoderSpec s;
  s.vocab_size = vocab;
  s.max_positions = positions;
  s.hidden = hidden;
  s.layers = layers;
  s.heads = s.kv_heads = heads;
  s.intermediate = intermediate;
  return s;
}

DecoderSpec llama_like(int64_t vocab, int64_t positions, int hidden, int layers, int heads,
                       int kv_heads, int intermediate, double theta, double init_std) {
  DecoderSpec s;
  s.style = "llama";
  s.norm = "rmsnorm";
  s.positions = "rotary";
  s.mlp = "swiglu";
  s.bias = false;
  s.vocab_size = vocab;
  s.max_positions = positions;
  s.hidden = hidden;
  s.layers = layers;
  s.heads = heads;
  s.kv_heads = kv_heads;
  s.intermediate = intermediate;
  s.rope_theta = theta;
  s.init_std = init_std;
  return s;
}

// Ordered as --explain and errors list them; the first is the default.
const std::vector<std::pair<std::string, DecoderSpec>>& presets() {
  static const std::vector<std::pair<std::string, DecoderSpec>> table = {
      // The CPU ladder's model: GPT-2's layout at a size two cores train in
      // minutes; the vocabulary is the data's (set by the family).
      {"gpt_tiny", gpt2_like(50257, 256, 128, 4, 4, 512)},
      // GPT-2 small (openai-community/gpt2, config.json: n_embd 768, n_layer
      // 12, n_head 12, n_positions 1024, vocab 50257).
      {"gpt2", gpt2_like(50257, 1024, 768, 12, 12, 3072)},
      {"llama_tiny", llama_like(49152, 256, 128, 4, 4, 2, 384, 10000.0, 0.02)},
      // HuggingFaceTB/SmolLM2-135M (config.json: hidden 576, 30 layers, 9
      // heads, 3 key-value heads, intermediate 1536, vocab 49152, rope_theta
      // 100000, max_position_embeddings 8192, initializer_range 0.041666666666666664,
      // tied embeddings, rms_norm_eps 1e-5).
      {"smollm2_135m", llama_like(49152, 8192, 576, 30, 9, 3, 1536, 100000.0, 0.041666666666666664)},
  };
  return table;
}

torch::nn::Linear linear(int64_t in, int64_t out, bool bias, double std) {
  auto l = torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
  torch::NoGradGuard guard;
  l->weight.normal_(0.0, std);
  if (bias) l->bias.zero_();
  return l;
}

torch::nn::Embedding embedding(int64_t n, int64_t dim, double std) {
  auto e = torch::nn::Embedding(torch::nn::EmbeddingOptions(n, dim));
  torch::NoGradGuard guard;
  e->weight.normal_(0.0, std);
  return e;
}

std::shared_ptr<torch::nn::Module> norm(const DecoderSpec& s) {
  if (s.norm == "rmsnorm") return std::make_shared<RMSNormImpl>(s.hidden, s.norm_eps);
  return std::make_shared<torch::nn::LayerNormImpl>(
      torch::nn::LayerNormOptions({s.hidden}).eps(s.norm_eps).elementwise_affine(true));
}

torch::Tensor apply_norm(const std::shared_ptr<torch::nn::Module>& m, const torch::Tensor& x) {
  if (auto* r = dynamic_cast<RMSNormImpl*>(m.get())) return r->forward(x);
  return dynamic_cast<torch::nn::LayerNormImpl&>(*m).forward(x);
}

using detail::child;
using detail::project;

int64_t norm_params(const DecoderSpec& s) {
  return s.norm == "rmsnorm" ? s.hidden : (s.bias ? 2 * s.hidden : s.hidden);
}

}  // namespace gpt_detail

namespace gd = gpt_detail;

// ---- specs ---------------------------------------------------------------------------------

DecoderSpec decoder_preset(const std::string& name) {
  for (const auto& [n, s] : gd::presets()) {
    if (n == name) return s;
  }
  std::string names;
  for (const auto& n : decoder_preset_names()) names += (names.empty() ? "" : ", ") + n;
  throw ConfigError("model.preset: unknown gpt preset \"" + name + "\"; known: " + names);
}

std::vector<std::string> decoder_preset_names() {
  std::vector<std::string> out;
  for (const auto& [n, s] : gd::presets()) out.push_back(n);
  return out;
}

void validate_decoder_spec(const DecoderSpec& s) {
  auto fail = [](const std::string& msg) { throw ConfigError(msg); };
  if (s.style != "gpt2" && s.style != "llama") fail("model.style: \"" + s.style + "\" is not gpt2 or llama");
  if (s.norm != "layernorm" && s.norm != "rmsnorm") fail("model.norm: \"" + s.norm + "\" is not layernorm or rmsnorm");
  if (s.positions != "learned" && s.positions != "rotary") {
    fail("model.positions: \"" + s.positions + "\" is not learned or rotary");
  }
  if (s.mlp != "gelu" && s.mlp != "swiglu") fail("model.mlp: \"" + s.mlp + "\" is not gelu or swiglu");
  if (s.vocab_size < 2) fail("model.vocab_size: must be >= 2");
  if (s.max_positions < 2) fail("model.max_positions: must be >= 2");
  if (s.hidden < 1 || s.layers < 1 || s.heads < 1 || s.kv_heads < 1 || s.intermediate < 1) {
    fail("model: hidden, layers, heads, kv_heads and intermediate must be >= 1");
  }
  if (s.hidden % s.heads != 0) {
    fail("model.heads: " + std::to_string(s.heads) + " does not divide model.hidden " + std::to_string(s.hidden));
  }
  if (s.heads % s.kv_heads != 0) {
    fail("model.kv_heads: " + std::to_string(s.kv_heads) + " does not divide model.heads " +
         std::to_string(s.heads));
  }
  if (s.positions == "rotary" && s.head_dim() % 2 != 0) {
    fail("model.heads: rotary positions need an even head size; hidden " + std::to_string(s.hidden) + " / " +
         std::to_string(s.heads) + " heads is odd");
  }
  if (s.pad_id >= s.vocab_size) {
    fail("model.vocab_size: " + std::to_string(s.vocab_size) + " has no place for the padding id " +
         std::to_string(s.pad_id));
  }
}

int64_t decoder_param_count(const DecoderSpec& s) {
  const int64_t H = s.hidden, I = s.intermediate, KV = int64_t(s.kv_heads) * s.head_dim();
  const int64_t b = s.bias ? 1 : 0;
  int64_t embeddings = s.vocab_size * H;
  if (s.positions == "learned") embeddings += s.max_positions * H;
  const int64_t attention = H * (H + 2 * KV) + b * (H + 2 * KV) + H * H + b * H;
  const int64_t mlp = s.mlp == "swiglu" ? 3 * H * I + b * (2 * I + H) : 2 * H * I + b * (I + H);
  const int64_t layer = attention + mlp + 2 * gd::norm_params(s);
  const int64_t head = s.tie_embeddings ? 0 : s.vocab_size * H;
  return embeddings + s.layers * layer + gd::norm_params(s) + head;
}

double decoder_forward_flops(const DecoderSpec& s, int64_t seq) {
  const double S = double(seq), H = s.hidden, I = s.intermediate;
  const double KV = double(s.kv_heads) * s.head_dim();
  const double per_layer = 2.0 * S * H * (H + 2.0 * KV)  // q, k, v
                           + 2.0 * 2.0 * S * S * H      // scores and weighted sums, every pair
                           + 2.0 * S * H * H            // attention output
                           + (s.mlp == "swiglu" ? 3.0 : 2.0) * 2.0 * S * H * I;
  return s.layers * per_layer + 2.0 * S * H * double(s.vocab_size);
}

double decoder_training_flops_per_token_rule(const DecoderSpec& s, int64_t seq) {
  int64_t n = decoder_param_count(s);
  if (s.positions == "learned") n -= s.max_positions * s.hidden;
  if (!s.tie_embeddings) n -= s.vocab_size * s.hidden;  // the input table is looked up, not multiplied
  return 6.0 * double(n) + 12.0 * s.layers * double(s.hidden) * double(seq);
}

// ---- norms and positions ----------------------------------------------------------------------

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  const auto xf = x.to(torch::kFloat);
  const auto normed = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  return weight * normed.to(x.scalar_type());
}

std::pair<torch::Tensor, torch::Tensor> rotary_tables(int64_t seq, int64_t head_dim, double theta,
                                                      const torch::TensorOptions& options) {
  const auto f = torch::TensorOptions().dtype(torch::kFloat).device(options.device());
  const auto exponents = torch::arange(0, head_dim, 2, f) / double(head_dim);
  const auto inv_freq = torch::pow(theta, exponents).reciprocal();
  const auto freqs = torch::outer(torch::arange(seq, f), inv_freq);  // [S, Dh/2]
  const auto angles = torch::cat({freqs, freqs}, -1);                // [S, Dh]
  return {angles.cos().to(options.dtype()), angles.sin().to(options.dtype())};
}

torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  // x [B, S, H, Dh]; cos, sin [S, Dh] broadcast over batch and heads.
  const int64_t half = x.size(-1) / 2;
  const auto rotated = torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  const auto c = cos.unsqueeze(1), s = sin.unsqueeze(1);
  return x * c + rotated * s;
}

// ---- the modules ----------------------------------------------------------------------------

DecoderBlockImpl::DecoderBlockImpl(const DecoderSpec& s) : spec_(s) {
  const int64_t H = s.hidden, I = s.intermediate, KV = int64_t(s.kv_heads) * s.head_dim();
  const double out_std = s.llama() ? s.init_std : s.init_std / std::sqrt(2.0 * s.layers);
  norm1 = gd::norm(s);
  norm2 = gd::norm(s);
  if (s.llama()) {
    register_module("input_layernorm", norm1);
    auto attn = gd::child(*this, "self_attn");
    q = attn->register_module("q_proj", gd::linear(H, H, s.bias, s.init_std));
    k = attn->register_module("k_proj", gd::linear(H, KV, s.bias, s.init_std));
    v = attn->register_module("v_proj", gd::linear(H, KV, s.bias, s.init_std));
    attn_out = attn->register_module("o_proj", gd::linear(H, H, s.bias, out_std));
    register_module("post_attention_layernorm", norm2);
  } else {
    register_module("ln_1", norm1);
    auto attn = gd::child(*this, "attn");
    qkv = attn->register_module("c_attn", gd::linear(H, H + 2 * KV, s.bias, s.init_std));
    attn_out = attn->register_module("c_proj", gd::linear(H, H, s.bias, out_std));
    register_module("ln_2", norm2);
  }
  auto m = gd::child(*this, "mlp");
  if (s.mlp == "swiglu") {
    const std::string g = s.llama() ? "gate_proj" : "c_fc", u = s.llama() ? "up_proj" : "c_fc2";
    gate = m->register_module(g, gd::linear(H, I, s.bias, s.init_std));
    up = m->register_module(u, gd::linear(H, I, s.bias, s.init_std));
    down = m->register_module(s.llama() ? "down_proj" : "c_proj", gd::linear(I, H, s.bias, out_std));
  } else {
    fc = m->register_module(s.llama() ? "up_proj" : "c_fc", gd::linear(H, I, s.bias, s.init_std));
    down = m->register_module(s.llama() ? "down_proj" : "c_proj", gd::linear(I, H, s.bias, out_std));
  }
}

torch::Tensor DecoderBlockImpl::attention(const torch::Tensor& h, const KeyPadding& padding,
                                          const torch::Tensor& cos, const torch::Tensor& sin) {
  const auto& s = spec_;
  const int64_t B = h.size(0), S = h.size(1), H = s.hidden, Dh = s.head_dim();
  const int64_t KV = int64_t(s.kv_heads) * Dh;
  torch::Tensor qkv_out;
  if (qkv) {
    qkv_out = gd::project(h, qkv->weight, qkv->bias);
  } else {
    // q, k and v in one GEMM, as the fused kernel reads them from one row.
    const auto w = torch::cat({q->weight, k->weight, v->weight});
    const auto b = s.bias ? torch::cat({q->bias, k->bias, v->bias}) : torch::Tensor();
    qkv_out = gd::project(h, w, b);
  }
  const bool grouped = s.kv_heads != s.heads;
  if (s.positions == "rotary" || grouped) {
    auto qh = qkv_out.narrow(-1, 0, H).view({B, S, s.heads, Dh});
    auto kh = qkv_out.narrow(-1, H, KV).view({B, S, s.kv_heads, Dh});
    auto vh = qkv_out.narrow(-1, H + KV, KV).view({B, S, s.kv_heads, Dh});
    if (s.positions == "rotary") {  // tables in float32, applied in the projection's dtype (as transformers)
      const auto c = cos.to(qh.scalar_type()), sn = sin.to(qh.scalar_type());
      qh = apply_rotary(qh, c, sn);
      kh = apply_rotary(kh, c, sn);
    }
    if (grouped) {  // query head j reads key-value head j / (heads / kv_heads), as repeat_kv
      const int64_t rep = s.heads / s.kv_heads;
      kh = kh.unsqueeze(3).expand({B, S, s.kv_heads, rep, Dh}).reshape({B, S, s.heads, Dh});
      vh = vh.unsqueeze(3).expand({B, S, s.kv_heads, rep, Dh}).reshape({B, S, s.heads, Dh});
    }
    qkv_out = torch::cat({qh.reshape({B, S, H}), kh.reshape({B, S, H}), vh.reshape({B, S, H})}, -1);
  }
  const auto ctx = self_attention(qkv_out, s.heads, s.dropout, is_training(), padding, /*causal=*/true);
  return gd::project(ctx, attn_out->weight, attn_out->bias);
}

torch::Tensor DecoderBlockImpl::mlp(const torch::Tensor& h) {
  if (spec_.mlp == "swiglu") {
    const auto g = gd::project(h, gate->weight, gate->bias);
    return gd::project(torch::silu(g) * gd::project(h, up->weight, up->bias), down->weight, down->bias);
  }
  const auto a = torch::gelu(gd::project(h, fc->weight, fc->bias), "tanh");
  return gd::project(a, down->weight, down->bias);
}

torch::Tensor DecoderBlockImpl::forward(const torch::Tensor& x, const KeyPadding& padding,
                                        const torch::Tensor& cos, const torch::Tensor& sin) {
  const bool train = is_training();
  const auto a = models::dropout(attention(gd::apply_norm(norm1, x), padding, cos, sin), spec_.dropout, train);
  const auto h = x + a;
  return h + models::dropout(mlp(gd::apply_norm(norm2, h)), spec_.dropout, train);
}

DecoderLMImpl::DecoderLMImpl(const DecoderSpec& s) : spec_(s) {
  validate_decoder_spec(s);
  base_ = gd::child(*this, s.llama() ? "model" : "transformer");
  tokens = base_->register_module(s.llama() ? "embed_tokens" : "wte", gd::embedding(s.vocab_size, s.hidden, s.init_std));
  if (s.positions == "learned") {
    // nanoGPT and GPT-2's own init: normal(0, 0.02) for the position table too.
    positions = base_->register_module(s.llama() ? "embed_positions" : "wpe",
                                       gd::embedding(s.max_positions, s.hidden, s.init_std));
  }
  auto list = gd::child(*base_, s.llama() ? "layers" : "h");
  for (int i = 0; i < s.layers; ++i) blocks.push_back(list->register_module(std::to_string(i), DecoderBlock(s)));
  final_norm = base_->register_module(s.llama() ? "norm" : "ln_f", gd::norm(s));
  if (!s.tie_embeddings) lm_head = register_module("lm_head", gd::linear(s.hidden, s.vocab_size, false, s.init_std));
}

torch::Tensor DecoderLMImpl::output_weight() const {
  return lm_head ? lm_head->weight : tokens->weight;
}

torch::Tensor DecoderLMImpl::run(const torch::Tensor& ids, const torch::Tensor& mask, Head head,
                                 const torch::Tensor& labels) {
  if (ids.dim() != 2 || ids.size(1) < 1) throw std::invalid_argument("input_ids: expected [batch, seq] with seq >= 1");
  const int64_t S = ids.size(1);
  if (S > spec_.max_positions) {
    throw std::invalid_argument("input_ids: " + std::to_string(S) + " tokens exceed model.max_positions " +
                                std::to_string(spec_.max_positions));
  }
  auto begin = [&](int unit) {
    if (hooks_) hooks_->before(unit);
  };
  auto end = [&](int unit, torch::Tensor out) { return hooks_ ? hooks_->after(unit, std::move(out)) : out; };
  const KeyPadding padding = mask.defined() ? key_padding(mask) : KeyPadding{};
  begin(0);
  auto x = tokens->forward(ids);
  if (positions) x = x + positions->forward(torch::arange(S, ids.options().dtype(torch::kLong)));
  x = end(0, models::dropout(x, spec_.dropout, is_training()));
  torch::Tensor cos, sin;
  if (spec_.positions == "rotary") {
    std::tie(cos, sin) = rotary_tables(S, spec_.head_dim(), spec_.rope_theta, x.options().dtype(torch::kFloat));
  }
  int unit = 1;
  for (auto& block : blocks) {
    begin(unit);
    if (recompute_ && is_training()) {
      // By value: the backward runs it again after run() has returned.
      x = end(unit, checkpoint([block, padding, cos, sin](const torch::Tensor& in) mutable {
                return block->forward(in, padding, cos, sin);
              }, x, /*draws=*/spec_.dropout > 0));
    } else {
      x = end(unit, block->forward(x, padding, cos, sin));
    }
    ++unit;
  }
  begin(unit);
  const auto h = gd::apply_norm(final_norm, x);
  if (head == Head::Hidden) return end(unit, h);
  auto out = [&](const torch::Tensor& w) {
    if (head == Head::Loss) return linear_cross_entropy(h, w, labels, loss_chunk_);
    return gd::project(h, w, torch::Tensor());
  };
  if (lm_head) return end(unit, out(lm_head->weight));
  if (!hooks_) return out(tokens->weight);
  // A tied output projection reads unit 0's matrix, which a sharding
  // strategy freed after the embeddings: gathered again around the head,
  // and (through the output's hook) again before the head's backward.
  hooks_->before(0);
  return end(unit, hooks_->after(0, out(tokens->weight)));
}

torch::Tensor DecoderLMImpl::hidden_states(const torch::Tensor& ids, const torch::Tensor& mask) {
  return run(ids, mask, Head::Hidden);
}

torch::Tensor DecoderLMImpl::forward(const torch::Tensor& ids, const torch::Tensor& mask) {
  return run(ids, mask, Head::Logits);
}

torch::Tensor DecoderLMImpl::forward(const data::Inputs& inputs) {
  const auto mask_it = inputs.find("attention_mask");
  const torch::Tensor mask = mask_it == inputs.end() ? torch::Tensor() : mask_it->second;
  const auto labels = inputs.find("labels");
  if (labels == inputs.end()) return forward(data::input(inputs, "input_ids"), mask);
  const torch::Tensor ids = data::input(inputs, "input_ids");
  if (labels->second.sizes() != ids.sizes()) {
    throw std::invalid_argument("labels: expected the next tokens [batch, seq] of input_ids");
  }
  return run(ids, mask, Head::Loss, labels->second);
}

void DecoderLMImpl::replace_head(int num_classes) {
  auto fresh = gd::linear(spec_.hidden, num_classes, false, spec_.init_std);
  fresh->to(tokens->weight.device(), tokens->weight.scalar_type());
  if (lm_head) {
    replace_module("lm_head", fresh);
  } else {
    register_module("lm_head", fresh);
  }
  lm_head = fresh;
  spec_.tie_embeddings = false;
  spec_.vocab_size = num_classes;
}

std::vector<std::string> DecoderLMImpl::head_tensors() const {
  if (lm_head) return {"lm_head.weight"};
  return {};
}

double DecoderLMImpl::forward_flops(const data::Inputs& inputs) const {
  const torch::Tensor ids = data::input(inputs, "input_ids");
  return double(ids.size(0)) * decoder_forward_flops(spec_, ids.size(1));
}

std::vector<dist::WrapUnit> DecoderLMImpl::wrap_units() {
  const std::string layer = base() + (spec_.llama() ? "layers." : "h.");
  const std::string tok = base() + (spec_.llama() ? "embed_tokens." : "wte.");
  const std::string pos = base() + (spec_.llama() ? "embed_positions." : "wpe.");
  std::vector<dist::WrapUnit> units(size_t(spec_.layers) + 2);
  units[0].name = "embeddings";
  for (int i = 0; i < spec_.layers; ++i) units[size_t(i) + 1].name = "layer_" + std::to_string(i);
  units.back().name = "head";
  for (const auto& kv : named_parameters(true)) {
    const std::string& n = kv.key();
    size_t u = units.size() - 1;
    if (detail::starts_with(n, tok) || detail::starts_with(n, pos)) {
      u = 0;
    } else if (detail::starts_with(n, layer)) {
      u = size_t(std::stoi(n.substr(layer.size()))) + 1;
    }
    units[u].params.emplace_back(n, kv.value());
  }
  return units;
}

}  // namespace accel::models

// ---- the family -----------------------------------------------------------------------------

namespace accel::models {
namespace gpt_detail {

void check(const nlohmann::json& m, const FamilyInfo::Where& where) {
  if (m["preset"] == "custom") {
    throw ConfigError(where({"model.preset"}) +
                      "model.preset: gpt has no \"custom\"; start from a preset (gpt_tiny, gpt2, llama_tiny, "
                      "smollm2_135m) and set its dims");
  }
  const int hidden = m["hidden"], heads = m["heads"], kv = m["kv_heads"];
  if (hidden > 0 && heads > 0 && hidden % heads != 0) {
    throw ConfigError(where({"model.heads", "model.hidden"}) + "model.heads: " + std::to_string(heads) +
                      " does not divide model.hidden " + std::to_string(hidden));
  }
  if (heads > 0 && kv > 0 && heads % kv != 0) {
    throw ConfigError(where({"model.kv_heads", "model.heads"}) + "model.kv_heads: " + std::to_string(kv) +
                      " does not divide model.heads " + std::to_string(heads));
  }
}

DecoderSpec resolve(const config::ModelConfig& m, const DataFacts& data) {
  DecoderSpec s = decoder_preset(m.preset);
  auto take = [](auto& field, auto value) {
    if (value > 0) field = value;
  };
  // The vocabulary is the tokenizer's unless the config sets one (larger).
  if (data.vocab_size > 0) s.vocab_size = data.vocab_size;
  take(s.vocab_size, m.vocab_size);
  take(s.max_positions, m.max_positions);
  take(s.hidden, m.hidden);
  take(s.layers, m.layers);
  take(s.intermediate, m.intermediate);
  if (m.heads > 0) {
    // Setting heads alone keeps the preset's grouping where it still divides.
    if (m.kv_heads <= 0 && (s.kv_heads == s.heads || m.heads % s.kv_heads != 0)) s.kv_heads = m.heads;
    s.heads = m.heads;
  }
  take(s.kv_heads, m.kv_heads);
  s.dropout = m.dropout;
  s.pad_id = data.pad_id;
  if (data.vocab_size > s.vocab_size) {
    throw ConfigError("model.vocab_size: " + std::to_string(s.vocab_size) + " is smaller than the tokenizer's vocab of " +
                      std::to_string(data.vocab_size) + " tokens (data.vocab)");
  }
  if (data.max_token_id >= s.vocab_size) {
    throw ConfigError("model.vocab_size: " + std::to_string(s.vocab_size) + " has no embedding for token id " +
                      std::to_string(data.max_token_id) + " of the data");
  }
  validate_decoder_spec(s);
  return s;
}

BuiltModel build(const config::ModelConfig& m, const DataFacts& data) {
  if (data.kind != "tokens") {
    throw ConfigError("model.arch: \"gpt\" reads token streams (next tokens), but the data is " + data.kind);
  }
  const DecoderSpec spec = resolve(m, data);
  check_fits_memory(decoder_param_count(spec),
                    "model.vocab_size " + std::to_string(spec.vocab_size) + ", hidden " + std::to_string(spec.hidden) +
                        ", layers " + std::to_string(spec.layers) + ", intermediate " +
                        std::to_string(spec.intermediate));
  auto model = std::make_shared<DecoderLMImpl>(spec);
  BuiltModel b;
  const int64_t seq = data.max_length > 0 ? data.max_length : 128;
  b.flops_per_sample = decoder_forward_flops(spec, seq);
  // the logits and their gradient, fp32
  b.head_bytes_per_sample = 2.0 * 4.0 * double(seq) * double(spec.vocab_size);
  // Recomputing the blocks keeps each block's input (fp32) and, during one
  // block's backward, that block's activations.
  b.recompute_bytes_per_sample = transformer_activation_bytes(1, seq, spec.hidden, spec.heads) +
                                 4.0 * double(spec.layers) * double(seq) * double(spec.hidden);
  b.activation_bytes_per_sample =
      transformer_activation_bytes(spec.layers, seq, spec.hidden, spec.heads) + b.head_bytes_per_sample;
  b.layers = spec.layers;
  b.dims = {{"arch", "gpt"},
            {"style", spec.style},
            {"norm", spec.norm},
            {"positions", spec.positions},
            {"mlp", spec.mlp},
            {"tie_embeddings", spec.tie_embeddings},
            {"vocab_size", spec.vocab_size},
            {"max_positions", spec.max_positions},
            {"hidden", spec.hidden},
            {"layers", spec.layers},
            {"heads", spec.heads},
            {"kv_heads", spec.kv_heads},
            {"intermediate", spec.intermediate},
            {"norm_eps", spec.norm_eps},
            {"training_flops_per_token_rule", decoder_training_flops_per_token_rule(spec, seq)}};
  if (spec.positions == "rotary") b.dims["rope_theta"] = spec.rope_theta;
  char buf[160];
  std::snprintf(buf, sizeof buf, "%.2f MFLOP/token fwd at %lld tokens", decoder_forward_flops(spec, seq) / double(seq) / 1e6,
                static_cast<long long>(seq));
  b.summary = "== model: decoder (" + spec.style + " layout, " + spec.norm + ", " + spec.positions + " positions, " +
              spec.mlp + ") " + std::to_string(spec.layers) + " x " + std::to_string(spec.hidden) + ", heads " +
              std::to_string(spec.heads) + " (" + std::to_string(spec.kv_heads) + " key-value), intermediate " +
              std::to_string(spec.intermediate) + ", vocab " + std::to_string(spec.vocab_size) + " | " +
              std::to_string(count_parameters(*model)) + " parameters | " + buf;
  b.module = model;
  return b;
}

data::CollateOptions collate(const BuiltModel& built, const config::DataConfig& d) {
  const int64_t positions = built.dims.at("max_positions").get<int64_t>();
  if (d.max_length > positions) {
    throw ConfigError("data.max_length: " + std::to_string(d.max_length) + " tokens exceed the model's " +
                      std::to_string(positions) + " positions (model.max_positions)");
  }
  return {};
}

std::vector<PresetRow> preset_rows() {
  std::vector<PresetRow> rows;
  for (const auto& name : decoder_preset_names()) {
    const auto s = decoder_preset(name);
    char shape[200];
    std::snprintf(shape, sizeof shape, "%s layout, %d x %d, heads %d (%d key-value), intermediate %d, vocab %lld, %lld positions",
                  s.style.c_str(), s.layers, s.hidden, s.heads, s.kv_heads, s.intermediate,
                  static_cast<long long>(s.vocab_size), static_cast<long long>(s.max_positions));
    rows.push_back({name, shape, decoder_param_count(s), decoder_forward_flops(s, 256) / 256.0, "token (at 256)"});
  }
  return rows;
}

}  // namespace gpt_detail

ModelFamily gpt_family() {
  ModelFamily f;
  f.info.arch = "gpt";
  f.info.input = "tokens";
  f.info.head = "vocab";
  f.info.summary = "decoder-only language models in GPT-2's or Llama's layout (causal attention, next-token logits)";
  f.info.presets = decoder_preset_names();
  f.info.formats = {};
  f.info.check = gpt_detail::check;
  f.build = gpt_detail::build;
  f.collate = gpt_detail::collate;
  f.preset_rows = gpt_detail::preset_rows;
  f.adapt = [](const NamedTensors&, const std::string&, const std::string& source, std::vector<std::string>&,
               std::string&) -> NamedTensors {
    throw ConfigError("model.init: gpt reads no safetensors file yet (" + source +
                      "); its pretrained weights come as GGUF ({\"gguf\": PATH})");
  };
  f.gguf = decoder_from_gguf;
  return f;
}

}  // namespace accel::models
