// Text encoders with Hugging Face's structure and parameter names, so a state
// dict maps one to one onto transformers' (and a model accel-bench saves
// loads there):
//   bert:       BertForSequenceClassification: bert.embeddings (word, position,
//               token type, LayerNorm), bert.encoder.layer.N (post-LayerNorm
//               self-attention and intermediate/output), bert.pooler, classifier
//   distilbert: DistilBertForSequenceClassification: distilbert.embeddings
//               (word, position, LayerNorm), distilbert.transformer.layer.N
//               (attention.q_lin/k_lin/v_lin/out_lin, sa_layer_norm,
//               ffn.lin1/lin2, output_layer_norm), pre_classifier, classifier
// Exact (erf) GELU, layer-norm eps 1e-12, key-padding-masked attention on
// every path (accel/models/attention.h). Inputs "input_ids" and
// "attention_mask" (accel/data/batch.h); token types are all 0 (single
// sentences).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "accel/models/attention.h"
#include "accel/models/family.h"
#include "accel/models/model.h"

namespace accel::models {

struct TextSpec {
  std::string arch = "bert";  // "bert" | "distilbert"
  int64_t vocab_size = 30522;
  int64_t max_positions = 512;
  int64_t type_vocab_size = 2;  // bert only
  int hidden = 768;
  int layers = 12;
  int heads = 12;
  int intermediate = 3072;
  int num_classes = 2;
  double dropout = 0.1;             // embeddings and the residual branches
  double attention_dropout = 0.1;   // attention probabilities
  double classifier_dropout = 0.1;  // before the classifier (DistilBERT's seq_classif_dropout: 0.2)
  int64_t pad_id = 0;               // [PAD]: the word embedding's padding_idx
  double layer_norm_eps = 1e-12;
  bool bert() const { return arch == "bert"; }
};

// Named architectures of a family: "minilm_l6_h384" (all-MiniLM-L6-v2, BERT),
// "bert_base", "bert_tiny"; "distilbert_base", "distilbert_tiny".
TextSpec text_preset(const std::string& arch, const std::string& name);
std::vector<std::string> text_preset_names(const std::string& arch);
void validate_text_spec(const TextSpec& spec);  // ConfigError naming the field

// Analytic forward FLOPs of one sequence of `seq` tokens (2 per multiply-add:
// projections, attention scores and weighted sums, FFN, pooler/pre-classifier
// and classifier; embeddings, norms, softmax and activations ignored).
double text_forward_flops(const TextSpec& spec, int64_t seq);
// Parameters without building the model, and those of the encoder alone
// (BertModel / DistilBertModel: what the model cards publish).
int64_t text_param_count(const TextSpec& spec);
int64_t text_encoder_param_count(const TextSpec& spec);

// One encoder layer: post-LayerNorm self-attention and feed-forward blocks,
// under either family's module names.
class TextLayerImpl : public torch::nn::Module {
 public:
  explicit TextLayerImpl(const TextSpec& spec);
  torch::Tensor forward(const torch::Tensor& x, const KeyPadding& padding);
  torch::nn::Linear query{nullptr}, key{nullptr}, value{nullptr}, attention_out{nullptr};
  torch::nn::Linear ffn_in{nullptr}, ffn_out{nullptr};
  torch::nn::LayerNorm attention_norm{nullptr}, ffn_norm{nullptr};

 private:
  TextSpec spec_;
};
TORCH_MODULE(TextLayer);

// Wrap units (for FSDP): 0 = embeddings, 1..layers = encoder layers,
// layers+1 = head (pooler + classifier, or pre_classifier + classifier).
class TextClassifierImpl : public Model {
 public:
  explicit TextClassifierImpl(const TextSpec& spec);
  // input_ids int64 [B, S], attention_mask [B, S] (undefined: no padding)
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask);
  torch::Tensor forward(const data::Inputs& inputs) override;
  std::string arch() const override { return spec_.arch; }
  int num_classes() const override { return spec_.num_classes; }
  void replace_head(int num_classes) override;
  std::vector<std::string> head_tensors() const override;
  double forward_flops(const data::Inputs& inputs) const override;
  std::vector<dist::WrapUnit> wrap_units() override;
  void set_unit_hooks(const dist::UnitHooks* hooks) override { hooks_ = hooks; }
  const TextSpec& spec() const { return spec_; }
  // The final hidden states [B, S, hidden] (before any head), for tests.
  torch::Tensor encode(const torch::Tensor& input_ids, const torch::Tensor& attention_mask);

  torch::nn::Embedding word_embeddings{nullptr}, position_embeddings{nullptr},
      token_type_embeddings{nullptr};
  torch::nn::LayerNorm embedding_norm{nullptr};
  std::vector<TextLayer> layers;
  torch::nn::Linear pooler{nullptr};  // bert: pooler.dense; distilbert: pre_classifier
  torch::nn::Linear classifier{nullptr};

 private:
  torch::Tensor embed(const torch::Tensor& input_ids);
  std::string base() const { return spec_.bert() ? "bert." : "distilbert."; }
  TextSpec spec_;
  std::shared_ptr<torch::nn::Module> base_;  // "bert" / "distilbert"
  const dist::UnitHooks* hooks_ = nullptr;
};
TORCH_MODULE(TextClassifier);

// transformers' config.json for exported weights of this family: BertConfig
// or DistilBertConfig fields, dims from the tensors, dropouts and heads from
// the resolved model section, id2label/label2id from the class names.
nlohmann::json text_hf_config(const std::string& arch, const nlohmann::json& model_section,
                              const NamedTensors& tensors,
                              const std::vector<std::string>& class_names);

// What the config.json beside pretrained weights says that the built model
// (its dims) does not: "num_attention_heads 6 (the model: heads 12)", ...
std::vector<std::string> text_config_disagreements(const std::string& arch,
                                                   const nlohmann::json& hf_config,
                                                   const nlohmann::json& dims);

// The families' registry rows.
ModelFamily bert_family();
ModelFamily distilbert_family();

// Hugging Face names of a pretrained file onto this model's: the base-model
// prefix ("bert." / "distilbert.") added where the file has none (an encoder
// saved as BertModel), pretraining heads (cls.*, vocab_transform,
// vocab_layer_norm, vocab_projector) and position_ids buffers left out (in
// `dropped`), TF-era LayerNorm gamma/beta renamed weight/bias.
NamedTensors text_adapt(const std::string& arch, const NamedTensors& source,
                        const std::string& format, const std::string& source_name,
                        std::vector<std::string>& dropped, std::string& format_used);

}  // namespace accel::models
