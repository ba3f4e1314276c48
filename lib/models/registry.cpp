// The model family registry (accel/models/family.h) and its torch-free view
// (accel/models/catalog.h). A new family is one row below plus its files.
#include <algorithm>

#include "accel/models/bert.h"
#include "accel/models/family.h"
#include "accel/models/vit.h"
#include "accel/util/errors.h"

namespace accel::models {

const std::vector<ModelFamily>& model_families() {
  static const std::vector<ModelFamily> rows = {
      vit_family(),
      bert_family(),
      distilbert_family(),
  };
  return rows;
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

}  // namespace accel::models
