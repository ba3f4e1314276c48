// Private to lib/models: small helpers the weight loaders share for their
// messages and name tables.
#pragma once

#include <string>
#include <vector>

#include <torch/torch.h>

namespace accel::models::detail {

inline std::string shape_str(const torch::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

// "a, b, c, d, e, ... (12 in all)"
inline std::string name_list(const std::vector<std::string>& names, size_t shown = 5) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < shown; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > shown) s += ", ... (" + std::to_string(names.size()) + " in all)";
  return s;
}

inline std::string prefix(const std::string& source_name) {
  return source_name.empty() ? std::string("weights: ") : source_name + ": ";
}

inline bool starts_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(0, p.size(), p) == 0;
}

}  // namespace accel::models::detail
