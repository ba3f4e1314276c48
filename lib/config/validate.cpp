// Validation driven by the schema table: unknown keys (per file, so the
// message names the file the key is in), then types, ranges, choices and
// aliases on the merged document, defaults, and the few cross-field checks
// that need no I/O. Also the conversion of a resolved document to RunConfig.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <set>

#include "accel/config/run_config.h"
#include "accel/data/catalog.h"
#include "accel/dist/catalog.h"
#include "accel/models/catalog.h"
#include "accel/train/task.h"
#include "accel/util/errors.h"
#include "json_text.h"
#include "schema.h"

namespace accel::config::detail {
namespace {

using nlohmann::json;

void check_top_key(const std::string& pre, const std::string& key, const json& v) {
  const auto& valid = top_level_keys();
  if (std::find(valid.begin(), valid.end(), key) != valid.end()) return;
  std::string msg = pre + "unknown " + (v.is_object() ? "section" : "top-level key") + " \"" + printable(key) + "\"" +
                    "; valid top-level keys: " + join(valid, ", ");
  std::string near = closest(key, valid);
  if (!near.empty()) {
    msg += "; did you mean \"" + near + "\"?";
  } else {
    for (const auto& s : sections())
      if (find_field(s + "." + key)) msg += "; did you mean \"" + s + "." + key + "\"?";
  }
  throw ConfigError(msg);
}

bool in_range(const Field& f, long double x) {
  if (f.min && (f.min_open ? x <= *f.min : x < *f.min)) return false;
  if (f.max && (f.max_open ? x >= *f.max : x > *f.max)) return false;
  return true;
}

// The value of an integer or an integral float (5.0 is accepted as 5, 5.5 is
// not). long double holds every int64 and uint64 exactly.
std::optional<long double> integral(const json& v) {
  if (v.is_number_unsigned()) return static_cast<long double>(v.get<uint64_t>());
  if (v.is_number_integer()) return static_cast<long double>(v.get<int64_t>());
  if (v.is_number_float()) {
    double x = v.get<double>();
    if (std::isfinite(x) && std::floor(x) == x) return x;
  }
  return std::nullopt;
}

// `where` is "file: path" (or "file: data.classes[2]" for a list entry).
json check_int(const Field& f, const json& v, const std::string& where) {
  if (v.is_string() && std::find(f.words.begin(), f.words.end(), v.get<std::string>()) != f.words.end())
    return v;
  auto x = integral(v);
  std::string r = range_text(f);
  if (!x || !in_range(f, *x)) {
    std::string also;
    for (const auto& w : f.words) also += " or \"" + w + "\"";
    throw ConfigError(where + ": expected an integer" + (r.empty() ? "" : " " + r) + also +
                      ", got " + show(v));
  }
  long double lo = 0, hi = 0;
  const char* bits = "a 32-bit";
  switch (f.int_kind) {
    case IntKind::I32: lo = INT32_MIN; hi = INT32_MAX; break;
    case IntKind::I64: lo = INT64_MIN; hi = INT64_MAX; bits = "a 64-bit"; break;
    case IntKind::U64: lo = 0; hi = UINT64_MAX; bits = "an unsigned 64-bit"; break;
  }
  if (*x < lo || *x > hi)
    throw ConfigError(where + ": " + show(v) + " does not fit in " + bits + " integer");
  if (f.int_kind == IntKind::U64) return static_cast<uint64_t>(*x);
  return static_cast<int64_t>(*x);
}

json check_float(const Field& f, const json& v, const std::string& where) {
  if (!v.is_number() || !std::isfinite(v.get<double>()) || !in_range(f, v.get<double>()))
    throw ConfigError(where + ": " + expectation(f) + ", got " + show(v));
  return v.get<double>();
}

json check_string(const Field& f, json v, const std::string& where) {
  // Lightning accepts precision=16 as a number; treat numbers as their text
  // where the field has aliases, so "16" and 16 mean the same.
  if (!f.aliases.empty() && v.is_number_integer()) v = v.dump();
  if (!v.is_string()) throw ConfigError(where + ": expected a string, got " + show(v));
  std::string s = v.get<std::string>();
  if (f.nonempty && s.empty()) throw ConfigError(where + ": must not be empty");
  for (const auto& [from, to] : f.aliases)
    if (s == from) s = to;
  if (f.choices.empty() || std::find(f.choices.begin(), f.choices.end(), s) != f.choices.end())
    return s;
  std::string msg = where + ": \"" + s + "\" is not one of " + join(f.choices, ", ");
  if (!f.aliases.empty()) {
    std::vector<std::string> names;
    for (const auto& a : f.aliases) names.push_back(a.first);
    msg += " (aliases: " + join(names, ", ") + ")";
  }
  std::string near = closest(s, f.choices);
  if (!near.empty()) msg += "; did you mean \"" + near + "\"?";
  throw ConfigError(msg);
}

json check_list(const Field& f, const json& v, const std::string& where) {
  if (!v.is_array()) throw ConfigError(where + ": " + expectation(f) + ", got " + show(v));
  json out = json::array();
  std::set<int64_t> seen;
  for (size_t k = 0; k < v.size(); ++k) {
    json e = check_int(f, v[k], where + "[" + std::to_string(k) + "]");
    if (f.unique && !seen.insert(e.get<int64_t>()).second)
      throw ConfigError(where + ": " + e.dump() + " appears more than once in " + show(v));
    out.push_back(e);
  }
  return out;
}

json check_value(const Field& f, const json& v, const Origins& origins) {
  std::string where = prefix(origins, f.path) + f.path;
  switch (f.type) {
    case Type::Int: return check_int(f, v, where);
    case Type::Float: return check_float(f, v, where);
    case Type::Bool:
      if (!v.is_boolean()) throw ConfigError(where + ": expected true or false, got " + show(v));
      return v;
    case Type::String: return check_string(f, v, where);
    case Type::IntList: return check_list(f, v, where);
  }
  return v;
}

const json* lookup(const json& doc, const Field& f) {
  const json* parent = &doc;
  if (!f.section.empty()) {
    auto s = doc.find(f.section);
    if (s == doc.end() || !s->is_object()) return nullptr;
    parent = &*s;
  }
  auto it = parent->find(f.key);
  return it == parent->end() || it->is_null() ? nullptr : &*it;
}

// Origin of the first of `paths` that some file or --set assigned.
std::string where_of(const Origins& o, std::initializer_list<const char*> paths) {
  for (const char* p : paths)
    if (!prefix(o, p).empty()) return prefix(o, p);
  return "";
}

void check_model(const json& m, const Origins& o, const models::FamilyInfo& family) {
  const bool needs_path = m["init"] != "random";
  if (needs_path && m["init_path"].get<std::string>().empty())
    throw ConfigError(where_of(o, {"model.init"}) + "model.init_path: required when model.init is " +
                      m["init"].dump());
  if (!needs_path && !m["init_path"].get<std::string>().empty())
    throw ConfigError(where_of(o, {"model.init_path"}) +
                      "model.init_path: set but model.init is \"random\"");
  const std::string format = m["init_format"];
  if (format != "auto" &&
      std::find(family.formats.begin(), family.formats.end(), format) == family.formats.end())
    throw ConfigError(where_of(o, {"model.init_format"}) + "model.init_format: \"" + format +
                      "\" is not a weight format of model.arch \"" + family.arch + "\" (auto, " +
                      join(family.formats, ", ") + ")");
  // The family's own cross-field rules on the dims given.
  if (family.check) {
    family.check(m, [&](const std::vector<std::string>& paths) {
      for (const auto& p : paths)
        if (!prefix(o, p).empty()) return prefix(o, p);
      return std::string();
    });
  }
}

void check_classes(const json& r, const Origins& o) {
  const json& data = r["data"];
  const std::string dataset = data["dataset"];
  const json& classes = data["classes"];
  // The dataset table's class count; 0 = known only once the data is read.
  const auto* info = data::find_dataset(dataset);
  const int64_t available = info ? info->classes : 0;
  for (const auto& c : classes)
    if (available > 0 && c.get<int64_t>() >= available)
      throw ConfigError(where_of(o, {"data.classes", "data.dataset"}) + "data.classes: " +
                        c.dump() + " is not a class of " + dataset + " (0.." +
                        std::to_string(available - 1) + ")");
  int64_t yielded = classes.empty() ? available : static_cast<int64_t>(classes.size());
  int64_t n = r["model"]["num_classes"];
  if (n > 0 && n < yielded)
    throw ConfigError(where_of(o, {"model.num_classes"}) + "model.num_classes: " +
                      std::to_string(n) + " is fewer than the " + std::to_string(yielded) +
                      " classes the data yields");
}

void check_data(const json& d, const Origins& o) {
  if (d["dataset"] == "text-csv") {
    for (const char* k : {"train_file", "test_file"})
      if (d[k].get<std::string>().empty())
        throw ConfigError(where_of(o, {"data.dataset"}) + "data." + k +
                          ": required when data.dataset is \"text-csv\"");
  }
}

void check_train(const json& t, const Origins& o) {
  const auto metric = train::task_metric(t["task"].get<std::string>());
  if (t["stop_at_target"] == true && !(t["target"].get<double>() > 0))
    throw ConfigError(where_of(o, {"train.stop_at_target", "train.target"}) +
                      "train.stop_at_target: needs train.target, the validation " + metric.name +
                      " to stop at (e.g. " + (metric.proportion ? "0.85" : "3.5") + ")");
  // A share's target is a fraction; a loss's is any positive value.
  if (const double target = t["target"].get<double>(); metric.proportion && target > 1) {
    char shown[32];
    std::snprintf(shown, sizeof shown, "%g", target);
    throw ConfigError(where_of(o, {"train.target"}) + "train.target: " + shown + " is above 1: train.task " + t["task"].get<std::string>() + "'s " + metric.name +
                      " is a fraction (0.85 for 85%)");
  }
}

void check_runtime(const json& rt, const Origins& o) {
  // devices "auto" is resolved at launch (1 under strategy single).
  const bool many = rt["devices"].is_number() && rt["devices"] != 1;
  const auto* strategy = dist::find_strategy(rt["strategy"].get<std::string>());
  if (strategy && strategy->one_rank && (many || rt["num_nodes"] != 1))
    throw ConfigError(where_of(o, {"runtime.strategy", "runtime.devices", "runtime.num_nodes"}) +
                      "runtime.strategy: \"" + strategy->name + "\" needs runtime.devices = 1 and "
                      "runtime.num_nodes = 1, got " + rt["devices"].dump() + " and " +
                      rt["num_nodes"].dump());
}

}  // namespace

std::string unknown_key(const std::string& section, const std::string& key) {
  std::string msg = "unknown key \"" + printable(section + "." + key) + "\"; valid keys in \"" + section +
                    "\": " + join(keys_of(section), ", ");
  // A close key in the same section, else the same key in another section
  // (train.lr for optim.lr is a common slip).
  std::string near = closest(key, keys_of(section));
  if (!near.empty()) return msg + "; did you mean \"" + section + "." + near + "\"?";
  for (const auto& s : sections())
    if (find_field(s + "." + key)) return msg + "; did you mean \"" + s + "." + key + "\"?";
  return msg;
}

void check_keys(const json& doc, const std::string& origin) {
  std::string pre = origin.empty() ? "" : origin + ": ";
  if (!doc.is_object())
    throw ConfigError(pre + "expected a JSON object at the top level, got " + show(doc));
  for (const auto& [key, value] : doc.items()) {
    check_top_key(pre, key, value);
    const auto& secs = sections();
    if (std::find(secs.begin(), secs.end(), key) == secs.end() || value.is_null()) continue;
    if (!value.is_object())
      throw ConfigError(pre + key + ": expected an object (the \"" + key +
                        "\" section), got " + show(value));
    for (const auto& item : value.items())
      if (!find_field(key + "." + item.key())) throw ConfigError(pre + unknown_key(key, item.key()));
  }
}

namespace {

// "a vit field" / "an image-data field" / "a text-csv or imdb field" / "a bert, distilbert or gpt field"
std::string tag_words(const Field& f) {
  std::vector<std::string> words;
  for (const auto& t : f.tags) {
    if (models::find_family(t) || data::find_dataset(t)) words.push_back(t);
    else words.push_back(t + "-data");
  }
  std::string w = words.empty() ? std::string() : words.back();
  if (words.size() > 1) w = join(std::vector<std::string>(words.begin(), words.end() - 1), ", ") + " or " + w;
  const bool vowel = !w.empty() && std::string("aeiou").find(w[0]) != std::string::npos;
  return (vowel ? "an " : "a ") + w + " field";
}

// The model family, the dataset and its kind: what decides which fields a
// document has (Field::tags), resolved before the fields.
Active resolve_active(const json& merged, const Origins& origins, const models::FamilyInfo*& family) {
  auto given = [&](const char* path) -> const json* { return lookup(merged, *find_field(path)); };
  Active a;
  const auto& catalog = models::model_catalog();
  if (const json* arch = given("model.arch")) {
    a.arch = check_value(*find_field("model.arch"), *arch, origins).get<std::string>();
  } else if (const json* preset = given("model.preset");
             preset && preset->is_string() && models::family_of_preset(preset->get<std::string>())) {
    a.arch = models::family_of_preset(preset->get<std::string>())->arch;
  } else {
    a.arch = catalog.front().arch;
  }
  family = models::find_family(a.arch);
  if (const json* ds = given("data.dataset")) {
    a.dataset = check_value(*find_field("data.dataset"), *ds, origins).get<std::string>();
  } else {
    a.dataset = data::default_dataset(family->input);
  }
  const auto* info = data::find_dataset(a.dataset);
  a.kind = info ? info->kind : "";
  if (a.kind != family->input)
    throw ConfigError(where_of(origins, {"data.dataset", "model.arch", "model.preset"}) +
                      "data.dataset: \"" + a.dataset + "\" holds " + a.kind +
                      " data, but model.arch \"" + a.arch + "\" reads " + family->input +
                      "; choose a dataset of that kind or another model.arch");
  return a;
}

// model.preset must be one of the family's presets (or custom).
json check_preset(const json* given, const models::FamilyInfo& family, const Origins& origins) {
  if (!given) return family.presets.front();
  Field f = *find_field("model.preset");
  f.choices = family.presets;
  f.choices.push_back("custom");
  try {
    return check_value(f, *given, origins);
  } catch (const ConfigError& e) {
    std::string msg = e.what();
    if (given->is_string()) {
      if (const auto* other = models::family_of_preset(given->get<std::string>()))
        msg += " (\"" + given->get<std::string>() + "\" is a " + other->arch +
               " preset; set model.arch \"" + other->arch + "\" or leave it out)";
    }
    throw ConfigError(msg);
  }
}

}  // namespace

json validate(const json& merged, const Origins& origins) {
  const models::FamilyInfo* family = nullptr;
  const Active active = resolve_active(merged, origins, family);
  json out = json::object();
  for (const auto& f : schema()) {
    const json* v = lookup(merged, f);
    if (!applies(f, active)) {
      if (v)
        throw ConfigError(prefix(origins, f.path) + f.path + ": " + tag_words(f) +
                          ", but this config's model.arch is \"" + active.arch +
                          "\" and data.dataset \"" + active.dataset + "\" (" + active.kind +
                          " data); leave it out");
      continue;
    }
    json value;
    if (f.path == "model.arch") {
      value = active.arch;
    } else if (f.path == "data.dataset") {
      value = active.dataset;
    } else if (f.path == "model.preset") {
      value = check_preset(v, *family, origins);
    } else {
      value = v ? check_value(f, *v, origins) : default_of(f, active);
    }
    if (f.section.empty())
      out[f.key] = std::move(value);
    else
      out[f.section][f.key] = std::move(value);
  }
  check_model(out["model"], origins, *family);
  check_classes(out, origins);
  check_data(out["data"], origins);
  check_train(out["train"], origins);
  check_runtime(out["runtime"], origins);
  return out;
}

}  // namespace accel::config::detail
