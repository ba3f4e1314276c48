// The model family registry (accel/models/family.h) and its torch-free view
// (accel/models/catalog.h). A new family is one row below plus its files.
#include <algorithm>
#include <cstdio>
#include <string>

#include "accel/metrics/metrics.h"
#include "accel/models/bert.h"
#include "accel/models/family.h"
#include "accel/models/gpt.h"
#include "accel/models/vit.h"
#include "accel/util/errors.h"

namespace accel::models {

const std::vector<ModelFamily>& model_families() {
  static const std::vector<ModelFamily> rows = {
      vit_family(),
      bert_family(),
      distilbert_family(),
      gpt_family(),
  };
  return rows;
}

double transformer_activation_bytes(int64_t layers, int64_t seq, int64_t hidden, int64_t heads) {
  const double s = double(seq), h = double(hidden), a = double(heads);
  return 2.0 * double(layers) * s * h * (34.0 + 5.0 * a * s / h);
}

void check_fits_memory(int64_t params, const std::string& shape) {
  const double memory = metrics::physical_memory_bytes();
  if (memory <= 0) return;  // unknown: let the run try
  const double need = double(params) * 16.0;  // fp32 weights, gradients, Adam's m and v
  if (need <= memory) return;
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                " gives %.3g parameters: about %.1f GB with gradients and Adam's state, more "
                "than this machine's %.1f GB of memory",
                double(params), need / 1e9, memory / 1e9);
  throw ConfigError(shape + buf);
}

const ModelFamily& model_family(const std::string& arch) {
  for (const auto& f : model_families()) {
    if (f.info.arch == arch) return f;
  }
  std::string names;
  for (const auto& f : model_families()) names += (names.empty() ? "" : ", ") + f.info.arch;
  throw ConfigError("model.arch: unknown model family \"" + arch + "\" (known: " + names + ")");
}

const std::vector<FamilyInfo>& model_catalog() {
  static const std::vector<FamilyInfo> infos = [] {
    std::vector<FamilyInfo> out;
    for (const auto& f : model_families()) out.push_back(f.info);
    return out;
  }();
  return infos;
}

const FamilyInfo* find_family(const std::string& arch) {
  for (const auto& f : model_catalog()) {
    if (f.arch == arch) return &f;
  }
  return nullptr;
}

const FamilyInfo* family_of_preset(const std::string& preset) {
  for (const auto& f : model_catalog()) {
    if (std::find(f.presets.begin(), f.presets.end(), preset) != f.presets.end()) return &f;
  }
  return nullptr;
}

nlohmann::json layout_of_config(const nlohmann::json& resolved, const nlohmann::json& f) {
  const auto cfg = config::to_run_config(resolved);
  DataFacts facts;
  facts.kind = f.value("kind", "image");
  facts.classes = f.value("classes", 0);
  facts.channels = f.value("channels", 0);
  facts.image_size = f.value("image_size", 0);
  facts.max_length = f.value("max_length", int64_t(0));
  facts.vocab_size = f.value("vocab_size", int64_t(0));
  facts.max_token_id = facts.vocab_size - 1;
  torch::manual_seed(0);
  const auto built = model_family(cfg.model.arch).build(cfg.model, facts);
  return layout_json(*built.module);
}

}  // namespace accel::models
