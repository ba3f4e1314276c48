// BERT and DistilBERT sequence classifiers in Hugging Face's layout (bert.h),
// initialised as transformers' _init_weights does (normal(0, 0.02) linear
// and embedding weights, zero biases and padding row, unit LayerNorms), and
// their family rows.
#include "accel/models/bert.h"

#include <cstdio>
#include <map>

#include "accel/util/errors.h"
#include "name_utils.h"

namespace accel::models {
namespace F = torch::nn::functional;
using detail::child;
using detail::project;

namespace {

constexpr double kInitStd = 0.02;  // BertConfig / DistilBertConfig initializer_range

TextSpec make(const char* arch, int64_t vocab, int64_t positions, int hidden, int layers,
              int heads, int intermediate, double classifier_dropout) {
  TextSpec s;
  s.arch = arch;
  s.vocab_size = vocab;
  s.max_positions = positions;
  s.hidden = hidden;
  s.layers = layers;
  s.heads = heads;
  s.intermediate = intermediate;
  s.classifier_dropout = classifier_dropout;
  return s;
}

// Ordered as --explain and errors list them; a family's first is its default.
const std::vector<std::pair<std::string, TextSpec>>& presets() {
  static const std::vector<std::pair<std::string, TextSpec>> table = {
      // sentence-transformers/all-MiniLM-L6-v2 (nreimers/MiniLM-L6-H384-uncased):
      // BERT, 6 x 384, 12 heads, 1536, BERT's uncased vocab.
      {"minilm_l6_h384", make("bert", 30522, 512, 384, 6, 12, 1536, 0.1)},
      {"bert_base", make("bert", 30522, 512, 768, 12, 12, 3072, 0.1)},
      // Tests: the real vocabulary (so real text runs through it), tiny layers.
      {"bert_tiny", make("bert", 30522, 512, 32, 2, 2, 64, 0.1)},
      {"distilbert_base", make("distilbert", 30522, 512, 768, 6, 12, 3072, 0.2)},
      {"distilbert_tiny", make("distilbert", 30522, 512, 32, 2, 2, 64, 0.2)},
  };
  return table;
}

torch::nn::Linear linear(int64_t in, int64_t out) {
  auto l = torch::nn::Linear(in, out);
  torch::NoGradGuard guard;
  l->weight.normal_(0.0, kInitStd);
  l->bias.zero_();
  return l;
}

torch::nn::LayerNorm layer_norm(const TextSpec& s) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({s.hidden}).eps(s.layer_norm_eps));
}

torch::nn::Embedding embedding(int64_t n, int64_t dim, int64_t padding_idx = -1) {
  auto opts = torch::nn::EmbeddingOptions(n, dim);
  if (padding_idx >= 0) opts.padding_idx(padding_idx);
  auto e = torch::nn::Embedding(opts);
  torch::NoGradGuard guard;
  e->weight.normal_(0.0, kInitStd);
  if (padding_idx >= 0) e->weight[padding_idx].zero_();
  return e;
}

}  // namespace

// ---- specs ---------------------------------------------------------------------------------

TextSpec text_preset(const std::string& arch, const std::string& name) {
  for (const auto& [n, s] : presets()) {
    if (n == name && s.arch == arch) return s;
  }
  std::string names;
  for (const auto& n : text_preset_names(arch)) names += (names.empty() ? "" : ", ") + n;
  throw ConfigError("model.preset: unknown " + arch + " preset \"" + name + "\"; known: " + names);
}

std::vector<std::string> text_preset_names(const std::string& arch) {
  std::vector<std::string> out;
  for (const auto& [n, s] : presets()) {
    if (s.arch == arch) out.push_back(n);
  }
  return out;
}

void validate_text_spec(const TextSpec& s) {
  auto fail = [](const std::string& msg) { throw ConfigError(msg); };
  if (s.vocab_size < 1) fail("model.vocab_size: must be >= 1");
  if (s.max_positions < 2) fail("model.max_positions: must be >= 2 ([CLS] and [SEP])");
  if (s.bert() && s.type_vocab_size < 1) fail("model.type_vocab_size: must be >= 1");
  if (s.hidden < 1 || s.layers < 1 || s.heads < 1 || s.intermediate < 1) {
    fail("model: hidden, layers, heads and intermediate must be >= 1");
  }
  if (s.hidden % s.heads != 0) {
    fail("model.heads: " + std::to_string(s.heads) + " does not divide model.hidden " +
         std::to_string(s.hidden));
  }
  if (s.num_classes < 1) fail("model.num_classes: must be >= 1");
  if (s.pad_id < 0 || s.pad_id >= s.vocab_size) {
    fail("model.vocab_size: " + std::to_string(s.vocab_size) + " has no place for the [PAD] id " +
         std::to_string(s.pad_id));
  }
}

double text_forward_flops(const TextSpec& s, int64_t seq) {
  const double S = double(seq), H = s.hidden, I = s.intermediate;
  const double per_layer = 2.0 * S * H * 3.0 * H   // q, k, v
                           + 2.0 * 2.0 * S * S * H  // scores and weighted sum
                           + 2.0 * S * H * H        // attention output
                           + 2.0 * 2.0 * S * H * I;  // feed-forward
  return s.layers * per_layer + 2.0 * H * H /*pooler or pre_classifier*/ + 2.0 * H * s.num_classes;
}

int64_t text_encoder_param_count(const TextSpec& s) {
  const int64_t H = s.hidden, I = s.intermediate;
  int64_t embeddings = s.vocab_size * H + s.max_positions * H + 2 * H;
  if (s.bert()) embeddings += s.type_vocab_size * H;
  const int64_t layer = 4 * (H * H + H)    // q, k, v, output
                        + 2 * (2 * H)      // two LayerNorms
                        + H * I + I + I * H + H;  // feed-forward
  const int64_t pooler = s.bert() ? H * H + H : 0;  // BertModel includes its pooler
  return embeddings + s.layers * layer + pooler;
}

int64_t text_param_count(const TextSpec& s) {
  const int64_t H = s.hidden;
  const int64_t pre_classifier = s.bert() ? 0 : H * H + H;
  return text_encoder_param_count(s) + pre_classifier + H * s.num_classes + s.num_classes;
}

// ---- the modules ----------------------------------------------------------------------------

TextLayerImpl::TextLayerImpl(const TextSpec& s) : spec_(s) {
  const int64_t H = s.hidden, I = s.intermediate;
  query = linear(H, H);
  key = linear(H, H);
  value = linear(H, H);
  attention_out = linear(H, H);
  ffn_in = linear(H, I);
  ffn_out = linear(I, H);
  attention_norm = layer_norm(s);
  ffn_norm = layer_norm(s);
  if (s.bert()) {
    auto attention = child(*this, "attention");
    auto self = child(*attention, "self");
    self->register_module("query", query);
    self->register_module("key", key);
    self->register_module("value", value);
    auto out = child(*attention, "output");
    out->register_module("dense", attention_out);
    out->register_module("LayerNorm", attention_norm);
    child(*this, "intermediate")->register_module("dense", ffn_in);
    auto output = child(*this, "output");
    output->register_module("dense", ffn_out);
    output->register_module("LayerNorm", ffn_norm);
  } else {
    auto attention = child(*this, "attention");
    attention->register_module("q_lin", query);
    attention->register_module("k_lin", key);
    attention->register_module("v_lin", value);
    attention->register_module("out_lin", attention_out);
    register_module("sa_layer_norm", attention_norm);
    auto ffn = child(*this, "ffn");
    ffn->register_module("lin1", ffn_in);
    ffn->register_module("lin2", ffn_out);
    register_module("output_layer_norm", ffn_norm);
  }
}


torch::Tensor TextLayerImpl::forward(const torch::Tensor& x, const KeyPadding& padding) {
  const bool train = is_training();
  // q, k and v in one projection, so the fused kernel reads them in place.
  const auto w = torch::cat({query->weight, key->weight, value->weight});
  const auto b = torch::cat({query->bias, key->bias, value->bias});
  const auto ctx = self_attention(project(x, w, b), spec_.heads, spec_.attention_dropout,
                                  train, padding);
  auto a = project(ctx, attention_out->weight, attention_out->bias);
  // BertSelfOutput drops out the projection; DistilBERT's out_lin has none.
  if (spec_.bert()) a = models::dropout(a, spec_.dropout, train);
  const auto h1 = attention_norm->forward(a + x);
  auto f = project(torch::gelu(project(h1, ffn_in->weight, ffn_in->bias)), ffn_out->weight, ffn_out->bias);
  f = models::dropout(f, spec_.dropout, train);
  return ffn_norm->forward(f + h1);
}

TextClassifierImpl::TextClassifierImpl(const TextSpec& s) : spec_(s) {
  validate_text_spec(s);
  base_ = child(*this, s.bert() ? "bert" : "distilbert");
  auto emb = child(*base_, "embeddings");
  word_embeddings = emb->register_module("word_embeddings", embedding(s.vocab_size, s.hidden, s.pad_id));
  position_embeddings =
      emb->register_module("position_embeddings", embedding(s.max_positions, s.hidden));
  if (s.bert()) {
    token_type_embeddings =
        emb->register_module("token_type_embeddings", embedding(s.type_vocab_size, s.hidden));
  }
  embedding_norm = emb->register_module("LayerNorm", layer_norm(s));
  auto stack = child(*base_, s.bert() ? "encoder" : "transformer");
  auto list = child(*stack, "layer");
  for (int i = 0; i < s.layers; ++i) layers.push_back(list->register_module(std::to_string(i), TextLayer(s)));
  if (s.bert()) {
    pooler = child(*base_, "pooler")->register_module("dense", linear(s.hidden, s.hidden));
  } else {
    pooler = register_module("pre_classifier", linear(s.hidden, s.hidden));
  }
  classifier = register_module("classifier", linear(s.hidden, s.num_classes));
}

void TextClassifierImpl::replace_head(int num_classes) {
  auto fresh = linear(spec_.hidden, num_classes);
  fresh->to(classifier->weight.device(), classifier->weight.scalar_type());
  replace_module("classifier", fresh);
  classifier = fresh;
  spec_.num_classes = num_classes;
}

std::vector<std::string> TextClassifierImpl::head_tensors() const {
  // The final layer first (its class count may differ); then the rest of the
  // task head, which an encoder without one (a BertModel / DistilBertModel
  // file) lacks too. BERT's pooler is part of its encoder (BertModel has it).
  std::vector<std::string> names = {"classifier.weight", "classifier.bias"};
  if (!spec_.bert()) {
    names.push_back("pre_classifier.weight");
    names.push_back("pre_classifier.bias");
  }
  return names;
}

torch::Tensor TextClassifierImpl::embed(const torch::Tensor& ids) {
  const int64_t S = ids.size(1);
  if (S > spec_.max_positions) {
    throw std::invalid_argument("input_ids: " + std::to_string(S) + " tokens exceed model.max_positions " +
                                std::to_string(spec_.max_positions));
  }
  const auto positions = torch::arange(S, ids.options().dtype(torch::kLong));
  auto x = word_embeddings->forward(ids);
  // Single sentences: every token type is 0 (transformers' default).
  if (spec_.bert()) x = x + token_type_embeddings->weight[0];
  x = x + position_embeddings->forward(positions);
  x = embedding_norm->forward(x);
  return models::dropout(x, spec_.dropout, is_training());
}

torch::Tensor TextClassifierImpl::encode(const torch::Tensor& ids, const torch::Tensor& mask) {
  const KeyPadding padding = mask.defined() ? key_padding(mask) : KeyPadding{};
  auto x = embed(ids);
  for (auto& layer : layers) x = layer->forward(x, padding);
  return x;
}

torch::Tensor TextClassifierImpl::forward(const torch::Tensor& ids, const torch::Tensor& mask) {
  const bool train = is_training();
  auto begin = [&](int unit) {
    if (hooks_) hooks_->before(unit);
  };
  auto end = [&](int unit, torch::Tensor out) { return hooks_ ? hooks_->after(unit, std::move(out)) : out; };
  const KeyPadding padding = mask.defined() ? key_padding(mask) : KeyPadding{};
  begin(0);
  auto x = end(0, embed(ids));
  int unit = 1;
  for (auto& layer : layers) {
    begin(unit);
    x = end(unit, layer->forward(x, padding));
    ++unit;
  }
  begin(unit);
  auto h = x.select(1, 0);  // [CLS]
  if (spec_.bert()) {
    h = torch::tanh(pooler->forward(h));  // BertPooler
  } else {
    h = torch::relu(pooler->forward(h));  // pre_classifier + ReLU
  }
  h = models::dropout(h, spec_.classifier_dropout, train);
  return end(unit, classifier->forward(h));
}

torch::Tensor TextClassifierImpl::forward(const data::Inputs& inputs) {
  const auto mask = inputs.find("attention_mask");
  return forward(data::input(inputs, "input_ids"),
                 mask == inputs.end() ? torch::Tensor() : mask->second);
}

double TextClassifierImpl::forward_flops(const data::Inputs& inputs) const {
  const torch::Tensor ids = data::input(inputs, "input_ids");  // a handle: no reference into a temporary's call (gcc 14)
  return double(ids.size(0)) * text_forward_flops(spec_, ids.size(1));
}

std::vector<dist::WrapUnit> TextClassifierImpl::wrap_units() {
  const std::string emb = base() + "embeddings.";
  const std::string layer = base() + (spec_.bert() ? "encoder.layer." : "transformer.layer.");
  std::vector<dist::WrapUnit> units(size_t(spec_.layers) + 2);
  units[0].name = "embeddings";
  for (int i = 0; i < spec_.layers; ++i) units[size_t(i) + 1].name = "layer_" + std::to_string(i);
  units.back().name = "head";
  for (const auto& kv : named_parameters(true)) {
    const std::string& n = kv.key();
    size_t u = units.size() - 1;
    if (detail::starts_with(n, emb)) {
      u = 0;
    } else if (detail::starts_with(n, layer)) {
      u = size_t(std::stoi(n.substr(layer.size()))) + 1;
    }
    units[u].params.emplace_back(n, kv.value());
  }
  return units;
}

// ---- the families ---------------------------------------------------------------------------

namespace {

void text_check(const nlohmann::json& m, const FamilyInfo::Where& where) {
  if (m["preset"] == "custom") {
    for (const char* k : {"vocab_size", "max_positions", "hidden", "layers", "heads", "intermediate"})
      if (m[k] == 0)
        throw ConfigError(where({"model.preset"}) + "model." + k +
                          ": must be set (> 0) when model.preset is \"custom\"");
  }
  const int hidden = m["hidden"], heads = m["heads"];
  if (hidden > 0 && heads > 0 && hidden % heads != 0)
    throw ConfigError(where({"model.heads", "model.hidden"}) + "model.heads: " + std::to_string(heads) +
                      " does not divide model.hidden " + std::to_string(hidden));
}

TextSpec resolve_text_spec(const std::string& arch, const config::ModelConfig& m,
                           const DataFacts& data) {
  TextSpec s;
  s.arch = arch;
  if (m.preset != "custom") s = text_preset(arch, m.preset);
  auto take = [](auto& field, auto value) {
    if (value > 0) field = value;
  };
  take(s.vocab_size, m.vocab_size);
  take(s.max_positions, m.max_positions);
  take(s.type_vocab_size, m.type_vocab_size);
  take(s.hidden, m.hidden);
  take(s.layers, m.layers);
  take(s.heads, m.heads);
  take(s.intermediate, m.intermediate);
  if (m.num_classes > 0 && m.num_classes < data.classes) {
    throw ConfigError("model.num_classes: " + std::to_string(m.num_classes) + " is fewer than the " +
                      std::to_string(data.classes) + " classes the data yields");
  }
  s.num_classes = m.num_classes > 0 ? m.num_classes : data.classes;
  s.dropout = m.dropout;
  s.attention_dropout = m.attention_dropout;
  s.classifier_dropout = m.classifier_dropout;
  s.pad_id = data.pad_id;
  if (data.vocab_size > s.vocab_size) {
    throw ConfigError("model.vocab_size: " + std::to_string(s.vocab_size) +
                      " is smaller than the tokenizer's vocab of " + std::to_string(data.vocab_size) +
                      " tokens (data.vocab)");
  }
  if (data.max_token_id >= s.vocab_size) {
    throw ConfigError("model.vocab_size: " + std::to_string(s.vocab_size) +
                      " has no embedding for token id " + std::to_string(data.max_token_id) +
                      " of the data");
  }
  validate_text_spec(s);
  return s;
}

std::string spec_line(const TextSpec& s, int64_t params) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%.2f MFLOP/token fwd at 128 tokens",
                text_forward_flops(s, 128) / 128.0 / 1e6);
  return std::string("== model: ") + (s.bert() ? "BERT" : "DistilBERT") + " " +
         std::to_string(s.layers) + " x " + std::to_string(s.hidden) + ", heads " +
         std::to_string(s.heads) + ", intermediate " + std::to_string(s.intermediate) + ", vocab " +
         std::to_string(s.vocab_size) + ", " + std::to_string(s.max_positions) + " positions, " +
         std::to_string(s.num_classes) + " classes | " + std::to_string(params) + " parameters | " + buf;
}

BuiltModel text_build(const std::string& arch, const config::ModelConfig& m, const DataFacts& data) {
  if (data.kind != "text") {
    throw ConfigError("model.arch: \"" + arch + "\" reads text, but the data is " + data.kind);
  }
  const TextSpec spec = resolve_text_spec(arch, m, data);
  check_fits_memory(text_param_count(spec),
                    "model.vocab_size " + std::to_string(spec.vocab_size) + ", max_positions " +
                        std::to_string(spec.max_positions) + ", hidden " +
                        std::to_string(spec.hidden) + ", layers " + std::to_string(spec.layers) +
                        ", intermediate " + std::to_string(spec.intermediate));
  auto model = std::make_shared<TextClassifierImpl>(spec);
  BuiltModel b;
  const int64_t seq = data.max_length > 0 ? data.max_length : 128;
  b.flops_per_sample = text_forward_flops(spec, seq);
  b.activation_bytes_per_sample = transformer_activation_bytes(spec.layers, seq, spec.hidden, spec.heads);
  b.layers = spec.layers;
  b.dims = {{"arch", arch},
            {"vocab_size", spec.vocab_size},
            {"max_positions", spec.max_positions},
            {"hidden", spec.hidden},
            {"layers", spec.layers},
            {"heads", spec.heads},
            {"intermediate", spec.intermediate},
            {"num_classes", spec.num_classes},
            {"encoder_params", text_encoder_param_count(spec)}};
  if (spec.bert()) b.dims["type_vocab_size"] = spec.type_vocab_size;
  b.summary = spec_line(spec, count_parameters(*model));
  b.module = model;
  return b;
}

data::CollateOptions text_collate(const BuiltModel& built, const config::DataConfig& d) {
  const int64_t positions = built.dims.at("max_positions").get<int64_t>();
  if (d.max_length > positions) {
    throw ConfigError("data.max_length: " + std::to_string(d.max_length) +
                      " exceeds the model's " + std::to_string(positions) +
                      " position embeddings (model.max_positions)");
  }
  data::CollateOptions o;
  o.pad_to = d.padding == "max_length" ? d.max_length : 0;
  return o;
}

std::vector<PresetRow> text_presets(const std::string& arch) {
  std::vector<PresetRow> rows;
  for (const auto& name : text_preset_names(arch)) {
    const auto s = text_preset(arch, name);
    char shape[160];
    std::snprintf(shape, sizeof shape, "%d x %d, heads %d, intermediate %d, vocab %lld, %lld positions, 2 classes",
                  s.layers, s.hidden, s.heads, s.intermediate, static_cast<long long>(s.vocab_size),
                  static_cast<long long>(s.max_positions));
    rows.push_back({name, shape, text_param_count(s), text_forward_flops(s, 128) / 128.0,
                    "token (at 128)"});
  }
  return rows;
}

ModelFamily text_family(const std::string& arch, const std::string& summary) {
  ModelFamily f;
  f.info.arch = arch;
  f.info.input = "text";
  f.info.summary = summary;
  f.info.presets = text_preset_names(arch);
  f.info.formats = {"hf"};
  f.info.check = text_check;
  f.build = [arch](const config::ModelConfig& m, const DataFacts& d) { return text_build(arch, m, d); };
  f.collate = text_collate;
  f.preset_rows = [arch] { return text_presets(arch); };
  f.adapt = [arch](const NamedTensors& source, const std::string& format, const std::string& name,
                   std::vector<std::string>& dropped, std::string& used) {
    return text_adapt(arch, source, format, name, dropped, used);
  };
  f.config_disagreements = [arch](const nlohmann::json& hf, const nlohmann::json& dims) {
    return text_config_disagreements(arch, hf, dims);
  };
  f.hf_config = [arch](const nlohmann::json& m, const NamedTensors& t,
                       const std::vector<std::string>& names) {
    return text_hf_config(arch, m, t, names);
  };
  return f;
}

}  // namespace

ModelFamily bert_family() {
  return text_family("bert", "BERT encoders with BertForSequenceClassification's head (MiniLM, BERT-base)");
}

ModelFamily distilbert_family() {
  return text_family("distilbert",
                     "DistilBERT encoders with DistilBertForSequenceClassification's head");
}

// ---- exported weights' config.json ----------------------------------------------------------

nlohmann::json text_hf_config(const std::string& arch, const nlohmann::json& m,
                              const NamedTensors& t, const std::vector<std::string>& class_names) {
  const bool bert = arch == "bert";
  const std::string base = bert ? "bert." : "distilbert.";
  auto shape = [&](const std::string& name, int dim) -> int64_t {
    auto it = t.find(name);
    if (it == t.end()) throw ConfigError("export: no tensor " + name + " in the checkpoint");
    return it->second.size(dim);
  };
  int64_t layers = 0;
  const std::string layer = base + (bert ? "encoder.layer." : "transformer.layer.");
  while (t.count(layer + std::to_string(layers) + (bert ? ".attention.self.query.weight" : ".attention.q_lin.weight"))) {
    ++layers;
  }
  const std::string first = layer + "0.";
  const int64_t labels = shape("classifier.weight", 0);
  // heads is not in any tensor's shape: the config's, else the preset's.
  int64_t heads = m.value("heads", 0);
  if (heads <= 0 && m.value("preset", std::string("custom")) != "custom") {
    heads = text_preset(arch, m.at("preset").get<std::string>()).heads;
  }
  nlohmann::json id2label = nlohmann::json::object(), label2id = nlohmann::json::object();
  for (int64_t i = 0; i < labels; ++i) {
    const std::string name = size_t(i) < class_names.size() ? class_names[size_t(i)] : "LABEL_" + std::to_string(i);
    id2label[std::to_string(i)] = name;
    label2id[name] = i;
  }
  const int64_t vocab = shape(base + "embeddings.word_embeddings.weight", 0);
  const int64_t hidden = shape(base + "embeddings.word_embeddings.weight", 1);
  const int64_t positions = shape(base + "embeddings.position_embeddings.weight", 0);
  const double dropout = m.value("dropout", 0.1), attn = m.value("attention_dropout", 0.1),
               cls = m.value("classifier_dropout", bert ? 0.1 : 0.2);
  nlohmann::json c = {{"id2label", id2label}, {"label2id", label2id}, {"vocab_size", vocab},
                      {"max_position_embeddings", positions}, {"initializer_range", kInitStd},
                      {"pad_token_id", 0}};
  if (bert) {
    c.update({{"architectures", {"BertForSequenceClassification"}}, {"model_type", "bert"},
              {"hidden_size", hidden}, {"num_hidden_layers", layers}, {"num_attention_heads", heads},
              {"intermediate_size", shape(first + "intermediate.dense.weight", 0)},
              {"hidden_act", "gelu"}, {"hidden_dropout_prob", dropout},
              {"attention_probs_dropout_prob", attn}, {"classifier_dropout", cls},
              {"type_vocab_size", shape(base + "embeddings.token_type_embeddings.weight", 0)},
              {"layer_norm_eps", 1e-12}, {"position_embedding_type", "absolute"}});
  } else {
    c.update({{"architectures", {"DistilBertForSequenceClassification"}}, {"model_type", "distilbert"},
              {"dim", hidden}, {"n_layers", layers}, {"n_heads", heads},
              {"hidden_dim", shape(first + "ffn.lin1.weight", 0)}, {"activation", "gelu"},
              {"dropout", dropout}, {"attention_dropout", attn}, {"seq_classif_dropout", cls},
              {"sinusoidal_pos_embds", false}});
  }
  return c;
}

// What a transformers config.json says that the built model does not: the
// dims (heads especially: no tensor's shape says them, so a file of 6-head
// weights loads into a 12-head model and trains a different network), the
// activation and the LayerNorm epsilon, under BERT's or DistilBERT's names.
std::vector<std::string> text_config_disagreements(const std::string& arch,
                                                   const nlohmann::json& hf,
                                                   const nlohmann::json& dims) {
  const bool bert = arch == "bert";
  std::vector<std::string> out;
  auto check = [&](const char* theirs, const char* ours) {
    if (!hf.contains(theirs) || !hf[theirs].is_number_integer() || !dims.contains(ours)) return;
    const auto a = hf[theirs].get<int64_t>(), b = dims[ours].get<int64_t>();
    if (a != b) {
      out.push_back(std::string(theirs) + " " + std::to_string(a) + " (the model: " + ours + " " +
                    std::to_string(b) + ")");
    }
  };
  check(bert ? "hidden_size" : "dim", "hidden");
  check(bert ? "num_hidden_layers" : "n_layers", "layers");
  check(bert ? "num_attention_heads" : "n_heads", "heads");
  check(bert ? "intermediate_size" : "hidden_dim", "intermediate");
  check("vocab_size", "vocab_size");
  check("max_position_embeddings", "max_positions");
  if (bert) check("type_vocab_size", "type_vocab_size");
  const char* act = bert ? "hidden_act" : "activation";
  if (hf.contains(act) && hf[act].is_string() && hf[act].get<std::string>() != "gelu") {
    out.push_back(std::string(act) + " \"" + hf[act].get<std::string>() +
                  "\" (the model computes \"gelu\")");
  }
  if (bert && hf.contains("layer_norm_eps") && hf["layer_norm_eps"].is_number()) {
    const double eps = hf["layer_norm_eps"].get<double>();
    if (std::abs(eps - 1e-12) > 1e-15) {
      out.push_back("layer_norm_eps " + nlohmann::json(eps).dump() + " (the model: 1e-12)");
    }
  }
  if (!bert && hf.value("sinusoidal_pos_embds", false)) {
    out.push_back("sinusoidal_pos_embds true (the model learns its position embeddings)");
  }
  return out;
}

// ---- pretrained names ---------------------------------------------------------------------------

NamedTensors text_adapt(const std::string& arch, const NamedTensors& source,
                        const std::string& format, const std::string& source_name,
                        std::vector<std::string>& dropped, std::string& format_used) {
  using detail::starts_with;
  const std::string where = detail::prefix(source_name);
  if (format != "auto" && format != "hf" && format != "huggingface") {
    throw ConfigError(where + "model.init_format \"" + format + "\" is not a format of model.arch \"" +
                      arch + "\" (auto, hf)");
  }
  format_used = "huggingface";
  const bool bert = arch == "bert";
  const std::string base = bert ? "bert." : "distilbert.";
  // Which family the names are: a file of the other one fails here, named,
  // rather than as a list of unexpected tensors.
  int bert_names = 0, distil_names = 0;
  for (const auto& kv : source) {
    const auto& n = kv.first;
    if (n.find("encoder.layer.") != std::string::npos && n.find("attention.self.") != std::string::npos) ++bert_names;
    if (n.find("transformer.layer.") != std::string::npos && n.find("attention.q_lin") != std::string::npos) ++distil_names;
  }
  if (bert_names == 0 && distil_names == 0) {
    std::vector<std::string> names;
    for (const auto& kv : source) names.push_back(kv.first);
    throw ConfigError(where + "no BERT (encoder.layer.N.attention.self.*) or DistilBERT "
                      "(transformer.layer.N.attention.q_lin) tensors; the file has " +
                      (names.empty() ? std::string("no tensors") : detail::name_list(names, 6)));
  }
  if (bert && bert_names == 0) {
    throw ConfigError(where + "holds DistilBERT names (transformer.layer.N); set model.arch \"distilbert\"");
  }
  if (!bert && distil_names == 0) {
    throw ConfigError(where + "holds BERT names (encoder.layer.N); set model.arch \"bert\"");
  }
  static const char* kPretrainingHeads[] = {"cls.", "vocab_transform.", "vocab_layer_norm.",
                                            "vocab_projector."};
  NamedTensors out;
  std::map<std::string, std::string> origin;
  for (const auto& [name, t] : source) {
    std::string n = name;
    bool drop = false;
    for (const char* h : kPretrainingHeads) drop = drop || starts_with(n, h);
    // Buffers transformers keeps in some versions' files; the model makes its own.
    drop = drop || (n.size() >= 12 && n.compare(n.size() - 12, 12, "position_ids") == 0);
    drop = drop || (n.size() >= 14 && n.compare(n.size() - 14, 14, "token_type_ids") == 0);
    if (drop) {
      dropped.push_back(name);
      continue;
    }
    // TF-era checkpoints name LayerNorm parameters gamma and beta.
    if (n.size() > 6 && n.compare(n.size() - 6, 6, ".gamma") == 0) n = n.substr(0, n.size() - 6) + ".weight";
    if (n.size() > 5 && n.compare(n.size() - 5, 5, ".beta") == 0) n = n.substr(0, n.size() - 5) + ".bias";
    const bool head = starts_with(n, "classifier.") || starts_with(n, "pre_classifier.");
    if (!head && !starts_with(n, base)) n = base + n;  // an encoder saved without its prefix
    auto [it, fresh] = origin.emplace(n, name);
    if (!fresh) throw ConfigError(where + "tensors " + it->second + " and " + name + " both map to " + n);
    out.emplace(n, t);
  }
  return out;
}

}  // namespace accel::models
