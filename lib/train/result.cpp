// RunResult -> result.json and metrics.csv.
#include "accel/train/result.h"

#include <cstdio>
#include <iomanip>
#include <sstream>

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
            {"step_split_ms", r.step_split_ms},
            {"comm_per_step", r.comm_per_step},
            {"data_kind", r.data_kind},
            {"samples_per_s", num(r.samples_per_s)},
            {"samples_per_s_per_device", num(r.samples_per_s_per_device)},
            {"tokens_per_s", num(r.tokens_per_s)},
            {"model_flops_per_s", num(r.model_flops_per_s)},
            {"flops_per_sample", r.flops_per_sample},
            {"params", r.params},
            {"peak_memory_kind", r.peak_memory_kind}};
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
  }
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
  if (!r.grad_scaler.is_null() && !r.grad_scaler.empty()) j["grad_scaler"] = r.grad_scaler;
  if (!r.error.empty()) j["error"] = r.error;
  if (!r.finished_at.empty()) j["finished_at"] = r.finished_at;
  return j;
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
