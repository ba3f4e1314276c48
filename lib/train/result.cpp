// RunResult -> result.json and metrics.csv; result.json -> RunRecord.
#include "accel/train/result.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <cstdio>
#include <iomanip>
#include <sstream>

#include "accel/util/input_file.h"
#include "accel/util/json_doc.h"
#include "accel/plan/accelerator.h"
#include "accel/train/task.h"

namespace accel::train {
namespace {

using nlohmann::json;

json num(const Opt& v) { return v ? json(*v) : json(); }
Opt opt(const json& v) { return v.is_null() ? Opt() : Opt(v.get<double>()); }

json spread_json(const metrics::Spread& s) {
  if (s.count == 0) return json();  // nothing measured after warm-up
  return {{"median", s.median}, {"p10", s.p10}, {"p90", s.p90}, {"mean", s.mean},
          {"count", s.count}};
}

}  // namespace

json to_json(const RunResult& r) {
  json j = {{"schema_version", RunResult::kSchemaVersion},
            {"name", r.name},
            {"status", r.status},
            {"started_at", r.started_at},
            {"config", r.config},
            {"env", r.env},
            {"plan", r.plan},
            {"loop", r.loop},
            {"strategy", r.strategy},
            {"device", r.device},
            {"precision_support", r.precision_support},
            {"warnings", r.warnings},
            {"world_size", r.world_size},
            {"threads", r.threads},
            {"epochs", epochs_to_json(r.epochs)},
            {"test_acc", num(r.test_acc)},
            {"test_loss", num(r.test_loss)},
            {"test_weights", r.test_weights},
            {"train_time_s", r.train_time_s},
            {"init_time_s", r.init_time_s},
            {"steps", r.steps},
            {"work", r.work},
            {"step_time_ms", spread_json(r.step_time_ms)},
            {"step_ms_after_warmup", r.step_ms_after_warmup},
            {"counters", r.counters},
            {"step_split_ms", r.step_split_ms},
            {"comm_per_step", r.comm_per_step},
            {"data_kind", r.data_kind},
            {"samples_per_s", num(r.samples_per_s)},
            {"samples_per_s_per_device", num(r.samples_per_s_per_device)},
            {"wall_samples_per_s", num(r.wall_samples_per_s)},
            {"tokens_per_s", num(r.tokens_per_s)},
            {"model_flops_per_s", num(r.model_flops_per_s)},
            {"flops_per_sample", r.flops_per_sample},
            {"params", r.params},
            {"peak_memory_kind", r.peak_memory_kind},
            {"optimizer_implementation", r.optimizer_implementation.empty()
                                             ? json()
                                             : json(r.optimizer_implementation)}};
  json peaks = json::array(), state = json::array(), ranks = json::array();
  for (const auto& k : r.ranks) {
    peaks.push_back(k.peak_memory_bytes);
    state.push_back(k.param_bytes + k.grad_bytes + k.optimizer_bytes);
    json rank = {{"rank", k.rank},
                 {"peak_memory_bytes", k.peak_memory_bytes},
                 {"host_peak_rss_bytes", k.host_peak_rss_bytes},
                 {"param_bytes", k.param_bytes},
                 {"grad_bytes", k.grad_bytes},
                 {"optimizer_bytes", k.optimizer_bytes}};
    if (r.peak_memory_kind == "cuda_max_allocated") {
      rank["cuda_max_allocated_bytes"] = k.cuda_max_allocated_bytes;
      rank["cuda_max_reserved_bytes"] = k.cuda_max_reserved_bytes;
    }
    ranks.push_back(rank);
  }
  if (r.data_kind == "image") {  // schema 2's names, which committed result sets use
    j["images_per_s"] = num(r.samples_per_s);
    j["images_per_s_per_device"] = num(r.samples_per_s_per_device);
    j["wall_images_per_s"] = num(r.wall_samples_per_s);
  }
  j["energy_source"] = r.energy.source;
  j["energy_note"] = r.energy.note.empty() ? json() : json(r.energy.note);
  j["energy_j"] = num(r.energy.joules);
  j["energy_j_per_step"] = num(r.energy.joules_per_step);
  j["energy_j_per_sample"] = num(r.energy.joules_per_sample);
  j["energy_to_target_j"] = num(r.energy.joules_to_target);
  j["peak_memory_bytes"] = peaks;
  j["model_state_bytes"] = state;
  j["ranks"] = ranks;
  if (!r.model.is_null()) j["model"] = r.model;
  if (!r.model_layout.is_null()) j["model_layout"] = r.model_layout;
  if (!r.data.is_null()) j["data"] = r.data;
  if (!r.init.is_null()) j["init"] = r.init;
  if (!r.resumed_from.is_null()) j["resumed_from"] = r.resumed_from;
  if (r.test_weights == "best_val") {
    j["best_val"] = r.best_val;
    j["test_acc_last"] = num(r.test_acc_last);
  }
  if (!r.target.is_null()) j["target"] = r.target;
  if (!r.grad_scaler.is_null() && !r.grad_scaler.empty()) j["grad_scaler"] = r.grad_scaler;
  if (!r.error.empty()) j["error"] = r.error;
  if (!r.failure.empty()) j["failure"] = r.failure;
  if (!r.finished_at.empty()) j["finished_at"] = r.finished_at;
  const double delay = r.config.is_object() && r.config.contains("train") &&
                              r.config["train"].is_object() &&
                              r.config["train"].value("inject_delay", json(0.0)).is_number()
                          ? r.config["train"].value("inject_delay", 0.0)
                          : 0.0;
  if (delay > 0) {
    j["fault_injection"] = {{"inject_delay", delay},
                            {"what", "every training step delayed by this fraction of its own time"}};
  }
  return j;
}

namespace {

const json* field(const json& doc, const char* key) {
  if (!doc.is_object()) return nullptr;
  const auto it = doc.find(key);
  return it == doc.end() ? nullptr : &*it;
}

Opt number(const json& doc, const char* key) {
  const json* v = field(doc, key);
  return v != nullptr && v->is_number() ? Opt(v->get<double>()) : Opt();
}

std::string text(const json& doc, const char* key, const std::string& fallback) {
  const json* v = field(doc, key);
  return v != nullptr && v->is_string() ? v->get<std::string>() : fallback;
}

constexpr int64_t kMaxWorld = 1 << 20;
constexpr int64_t kMaxCount = int64_t(1) << 53;  // exact in a double

json object_or_null(const json& doc, const char* key) {
  const json* v = field(doc, key);
  return v != nullptr && v->is_object() ? *v : json();
}

std::vector<double> numbers(const json& doc, const char* key) {
  std::vector<double> out;
  const json* v = field(doc, key);
  if (v == nullptr) return out;
  if (v->is_number()) out.push_back(v->get<double>());
  if (v->is_array()) {
    for (const auto& x : *v) {
      if (x.is_number()) out.push_back(x.get<double>());
    }
  }
  return out;
}

}  // namespace

Opt RunRecord::per_device_samples_per_s() const {
  if (samples_per_s_per_device) return samples_per_s_per_device;
  if (samples_per_s) return *samples_per_s / std::max(1, world_size);
  return std::nullopt;
}

RunRecord run_record_of(const json& doc, const std::filesystem::path& dir) {
  RunRecord r;
  r.dir = dir;
  r.present = true;
  r.status = text(doc, "status", "unknown");
  r.error = text(doc, "error", "");
  r.failure = text(doc, "failure", "");
  r.config = object_or_null(doc, "config");
  r.env = object_or_null(doc, "env");
  r.data = object_or_null(doc, "data");
  r.model_layout = object_or_null(doc, "model_layout");
  r.step_split_ms = object_or_null(doc, "step_split_ms");
  r.comm_per_step = object_or_null(doc, "comm_per_step");
  r.work = object_or_null(doc, "work");
  r.plan = object_or_null(doc, "plan");
  r.name = text(doc, "name", dir.filename().string());
  const json runtime = object_or_null(r.config, "runtime");
  // "strategy" is what the run resolved; the config may say "auto".
  r.strategy = text(doc, "strategy", text(runtime, "strategy", ""));
  // Older results record no device: their accelerator by the rows' one rule on
  // the machine their env describes ("auto" on a GPU machine ran on its GPU).
  r.device = text(doc, "device", plan::accelerator_kind_of(text(runtime, "accelerator", "cpu"), plan::facts_from_env(r.env)));
  // The accelerator it resolved: its plan's, else its device's row.
  const auto* device_row = plan::accelerator_of_device(r.device);
  r.accelerator = text(r.plan, "accelerator", device_row != nullptr ? device_row->kind : "cpu");
  const json task = object_or_null(r.plan, "task");
  r.metric = train::task_metric(text(task, "name", text(object_or_null(r.config, "train"), "task", "classification")));
  const std::string name = text(task, "metric", r.metric.name);
  if (const json* v = field(task, "higher_is_better"); v != nullptr && v->is_boolean()) {
    r.metric.higher_is_better = v->get<bool>();
  }
  if (const json* v = field(task, "proportion"); v != nullptr && v->is_boolean()) r.metric.proportion = v->get<bool>();
  // A name the report prints in headings: short, printable, no markup.
  const bool plain = name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == ' ' || c == '-' ||
           c == '.';
  });
  const bool trimmed = !name.empty() && name.front() != ' ' && name.back() != ' ' && name.find("  ") == std::string::npos;
  r.metric.name = plain && trimmed ? name : "metric";
  r.data_kind = text(doc, "data_kind", "image");
  r.precision_support = text(doc, "precision_support", "native");
  if (const Opt w = number(doc, "world_size")) {
    r.world_size = int(bounded_int(*w, 1, kMaxWorld));
  } else {
    const double devices = number(runtime, "devices").value_or(1);
    const double nodes = number(runtime, "num_nodes").value_or(1);
    r.world_size = int(bounded_int(devices * nodes, 1, kMaxWorld));
  }
  r.threads = int(bounded_int(number(doc, "threads").value_or(number(r.env, "threads").value_or(0)), 0, 1 << 20));
  r.steps = bounded_int(number(doc, "steps").value_or(0), 0, kMaxCount);
  if (const Opt b = number(object_or_null(r.config, "train"), "batch_size")) r.batch_size = bounded_int(*b, 0, kMaxCount);
  r.test_acc = number(doc, "test_acc");
  r.test_loss = number(doc, "test_loss");
  r.train_time_s = number(doc, "train_time_s");
  r.init_time_s = number(doc, "init_time_s");
  r.samples_per_s = number(doc, "samples_per_s");
  if (!r.samples_per_s) r.samples_per_s = number(doc, "images_per_s");
  r.samples_per_s_per_device = number(doc, "samples_per_s_per_device");
  if (!r.samples_per_s_per_device) r.samples_per_s_per_device = number(doc, "images_per_s_per_device");
  r.tokens_per_s = number(doc, "tokens_per_s");
  r.flops_per_sample = number(doc, "flops_per_sample");
  r.model_flops_per_s = number(doc, "model_flops_per_s");
  const json step = object_or_null(doc, "step_time_ms");
  r.step_ms_median = number(step, "median");
  r.counters = object_or_null(doc, "counters");
  r.optimizer_implementation = text(doc, "optimizer_implementation", "");
  r.energy_source = text(doc, "energy_source", "");
  r.energy_j = number(doc, "energy_j");
  r.energy_j_per_step = number(doc, "energy_j_per_step");
  r.energy_j_per_sample = number(doc, "energy_j_per_sample");
  r.energy_to_target_j = number(doc, "energy_to_target_j");
  r.inject_delay = number(object_or_null(doc, "fault_injection"), "inject_delay")
                       .value_or(number(object_or_null(r.config, "train"), "inject_delay").value_or(0.0));
  if (const json target = object_or_null(doc, "target"); target.is_object()) {
    if (const Opt v = number(target, "value")) {
      RunRecord::Target t;
      t.value = *v;
      t.reached = target.value("reached", json(false)) == json(true);
      t.stopped = target.value("stopped", json(false)) == json(true);
      if (t.reached) {
        t.step = number(target, "step");
        t.samples = number(target, "samples");
        t.time_s = number(target, "time_s");
        t.val_acc = number(target, "val_acc");
      }
      r.target = t;
    }
  }
  r.started_at = text(doc, "started_at", "");
  r.finished_at = text(doc, "finished_at", "");
  if (const json* series = field(doc, "step_ms_after_warmup"); series != nullptr && series->is_array()) {
    for (const auto& v : *series) {
      if (v.is_number()) r.step_ms_after_warmup.push_back(v.get<double>());
    }
  }
  r.step_ms_mean = number(step, "mean");
  r.peak_memory_bytes = numbers(doc, "peak_memory_bytes");
  if (const json* e = field(doc, "epochs"); e != nullptr && e->is_array()) {
    for (const auto& x : *e) {
      ++r.epochs_done;
      r.epoch_time_s.push_back(number(x, "time_s").value_or(0.0));
      r.epoch_val_acc.push_back(number(x, "val_acc").value_or(-1.0));
    }
  }
  if (const json* k = field(doc, "ranks"); k != nullptr && k->is_array()) {
    for (const auto& x : *k) {
      RankResult rr;
      rr.rank = int(bounded_int(number(x, "rank").value_or(double(r.ranks.size())), 0, kMaxWorld));
      auto bytes = [&](const char* key) { return bounded_int(number(x, key).value_or(0), 0, kMaxCount); };
      rr.peak_memory_bytes = bytes("peak_memory_bytes");
      rr.param_bytes = bytes("param_bytes");
      rr.grad_bytes = bytes("grad_bytes");
      rr.optimizer_bytes = bytes("optimizer_bytes");
      rr.host_peak_rss_bytes = bytes("host_peak_rss_bytes");
      rr.cuda_max_allocated_bytes = bytes("cuda_max_allocated_bytes");
      rr.cuda_max_reserved_bytes = bytes("cuda_max_reserved_bytes");
      r.ranks.push_back(rr);
    }
  }
  if (const json* w = field(doc, "warnings"); w != nullptr && w->is_array()) {
    for (const auto& x : *w) {
      if (x.is_string()) r.warnings.push_back(x.get<std::string>());
    }
  }
  return r;
}

RunRecord read_run_record(const std::filesystem::path& dir) {
  RunRecord r;
  r.dir = dir;
  const auto file = dir / "result.json";
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return r;
  json doc;
  try {
    doc = parse_json_text(read_input_file(file, ""), file.string());
  } catch (const std::exception& e) {  // not a regular file, too large, not JSON
    r.status = "unreadable";
    r.error = std::string(e.what()).find(file.string()) == 0 ? e.what()
                                                              : file.string() + ": not JSON: " + e.what();
    return r;
  }
  // Its text reaches terminals, tables and pages: cleaned as read, except
  // the resolved config, whose hash decides whether a sweep or tune reuses
  // the run (shown, it is cleaned where it is shown).
  if (doc.is_object()) {
    for (auto it = doc.begin(); it != doc.end(); ++it) {
      if (it.key() != "config") clean_strings(it.value());
    }
  }
  RunRecord r2 = run_record_of(doc, dir);
  if (r2.ok()) {
    if (const std::string why = impossible_figure(r2, doc); !why.empty()) {
      r2.status = "unreadable";
      r2.error = file.string() + ": " + why;
    }
  }
  return r2;
}

std::string impossible_figure(const RunRecord& r, const json& doc) {
  char buf[64];
  auto shown = [&](double v) {
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return std::string(buf);
  };
  auto positive = [&](const char* what, const Opt& v) -> std::string {
    if (v && !(std::isfinite(*v) && *v > 0)) return std::string(what) + " is " + shown(*v) + ": it must be > 0";
    return "";
  };
  auto at_least_zero = [&](const char* what, const Opt& v) -> std::string {
    if (v && !(std::isfinite(*v) && *v >= 0)) return std::string(what) + " is " + shown(*v) + ": it must be >= 0";
    return "";
  };
  // The task's metric: a share lies from 0 to 1; another (a loss) is finite
  // and of a size no metric has, so a difference or interval of it stays finite.
  auto fraction = [&](const char* what, const Opt& v) -> std::string {
    if (!v) return "";
    if (r.metric.proportion && !(*v >= 0 && *v <= 1)) {
      return std::string(what) + " is " + shown(*v) + ": " + r.metric.name + " is a share, from 0 to 1";
    }
    if (!r.metric.proportion && !(std::isfinite(*v) && std::fabs(*v) <= kMaxMetric)) {
      return std::string(what) + " is " + shown(*v) + ": " + r.metric.name + " must be finite, at most " +
             shown(kMaxMetric) + " in size";
    }
    return "";
  };
  // Figures no run on any machine makes: a doctored 1e-300 s or 1e308 s
  // would pass the sign checks and then overflow every ratio and interval
  // taken from it, which would vanish without a word.
  auto plausible = [&](const char* what, const Opt& v, double lo, double hi, const char* unit) -> std::string {
    if (!v || !std::isfinite(*v) || *v <= 0) return "";  // the sign checks say why
    if (*v < lo || *v > hi) {
      return std::string(what) + " is " + shown(*v) + ": no run measures below " + shown(lo) + " " + unit +
             " or above " + shown(hi) + " " + unit;
    }
    return "";
  };
  for (const std::string& why :
       {plausible("train_time_s", r.train_time_s, kMinTimeS, kMaxTimeS, "s"),
        plausible("init_time_s", r.init_time_s, 0, kMaxTimeS, "s"),
        plausible("step_time_ms.median", r.step_ms_median, kMinTimeS * 1e3, kMaxTimeS * 1e3, "ms"),
        plausible("step_time_ms.mean", r.step_ms_mean, kMinTimeS * 1e3, kMaxTimeS * 1e3, "ms"),
        plausible("samples_per_s", r.samples_per_s, 1 / kMaxTimeS, kMaxRate, "per s"),
        plausible("tokens_per_s", r.tokens_per_s, 1 / kMaxTimeS, kMaxRate, "per s")}) {
    if (!why.empty()) return why;
  }
  for (const double v : r.step_ms_after_warmup) {
    if (const auto why = plausible("a step of step_ms_after_warmup", v, kMinTimeS * 1e3, kMaxTimeS * 1e3, "ms");
        !why.empty()) {
      return why;
    }
  }
  for (const double v : r.epoch_time_s) {
    if (const auto why = plausible("an epoch's time_s", v, 0, kMaxTimeS, "s"); !why.empty()) return why;
  }
  for (const std::string& why :
       {positive("train_time_s", r.train_time_s), at_least_zero("init_time_s", r.init_time_s),
        positive("step_time_ms.median", r.step_ms_median), positive("step_time_ms.mean", r.step_ms_mean),
        positive("samples_per_s", r.samples_per_s), positive("samples_per_s_per_device", r.samples_per_s_per_device),
        positive("tokens_per_s", r.tokens_per_s), positive("flops_per_sample", r.flops_per_sample),
        positive("model_flops_per_s", r.model_flops_per_s), fraction("test_acc", r.test_acc),
        at_least_zero("test_loss", r.test_loss), at_least_zero("energy_j", r.energy_j),
        at_least_zero("energy_j_per_step", r.energy_j_per_step),
        at_least_zero("energy_j_per_sample", r.energy_j_per_sample),
        at_least_zero("energy_to_target_j", r.energy_to_target_j)}) {
    if (!why.empty()) return why;
  }
  for (const double v : r.step_ms_after_warmup) {
    if (const auto why = positive("a step of step_ms_after_warmup", v); !why.empty()) return why;
  }
  for (const double v : r.peak_memory_bytes) {
    if (const auto why = positive("peak_memory_bytes", v); !why.empty()) return why;
  }
  for (const double v : r.epoch_time_s) {
    if (const auto why = at_least_zero("an epoch's time_s", v); !why.empty()) return why;
  }
  for (const double v : r.epoch_val_acc) {
    if (v == -1.0) continue;  // the epoch had no validation
    if (const auto why = fraction("an epoch's val_acc", v); !why.empty()) return why;
  }
  // Counts an integer cast would turn into nonsense.
  for (const auto& [key, lo, hi] : {std::tuple{"world_size", 1.0, double(kMaxWorld)},
                                    std::tuple{"steps", 0.0, double(kMaxCount)},
                                    std::tuple{"threads", 0.0, double(1 << 20)}}) {
    const Opt v = number(doc, key);
    if (v && !(*v >= lo && *v <= hi && std::floor(*v) == *v)) {
      return std::string(key) + " is " + shown(*v) + ": a count from " + shown(lo) + " to " + shown(hi);
    }
  }
  if (r.target) {
    const auto& t = *r.target;
    if (!std::isfinite(t.value)) return "target.value is " + shown(t.value) + ": it must be finite";
    for (const std::string& why : {at_least_zero("target.time_s", t.time_s), at_least_zero("target.samples", t.samples),
                                   at_least_zero("target.step", t.step), fraction("target.val_acc", t.val_acc)}) {
      if (!why.empty()) return why;
    }
    // Counts and times no run reaches (a doctored 1e308 samples would score as given).
    for (const auto& [what, v, most] : {std::tuple{"target.samples", t.samples, double(kMaxCount)},
                                        std::tuple{"target.step", t.step, double(kMaxCount)},
                                        std::tuple{"target.time_s", t.time_s, 1e9}}) {
      if (v && *v > most) return std::string(what) + " is " + shown(*v) + ": beyond any run (at most " + shown(most) + ")";
    }
  }
  return "";
}

std::string metrics_csv(const std::vector<MetricRow>& rows) {
  std::ostringstream out;
  out << "kind,step,epoch,loss,train_acc,val_acc,step_time_ms\n";
  auto cell = [&](const Opt& v) {
    if (v) out << std::setprecision(9) << *v;
  };
  for (const auto& r : rows) {
    out << r.kind << ',' << r.step << ',' << r.epoch << ',';
    cell(r.loss);
    out << ',';
    cell(r.train_acc);
    out << ',';
    cell(r.val_acc);
    out << ',';
    cell(r.step_time_ms);
    out << '\n';
  }
  return out.str();
}

json rows_to_json(const std::vector<MetricRow>& rows) {
  json a = json::array();
  for (const auto& r : rows) {
    a.push_back({r.kind, r.step, r.epoch, num(r.loss), num(r.train_acc), num(r.val_acc),
                 num(r.step_time_ms)});
  }
  return a;
}

std::vector<MetricRow> rows_from_json(const json& a) {
  std::vector<MetricRow> rows;
  for (const auto& j : a) {
    rows.push_back({j.at(0).get<std::string>(), j.at(1).get<int64_t>(), j.at(2).get<int>(),
                    opt(j.at(3)), opt(j.at(4)), opt(j.at(5)), opt(j.at(6))});
  }
  return rows;
}

json epochs_to_json(const std::vector<EpochResult>& epochs) {
  json a = json::array();
  for (const auto& e : epochs) {
    a.push_back({{"epoch", e.epoch},
                 {"train_acc", num(e.train_acc)},
                 {"val_acc", num(e.val_acc)},
                 {"val_loss", num(e.val_loss)},
                 {"loss", num(e.loss)},
                 {"steps", e.steps},
                 {"time_s", e.time_s}});
  }
  return a;
}

std::vector<EpochResult> epochs_from_json(const json& a) {
  std::vector<EpochResult> out;
  for (const auto& j : a) {
    EpochResult e;
    e.epoch = j.at("epoch").get<int>();
    e.train_acc = opt(j.value("train_acc", json()));
    e.val_acc = opt(j.value("val_acc", json()));
    e.val_loss = opt(j.value("val_loss", json()));
    e.loss = opt(j.value("loss", json()));
    e.steps = j.value("steps", int64_t{0});
    e.time_s = j.value("time_s", 0.0);
    out.push_back(e);
  }
  return out;
}

std::string percent_or_na(const Opt& v) {
  if (!v) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f%%", *v * 100.0);
  return buf;
}

}  // namespace accel::train
