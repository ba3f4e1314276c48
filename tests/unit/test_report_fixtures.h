// Result sets written by the tests themselves: a sweep.json manifest and
// result.json files with the fields a run writes, figures chosen per test.
#pragma once

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "accel/util/json.h"

#include "accel/util/json_doc.h"

namespace report_test {

using accel::Json;
namespace fs = std::filesystem;

struct FakeRun {
  std::string status = "ok";
  double time_s = 600;
  double acc = 0.80;
  std::vector<double> mem = {1e9};
  double images_per_s = 100;
  int threads = 2;
  Json config_patch = Json::object();       // merged into the base config
  std::vector<double> epoch_time = {200, 200, 200};
  std::vector<double> epoch_val = {0.5, 0.7, 0.8};
  bool drop_figures = false;                // a result.json without figures (n/a)
  bool text = false;  // a text run: samples_per_s and tokens_per_s, no images_per_s
  // Step times (ms) for metrics.csv, warm-up steps first (train.warmup_steps
  // is 5 by default); empty: no metrics.csv and no step_time_ms.
  std::vector<double> steps;
  double test_samples = 0;  // work.test.samples when > 0
  std::string finished_at;  // when set, the run's end (UTC, ISO 8601)
  Json target;              // result.json's "target" (train.target) when set
  int64_t steps_run = 0;    // result.json's "steps" (training steps) when > 0
  Json plan;                // result.json's "plan" when set (its task names the metric)
  Json extra = Json::object();  // more result.json fields, set as given
};

// n step times around `ms`, spread +-rel, deterministic (no two alike).
inline std::vector<double> steady_steps(double ms, int n = 45, double rel = 0.01) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back(ms * (1 + rel * std::sin(1.7 * i + 0.3)));
  return v;
}

inline Json base_config() {
  return {{"name", "rung"},
          {"model", {{"preset", "vit_tiny_fmnist"}, {"init", "random"}, {"init_path", ""}}},
          {"data", {{"dataset", "synthetic"}, {"root", ""}}},
          {"train", {{"epochs", 3}, {"batch_size", 16}, {"seed", 123}}},
          {"runtime",
           {{"accelerator", "cpu"}, {"devices", 1}, {"num_nodes", 1}, {"strategy", "auto"},
            {"precision", "32-true"}, {"threads", 0}}}};
}

inline Json fake_result(const FakeRun& f) {
  Json cfg = base_config();
  cfg.merge_patch(f.config_patch);
  Json r = {{"schema_version", 1},
            {"status", f.status},
            {"config", cfg},
            {"env",
             {{"cpu_model", "Test CPU"}, {"cores", 2}, {"threads", f.threads},
              {"libtorch_version", "1.13.0"}, {"gpu_count", 0}, {"accel_bench_version", "0.1.0"},
              {"git_sha", "abc"}}},
            {"flops_per_sample", 1e8}};
  if (f.status != "ok") {
    r["error"] = "diverged";
    return r;
  }
  if (f.drop_figures) return r;
  r["train_time_s"] = f.time_s;
  r["test_acc"] = f.acc;
  if (f.text) {
    r["schema_version"] = 3;
    r["data_kind"] = "text";
    r["samples_per_s"] = f.images_per_s;
    r["tokens_per_s"] = f.images_per_s * 27;
  } else {
    r["images_per_s"] = f.images_per_s;
  }
  r["peak_memory_bytes"] = f.mem;
  if (!f.steps.empty()) {
    std::vector<double> after(f.steps.begin() + std::min<size_t>(5, f.steps.size()), f.steps.end());
    std::sort(after.begin(), after.end());
    if (!after.empty()) r["step_time_ms"] = {{"median", after[after.size() / 2]}, {"count", after.size()}};
  }
  if (!f.finished_at.empty()) r["finished_at"] = f.finished_at;
  if (f.steps_run > 0) r["steps"] = f.steps_run;
  if (!f.target.is_null()) r["target"] = f.target;
  if (!f.plan.is_null()) r["plan"] = f.plan;
  for (const auto& [k, v] : f.extra.items()) r[k] = v;
  if (f.test_samples > 0) r["work"] = {{"test", {{"samples", f.test_samples}, {"passes", 1}}}};
  r["epochs"] = Json::array();
  for (size_t i = 0; i < f.epoch_time.size(); ++i) {
    r["epochs"].push_back({{"epoch", i + 1}, {"time_s", f.epoch_time[i]},
                           {"val_acc", f.epoch_val[i]}});
  }
  return r;
}

inline Json read_json(const fs::path& file) {
  std::ifstream in(file);
  return Json::parse(in);
}

inline void write_json(const fs::path& file, const Json& doc) {
  fs::create_directories(file.parent_path());
  std::ofstream(file) << doc.dump(2);
}

// A set under `dir` with a manifest; rungs in the order added.
struct SetBuilder {
  fs::path dir;
  Json manifest;

  explicit SetBuilder(fs::path d, const std::string& machine = "test-cpu-2c-lt1.13.0")
      : dir(std::move(d)) {
    manifest = {{"schema_version", 1}, {"suite", "t"}, {"machine_id", machine},
                {"upstream", Json::array()}, {"rungs", Json::array()}};
  }
  SetBuilder& target(double t) {
    manifest["target_accuracy"] = t;
    return *this;
  }
  SetBuilder& reference(const Json& ref) {
    manifest["reference"] = ref;
    return *this;
  }
  // repeats.size() > 1 writes <id>/r1, r2, ...; `missing` lists the run but writes nothing.
  SetBuilder& rung(const std::string& id, const std::string& article,
                   const std::vector<FakeRun>& repeats, bool missing = false,
                   const std::string& key = "rungs") {
    Json e = {{"id", id}, {"article", article}, {"changes", "change " + id},
              {"status", "ok"}, {"runs", Json::array()}};
    for (size_t i = 0; i < repeats.size(); ++i) {
      const std::string rel = repeats.size() > 1 ? id + "/r" + std::to_string(i + 1) : id;
      e["runs"].push_back({{"dir", rel}});
      if (!missing) write_run(rel, repeats[i]);
    }
    manifest[key].push_back(e);
    return *this;
  }
  // Timing runs (sweep --timing-runs) of the rung `id` added last: <id>/timing/t1, t2, ...
  SetBuilder& timing(const std::string& id, const std::vector<FakeRun>& runs) {
    for (auto& e : manifest["rungs"]) {
      if (e["id"] != id) continue;
      e["timing_runs"] = Json::array();
      for (size_t i = 0; i < runs.size(); ++i) {
        const std::string rel = id + "/timing/t" + std::to_string(i + 1);
        e["timing_runs"].push_back({{"dir", rel}, {"status", runs[i].status}});
        write_run(rel, runs[i]);
      }
    }
    return *this;
  }
  void write_run(const std::string& rel, const FakeRun& run) const {
    write_json(dir / rel / "result.json", fake_result(run));
    if (run.steps.empty()) return;
    std::ofstream csv(dir / rel / "metrics.csv");
    csv << "kind,step,epoch,loss,train_acc,val_acc,step_time_ms\n";
    for (size_t k = 0; k < run.steps.size(); ++k) csv << "step," << k << ",1,0.5,,," << run.steps[k] << "\n";
  }
  SetBuilder& needs(const std::string& id, const std::string& article, const std::string& what) {
    manifest["rungs"].push_back({{"id", id}, {"article", article}, {"changes", "x"},
                                 {"status", "skipped"}, {"needs", what}, {"runs", Json::array()}});
    return *this;
  }
  // A rung its sweep left out (`sweep --only` named others).
  SetBuilder& left_out(const std::string& id, const std::string& article) {
    manifest["rungs"].push_back({{"id", id}, {"article", article}, {"changes", "x"},
                                 {"status", "excluded"}, {"runs", Json::array()}});
    return *this;
  }
  fs::path write() {
    write_json(dir / "sweep.json", manifest);
    return dir;
  }
};

}  // namespace report_test
