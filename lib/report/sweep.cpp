#include "accel/report/sweep.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <sstream>

#include "accel/config/run_config.h"
#include "accel/metrics/hardware.h"
#include "accel/metrics/metrics.h"
#include "accel/report/machine.h"
#include "accel/report/progress.h"
#include "accel/report/suite.h"
#include "accel/util/errors.h"
#include "child_process.h"

namespace fs = std::filesystem;

namespace accel::report {
namespace {

std::string percent(OptNum v) {
  if (!v) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f%%", *v * 100);
  return buf;
}

class Sweep {
 public:
  explicit Sweep(const SweepOptions& o)
      : opts_(o), suite_(load_suite(o.suite)), progress_(o.log ? *o.log : null_, o.terminal) {}

  SweepSummary run();

 private:
  Json plan_entry(const SuiteRung& r) const;
  void run_rung(const SuiteRung& r, Json& entry, bool upstream);
  // An upstream run committed with the suite: copied in when its config matches.
  bool use_committed(const SuiteRung& r, const Json& resolved, Json& entry);
  // One run: reuse it (--resume, same config) or spawn it. Returns its record.
  Json run_one(const SuiteRung& r, const std::vector<std::string>& sets, const std::string& rel,
               const std::string& label, bool need_checkpoint);
  std::string skip_reason(const SuiteRung& r, const Json& resolved) const;
  std::string upstream_for(const SuiteRung& r, const Json& resolved) const;
  void save() { metrics::write_json_atomic(set_dir_ / "sweep.json", manifest_); }

  SweepOptions opts_;
  Suite suite_;
  std::ostringstream null_;
  Progress progress_;
  Json machine_, manifest_;
  fs::path set_dir_;
  SweepSummary summary_;
};

Json Sweep::plan_entry(const SuiteRung& r) const {
  Json e = {{"id", r.id}, {"changes", r.changes}, {"config", r.config.string()},
            {"status", "pending"}, {"runs", Json::array()}};
  if (!r.article.empty()) e["article"] = r.article;
  if (!r.init_from.empty()) e["init_from"] = r.init_from;
  if (!r.needs.empty()) e["needs"] = r.needs;
  return e;
}

std::string Sweep::skip_reason(const SuiteRung& r, const Json& resolved) const {
  const bool cuda = machine_["env"].value("cuda_available", false);
  const int gpus = machine_["env"].value("gpu_count", 0);
  std::string needs = r.needs;
  std::transform(needs.begin(), needs.end(), needs.begin(), ::toupper);
  if (r.config.empty()) return r.needs.empty() ? "no config" : r.needs;
  if (needs == "CUDA" && !cuda) return "CUDA";
  if (resolved["runtime"].value("accelerator", "cpu") == "cuda") {
    if (!cuda) return "CUDA";
    // "auto" takes the GPUs there are (at least one, checked above).
    const auto& d = resolved["runtime"].value("devices", Json(1));
    const int devices = d.is_number_integer() ? d.get<int>() : 1;
    if (devices > gpus) return std::to_string(devices) + " GPUs";
  }
  return "";
}

std::string Sweep::upstream_for(const SuiteRung& r, const Json& resolved) const {
  if (!r.init_from.empty()) return r.init_from;
  if (resolved["model"].value("init", "random") != "checkpoint") return "";
  const auto folder = fs::path(resolved["model"].value("init_path", "")).parent_path().filename();
  for (const auto& u : suite_.upstream) {
    if (u.id == folder.string()) return u.id;
  }
  return "";
}

Json Sweep::run_one(const SuiteRung& r, const std::vector<std::string>& sets,
                    const std::string& rel, const std::string& label, bool need_checkpoint) {
  const fs::path dir = set_dir_ / rel;
  const Json resolved = config::load_config(r.config.string(), sets);
  Json rec = {{"dir", rel}, {"config_hash", json_hash(resolved)}, {"sets", sets}};
  const auto prior = read_run(dir);
  if (opts_.resume && prior.ok() && json_hash(prior.config) == json_hash(resolved) &&
      (!need_checkpoint || fs::exists(dir / "checkpoint.ckpt"))) {
    rec["status"] = "reused";
    progress_.note(label + ": reused (resolved config unchanged), test acc " +
                   percent(prior.test_acc));
    ++summary_.reused;
    return rec;
  }
  // A rung a signal stopped continues from its checkpoint under --resume.
  const bool continue_it = opts_.resume && prior.present && prior.status == "interrupted" &&
                           json_hash(prior.config) == json_hash(resolved) &&
                           fs::exists(dir / "checkpoint.ckpt");
  fs::create_directories(dir);
  fs::remove(dir / "result.json");  // a crash must not leave an older result in place
  std::vector<std::string> argv = {opts_.exe.string(), "run", "-c", r.config.string(),
                                   "--out", dir.string()};
  if (continue_it) {
    argv.insert(argv.end(), {"--resume", "auto"});
    progress_.note(label + ": continuing the interrupted run from its checkpoint");
  } else {
    argv.push_back("--force");
  }
  for (const auto& s : sets) {
    argv.push_back("--set");
    argv.push_back(s);
  }
  progress_.start(label, resolved["train"].value("batch_size", 1),
                  resolved["train"].value("epochs", 1));
  const auto t0 = std::chrono::steady_clock::now();
  const auto child = detail::run_child(argv, dir / "run.log",
                                       [&](const std::string& l) { progress_.line(l); });
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto result = read_run(dir);
  rec["exit_code"] = child.exit_code;
  rec["wall_s"] = wall;
  char took[64];
  std::snprintf(took, sizeof(took), "%.1f s", wall);
  if (child.stop_signal != 0) {
    // Stopped on request: the run checkpointed (exit 3) or was killed by a
    // second signal; either way the sweep stops after recording it.
    summary_.stop_signal = child.stop_signal;
    summary_.stopped_rung = label;
    rec["status"] = "interrupted";
    rec["signal"] = child.stop_signal;
    rec["checkpoint"] = fs::exists(dir / "checkpoint.ckpt");
    progress_.finish("interrupted by signal " + std::to_string(child.stop_signal) + " after " +
                     took + (child.exit_code == 3 ? " (checkpoint written)" : "") +
                     "; continue with sweep --resume");
  } else if (child.exit_code == 0 && result.ok()) {
    rec["status"] = "ok";
    ++summary_.ok;
    progress_.finish(std::string("ok in ") + took + ", test acc " + percent(result.test_acc));
  } else {
    rec["status"] = "failed";
    rec["error"] = !result.error.empty() ? result.error : child.last_line;
    ++summary_.failed;
    progress_.finish("FAILED (exit " + std::to_string(child.exit_code) + ") after " + took +
                     ": " + rec["error"].get<std::string>() + " [log: " +
                     (dir / "run.log").string() + "]");
  }
  return rec;
}

bool Sweep::use_committed(const SuiteRung& r, const Json& resolved, Json& entry) {
  if (r.committed.empty() || opts_.rerun_upstream) return false;
  const auto& c = r.committed;
  const auto weights = c / "model.safetensors";
  const auto prior = read_run(c);
  if (!fs::exists(weights) || !prior.ok()) {
    progress_.note(r.id + ": the committed run in " + c.string() +
                   " lacks model.safetensors or an ok result.json; running it");
    return false;
  }
  // The committed config resolved again by today's schema: fields added since
  // it was made take their defaults, so a new field does not invalidate it
  // (a default that changed, or an edited config, does).
  Json committed_config;
  try {
    committed_config = config::resolve_config(prior.config, c);
  } catch (const ConfigError&) {
    committed_config = prior.config;  // a field since removed: not the same config
  }
  if (json_hash(committed_config) != json_hash(resolved)) {
    progress_.note(r.id + ": the committed run in " + c.string() +
                   " was made by another config; running it");
    return false;
  }
  const fs::path dir = set_dir_ / r.id;
  fs::create_directories(dir);
  for (const char* f : {"config.json", "result.json", "metrics.csv"}) {
    if (fs::exists(c / f)) fs::copy_file(c / f, dir / f, fs::copy_options::overwrite_existing);
  }
  entry["status"] = "committed";
  entry["committed"] = c.string();
  entry["weights"] = fs::absolute(weights).lexically_normal().string();
  entry["runs"].push_back({{"dir", r.id}, {"status", "committed"}});
  progress_.note(r.id + ": committed run " + c.string() + " (same config; test acc " +
                 percent(prior.test_acc) + "), not rerun; --rerun-upstream runs it");
  ++summary_.reused;
  return true;
}

void Sweep::run_rung(const SuiteRung& r, Json& entry, bool upstream) {
  std::vector<std::string> sets = suite_.sets;
  sets.insert(sets.end(), opts_.sets.begin(), opts_.sets.end());
  auto fail = [&](const std::string& why) {
    entry["status"] = "failed";
    entry["error"] = why;
    ++summary_.failed;
    progress_.note(r.id + ": FAILED: " + why);
  };
  Json resolved;
  if (!r.config.empty()) {
    try {
      resolved = config::load_config(r.config.string(), sets);
    } catch (const ConfigError& e) {
      return fail(e.what());
    }
  }
  if (const auto why = skip_reason(r, resolved); !why.empty()) {
    entry["status"] = "skipped";
    entry["needs"] = why;
    ++summary_.skipped;
    progress_.note(r.id + ": skipped (needs " + why + ")");
    return;
  }
  if (upstream && use_committed(r, resolved, entry)) return;
  if (const auto up = upstream_for(r, resolved); !up.empty()) {
    const Json* up_entry = nullptr;
    for (const auto& u : manifest_["upstream"]) {
      if (u["id"] == up) up_entry = &u;
    }
    const auto up_status = up_entry ? (*up_entry)["status"].get<std::string>() : "";
    if (up_status == "committed") {
      sets.push_back("model.init=safetensors");
      sets.push_back("model.init_path=" + (*up_entry)["weights"].get<std::string>());
    } else if (up_status == "ok") {
      sets.push_back("model.init=checkpoint");
      sets.push_back("model.init_path=" + (set_dir_ / up / "checkpoint.ckpt").string());
    } else {
      return fail("upstream run " + up + " did not finish");
    }
  }
  if (!r.where_emulated.empty()) {
    const auto& rt = resolved["runtime"];
    const bool cuda = rt.value("accelerator", "cpu") == "cuda" ||
                      (rt.value("accelerator", "cpu") == "auto" &&
                       machine_["env"].value("cuda_available", false));
    const auto precision = rt.value("precision", "32-true");
    const auto support =
        metrics::precision_support(precision, cuda ? "cuda" : "cpu", metrics::cpu_features());
    if (support.emulated()) {
      sets.insert(sets.end(), r.where_emulated.begin(), r.where_emulated.end());
      entry["where_emulated"] = {{"precision", precision},
                                 {"set", r.where_emulated},
                                 {"note", r.where_emulated_note},
                                 {"comparable", r.where_emulated_comparable}};
      std::string added;
      for (const auto& v : r.where_emulated) added += (added.empty() ? "" : " ") + v;
      progress_.note(r.id + ": " + precision + " is emulated on this CPU; running with " + added);
    }
  }
  const int repeats = upstream ? 1
                      : opts_.repeats > 0 ? opts_.repeats
                                          : std::max<int>(1, int(opts_.seeds.size()));
  bool all_ok = true;
  for (int i = 0; i < repeats; ++i) {
    auto run_sets = sets;
    if (!upstream && !opts_.seeds.empty()) {
      run_sets.push_back("train.seed=" + std::to_string(opts_.seeds[size_t(i) % opts_.seeds.size()]));
    }
    const std::string rel = repeats > 1 ? r.id + "/r" + std::to_string(i + 1) : r.id;
    const std::string label = repeats > 1 ? r.id + " r" + std::to_string(i + 1) : r.id;
    Json rec;
    try {
      rec = run_one(r, run_sets, rel, label, upstream);
    } catch (const std::exception& e) {  // a config the --set made invalid, spawn failure
      rec = {{"dir", rel}, {"status", "failed"}, {"error", e.what()}};
      ++summary_.failed;
      progress_.note(label + ": FAILED: " + e.what());
    }
    all_ok = all_ok && rec["status"] != "failed";
    entry["runs"].push_back(rec);
    if (summary_.stop_signal != 0) {
      entry["status"] = "interrupted";
      save();
      return;
    }
    save();
  }
  entry["status"] = all_ok ? "ok" : "failed";
}

SweepSummary Sweep::run() {
  if (opts_.exe.empty()) opts_.exe = fs::read_symlink("/proc/self/exe");
  machine_ = this_machine();
  set_dir_ = sweep_set_dir(opts_.out, suite_.name, machine_["id"].get<std::string>());
  summary_.set_dir = set_dir_;
  fs::create_directories(set_dir_);
  manifest_ = {{"schema_version", 1},
               {"suite", suite_.name},
               {"suite_file", suite_.file.string()},
               {"description", suite_.description},
               {"machine_id", machine_["id"]},
               {"machine", machine_},
               {"repeats", opts_.repeats},
               {"seeds", opts_.seeds},
               {"sets", opts_.sets},
               {"suite_sets", suite_.sets},
               {"started_at", metrics::utc_now()},
               {"upstream", Json::array()},
               {"rungs", Json::array()}};
  manifest_["target_accuracy"] =
      suite_.target_accuracy ? Json(*suite_.target_accuracy) : Json(nullptr);
  manifest_["reference"] = suite_.reference;
  for (const auto& u : suite_.upstream) manifest_["upstream"].push_back(plan_entry(u));
  for (const auto& r : suite_.rungs) manifest_["rungs"].push_back(plan_entry(r));
  save();
  progress_.note("suite " + suite_.name + " on " + machine_["id"].get<std::string>() + " -> " +
                 set_dir_.string());
  for (size_t i = 0; i < suite_.upstream.size() && summary_.stop_signal == 0; ++i) {
    run_rung(suite_.upstream[i], manifest_["upstream"][i], true);
    save();
  }
  for (size_t i = 0; i < suite_.rungs.size() && summary_.stop_signal == 0; ++i) {
    run_rung(suite_.rungs[i], manifest_["rungs"][i], false);
    save();
  }
  if (summary_.stop_signal != 0) {
    manifest_["stopped_at"] = metrics::utc_now();
    manifest_["stopped_by_signal"] = summary_.stop_signal;
    save();
    progress_.note("stopped by signal " + std::to_string(summary_.stop_signal) + " during " +
                   summary_.stopped_rung + "; sweep --resume continues it from its checkpoint");
    return summary_;
  }
  manifest_["finished_at"] = metrics::utc_now();
  save();
  progress_.note(std::to_string(summary_.ok) + " ran ok, " + std::to_string(summary_.reused) +
                 " reused, " + std::to_string(summary_.failed) + " failed, " +
                 std::to_string(summary_.skipped) + " skipped; results in " + set_dir_.string());
  return summary_;
}

}  // namespace

fs::path sweep_set_dir(const fs::path& out, const std::string& suite,
                       const std::string& machine_id) {
  return out / suite / machine_id;
}

std::vector<uint64_t> parse_seeds(const std::string& text) {
  std::vector<uint64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    try {
      out.push_back(std::stoull(item, &used));
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || item[0] == '-') {
      throw ConfigError("--seeds: \"" + text + "\": expected numbers separated by commas");
    }
  }
  if (out.empty()) throw ConfigError("--seeds: give at least one seed");
  return out;
}

SweepSummary run_sweep(const SweepOptions& opts) {
  if (opts.repeats < 0) throw ConfigError("--repeats: must be at least 1");
  Sweep sweep(opts);
  return sweep.run();
}

}  // namespace accel::report
