// The model family registry: one row per model.arch naming how the family
// builds its module from a config and the data, what the loader must give it,
// its presets, and how a pretrained file's tensor names map onto its own. The
// training core looks the family up and never branches on it (as torchtitan's
// TrainSpec). A new family is one row in lib/models/registry.cpp plus its
// files (docs/ARCHITECTURE.md).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "accel/util/json.h"

#include "accel/config/run_config.h"
#include "accel/data/dataset.h"
#include "accel/models/catalog.h"
#include "accel/models/model.h"
#include "accel/models/weights.h"

namespace accel {
struct GgufFile;  // accel/util/gguf_header.h
}  // namespace accel

namespace accel::models {

// What the data tells a model before it is built.
struct DataFacts {
  std::string kind;        // "image" | "text"
  int classes = 0;         // labels the data yields
  int channels = 0;        // images
  int image_size = 0;      // images: the stored side (square)
  int64_t max_length = 0;  // text: the longest tokenized row (with [CLS]/[SEP])
  int64_t vocab_size = 0;  // text: the tokenizer's vocab (0 = synthetic ids)
  int64_t max_token_id = -1;  // text: the largest id in the data
  int64_t pad_id = 0;         // text: the id padding carries ([PAD])
};

struct BuiltModel {
  std::shared_ptr<Model> module;
  nlohmann::json dims;  // result.json's "model": the resolved dims
  std::string summary;  // the banner's "== model: ..." line
  double flops_per_sample = 0;  // forward, at the data's shape (text: at max_length)
  // What one sample's activations take in training, kept for the backward
  // (fp32): per layer s*h*(34 + 5*a*s/h) bytes at 16 bits for sequence s,
  // hidden h, a heads (Korthikanti et al. 2022, "Reducing Activation
  // Recomputation in Large Transformer Models", eq. 1), doubled for fp32.
  // 0 when unknown. An estimate, to refuse a batch that cannot fit.
  double activation_bytes_per_sample = 0;
  // Of those, the head's whole outputs and their gradient (fp32), which a
  // model making its own loss in chunks (Model::make_own_loss) never holds.
  double head_bytes_per_sample = 0;
  // What the transformer layers' activations take instead where the model
  // recomputes its blocks in the backward (Model::recompute_blocks); 0 when
  // it cannot.
  double recompute_bytes_per_sample = 0;
  int64_t layers = 1;  // transformer layers: evaluation keeps one layer's activations at a time
};

// Korthikanti et al.'s per-sample activation bytes (fp32) of `layers`
// transformer layers over `seq` tokens of width `hidden` with `heads` heads.
double transformer_activation_bytes(int64_t layers, int64_t seq, int64_t hidden, int64_t heads);

struct PresetRow {
  std::string name, shape;  // shape: "224px patch 16, dim 768, depth 12, ..."
  int64_t params = 0;
  double flops = 0;         // forward FLOPs per unit
  std::string unit;         // "image" | "token (at 128)"
};

struct ModelFamily {
  FamilyInfo info;
  // The module for a config's model section and the data (seeded by the
  // caller's torch::manual_seed): preset, overrides, checks against the data
  // (ConfigError naming the field), initial weights as the family's reference
  // implementation initialises them.
  std::function<BuiltModel(const config::ModelConfig& model, const DataFacts& data)> build;
  // How the loader must collate for this model (ViT: resize to its image
  // size; text: padding), with the data section's checks (data.resize,
  // data.max_length against the model).
  std::function<data::CollateOptions(const BuiltModel& built, const config::DataConfig& data)>
      collate;
  // `accel-bench presets`, one row per preset.
  std::function<std::vector<PresetRow>()> preset_rows;
  // Tensors of a pretrained file under this family's names. `format` is one
  // of info.formats or "auto" (detected from the names; ConfigError when it
  // cannot tell). Tensors the family knows to have no place (pretraining
  // heads) are left out and named in `dropped`.
  std::function<NamedTensors(const NamedTensors& source, const std::string& format,
                             const std::string& source_name, std::vector<std::string>& dropped,
                             std::string& format_used)>
      adapt;
  // The config.json a Hugging Face loader needs beside exported weights (the
  // model's dims read from the tensors, the rest from the resolved model
  // section; id2label from the class names); null for a family whose names
  // are not transformers' (vit: torchvision's).
  std::function<nlohmann::json(const nlohmann::json& model_section, const NamedTensors& tensors,
                               const std::vector<std::string>& class_names)>
      hf_config;
  // Where pretrained weights come with a Hugging Face config.json beside
  // them: what it says that the built model (its BuiltModel::dims) does not,
  // as "num_attention_heads 6 (the model: heads 12)"; empty when they agree.
  // Unset for families whose files carry no such config (vit).
  std::function<std::vector<std::string>(const nlohmann::json& hf_config, const nlohmann::json& dims)>
      config_disagreements;
  // The tensors of a GGUF file (llama.cpp's names, layout and metadata) under
  // this family's names, dequantized, for the built model's dims: ConfigError
  // naming the file where its architecture or a metadata dim disagrees with
  // the model. Tensors with no place are named in `dropped`. Unset for a
  // family no GGUF describes.
  std::function<NamedTensors(const GgufFile& file, const nlohmann::json& dims, std::vector<std::string>& dropped)>
      gguf;
};

// The disagreements of the config.json beside `weights` (none when there is
// no such file or the family reads none); ConfigError naming it when it is
// not a JSON object.
std::vector<std::string> beside_config_disagreements(const ModelFamily& family,
                                                     const std::filesystem::path& weights,
                                                     const nlohmann::json& dims);

// Before a family builds its module: a model whose parameters, gradients and
// Adam's two moments (16 bytes a parameter in fp32) exceed this machine's
// memory cannot train; refused with a ConfigError naming the fields that set
// its size (`shape`, e.g. "model.image_size 56 ..., depth 100000") and both
// figures, instead of growing towards the OOM killer.
void check_fits_memory(int64_t params, const std::string& shape);

const std::vector<ModelFamily>& model_families();
// ConfigError "model.arch: unknown ..." listing the families.
const ModelFamily& model_family(const std::string& arch);

// The model a resolved config builds on data of these facts (a result's
// "data_facts": kind, classes, channels, image_size, max_length,
// vocab_size), as layout_json: what predict --article reads of a rung it
// never ran. Built from seed 0; ConfigError for a config the schema refuses.
nlohmann::json layout_of_config(const nlohmann::json& resolved, const nlohmann::json& data_facts);

}  // namespace accel::models
