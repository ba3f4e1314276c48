// Named tensors into any family's Model (weights.h): strict key checks, head
// replacement, and a failed load that changes nothing.
#include "accel/models/weights.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "accel/models/model.h"
#include "accel/util/errors.h"
#include "name_utils.h"

namespace accel::models {

using detail::name_list;
using detail::prefix;
using detail::shape_str;

std::string LoadReport::summary() const {
  std::string s = "loaded " + std::to_string(loaded) + " tensors";
  if (!source.empty()) s += " from " + source;
  if (head_replaced) {
    s += "; head replaced (" + std::to_string(source_classes) + " -> " +
         std::to_string(model_classes) + " classes)";
  }
  if (head_new) s += "; new head (" + std::to_string(model_classes) + " classes; the weights have none)";
  s += "; missing: " + (missing.empty() ? std::string("none") : name_list(missing));
  s += "; unexpected: " + (unexpected.empty() ? std::string("none") : name_list(unexpected));
  if (!dropped.empty()) s += "; left out (pretraining heads, position ids): " + name_list(dropped);
  return s;
}

LoadReport apply_named_tensors(Model& model, const NamedTensors& tensors, bool strict,
                               const std::string& source_name) {
  LoadReport report;
  report.source = source_name;
  report.model_classes = model.num_classes();
  const std::string where = prefix(source_name);
  const int classes = model.num_classes();
  const std::vector<std::string> head = model.head_tensors();  // [0] weight, [1] bias of the last layer

  std::vector<std::pair<std::string, torch::Tensor>> targets;  // model order
  for (const auto& item : model.named_parameters(true)) targets.emplace_back(item.key(), item.value());
  for (const auto& item : model.named_buffers(true)) targets.emplace_back(item.key(), item.value());
  std::map<std::string, torch::Tensor> by_name(targets.begin(), targets.end());

  // A source without any of the head's tensors (an encoder without a task
  // head) leaves the model's fresh head. A source head over the same
  // features but another class count is dropped and the model's head
  // re-initialised. Any other head shape falls through to the ordinary shape
  // check below.
  const bool no_head = std::none_of(head.begin(), head.end(),
                                    [&](const std::string& n) { return tensors.count(n) > 0; });
  bool replace_head = false;
  if (!no_head && head.size() >= 2 && by_name.count(head[0])) {
    const int64_t features = by_name.at(head[0]).size(1);
    int64_t src_classes = -1;
    bool plain = true;
    auto w = tensors.find(head[0]);
    auto b = tensors.find(head[1]);
    if (w != tensors.end()) {
      const auto& t = w->second;
      plain = t.defined() && t.dim() == 2 && t.size(1) == features;
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
  const std::set<std::string> final_layer(head.begin(), head.begin() + std::min<size_t>(2, head.size()));
  const std::set<std::string> head_set(head.begin(), head.end());
  auto skipped = [&](const std::string& name) {
    return (replace_head && final_layer.count(name)) || (no_head && head_set.count(name));
  };

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
      const std::string hint = model.shape_hint(name);
      throw ConfigError(where + "tensor " + name + " has shape " + shape_str(src) +
                        " but the model expects " + shape_str(dst) + (hint.empty() ? "" : ": " + hint));
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
    model.replace_head(classes);
    report.head_replaced = true;
  }
  report.head_new = no_head && !head.empty();
  for (auto& [dst, src] : copies) dst.copy_(src);
  report.loaded = static_cast<int64_t>(copies.size());
  return report;
}

int64_t count_parameters(const torch::nn::Module& module) {
  int64_t n = 0;
  for (const auto& p : module.parameters()) n += p.numel();
  return n;
}

nlohmann::json layout_json(Model& model) {
  std::set<const void*> lookups;  // the tables of every Embedding module
  for (const auto& m : model.modules(/*include_self=*/true)) {
    if (const auto* e = m->as<torch::nn::EmbeddingImpl>()) {
      lookups.insert(e->weight.unsafeGetTensorImpl());
    }
  }
  nlohmann::json numels = nlohmann::json::array();
  int64_t element_bytes = 4;
  for (const auto& p : model.parameters()) {
    if (!p.requires_grad()) continue;
    numels.push_back(p.numel());
    element_bytes = int64_t(p.element_size());
  }
  nlohmann::json units = nlohmann::json::array();
  for (const auto& u : model.wrap_units()) {
    int64_t n = 0, compute = 0;
    for (const auto& [name, t] : u.params) {
      n += t.numel();
      if (lookups.count(t.unsafeGetTensorImpl()) == 0) compute += t.numel();
    }
    units.push_back({{"name", u.name}, {"numel", n}, {"compute_numel", compute}});
  }
  return {{"param_numels", numels}, {"element_bytes", element_bytes}, {"units", units}};
}

}  // namespace accel::models
