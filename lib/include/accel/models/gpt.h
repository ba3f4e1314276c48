// Decoder-only language models (GPT-style), with Hugging Face's structure and
// parameter names in either of two styles, so a state dict maps one to one
// onto transformers' (GPT-2's Conv1D weights transposed, as nanoGPT loads
// them):
//   gpt2:  GPT2LMHeadModel: transformer.wte, transformer.wpe (learned
//          positions), transformer.h.N (ln_1, attn.c_attn (q, k and v in one
//          projection), attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj: pre-LayerNorm,
//          tanh-approximated GELU, biases), transformer.ln_f, lm_head
//   llama: LlamaForCausalLM: model.embed_tokens, model.layers.N
//          (input_layernorm, self_attn.q_proj/k_proj/v_proj/o_proj with rotary
//          positions and grouped key-value heads, post_attention_layernorm,
//          mlp.gate_proj/up_proj/down_proj: RMSNorm, SwiGLU, no biases),
//          model.norm, lm_head
// The style sets the names and the defaults of norm, positions and MLP; each
// can be set apart from it (the names stay the style's). The output
// embedding is the input embedding's matrix where `tie_embeddings` (GPT-2,
// SmolLM2): then lm_head has no parameter of its own.
//
// Causal self-attention on every attention path (accel/models/attention.h:
// the fused CPU kernel's causal rule, SDPA's is_causal, the explicit form's
// lower-triangular mask), with an optional key-padding mask (padded
// documents). Inputs "input_ids" and, optionally, "attention_mask"
// (accel/data/batch.h); the output is the next-token logits [B, S, vocab].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "accel/models/attention.h"
#include "accel/models/family.h"
#include "accel/models/model.h"

namespace accel::models {

struct DecoderSpec {
  std::string style = "gpt2";        // "gpt2" | "llama": names and defaults
  std::string norm = "layernorm";    // "layernorm" | "rmsnorm"
  std::string positions = "learned";  // "learned" | "rotary"
  std::string mlp = "gelu";          // "gelu" (tanh approximation) | "swiglu"
  bool bias = true;                  // biases in projections and LayerNorms
  bool tie_embeddings = true;
  int64_t vocab_size = 50257;
  int64_t max_positions = 1024;  // learned: the table's rows; rotary: the longest sequence
  int hidden = 768;
  int layers = 12;
  int heads = 12;
  int kv_heads = 12;  // key-value heads (grouped-query attention); divides heads
  int intermediate = 3072;
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;
  double dropout = 0.0;  // embeddings, residual branches and attention probabilities
  double init_std = 0.02;
  int64_t pad_id = -1;  // an id padding carries, or -1 (its embedding row is not special)
  bool llama() const { return style == "llama"; }
  int head_dim() const { return hidden / heads; }
};

// Named architectures: "gpt_tiny" (CPU ladders and tests: GPT-2 style, 4 x 128),
// "gpt2" (GPT-2 124M: 124,439,808 parameters), "llama_tiny", "smollm2_135m"
// (SmolLM2-135M's shape: 30 x 576, 9 heads, 3 key-value heads: 134,515,008).
DecoderSpec decoder_preset(const std::string& name);
std::vector<std::string> decoder_preset_names();
void validate_decoder_spec(const DecoderSpec& spec);  // ConfigError naming the field

// Parameters without building the model (the tied output embedding counted once).
int64_t decoder_param_count(const DecoderSpec& spec);
// Analytic forward FLOPs of one sequence of `seq` tokens, 2 per multiply-add:
// the projections, the attention's scores and weighted sums over every
// (query, key) pair (as the kernels compute them and as MFU conventions
// count them), the MLP and the output projection over the vocabulary;
// embeddings, norms, rotary, softmax and activations ignored.
double decoder_forward_flops(const DecoderSpec& spec, int64_t seq);
// The training FLOPs a token costs by the rule nanoGPT and torchtitan
// estimate MFU with: 6 N + 12 L H S, N the parameters without the position
// table (a tied output embedding counted once, as the output projection),
// L layers, H the hidden width, S the sequence length.
double decoder_training_flops_per_token_rule(const DecoderSpec& spec, int64_t seq);

// The family's GGUF adapter (ModelFamily::gguf, lib/models/gpt_gguf.cpp): a
// "llama" GGUF's tensors under this family's Llama names, the query and key
// rows back in transformers' order; ConfigError where the file's metadata
// (layers, width, heads, key-value heads, intermediate, rope base, norm eps,
// vocabulary) disagrees with the built model's dims, or its architecture is
// not llama.
NamedTensors decoder_from_gguf(const GgufFile& file, const nlohmann::json& dims, std::vector<std::string>& dropped);

// Root-mean-square norm (LlamaRMSNorm): x / sqrt(mean(x^2) + eps) * weight,
// computed in float32 and returned in x's dtype.
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(RMSNorm);

// Rotary position embedding (the rotate-half form of GPT-NeoX and Llama) of
// x [B, S, H, Dh] at positions 0..S-1, with cos/sin [S, Dh] from
// rotary_tables.
std::pair<torch::Tensor, torch::Tensor> rotary_tables(int64_t seq, int64_t head_dim, double theta,
                                                      const torch::TensorOptions& options);
torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

// One decoder block: pre-norm causal self-attention and MLP, residual adds.
class DecoderBlockImpl : public torch::nn::Module {
 public:
  explicit DecoderBlockImpl(const DecoderSpec& spec);
  torch::Tensor forward(const torch::Tensor& x, const KeyPadding& padding, const torch::Tensor& cos,
                        const torch::Tensor& sin);
  // gpt2: qkv = c_attn; llama: q, k, v = q_proj, k_proj, v_proj.
  torch::nn::Linear qkv{nullptr}, q{nullptr}, k{nullptr}, v{nullptr}, attn_out{nullptr};
  torch::nn::Linear fc{nullptr}, gate{nullptr}, up{nullptr}, down{nullptr};
  std::shared_ptr<torch::nn::Module> norm1, norm2;  // LayerNorm or RMSNorm

 private:
  torch::Tensor attention(const torch::Tensor& h, const KeyPadding& padding, const torch::Tensor& cos,
                          const torch::Tensor& sin);
  torch::Tensor mlp(const torch::Tensor& h);
  DecoderSpec spec_;
};
TORCH_MODULE(DecoderBlock);

// Wrap units (for FSDP): 0 = embeddings, 1..layers = blocks, layers+1 = the
// final norm and the head (an untied lm_head's weight). A tied head reads
// unit 0's matrix: the forward asks for unit 0 again around it (before(0),
// after(0)) inside the last unit.
class DecoderLMImpl : public Model {
 public:
  explicit DecoderLMImpl(const DecoderSpec& spec);
  // input_ids int64 [B, S], attention_mask [B, S] (undefined: no padding):
  // next-token logits [B, S, vocab].
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask);
  // With inputs["labels"] [B, S] (data::kNoTarget where there is no next token): the
  // mean next-token cross-entropy (accel/models/linear_cross_entropy.h),
  // made chunk by chunk inside the head's wrap unit, so FSDP's gathers hold
  // around it as around the logits.
  torch::Tensor forward(const data::Inputs& inputs) override;
  bool make_own_loss(int64_t chunk_tokens) override {
    loss_chunk_ = chunk_tokens;
    return true;
  }
  bool recompute_blocks(bool on) override {
    recompute_ = on;
    return true;
  }
  // The final normed hidden states [B, S, hidden] (before lm_head), and the
  // output projection's weight [vocab, hidden]: a loss that never makes the
  // whole logits (chunked cross-entropy) reads these. Not under a sharding
  // strategy's hooks: the final unit and unit 0 are freed by then.
  torch::Tensor hidden_states(const torch::Tensor& input_ids, const torch::Tensor& attention_mask);
  torch::Tensor output_weight() const;
  std::string arch() const override { return "gpt"; }
  int num_classes() const override { return int(spec_.vocab_size); }
  // A fresh, untied output projection of num_classes rows.
  void replace_head(int num_classes) override;
  std::vector<std::string> head_tensors() const override;
  double forward_flops(const data::Inputs& inputs) const override;
  std::vector<dist::WrapUnit> wrap_units() override;
  void set_unit_hooks(const dist::UnitHooks* hooks) override { hooks_ = hooks; }
  const DecoderSpec& spec() const { return spec_; }

  torch::nn::Embedding tokens{nullptr}, positions{nullptr};  // positions: learned only
  std::vector<DecoderBlock> blocks;
  std::shared_ptr<torch::nn::Module> final_norm;
  torch::nn::Linear lm_head{nullptr};  // untied only

 private:
  // What run() ends in, computed inside the last wrap unit.
  enum class Head { Hidden, Logits, Loss };
  torch::Tensor run(const torch::Tensor& ids, const torch::Tensor& mask, Head head,
                    const torch::Tensor& labels = {});
  std::string base() const { return spec_.llama() ? "model." : "transformer."; }
  DecoderSpec spec_;
  std::shared_ptr<torch::nn::Module> base_;
  const dist::UnitHooks* hooks_ = nullptr;
  int64_t loss_chunk_ = 0;
  bool recompute_ = false;
};
TORCH_MODULE(DecoderLM);

// The family's registry row: model.arch "gpt" on token streams, a
// vocabulary head (train.task causal_lm), the vocabulary the tokenizer's.
ModelFamily gpt_family();

}  // namespace accel::models
