// The BERT and DistilBERT classifiers: published parameter counts, Hugging
// Face's parameter names, the forward against a reference written with the
// explicit ops on the same weights, the real all-MiniLM-L6-v2 against
// transformers' hidden states (tests/data/minilm_reference.json), padding
// that changes no sample's logits, the masked fused kernel against the
// explicit masked attention on every ISA, and HF safetensors both ways.
// torch first: glog (through torch) defines CHECK, doctest must win.
#include <torch/torch.h>

#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "accel/util/json.h"

#include "accel/config/run_config.h"
#include "accel/data/catalog.h"
#include "accel/kernels/attention.h"
#include "accel/models/attention.h"
#include "accel/models/bert.h"
#include "accel/models/pretrained.h"
#include "accel/models/safetensors.h"
#include "accel/models/weights.h"
#include "accel/util/errors.h"
#include "support/temp_dir.h"

namespace fs = std::filesystem;
using namespace accel::models;

namespace {

struct Restore {
  ~Restore() {
    accel::kernels::attention_force_isa("");
    set_attention_impl(AttentionImpl::Auto);
  }
};

TextSpec tiny(const std::string& arch, double dropout = 0.0) {
  auto s = text_preset(arch, arch == "bert" ? "bert_tiny" : "distilbert_tiny");
  s.dropout = s.attention_dropout = s.classifier_dropout = dropout;
  return s;
}

TextClassifier model_of(const TextSpec& s, uint64_t seed = 1) {
  torch::manual_seed(seed);
  TextClassifier m(s);
  m->eval();
  return m;
}

// A right-padded batch: row b holds lengths[b] tokens ([CLS] ... [SEP]).
std::pair<torch::Tensor, torch::Tensor> batch(const std::vector<int64_t>& lengths, int64_t width,
                                              uint64_t seed = 3) {
  torch::manual_seed(seed);
  auto ids = torch::randint(1000, 5000, {int64_t(lengths.size()), width});
  auto mask = torch::zeros({int64_t(lengths.size()), width}, torch::kLong);
  for (size_t b = 0; b < lengths.size(); ++b) {
    ids[b][0] = 101;
    ids[b][lengths[b] - 1] = 102;
    if (lengths[b] < width) ids[b].narrow(0, lengths[b], width - lengths[b]).fill_(0);
    mask[b].narrow(0, 0, lengths[b]).fill_(1);
  }
  return {ids, mask};
}

// BERT / DistilBERT written out with explicit ops over the model's own
// parameters: the reference the model's forward must equal.
torch::Tensor reference_logits(TextClassifierImpl& m, const torch::Tensor& ids,
                               const torch::Tensor& mask) {
  const auto& s = m.spec();
  const int64_t B = ids.size(0), S = ids.size(1), H = s.hidden, nh = s.heads, dh = H / nh;
  auto ln = [&](const torch::Tensor& x, const torch::nn::LayerNorm& l) {
    return torch::layer_norm(x, {H}, l->weight, l->bias, s.layer_norm_eps);
  };
  auto x = torch::embedding(m.word_embeddings->weight, ids) +
           m.position_embeddings->weight.narrow(0, 0, S).unsqueeze(0);
  if (s.bert()) x = x + m.token_type_embeddings->weight[0];
  x = ln(x, m.embedding_norm);
  const auto additive = (1.0 - mask.to(torch::kFloat)).view({B, 1, 1, S}) * -1e30;
  for (auto& layer : m.layers) {
    auto split = [&](const torch::nn::Linear& l) {
      return torch::linear(x, l->weight, l->bias).view({B, S, nh, dh}).transpose(1, 2);
    };
    const auto q = split(layer->query), k = split(layer->key), v = split(layer->value);
    const auto scores = torch::matmul(q, k.transpose(-1, -2)) / std::sqrt(double(dh)) + additive;
    const auto ctx = torch::matmul(torch::softmax(scores, -1), v).transpose(1, 2).reshape({B, S, H});
    const auto h1 = ln(torch::linear(ctx, layer->attention_out->weight, layer->attention_out->bias) + x,
                       layer->attention_norm);
    const auto f = torch::linear(torch::gelu(torch::linear(h1, layer->ffn_in->weight, layer->ffn_in->bias)),
                                 layer->ffn_out->weight, layer->ffn_out->bias);
    x = ln(f + h1, layer->ffn_norm);
  }
  auto h = torch::linear(x.select(1, 0), m.pooler->weight, m.pooler->bias);
  h = s.bert() ? torch::tanh(h) : torch::relu(h);
  return torch::linear(h, m.classifier->weight, m.classifier->bias);
}

std::set<std::string> names_of(torch::nn::Module& m) {
  std::set<std::string> out;
  for (const auto& kv : m.named_parameters(true)) out.insert(kv.key());
  for (const auto& kv : m.named_buffers(true)) out.insert(kv.key());
  return out;
}

// HF's state dict of a BertForSequenceClassification / DistilBertForSequenceClassification.
std::set<std::string> hf_names(const std::string& arch, int layers) {
  std::set<std::string> n;
  auto wb = [&](const std::string& p) {
    n.insert(p + ".weight");
    n.insert(p + ".bias");
  };
  if (arch == "bert") {
    n.insert("bert.embeddings.word_embeddings.weight");
    n.insert("bert.embeddings.position_embeddings.weight");
    n.insert("bert.embeddings.token_type_embeddings.weight");
    wb("bert.embeddings.LayerNorm");
    for (int i = 0; i < layers; ++i) {
      const std::string l = "bert.encoder.layer." + std::to_string(i) + ".";
      for (const char* p : {"attention.self.query", "attention.self.key", "attention.self.value",
                            "attention.output.dense", "attention.output.LayerNorm",
                            "intermediate.dense", "output.dense", "output.LayerNorm"})
        wb(l + p);
    }
    wb("bert.pooler.dense");
  } else {
    n.insert("distilbert.embeddings.word_embeddings.weight");
    n.insert("distilbert.embeddings.position_embeddings.weight");
    wb("distilbert.embeddings.LayerNorm");
    for (int i = 0; i < layers; ++i) {
      const std::string l = "distilbert.transformer.layer." + std::to_string(i) + ".";
      for (const char* p : {"attention.q_lin", "attention.k_lin", "attention.v_lin", "attention.out_lin",
                            "sa_layer_norm", "ffn.lin1", "ffn.lin2", "output_layer_norm"})
        wb(l + p);
    }
    wb("pre_classifier");
  }
  wb("classifier");
  return n;
}

}  // namespace

TEST_CASE("bert: bert_base and distilbert_base have the published parameter counts") {
  const auto bert = text_preset("bert", "bert_base"), distil = text_preset("distilbert", "distilbert_base");
  // bert-base-uncased's BertModel and distilbert-base-uncased's DistilBertModel
  // (keras-hub presets and the model cards: 109,482,240 and 66,362,880).
  CHECK(text_encoder_param_count(bert) == 109482240);
  CHECK(text_encoder_param_count(distil) == 66362880);
  // With the sequence-classification heads of 2 labels.
  CHECK(text_param_count(bert) == 109483778);
  CHECK(text_param_count(distil) == 66955010);
  for (const char* arch : {"bert", "distilbert"}) {
    auto s = tiny(arch);
    CHECK(count_parameters(*model_of(s)) == text_param_count(s));
  }
  CHECK(count_parameters(*model_of(text_preset("bert", "minilm_l6_h384"))) == 22713986);
}

TEST_CASE("bert: parameter names are transformers' for both families") {
  for (const char* arch : {"bert", "distilbert"}) {
    CAPTURE(arch);
    auto m = model_of(tiny(arch));
    CHECK(names_of(*m) == hf_names(arch, 2));
    // FSDP units hold every parameter once: embeddings, each layer, the head.
    const auto units = m->wrap_units();
    CHECK(units.size() == 4);
    size_t params = 0;
    for (const auto& u : units) params += u.params.size();
    CHECK(params == m->named_parameters(true).size());
    CHECK(units.front().name == "embeddings");
  }
}

TEST_CASE("bert: the forward equals the explicit ops on the same weights, padding masked") {
  Restore restore;
  for (const char* arch : {"bert", "distilbert"}) {
    for (auto impl : {AttentionImpl::Auto, AttentionImpl::Explicit}) {
      CAPTURE(arch);
      set_attention_impl(impl);
      auto m = model_of(tiny(arch), 11);
      auto [ids, mask] = batch({7, 3, 12}, 12);
      torch::NoGradGuard g;
      const auto got = m->forward(ids, mask);
      const auto want = reference_logits(*m, ids, mask);
      CHECK(torch::allclose(got, want, 1e-4, 1e-5));
    }
  }
}

TEST_CASE("bert: padding does not change a sample's logits") {
  Restore restore;
  for (const char* arch : {"bert", "distilbert"}) {
    for (auto impl : {AttentionImpl::Auto, AttentionImpl::Explicit}) {
      CAPTURE(arch);
      set_attention_impl(impl);
      auto m = model_of(tiny(arch), 5);
      torch::NoGradGuard g;
      auto [ids, mask] = batch({5, 16, 9}, 16, 8);
      const auto padded = m->forward(ids, mask);
      for (int64_t b = 0; b < 3; ++b) {
        const int64_t n = mask[b].sum().item<int64_t>();
        const auto alone = m->forward(ids[b].narrow(0, 0, n).unsqueeze(0), mask[b].narrow(0, 0, n).unsqueeze(0));
        CHECK(torch::allclose(alone[0], padded[b], 1e-5, 1e-5));
      }
    }
  }
}

TEST_CASE("bert: the real all-MiniLM-L6-v2 gives transformers' hidden states on a padded batch") {
  const auto dir = accel::data::text_data_dir() / "all-MiniLM-L6-v2";
  REQUIRE_MESSAGE(fs::exists(dir / "model.safetensors"), "run scripts/setup.sh");
  std::ifstream in(std::string(ACCEL_SOURCE_DIR) + "/tests/data/minilm_reference.json");
  const auto ref = nlohmann::json::parse(in);
  auto m = model_of(text_preset("bert", "minilm_l6_h384"));
  const auto report = load_pretrained(*m, dir / "model.safetensors", "auto", true);
  CHECK(report.loaded == 103);
  CHECK(report.head_new);
  CHECK(report.dropped == std::vector<std::string>{"embeddings.position_ids"});
  const int64_t width = ref["padded_length"];
  const auto& cases = ref["cases"];
  auto ids = torch::zeros({int64_t(cases.size()), width}, torch::kLong);
  auto mask = torch::zeros_like(ids);
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto v = cases[i]["ids"].get<std::vector<int64_t>>();
    for (size_t j = 0; j < v.size(); ++j) ids[int64_t(i)][int64_t(j)] = v[j];
    mask[int64_t(i)].narrow(0, 0, int64_t(v.size())).fill_(1);
  }
  torch::NoGradGuard g;
  const auto h = m->encode(ids, mask);
  for (size_t i = 0; i < cases.size(); ++i) {
    CAPTURE(cases[i]["text"].get<std::string>());
    const int64_t n = int64_t(cases[i]["ids"].size()), b = int64_t(i);
    const auto cls = torch::tensor(cases[i]["cls16"].get<std::vector<float>>());
    const auto last = torch::tensor(cases[i]["last16"].get<std::vector<float>>());
    CHECK(torch::allclose(h[b][0].narrow(0, 0, 16), cls, 0, 2e-5));
    CHECK(torch::allclose(h[b][n - 1].narrow(0, 0, 16), last, 0, 2e-5));
    CHECK(h[b].narrow(0, 0, n).sum().item<double>() ==
          doctest::Approx(cases[i]["valid_sum"].get<double>()).epsilon(1e-4).scale(1.0));
  }
}

TEST_CASE("bert: a model saved with Hugging Face names loads back bitwise, with or without the base prefix") {
  accel_test::TempDir dir;
  for (const char* arch : {"bert", "distilbert"}) {
    CAPTURE(arch);
    auto a = model_of(tiny(arch), 1), b = model_of(tiny(arch), 2);
    NamedTensors state;
    for (const auto& kv : a->named_parameters(true)) state[kv.key()] = kv.value().detach().clone();
    const auto file = dir / (std::string(arch) + ".safetensors");
    write_safetensors(file, state, {{"format", "pt"}});
    const auto report = load_pretrained(*b, file, "hf", true);
    CHECK_FALSE(report.head_new);
    for (const auto& kv : a->named_parameters(true)) CHECK(torch::equal(kv.value(), b->named_parameters(true)[kv.key()]));
    // The encoder alone, as BertModel / DistilBertModel save it: no prefix, no head.
    NamedTensors bare;
    const std::string prefix = std::string(arch) + ".";
    for (const auto& [k, v] : state)
      if (k.rfind(prefix, 0) == 0) bare[k.substr(prefix.size())] = v;
    write_safetensors(dir / "bare.safetensors", bare, {{"format", "pt"}});
    auto c = model_of(tiny(arch), 3);
    const auto r2 = load_pretrained(*c, dir / "bare.safetensors", "auto", true);
    CHECK(r2.head_new);
    CHECK(torch::equal(c->word_embeddings->weight, a->word_embeddings->weight));
  }
}

TEST_CASE("bert: a DistilBERT masked-LM file loads without its pretraining head, and a file of the other family is named") {
  accel_test::TempDir dir;
  auto src = model_of(tiny("distilbert"), 4);
  NamedTensors state;
  for (const auto& kv : src->named_parameters(true)) {
    if (kv.key().rfind("distilbert.", 0) == 0) state[kv.key()] = kv.value().detach().clone();
  }
  // distilbert-base-uncased's file: the encoder with its prefix and the MLM head.
  state["vocab_transform.weight"] = torch::randn({32, 32});
  state["vocab_transform.bias"] = torch::randn({32});
  state["vocab_layer_norm.weight"] = torch::ones({32});
  state["vocab_layer_norm.bias"] = torch::zeros({32});
  state["vocab_projector.weight"] = torch::randn({30522, 32});
  state["vocab_projector.bias"] = torch::zeros({30522});
  const auto file = dir / "distilbert-mlm.safetensors";
  write_safetensors(file, state, {{"format", "pt"}});
  auto m = model_of(tiny("distilbert"), 9);
  const auto r = load_pretrained(*m, file, "auto", true);
  CHECK(r.head_new);
  CHECK(r.dropped.size() == 6);
  CHECK(torch::equal(m->layers[1]->ffn_out->weight, src->layers[1]->ffn_out->weight));
  auto bert = model_of(tiny("bert"));
  try {
    load_pretrained(*bert, file, "auto", true);
    FAIL("no error");
  } catch (const accel::ConfigError& e) {
    CHECK(std::string(e.what()).find("set model.arch \"distilbert\"") != std::string::npos);
  }
}

TEST_CASE("bert: exported weights get transformers' config.json with the dims of their tensors") {
  for (const char* arch : {"bert", "distilbert"}) {
    CAPTURE(arch);
    auto m = model_of(tiny(arch));
    NamedTensors t;
    for (const auto& kv : m->named_parameters(true)) t[kv.key()] = kv.value();
    const nlohmann::json section = {{"preset", std::string(arch) + "_tiny"}, {"heads", 0}, {"dropout", 0.1},
                                    {"attention_dropout", 0.1}, {"classifier_dropout", 0.2}};
    const auto c = text_hf_config(arch, section, t, {"rotten", "fresh"});
    CHECK(c["vocab_size"] == 30522);
    CHECK(c["max_position_embeddings"] == 512);
    CHECK(c["id2label"]["1"] == "fresh");
    CHECK(c["label2id"]["rotten"] == 0);
    if (std::string(arch) == "bert") {
      CHECK(c["architectures"][0] == "BertForSequenceClassification");
      CHECK(c["hidden_size"] == 32);
      CHECK(c["num_hidden_layers"] == 2);
      CHECK(c["num_attention_heads"] == 2);
      CHECK(c["intermediate_size"] == 64);
      CHECK(c["type_vocab_size"] == 2);
    } else {
      CHECK(c["architectures"][0] == "DistilBertForSequenceClassification");
      CHECK(c["dim"] == 32);
      CHECK(c["n_layers"] == 2);
      CHECK(c["hidden_dim"] == 64);
      CHECK(c["seq_classif_dropout"] == 0.2);
    }
  }
}
