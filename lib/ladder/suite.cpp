#include "accel/ladder/suite.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include "accel/results/result_set.h"
#include "accel/util/errors.h"

namespace fs = std::filesystem;

namespace accel::ladder {

using results::is_safe_id;
namespace {

[[noreturn]] void bad(const Suite& s, const std::string& what) {
  throw ConfigError(s.file.string() + ": " + what);
}

void only_keys(const Suite& s, const Json& obj, const std::string& where,
               const std::set<std::string>& allowed) {
  if (!obj.is_object()) bad(s, where + ": expected an object");
  for (const auto& [key, value] : obj.items()) {
    if (allowed.count(key) == 0) {
      std::string list;
      for (const auto& k : allowed) list += (list.empty() ? "" : ", ") + k;
      bad(s, where + ": unknown key \"" + key + "\" (valid: " + list + ")");
    }
  }
}

std::string text(const Suite& s, const Json& obj, const std::string& where, const char* key,
                 bool required) {
  if (!obj.contains(key)) {
    if (required) bad(s, where + ": missing \"" + key + "\"");
    return "";
  }
  if (!obj[key].is_string()) bad(s, where + "." + key + ": expected a string");
  return obj[key].get<std::string>();
}

// Ids become folder names: keep them to a safe alphabet.
void check_id(const Suite& s, const std::string& where, const std::string& id) {
  if (!is_safe_id(id)) bad(s, where + ".id: \"" + id + "\" must be letters, digits, '-', '_' or '.'");
}

// A list of --set values ("section.key=value"), checked for their shape here
// and as config fields when the sweep resolves each run.
std::vector<std::string> set_list(const Suite& s, const Json& v, const std::string& where,
                                  bool non_empty) {
  const std::string want = std::string("expected a ") + (non_empty ? "non-empty " : "") +
                           "list of \"section.key=value\" strings";
  if (!v.is_array() || (non_empty && v.empty())) bad(s, where + ": " + want);
  std::vector<std::string> out;
  for (const auto& x : v) {
    if (!x.is_string() || x.get<std::string>().find('=') == std::string::npos) {
      bad(s, where + ": " + want);
    }
    out.push_back(x.get<std::string>());
  }
  return out;
}

SuiteRung read_rung(const Suite& s, const Json& obj, const std::string& where, bool upstream) {
  if (upstream) {
    only_keys(s, obj, where, {"id", "config", "changes", "committed", "set", "where_emulated"});
  } else {
    only_keys(s, obj, where, {"id", "article", "batch_sizes", "config", "changes", "init_from", "needs", "set",
                              "versus", "where_emulated"});
  }
  SuiteRung r;
  r.id = text(s, obj, where, "id", true);
  check_id(s, where, r.id);
  r.changes = text(s, obj, where, "changes", false);
  r.article = upstream ? "" : text(s, obj, where, "article", false);
  r.init_from = upstream ? "" : text(s, obj, where, "init_from", false);
  r.versus = upstream ? "" : text(s, obj, where, "versus", false);
  r.needs = upstream ? "" : text(s, obj, where, "needs", false);
  const auto cfg = text(s, obj, where, "config", upstream || r.needs.empty());
  if (!cfg.empty()) {
    r.config = s.file.parent_path() / cfg;
    if (!fs::exists(r.config)) bad(s, where + ".config: " + r.config.string() + ": no such file");
  }
  if (const auto dir = upstream ? text(s, obj, where, "committed", false) : ""; !dir.empty()) {
    r.committed = (s.file.parent_path() / dir).lexically_normal();
    if (!fs::is_directory(r.committed)) {
      bad(s, where + ".committed: " + r.committed.string() + ": no such folder");
    }
  }
  if (obj.contains("set")) r.sets = set_list(s, obj["set"], where + ".set", /*non_empty=*/false);
  if (obj.contains("where_emulated")) {
    const std::string w = where + ".where_emulated";
    const auto& we = obj["where_emulated"];
    only_keys(s, we, w, {"set", "note", "comparable"});
    if (we.contains("comparable")) {
      if (!we["comparable"].is_boolean()) bad(s, w + ".comparable: expected true or false");
      r.where_emulated_comparable = we["comparable"].get<bool>();
    }
    r.where_emulated = set_list(s, we.contains("set") ? we["set"] : Json(), w + ".set",
                                /*non_empty=*/true);
    r.where_emulated_note = text(s, we, w, "note", false);
  }
  return r;
}

// The batch sizes of a batch series: whole numbers from 1 to 2^20, increasing.
std::vector<int64_t> batch_sizes(const Suite& s, const Json& v, const std::string& where) {
  const std::string want = ": expected a non-empty list of increasing whole batch sizes from 1 to 1048576, "
                           "e.g. [16, 64, 128, 256]";
  if (!v.is_array() || v.empty() || v.size() > 32) bad(s, where + want);
  std::vector<int64_t> out;
  for (const auto& x : v) {
    if (!x.is_number_integer() || x.get<int64_t>() < 1 || x.get<int64_t>() > (int64_t(1) << 20) ||
        (!out.empty() && x.get<int64_t>() <= out.back())) {
      bad(s, where + want);
    }
    out.push_back(x.get<int64_t>());
  }
  return out;
}

// One rung per batch size of a batch series (suite.h).
std::vector<SuiteRung> batch_series(const Suite& s, const SuiteRung& r, const Json& obj, const std::string& where) {
  const auto sizes = batch_sizes(s, obj["batch_sizes"], where + ".batch_sizes");
  if (r.config.empty()) bad(s, where + ".batch_sizes: a batch series needs a config to run");
  std::vector<SuiteRung> out;
  for (size_t k = 0; k < sizes.size(); ++k) {
    SuiteRung b = r;
    const std::string n = std::to_string(sizes[k]);
    b.id = r.id + "-b" + n;
    check_id(s, where, b.id);
    if (k > 0) {  // the article and "versus" are the first batch's; each later one's is the batch before
      b.article.clear();
      b.versus.clear();
    }
    b.changes = r.changes.empty() ? "batch " + n : r.changes + " at batch " + n;
    b.sets.push_back("train.batch_size=" + n);
    b.series = r.id;
    b.batch = sizes[k];
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace

Suite load_suite(const fs::path& file) {
  Suite s;
  s.file = file;
  const Json doc = read_json_file(file);
  only_keys(s, doc, "suite", {"suite", "description", "reference", "results", "target_accuracy",
                              "convergence_reference", "set", "upstream", "rungs"});
  s.name = text(s, doc, "suite", "suite", true);
  check_id(s, "suite", s.name);
  s.description = text(s, doc, "suite", "description", false);
  if (doc.contains("target_accuracy")) {
    const auto& t = doc["target_accuracy"];
    // Of the rungs' task metric on validation: an accuracy is a fraction (the
    // sweep refuses one above 1 where a rung's metric is), a loss any value.
    if (!t.is_number() || !(t.get<double>() > 0) || !std::isfinite(t.get<double>()) ||
        t.get<double>() > train::kMaxMetric) {
      bad(s, "target_accuracy: expected the rungs' validation metric, > 0: an accuracy as a fraction in (0, 1], "
             "e.g. 0.85, or a language model's loss, e.g. 3.5");
    }
    s.target_accuracy = t.get<double>();
  }
  s.convergence_reference = text(s, doc, "suite", "convergence_reference", false);
  const auto ref = text(s, doc, "suite", "reference", false);
  if (!ref.empty()) s.reference = read_json_file(file.parent_path() / ref);
  if (doc.contains("set")) s.sets = set_list(s, doc["set"], "set", /*non_empty=*/false);
  if (const auto res = text(s, doc, "suite", "results", false); !res.empty()) {
    s.results = (file.parent_path() / res).lexically_normal();
    if (!fs::is_directory(s.results)) bad(s, "results: " + s.results.string() + ": no such folder");
  }
  std::set<std::string> ids;
  for (const auto& [key, upstream] : {std::pair{"upstream", true}, std::pair{"rungs", false}}) {
    if (!doc.contains(key)) {
      if (!upstream) bad(s, "missing \"rungs\"");
      continue;
    }
    if (!doc[key].is_array()) bad(s, std::string(key) + ": expected a list");
    for (size_t i = 0; i < doc[key].size(); ++i) {
      const std::string where = std::string(key) + "[" + std::to_string(i) + "]";
      auto r = read_rung(s, doc[key][i], where, upstream);
      std::vector<SuiteRung> expanded;
      if (!upstream && doc[key][i].contains("batch_sizes")) {
        expanded = batch_series(s, r, doc[key][i], where);
      } else {
        expanded.push_back(std::move(r));
      }
      for (auto& e : expanded) {
        if (!ids.insert(e.id).second) bad(s, where + ".id: \"" + e.id + "\" used twice");
        (upstream ? s.upstream : s.rungs).push_back(std::move(e));
      }
    }
  }
  if (s.rungs.empty()) bad(s, "rungs: the list is empty");
  for (size_t i = 0; i < s.rungs.size(); ++i) {
    const auto& r = s.rungs[i];
    const bool known = std::any_of(s.upstream.begin(), s.upstream.end(),
                                   [&](const SuiteRung& u) { return u.id == r.init_from; });
    if (!r.init_from.empty() && !known) {
      bad(s, "rung " + r.id + ": init_from \"" + r.init_from + "\" is not an upstream id");
    }
    const bool earlier = std::any_of(s.rungs.begin(), s.rungs.begin() + std::ptrdiff_t(i),
                                     [&](const SuiteRung& e) { return e.id == r.versus; });
    if (!r.versus.empty() && !earlier) {
      bad(s, "rung " + r.id + ": versus \"" + r.versus + "\" is not the id of a rung before it");
    }
  }
  // A rung's "article" names the reference's figures it is shown beside: a
  // name the reference lacks would show none, silently.
  if (s.reference.is_object()) {
    const auto& refs = s.reference.contains("rungs") ? s.reference["rungs"] : Json();
    for (const auto& r : s.rungs) {
      if (!r.article.empty() && !(refs.is_object() && refs.contains(r.article))) {
        bad(s, "rung " + r.id + ": article \"" + r.article + "\" is not a rung of the reference");
      }
    }
  }
  if (!s.convergence_reference.empty() &&
      std::none_of(s.rungs.begin(), s.rungs.end(), [&](const SuiteRung& r) { return r.id == s.convergence_reference; })) {
    bad(s, "convergence_reference: \"" + s.convergence_reference + "\" is not a rung id");
  }
  if (!s.convergence_reference.empty() && !s.target_accuracy) {
    bad(s, "convergence_reference: needs target_accuracy (samples to that target are what it compares)");
  }
  return s;
}

}  // namespace accel::ladder
