#include "accel/precision/catalog.h"

namespace accel::precision {

const std::vector<PrecisionInfo>& precision_catalog() {
  static const std::vector<PrecisionInfo> rows = {
      {"32-true", "fp32", "fp32", false, false},  {"16-mixed", "fp16", "fp32", true, true},
      {"bf16-mixed", "bf16", "fp32", true, false}, {"16-true", "fp16", "fp16", false, false},
      {"bf16-true", "bf16", "bf16", false, false}, {"64-true", "fp64", "fp64", false, false},
  };
  return rows;
}

const std::vector<std::pair<std::string, std::string>>& precision_aliases() {
  static const std::vector<std::pair<std::string, std::string>> aliases = {
      {"16", "16-mixed"}, {"bf16", "bf16-mixed"}, {"32", "32-true"}, {"64", "64-true"}};
  return aliases;
}

const PrecisionInfo* find_precision(const std::string& name_or_alias) {
  std::string name = name_or_alias;
  for (const auto& [from, to] : precision_aliases()) {
    if (name == from) name = to;
  }
  for (const auto& row : precision_catalog()) {
    if (row.name == name) return &row;
  }
  return nullptr;
}

std::vector<std::string> precision_names() {
  std::vector<std::string> names;
  for (const auto& row : precision_catalog()) names.push_back(row.name);
  return names;
}

}  // namespace accel::precision
