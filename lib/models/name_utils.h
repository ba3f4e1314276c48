// Private to lib/models: small helpers the weight loaders share for their
// messages and name tables, and the transformer families for their modules.
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

// An empty module registered under `name`: a level of Hugging Face's naming
// ("bert.encoder.layer", "transformer.h") with no code of its own.
inline std::shared_ptr<torch::nn::Module> child(torch::nn::Module& parent, const std::string& name) {
  return parent.register_module(name, std::make_shared<torch::nn::Module>());
}

// A projection of [B, S, in] rows as one GEMM with its bias (addmm on the
// rows flattened; mm where `b` is undefined): 1.13's linear of a 3-D input is
// a matmul and a separate in-place bias add, which under bf16 autocast also
// converts the output twice (5 ms of a 155 ms text step).
inline torch::Tensor project(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  auto sizes = x.sizes().vec();
  sizes.back() = w.size(0);
  const auto rows = x.reshape({-1, x.size(-1)});
  return (b.defined() ? torch::addmm(b, rows, w.t()) : torch::mm(rows, w.t())).view(sizes);
}

}  // namespace accel::models::detail
