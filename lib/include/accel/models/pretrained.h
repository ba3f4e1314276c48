// Pretrained weights from the ecosystem into any family's model
// (load_pretrained: safetensors -> the family's name adapter -> the model),
// and the ViT family's adapter: torchvision, timm (vit_base_patch16_224 and
// family) and Hugging Face (google/vit-base-*) parameter names mapped onto
// this project's torchvision-shaped model. docs/PRETRAINED.md has the full
// tables and the sources.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "accel/models/model.h"
#include "accel/util/json.h"
#include "accel/models/weights.h"

namespace accel::models {

enum class WeightFormat { Auto, Torchvision, Timm, HuggingFace };

// "auto", "torchvision", "timm", "huggingface" (also "hf"); ConfigError naming
// the known values otherwise.
WeightFormat weight_format_from_string(const std::string& name);
std::string weight_format_name(WeightFormat format);

// Torchvision: "conv_proj.weight"; timm: "patch_embed.proj.weight"; Hugging
// Face: "[vit.]embeddings.patch_embeddings.projection.weight". Unknown: a
// ConfigError listing a few of the names (prefixed with source_name).
WeightFormat detect_weight_format(const std::vector<std::string>& names,
                                  const std::string& source_name = "");

// The torchvision name one source name maps to, or nullopt when it has no
// place in the model (timm's fc_norm, HF's pooler, ...). HF's separate
// query/key/value weights all map to in_proj_weight (likewise biases):
// to_torchvision_names concatenates them. `format` must not be Auto.
std::optional<std::string> torchvision_name(const std::string& name, WeightFormat format);

// Renames (and for HF fuses q,k,v along dim 0, in that order) a whole set of
// tensors. Names without a place are passed through unchanged so that
// apply_named_tensors reports them as unexpected. A layer with only some of
// query/key/value, or q/k/v of different shapes: ConfigError.
NamedTensors to_torchvision_names(const NamedTensors& source, WeightFormat format,
                                  const std::string& source_name = "");

// read_safetensors + the model family's name adapter (format: one of the
// family's model.init_format values, or "auto") + apply_named_tensors.
LoadReport load_pretrained(Model& model, const std::filesystem::path& file,
                           const std::string& format = "auto", bool strict = true);
// The ViT family's name adapter (its ModelFamily::adapt): format "auto",
// "torchvision", "timm" or "hf".
NamedTensors vit_adapt(const NamedTensors& source, const std::string& format,
                       const std::string& source_name, std::vector<std::string>& dropped,
                       std::string& format_used);

// A GGUF file's tensors (dequantized to float32) through the family's GGUF
// adapter (ModelFamily::gguf, which checks the file's metadata against the
// built model's `dims`) into the model. ConfigError for a family that reads
// no GGUF, or from the reader and the adapter.
LoadReport load_gguf(Model& model, const std::filesystem::path& file, const nlohmann::json& dims,
                     bool strict = true);

// The same with a ViT format.
LoadReport load_pretrained(Model& model, const std::filesystem::path& file, WeightFormat format,
                           bool strict = true);

}  // namespace accel::models
