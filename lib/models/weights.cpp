// Named tensors into a ViT (weights.h) and the torchvision / timm / Hugging
// Face name mapping (pretrained.h). docs/PRETRAINED.md documents the table.
#include "accel/models/weights.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <map>
#include <set>
#include <utility>

#include "accel/models/pretrained.h"
#include "accel/models/safetensors.h"
#include "accel/util/errors.h"

namespace accel::models {
namespace {

std::string shape_str(const torch::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

// "a, b, c, d, e, ... (12 in all)"
std::string name_list(const std::vector<std::string>& names, size_t shown = 5) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < shown; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > shown) s += ", ... (" + std::to_string(names.size()) + " in all)";
  return s;
}

std::string prefix(const std::string& source_name) {
  return source_name.empty() ? std::string("weights: ") : source_name + ": ";
}

bool starts_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(0, p.size(), p) == 0;
}

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

std::string LoadReport::summary() const {
  std::string s = "loaded " + std::to_string(loaded) + " tensors";
  if (!source.empty()) s += " from " + source;
  if (head_replaced) {
    s += "; head replaced (" + std::to_string(source_classes) + " -> " +
         std::to_string(model_classes) + " classes)";
  }
  s += "; missing: " + (missing.empty() ? std::string("none") : name_list(missing));
  s += "; unexpected: " + (unexpected.empty() ? std::string("none") : name_list(unexpected));
  return s;
}

LoadReport apply_named_tensors(VisionTransformer& model, const NamedTensors& tensors,
                               bool strict, const std::string& source_name) {
  LoadReport report;
  report.source = source_name;
  report.model_classes = model->spec().num_classes;
  const std::string where = prefix(source_name);
  const ViTSpec& spec = model->spec();
  const int classes = spec.num_classes;

  // A source head over the same features but another class count is dropped
  // and the model's head re-initialised. Any other head shape falls through
  // to the ordinary shape check below.
  bool replace_head = false;
  {
    int64_t src_classes = -1;
    bool plain = true;
    auto w = tensors.find("heads.head.weight");
    auto b = tensors.find("heads.head.bias");
    if (w != tensors.end()) {
      const auto& t = w->second;
      plain = t.defined() && t.dim() == 2 && t.size(1) == spec.dim;
      if (plain) src_classes = t.size(0);
    }
    if (plain && b != tensors.end()) {
      const auto& t = b->second;
      plain = t.defined() && t.dim() == 1 && (src_classes < 0 || t.size(0) == src_classes);
      if (plain) src_classes = t.size(0);
    }
    if (plain && src_classes >= 0) {
      report.source_classes = static_cast<int>(src_classes);
      replace_head = src_classes != classes;
    }
  }
  auto skipped = [&](const std::string& name) {
    return replace_head && (name == "heads.head.weight" || name == "heads.head.bias");
  };

  std::vector<std::pair<std::string, torch::Tensor>> targets;  // model order
  for (const auto& item : model->named_parameters(true)) targets.emplace_back(item.key(), item.value());
  for (const auto& item : model->named_buffers(true)) targets.emplace_back(item.key(), item.value());
  std::map<std::string, torch::Tensor> by_name(targets.begin(), targets.end());

  // Check everything before touching the model: a failed load changes nothing.
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;  // (target, source)
  for (const auto& [name, src] : tensors) {
    if (skipped(name)) continue;
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      report.unexpected.push_back(name);
      continue;
    }
    const torch::Tensor& dst = it->second;
    if (!src.defined()) throw ConfigError(where + "tensor " + name + " is undefined");
    if (src.sizes() != dst.sizes()) {
      if (name == "encoder.pos_embedding") {
        throw ConfigError(where + "tensor " + name + " has shape " + shape_str(src) +
                          " but the model expects " + shape_str(dst) +
                          ": the weights were trained at another image or patch size; "
                          "interpolating position embeddings is not supported, so set "
                          "the model's image_size and patch_size to match the weights");
      }
      throw ConfigError(where + "tensor " + name + " has shape " + shape_str(src) +
                        " but the model expects " + shape_str(dst));
    }
    if (dst.is_floating_point() && !src.is_floating_point()) {
      throw ConfigError(where + "tensor " + name + " has dtype " +
                        std::string(c10::toString(src.scalar_type())) +
                        " but the model's is floating point");
    }
    copies.emplace_back(dst, src);
  }
  for (const auto& [name, t] : targets) {
    if (!skipped(name) && tensors.find(name) == tensors.end()) report.missing.push_back(name);
  }
  if (strict && (!report.missing.empty() || !report.unexpected.empty())) {
    std::string msg = where + "the weights do not match the model:";
    if (!report.unexpected.empty()) {
      msg += " " + std::to_string(report.unexpected.size()) +
             " unexpected tensor(s) the model has no place for: " + name_list(report.unexpected) + ";";
    }
    if (!report.missing.empty()) {
      msg += " " + std::to_string(report.missing.size()) +
             " model tensor(s) missing from the weights: " + name_list(report.missing) + ";";
    }
    throw ConfigError(msg + " non-strict loading reports these instead of failing");
  }

  torch::NoGradGuard guard;
  if (replace_head) {
    model->replace_head(classes);
    report.head_replaced = true;
  }
  for (auto& [dst, src] : copies) dst.copy_(src);
  report.loaded = static_cast<int64_t>(copies.size());
  return report;
}

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

LoadReport load_pretrained(VisionTransformer& model, const std::filesystem::path& file,
                           WeightFormat format, bool strict) {
  const std::string name = file.string();
  NamedTensors source = read_safetensors(file);
  if (format == WeightFormat::Auto) {
    std::vector<std::string> names;
    for (const auto& kv : source) names.push_back(kv.first);
    format = detect_weight_format(names, name);
  }
  NamedTensors mapped = to_torchvision_names(source, format, name);
  source.clear();
  return apply_named_tensors(model, mapped, strict,
                             name + " (" + weight_format_name(format) + " names)");
}

}  // namespace accel::models
