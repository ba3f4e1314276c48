// load_pretrained for any family, and the ViT family's torchvision / timm /
// Hugging Face name mapping (pretrained.h). docs/PRETRAINED.md documents the
// tables.
#include "accel/models/family.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <map>
#include <set>
#include <utility>

#include "accel/models/gguf.h"
#include "accel/models/pretrained.h"
#include "accel/models/safetensors.h"
#include "accel/util/errors.h"
#include "accel/util/input_file.h"
#include "accel/util/json_doc.h"
#include "name_utils.h"

namespace accel::models {
namespace {

using detail::name_list;
using detail::prefix;
using detail::shape_str;
using detail::starts_with;

using Pairs = std::vector<std::pair<std::string, std::string>>;

// Expands module pairs to their .weight and .bias tensors.
Pairs with_weight_bias(const Pairs& modules, Pairs params = {}) {
  for (const auto& [from, to] : modules) {
    for (const char* leaf : {".weight", ".bias"}) params.emplace_back(from + leaf, to + leaf);
  }
  return params;
}

struct Table {
  std::string layer_prefix;  // before the layer index
  Pairs top, layer;          // full names; names after "<prefix>N."
};

const Table& timm_table() {
  static const Table t{
      "blocks.",
      with_weight_bias({{"patch_embed.proj", "conv_proj"}, {"norm", "encoder.ln"}, {"head", "heads.head"}},
                       {{"cls_token", "class_token"}, {"pos_embed", "encoder.pos_embedding"}}),
      with_weight_bias({{"norm1", "ln_1"},
                        {"attn.proj", "self_attention.out_proj"},
                        {"norm2", "ln_2"},
                        {"mlp.fc1", "mlp.0"},
                        {"mlp.fc2", "mlp.3"}},
                       {{"attn.qkv.weight", "self_attention.in_proj_weight"},
                        {"attn.qkv.bias", "self_attention.in_proj_bias"}})};
  return t;
}

// Names after the optional "vit." prefix.
const Table& hf_table() {
  static const Table t{
      "encoder.layer.",
      with_weight_bias({{"embeddings.patch_embeddings.projection", "conv_proj"},
                        {"layernorm", "encoder.ln"},
                        {"classifier", "heads.head"}},
                       {{"embeddings.cls_token", "class_token"},
                        {"embeddings.position_embeddings", "encoder.pos_embedding"}}),
      with_weight_bias({{"layernorm_before", "ln_1"},
                        {"attention.output.dense", "self_attention.out_proj"},
                        {"layernorm_after", "ln_2"},
                        {"intermediate.dense", "mlp.0"},
                        {"output.dense", "mlp.3"}},
                       {{"attention.attention.query.weight", "self_attention.in_proj_weight"},
                        {"attention.attention.key.weight", "self_attention.in_proj_weight"},
                        {"attention.attention.value.weight", "self_attention.in_proj_weight"},
                        {"attention.attention.query.bias", "self_attention.in_proj_bias"},
                        {"attention.attention.key.bias", "self_attention.in_proj_bias"},
                        {"attention.attention.value.bias", "self_attention.in_proj_bias"}})};
  return t;
}

std::optional<std::string> lookup(const Pairs& pairs, const std::string& name) {
  for (const auto& [from, to] : pairs) {
    if (from == name) return to;
  }
  return std::nullopt;
}

std::optional<std::string> map_with(const Table& table, const std::string& name) {
  if (auto top = lookup(table.top, name)) return top;
  if (!starts_with(name, table.layer_prefix)) return std::nullopt;
  const std::string rest = name.substr(table.layer_prefix.size());
  const size_t dot = rest.find('.');
  if (dot == 0 || dot == std::string::npos || dot > 6) return std::nullopt;
  for (size_t i = 0; i < dot; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(rest[i]))) return std::nullopt;
  }
  if (dot > 1 && rest[0] == '0') return std::nullopt;  // "01" is not a layer index
  auto leaf = lookup(table.layer, rest.substr(dot + 1));
  if (!leaf) return std::nullopt;
  return "encoder.layers.encoder_layer_" + rest.substr(0, dot) + "." + *leaf;
}

// 0, 1, 2 for an HF query, key, value tensor; -1 otherwise.
int qkv_index(const std::string& name) {
  static const std::array<const char*, 3> parts = {".query.", ".key.", ".value."};
  if (name.find(".attention.attention.") == std::string::npos) return -1;
  for (int i = 0; i < 3; ++i) {
    if (name.find(parts[i]) != std::string::npos) return i;
  }
  return -1;
}

}  // namespace

// ---------------------------------------------------------------------------

WeightFormat weight_format_from_string(const std::string& name) {
  std::string s = name;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s == "auto") return WeightFormat::Auto;
  if (s == "torchvision") return WeightFormat::Torchvision;
  if (s == "timm") return WeightFormat::Timm;
  if (s == "huggingface" || s == "hf") return WeightFormat::HuggingFace;
  throw ConfigError("weights format: unknown \"" + name +
                    "\"; known: auto, torchvision, timm, huggingface (hf)");
}

std::string weight_format_name(WeightFormat format) {
  switch (format) {
    case WeightFormat::Auto: return "auto";
    case WeightFormat::Torchvision: return "torchvision";
    case WeightFormat::Timm: return "timm";
    case WeightFormat::HuggingFace: return "huggingface";
  }
  return "?";
}

WeightFormat detect_weight_format(const std::vector<std::string>& names,
                                  const std::string& source_name) {
  const std::set<std::string> set(names.begin(), names.end());
  if (set.count("conv_proj.weight")) return WeightFormat::Torchvision;
  if (set.count("patch_embed.proj.weight")) return WeightFormat::Timm;
  if (set.count("vit.embeddings.patch_embeddings.projection.weight") ||
      set.count("embeddings.patch_embeddings.projection.weight")) {
    return WeightFormat::HuggingFace;
  }
  throw ConfigError(prefix(source_name) +
                    "cannot tell the weight format (no conv_proj.weight, patch_embed.proj.weight "
                    "or [vit.]embeddings.patch_embeddings.projection.weight); the file has " +
                    (names.empty() ? std::string("no tensors") : name_list(names, 6)));
}

std::optional<std::string> torchvision_name(const std::string& name, WeightFormat format) {
  switch (format) {
    case WeightFormat::Torchvision: return name;
    case WeightFormat::Timm: return map_with(timm_table(), name);
    case WeightFormat::HuggingFace:
      return map_with(hf_table(), starts_with(name, "vit.") ? name.substr(4) : name);
    case WeightFormat::Auto: break;
  }
  throw std::invalid_argument("torchvision_name: format must not be Auto");
}

NamedTensors to_torchvision_names(const NamedTensors& source, WeightFormat format,
                                  const std::string& source_name) {
  const std::string where = prefix(source_name);
  if (format == WeightFormat::Auto) {
    std::vector<std::string> names;
    for (const auto& kv : source) names.push_back(kv.first);
    format = detect_weight_format(names, source_name);
  }
  NamedTensors out;
  std::map<std::string, std::string> origin;                  // target -> source name
  std::map<std::string, std::array<std::string, 3>> pending;  // in_proj -> q, k, v names
  for (const auto& [name, tensor] : source) {
    auto mapped = torchvision_name(name, format);
    const std::string target = mapped ? *mapped : name;
    const int part = (format == WeightFormat::HuggingFace && mapped) ? qkv_index(name) : -1;
    if (part >= 0) {
      pending[target][part] = name;
      continue;
    }
    auto [it, fresh] = origin.emplace(target, name);
    if (!fresh) {
      throw ConfigError(where + "tensors " + it->second + " and " + name + " both map to " + target);
    }
    out.emplace(target, tensor);
  }
  static const char* kParts[] = {"query", "key", "value"};
  for (const auto& [target, parts] : pending) {
    std::vector<torch::Tensor> pieces;
    std::string first;
    for (int i = 0; i < 3; ++i) {
      if (parts[i].empty()) {
        throw ConfigError(where + "no " + kParts[i] + " tensor next to " +
                          (parts[0].empty() ? (parts[1].empty() ? parts[2] : parts[1]) : parts[0]) +
                          " (needed to build " + target + ")");
      }
      const torch::Tensor& t = source.at(parts[i]);
      if (!t.defined()) throw ConfigError(where + "tensor " + parts[i] + " is undefined");
      if (!pieces.empty() && t.sizes() != pieces[0].sizes()) {
        throw ConfigError(where + "tensor " + parts[i] + " has shape " + shape_str(t) + " but " +
                          parts[0] + " has " + shape_str(pieces[0]));
      }
      pieces.push_back(pieces.empty() ? t : t.to(pieces[0].scalar_type()));
    }
    if (out.count(target)) throw ConfigError(where + "more than one tensor maps to " + target);
    out.emplace(target, torch::cat(pieces, 0));
  }
  return out;
}

LoadReport load_pretrained(Model& model, const std::filesystem::path& file,
                           const std::string& format, bool strict) {
  const std::string name = file.string();
  const std::string arch = model.arch();
  const auto& family = model_family(arch);  // the registry's entry (named argument: gcc 14's -Wdangling-reference)
  NamedTensors source = read_safetensors(file);
  std::vector<std::string> dropped;
  std::string used;
  NamedTensors mapped = family.adapt(source, format, name, dropped, used);
  source.clear();
  auto report = apply_named_tensors(model, mapped, strict, name + " (" + used + " names)");
  report.dropped = dropped;
  return report;
}

LoadReport load_gguf(Model& model, const std::filesystem::path& file, const nlohmann::json& dims, bool strict) {
  const std::string name = file.string();
  const auto& family = model_family(model.arch());
  if (!family.gguf) {
    throw ConfigError("model.init: \"gguf\" (" + name + "): model.arch \"" + model.arch() +
                      "\" reads no GGUF file; its pretrained weights come as safetensors");
  }
  const GgufFile gguf = read_gguf_header(file);
  std::vector<std::string> dropped;
  NamedTensors mapped = family.gguf(gguf, dims, dropped);
  auto report = apply_named_tensors(model, mapped, strict, name + " (gguf)");
  report.dropped = dropped;
  return report;
}

std::vector<std::string> beside_config_disagreements(const ModelFamily& family,
                                                     const std::filesystem::path& weights,
                                                     const nlohmann::json& dims) {
  if (!family.config_disagreements) return {};
  const auto file = (weights.has_parent_path() ? weights.parent_path() : std::filesystem::path(".")) /
                    "config.json";
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return {};
  const nlohmann::json hf = parse_json_text(read_input_file(file, "the config.json beside the weights"),
                                            file.string() + " (beside the weights " + weights.string() + ")");
  if (!hf.is_object()) {
    throw ConfigError(file.string() + " (beside the weights " + weights.string() +
                      "): not a JSON object");
  }
  return family.config_disagreements(hf, dims);
}

LoadReport load_pretrained(Model& model, const std::filesystem::path& file, WeightFormat format,
                           bool strict) {
  return load_pretrained(model, file, weight_format_name(format), strict);
}

// The ViT family's adapter (family.h): format "auto", "torchvision", "timm"
// or "hf"/"huggingface".
NamedTensors vit_adapt(const NamedTensors& source, const std::string& format,
                       const std::string& source_name, std::vector<std::string>& /*dropped*/,
                       std::string& format_used) {
  WeightFormat f = weight_format_from_string(format);
  if (f == WeightFormat::Auto) {
    std::vector<std::string> names;
    for (const auto& kv : source) names.push_back(kv.first);
    f = detect_weight_format(names, source_name);
  }
  format_used = weight_format_name(f);
  return to_torchvision_names(source, f, source_name);
}

}  // namespace accel::models
