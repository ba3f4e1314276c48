#include "accel/results/result_set.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "accel/results/stats.h"
#include "accel/util/errors.h"
#include "accel/util/input_file.h"
#include "accel/util/json_doc.h"

namespace fs = std::filesystem;

namespace accel::results {


std::vector<double> step_times_after_warmup(const RunRecord& run) {
  if (!run.step_ms_after_warmup.empty()) return run.step_ms_after_warmup;
  std::vector<double> out;
  std::string text;
  try {
    text = read_input_file(run.dir / "metrics.csv", "metrics.csv");
  } catch (const std::exception&) {
    return out;  // no per-step figures: the run has no interval of its own
  }
  const auto warmup = long(num_at(run.config, "train/warmup_steps").value_or(5));
  long steps = 0;
  size_t pos = text.find('\n');  // after the header
  while (pos != std::string::npos && pos + 1 < text.size()) {
    const size_t end = text.find('\n', pos + 1);
    const std::string line = text.substr(pos + 1, end == std::string::npos ? end : end - pos - 1);
    pos = end;
    if (line.rfind("step,", 0) != 0) continue;
    const auto comma = line.rfind(',');
    if (steps++ < warmup || comma + 1 >= line.size()) continue;
    char* stop = nullptr;
    const double ms = std::strtod(line.c_str() + comma + 1, &stop);
    if (stop != line.c_str() + comma + 1 && std::isfinite(ms) && ms > 0) out.push_back(ms);
  }
  return out;
}

std::vector<double> timing_factors(const RungRuns& r) {
  std::vector<double> out;
  const RunRecord* full = nullptr;
  for (const auto& run : r.repeats) {
    if (!run.ok()) continue;
    if (full != nullptr) return out;  // repeats: they are the between-run samples
    full = &run;
  }
  if (full == nullptr || r.timing.empty()) return out;
  const auto steps = step_times_after_warmup(*full);
  for (const auto& t : r.timing) {
    if (!t.ok()) continue;
    const auto own = step_times_after_warmup(t);
    if (own.size() < 4 || own.size() > steps.size()) continue;
    const double window = stats::median(std::vector<double>(steps.begin(), steps.begin() + long(own.size())));
    const double mine = stats::median(own);
    if (window > 0 && mine > 0 && std::isfinite(mine / window)) out.push_back(mine / window);
  }
  return out;
}

std::vector<double> with_timing(std::vector<double> values, const std::vector<double>& factors) {
  if (values.size() != 1) return values;
  const double full = values.front();
  for (const double f : factors) values.push_back(full * f);
  return values;
}

const RungRuns* ResultSet::find(const std::string& id) const {
  for (const auto* list : {&rungs, &upstream}) {
    for (const auto& r : *list) {
      if (r.id == id) return &r;
    }
  }
  return nullptr;
}

Json ResultSet::env() const {
  for (const auto* list : {&rungs, &upstream}) {
    for (const auto& r : *list) {
      for (const auto& run : r.repeats) {
        if (run.env.is_object()) return run.env;
      }
    }
  }
  return Json();
}

namespace {

[[noreturn]] void bad_manifest(const fs::path& set, const std::string& what) {
  throw ConfigError((set / "sweep.json").string() + ": " + what);
}

// A run folder sweep.json names: relative, inside the set, of safe names.
std::string run_dir(const fs::path& set, const Json& run, const std::string& id) {
  const std::string dir = str_at(run, "dir", id);
  const fs::path p(dir);
  bool safe = !p.empty() && p.is_relative();
  for (const auto& part : p) safe = safe && is_safe_id(part.string());
  if (!safe) {
    bad_manifest(set, "run folder \"" + dir + "\" of rung " + id +
                          " is not a folder inside the set (letters, digits, '-', '_', '.')");
  }
  return dir;
}

RungRuns rung_from_manifest(const fs::path& set, const Json& entry, bool upstream) {
  RungRuns r;
  r.id = str_at(entry, "id");
  if (!is_safe_id(r.id)) {
    bad_manifest(set, "rung id \"" + r.id + "\" must be letters, digits, '-', '_' or '.'");
  }
  r.article = str_at(entry, "article");
  r.changes = str_at(entry, "changes");
  r.versus = str_at(entry, "versus");
  if (!r.versus.empty() && !is_safe_id(r.versus)) {
    bad_manifest(set, "rung " + r.id + ": versus \"" + r.versus + "\" is not a rung id");
  }
  r.needs = str_at(entry, "needs");
  r.sweep_status = str_at(entry, "status");
  r.skipped = str_at(entry, "skipped");
  r.upstream = upstream;
  r.committed = str_at(entry, "committed");
  if (entry.contains("where_emulated") && entry["where_emulated"].is_object()) {
    const auto& w = entry["where_emulated"];
    r.emulated_note = str_at(w, "note");
    if (w.contains("comparable") && w["comparable"].is_boolean()) {
      r.comparable = w["comparable"].get<bool>();
    }
    if (r.emulated_note.empty()) r.emulated_note = str_at(w, "precision") + " is emulated here";
    if (w.contains("set") && w["set"].is_array()) {
      for (const auto& v : w["set"]) {
        if (v.is_string()) r.emulated_sets.push_back(v.get<std::string>());
      }
    }
  }
  if (entry.contains("budget_cuts") && entry["budget_cuts"].is_array()) {
    for (const auto& v : entry["budget_cuts"]) {
      if (v.is_string()) r.budget_cuts.push_back(v.get<std::string>());
    }
  }
  if (entry.contains("runs") && entry["runs"].is_array()) {
    for (const auto& run : entry["runs"]) {
      r.repeats.push_back(read_run(set / run_dir(set, run, r.id)));
    }
  }
  if (entry.contains("timing_runs") && entry["timing_runs"].is_array()) {
    for (const auto& run : entry["timing_runs"]) {
      r.timing.push_back(read_run(set / run_dir(set, run, r.id)));
    }
  }
  return r;
}

// A folder of run folders without a manifest (e.g. results committed before
// the sweep existed): each folder with result.json, or with r*/result.json.
void scan_plain(ResultSet& s) {
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(s.dir)) {
    if (e.is_directory()) dirs.push_back(e.path());
  }
  std::sort(dirs.begin(), dirs.end());
  for (const auto& d : dirs) {
    RungRuns r;
    r.id = d.filename().string();
    r.upstream = r.id.rfind("pretrain", 0) == 0;
    // "04-bf16-mixed" is the article's rung 04, as the ladder's configs are named.
    if (r.id.size() > 2 && std::isdigit(static_cast<unsigned char>(r.id[0])) &&
        std::isdigit(static_cast<unsigned char>(r.id[1])) && r.id[2] == '-') {
      r.article = r.id.substr(0, 2);
    }
    if (fs::exists(d / "result.json")) {
      r.repeats.push_back(read_run(d));
    } else {
      std::vector<fs::path> reps;
      for (const auto& e : fs::directory_iterator(d)) {
        if (e.is_directory() && fs::exists(e.path() / "result.json")) reps.push_back(e.path());
      }
      std::sort(reps.begin(), reps.end());
      for (const auto& rep : reps) r.repeats.push_back(read_run(rep));
    }
    if (r.repeats.empty()) continue;
    // The rung's id is its folder's name: held to the ids' rules, as sweep.json's are.
    if (!is_safe_id(r.id)) {
      throw ConfigError(clean_text(d.string(), 400) +
                        ": a rung's folder is named by its id (letters, digits, '-', '_' or '.')");
    }
    (r.upstream ? s.upstream : s.rungs).push_back(std::move(r));
  }
}

// The metric of the set's first present run (rungs, then upstream).
train::MetricFacts set_metric(const ResultSet& s) {
  for (const auto* rungs : {&s.rungs, &s.upstream}) {
    for (const auto& r : *rungs) {
      for (const auto& run : r.repeats) {
        if (run.present) return run.metric;
      }
    }
  }
  return {};
}

}  // namespace

ResultSet load_result_set(const fs::path& dir) {
  if (!fs::is_directory(dir)) throw ConfigError(dir.string() + ": no such folder");
  // Every file a report or compare reads from the set is the set's own.
  refuse_links_leaving(dir, "result set");
  ResultSet s;
  s.dir = dir;
  if (fs::exists(dir / "sweep.json")) {
    s.manifest = read_json_file(dir / "sweep.json");
    clean_strings(s.manifest);
    s.suite = str_at(s.manifest, "suite");
    s.machine_id = str_at(s.manifest, "machine_id");
    for (const auto& [what, id] : {std::pair{"suite", s.suite}, std::pair{"machine_id", s.machine_id}}) {
      if (!is_safe_id(id)) {
        bad_manifest(dir, std::string(what) + " \"" + id + "\" must be letters, digits, '-', '_' or '.'");
      }
    }
    s.target_accuracy = num_at(s.manifest, "target_accuracy");
    s.convergence_reference = str_at(s.manifest, "convergence_reference", "");
    if (s.manifest.contains("reference")) s.reference = s.manifest["reference"];
    for (const auto& [key, up] : {std::pair{"upstream", true}, std::pair{"rungs", false}}) {
      if (!s.manifest.contains(key) || !s.manifest[key].is_array()) continue;
      for (const auto& entry : s.manifest[key]) {
        (up ? s.upstream : s.rungs).push_back(rung_from_manifest(dir, entry, up));
      }
    }
    s.metric = set_metric(s);
    return s;
  }
  // Names from folders, as text (a folder name need not be UTF-8).
  s.suite = clean_text(dir.parent_path().filename().string(), 200);
  s.machine_id = clean_text(dir.filename().string(), 200);
  scan_plain(s);
  if (s.rungs.empty() && s.upstream.empty()) {
    throw ConfigError(dir.string() + ": not a result set (no sweep.json and no run folders "
                      "with result.json)");
  }
  s.metric = set_metric(s);
  return s;
}

std::vector<fs::path> find_result_sets(const fs::path& dir) {
  if (!fs::is_directory(dir)) throw ConfigError(dir.string() + ": no such folder");
  std::vector<fs::path> out;
  if (fs::exists(dir / "sweep.json")) return {dir};
  for (const auto& a : fs::directory_iterator(dir)) {
    if (!a.is_directory()) continue;
    if (fs::exists(a.path() / "sweep.json")) {
      out.push_back(a.path());
      continue;
    }
    for (const auto& b : fs::directory_iterator(a.path())) {
      if (b.is_directory() && fs::exists(b.path() / "sweep.json")) out.push_back(b.path());
    }
  }
  std::sort(out.begin(), out.end());
  if (out.empty()) out.push_back(dir);  // maybe a plain folder of runs
  return out;
}

fs::path single_result_set(const fs::path& dir) {
  const auto sets = find_result_sets(dir);
  if (sets.size() != 1) {
    std::string names;
    for (const auto& s : sets) names += " " + s.string();
    throw ConfigError(dir.string() + ": holds " + std::to_string(sets.size()) +
                      " result sets; name one of:" + names);
  }
  return sets.front();
}

bool is_safe_id(const std::string& id) {
  return !id.empty() && id != "." && id != ".." &&
         std::all_of(id.begin(), id.end(), [](char c) {
           return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
         });
}

}  // namespace accel::results
