// The decoder family's GGUF adapter (ModelFamily::gguf): a llama-architecture
// GGUF file, as llama.cpp's convert_hf_to_gguf.py writes one from a Hugging
// Face LlamaForCausalLM (SmolLM2, Llama, Mistral-style files), back under
// transformers' names and row order.
//
// Names (gguf-py's tensor_mapping.py, the "llama-hf" rows): token_embd ->
// model.embed_tokens, blk.N.attn_norm -> model.layers.N.input_layernorm,
// blk.N.attn_{q,k,v,output} -> self_attn.{q,k,v,o}_proj, blk.N.ffn_norm ->
// post_attention_layernorm, blk.N.ffn_{gate,up,down} -> mlp.{gate,up,down}_proj,
// output_norm -> model.norm, output -> lm_head (absent where the output
// projection is the input embedding, as SmolLM2's).
//
// Rows: the converter permutes the query and key projections' rows so that
// llama.cpp's rotary embedding, which turns adjacent pairs (2i, 2i + 1),
// turns the pairs transformers' rotate_half turns (i, i + head_dim / 2): in
// each head, HF row j * head_dim / 2 + i becomes row 2 i + j. This undoes it
// (with the key-value head count for the keys), so the model's rotate_half
// sees transformers' order.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "accel/models/family.h"
#include "accel/models/gguf.h"
#include "accel/models/gpt.h"
#include "accel/util/errors.h"
#include "name_utils.h"

namespace accel::models {
namespace gpt_gguf_detail {

using nlohmann::json;

// GGUF row order -> transformers' for a [heads * head_dim, in] projection.
torch::Tensor unpermute_rows(const torch::Tensor& w, int64_t heads) {
  const int64_t out = w.size(0), head_dim = out / heads;
  const int64_t in = w.dim() == 2 ? w.size(1) : 1;
  return w.reshape({heads, head_dim / 2, 2, in}).transpose(1, 2).contiguous().reshape(w.sizes());
}

// blk.N.<what> -> model.layers.N.<theirs>, or "" where `what` has no place.
std::string layer_name(const std::string& what) {
  static const std::vector<std::pair<std::string, std::string>> table = {
      {"attn_norm", "input_layernorm"},       {"attn_q", "self_attn.q_proj"},
      {"attn_k", "self_attn.k_proj"},         {"attn_v", "self_attn.v_proj"},
      {"attn_output", "self_attn.o_proj"},    {"ffn_norm", "post_attention_layernorm"},
      {"ffn_gate", "mlp.gate_proj"},          {"ffn_up", "mlp.up_proj"},
      {"ffn_down", "mlp.down_proj"},
  };
  for (const auto& [g, hf] : table) {
    if (what == g + ".weight") return hf + ".weight";
    if (what == g + ".bias") return hf + ".bias";
  }
  return "";
}

}  // namespace gpt_gguf_detail

NamedTensors decoder_from_gguf(const GgufFile& file, const nlohmann::json& dims, std::vector<std::string>& /*dropped*/) {
  namespace gg = gpt_gguf_detail;
  const std::string where = file.path.string() + ": ";
  auto meta = [&](const std::string& key) -> const nlohmann::json* {
    const auto it = file.metadata.find(key);
    return it == file.metadata.end() ? nullptr : &it->second;
  };
  const auto* arch = meta("general.architecture");
  if (arch == nullptr || !arch->is_string()) {
    throw ConfigError(where + "gguf: no general.architecture; a decoder reads a \"llama\" file");
  }
  if (*arch != "llama") {
    throw ConfigError(where + "gguf: architecture \"" + arch->get<std::string>() +
                      "\" is not read; a decoder reads \"llama\" (Llama, SmolLM2, Mistral-style) files");
  }
  if (dims.value("style", "") != "llama" || dims.value("norm", "") != "rmsnorm" ||
      dims.value("positions", "") != "rotary" || dims.value("mlp", "") != "swiglu") {
    throw ConfigError("model.preset: a llama GGUF (" + file.path.string() +
                      ") needs a decoder in Llama's layout (RMSNorm, rotary positions, SwiGLU), such as "
                      "\"smollm2_135m\" or \"llama_tiny\"; the model is " + dims.value("style", std::string("?")) +
                      " with " + dims.value("norm", std::string("?")) + ", " +
                      dims.value("positions", std::string("?")) + " positions, " + dims.value("mlp", std::string("?")));
  }
  // The dims the file's metadata gives, against the model's.
  std::vector<std::string> differ;
  auto integer = [&](const std::string& key, const char* field, const nlohmann::json* fallback) {
    const auto* v = meta("llama." + key);
    if (v == nullptr) v = fallback;
    if (v == nullptr) throw ConfigError(where + "gguf: no llama." + key + " in the metadata");
    if (!v->is_number_integer()) throw ConfigError(where + "gguf: llama." + key + " is not an integer");
    const int64_t theirs = v->get<int64_t>(), ours = dims.at(field).get<int64_t>();
    if (theirs != ours) {
      differ.push_back("llama." + key + " " + std::to_string(theirs) + " (the model: " + field + " " +
                       std::to_string(ours) + ")");
    }
    return theirs;
  };
  auto real = [&](const std::string& key, const char* field, double fallback, double rel) {
    const auto* v = meta("llama." + key);
    const double theirs = v == nullptr ? fallback : (v->is_number() ? v->get<double>() : NAN);
    if (std::isnan(theirs)) throw ConfigError(where + "gguf: llama." + key + " is not a number");
    const double ours = dims.at(field).get<double>();
    if (std::abs(theirs - ours) > rel * std::abs(ours)) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "llama.%s %g (the model: %s %g)", key.c_str(), theirs, field, ours);
      differ.push_back(buf);
    }
  };
  integer("block_count", "layers", nullptr);
  integer("embedding_length", "hidden", nullptr);
  integer("feed_forward_length", "intermediate", nullptr);
  const int64_t heads = integer("attention.head_count", "heads", nullptr);
  const int64_t kv_heads = integer("attention.head_count_kv", "kv_heads", meta("llama.attention.head_count"));
  real("rope.freq_base", "rope_theta", 10000.0, 1e-6);  // llama.cpp's default where the file has none
  if (meta("llama.attention.layer_norm_rms_epsilon") != nullptr) {
    real("attention.layer_norm_rms_epsilon", "norm_eps", 0.0, 1e-6);  // stored as float32
  }
  if (meta("llama.rope.scaling.type") != nullptr && meta("llama.rope.scaling.type")->is_string() &&
      *meta("llama.rope.scaling.type") != "none") {
    differ.push_back("llama.rope.scaling.type \"" + meta("llama.rope.scaling.type")->get<std::string>() +
                     "\" (the model: unscaled rotary positions)");
  }
  if (const auto* embd = file.find("token_embd.weight"); embd != nullptr && embd->dims.size() == 2 &&
                                                          embd->dims[1] != dims.at("vocab_size").get<int64_t>()) {
    differ.push_back("a vocabulary of " + std::to_string(embd->dims[1]) + " tokens (the model: vocab_size " +
                     std::to_string(dims.at("vocab_size").get<int64_t>()) +
                     ", the data's tokenizer; read the file's own with data.tokenizer \"gguf-bpe\")");
  }
  if (!differ.empty()) {
    std::string list;
    for (const auto& d : differ) list += (list.empty() ? "" : "; ") + d;
    throw ConfigError("model.init_path: " + file.path.string() +
                      " describes another network than the model section builds: " + list +
                      "; set the model fields (model.preset, model.layers, ...) to match it");
  }

  NamedTensors out;
  for (const auto& info : file.tensors) {
    const std::string& n = info.name;
    std::string target;
    if (n == "token_embd.weight") {
      target = "model.embed_tokens.weight";
    } else if (n == "output_norm.weight") {
      target = "model.norm.weight";
    } else if (n == "output.weight") {
      target = "lm_head.weight";
    } else if (n == "rope_freqs.weight") {
      throw ConfigError(where + "gguf: rope_freqs.weight (scaled rotary frequencies, as Llama 3's) is not modeled");
    } else if (detail::starts_with(n, "blk.")) {
      const size_t dot = n.find('.', 4);
      const std::string index = dot == std::string::npos ? "" : n.substr(4, dot - 4);
      const std::string theirs = dot == std::string::npos ? "" : gg::layer_name(n.substr(dot + 1));
      if (!index.empty() && index.find_first_not_of("0123456789") == std::string::npos && !theirs.empty()) {
        target = "model.layers." + index + "." + theirs;
      }
    }
    if (target.empty()) target = n;  // no place: the loader names it unexpected
    torch::Tensor t = read_gguf_tensor(file, n);
    const bool q = n.find(".attn_q.") != std::string::npos, k = n.find(".attn_k.") != std::string::npos;
    if (q || k) {
      const int64_t h = q ? heads : kv_heads;
      const int64_t head_dim = dims.at("hidden").get<int64_t>() / dims.at("heads").get<int64_t>();
      if (t.size(0) != h * head_dim || head_dim % 2 != 0) {
        throw ConfigError(where + "gguf: " + n + " has " + std::to_string(t.size(0)) + " rows, not " +
                          std::to_string(h) + " heads of " + std::to_string(head_dim) + " (tensor " + n + ")");
      }
      t = gg::unpermute_rows(t, h);
    }
    out.emplace(target, std::move(t));
  }
  return out;
}

}  // namespace accel::models
