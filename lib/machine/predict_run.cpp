// `accel-bench predict` from files and flags (accel/machine/predict.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "accel/machine/peaks.h"
#include "accel/machine/predict.h"
#include "accel/util/json_doc.h"
#include "accel/util/errors.h"

namespace accel::machine {
namespace {

namespace fs = std::filesystem;


Json read_or_refuse(const std::string& file, const std::string& flag) {
  if (file.empty()) throw ConfigError(flag + ": no file given");
  if (!fs::exists(file)) throw ConfigError(flag + " " + file + ": no such file");
  return read_json_file(file);
}

std::string pct(double predicted, double measured) {
  return format_double("%+.1f%%", (predicted / measured - 1.0) * 100.0);
}

// The base of the request: a measured run or an article's rung.
PredictBase load_base(const PredictRequest& q, std::string& gpu_of_base, Json& article) {
  if (!q.result.empty() && !q.article.empty()) throw ConfigError("predict: give RESULT.json or --article, not both");
  if (!q.result.empty()) {
    const Json r = read_or_refuse(q.result, "RESULT");
    if (!r.is_object()) throw ConfigError(q.result + ": not an accel-bench result.json (not an object)");
    const auto record = train::run_record_of(r, fs::path(q.result).parent_path());
    gpu_of_base = str_at(record.env, "gpu_name");
    return base_from_result(record, q.result);
  }
  if (q.article.empty()) throw ConfigError("predict: give a one-device RESULT.json, or --article FILE --rung ID");
  if (q.rung.empty()) throw ConfigError("--article: also give --rung (the article's one-device rung)");
  article = read_or_refuse(q.article, "--article");
  if (!article.is_object() || !article.value("rungs", Json::object()).is_object() ||
      !article.value("workload", Json::object()).is_object()) {
    throw ConfigError("--article " + q.article + ": not an article's reference (an object with \"rungs\" and "
                      "\"workload\" objects, as results/reference/*.json)");
  }
  if (article["rungs"].contains(q.rung)) {
    const Json& rr = article["rungs"][q.rung];
    const std::string at = "--article " + q.article + ": rungs." + q.rung;
    if (!rr.is_object()) throw ConfigError(at + ": not an object");
    if (rr.contains("devices") && !rr["devices"].is_number_integer()) throw ConfigError(at + ".devices: not an integer");
    if (rr.contains("config") && !rr["config"].is_string()) throw ConfigError(at + ".config: not a string");
    if (rr.contains("time_min") && !rr["time_min"].is_number()) throw ConfigError(at + ".time_min: not a number");
  }
  const auto& rungs = article.value("rungs", Json::object());
  const auto& w = article.value("workload", Json());
  if (!rungs.contains(q.rung)) {
    return base_from_article(article, q.rung, Json::object(), "", q.article);  // names the rungs
  }
  if (rungs.at(q.rung).value("devices", 1) != 1) {
    throw ConfigError("--rung " + q.rung + ": runs on " + std::to_string(rungs.at(q.rung).value("devices", 1)) +
                      " devices; predict starts from a one-device rung");
  }
  const std::string cfg_rel = rungs.at(q.rung).value("config", "");
  if (cfg_rel.empty() || !w.is_object()) {
    throw ConfigError(q.article + ": rung " + q.rung + " names no config, or the file has no workload block");
  }
  const std::string cfg_file = (fs::path(q.article).parent_path() / cfg_rel).lexically_normal().string();
  const Json resolved = q.load_config(cfg_file);
  const Json layout = q.model_layout(resolved, w.value("data_facts", Json::object()));
  gpu_of_base = article.value("hardware_short", "");
  auto b = base_from_article(article, q.rung, layout, resolved, q.article);
  b.assumptions.insert(b.assumptions.begin(), "the model and precision of " + cfg_file);
  return b;
}

// How per-device compute changes on the predicted devices.
void compute_scaling(const PredictRequest& q, const PredictBase& b, const std::string& base_gpu,
                     PredictOptions& o) {
  const int given = (q.threads_per_device > 0) + !q.gpu.empty() + (q.compute_scale > 0);
  if (given > 1) throw ConfigError("predict: give one of --threads-per-device, --gpu, --compute-scale");
  const auto dtype = matmul_dtype(b.precision);
  if (q.compute_scale > 0) {
    o.compute_scale = q.compute_scale;
    o.compute_note = "--compute-scale, as given";
  } else if (q.threads_per_device > 0) {
    if (b.device_kind != "cpu") throw ConfigError("--threads-per-device: the base ran on a GPU");
    const auto peaks = PeakTable::load("", q.calibration);  // validated
    const int from = b.threads > 0 ? b.threads : 1;
    const auto p0 = peaks.calibrated_cpu(dtype, from), p1 = peaks.calibrated_cpu(dtype, q.threads_per_device);
    if (!p0 || !p1) {
      throw ConfigError("--threads-per-device: --calibration " + q.calibration + " has no " + dtype +
                        " peaks at " + std::to_string(from) + " and " + std::to_string(q.threads_per_device) +
                        " threads (accel-bench calibrate)");
    }
    o.compute_scale = p0->flops_per_s / p1->flops_per_s;
    o.compute_note = "the calibrated " + dtype + " matmul peak at " + std::to_string(from) + " thread(s) over " +
                     std::to_string(q.threads_per_device) + " (" + format_double("%.0f", p0->flops_per_s / 1e9) + " / " +
                     format_double("%.0f", p1->flops_per_s / 1e9) + " GFLOP/s)";
  } else if (!q.gpu.empty()) {
    const auto peaks = PeakTable::load(reference_file(q.published_peaks), "");
    const auto p0 = peaks.published(base_gpu, dtype), p1 = peaks.published(q.gpu, dtype);
    if (!p0) throw ConfigError("--gpu: the base's device (\"" + base_gpu + "\") has no " + dtype + " peak in " + q.published_peaks);
    if (!p1) throw ConfigError("--gpu: \"" + q.gpu + "\" has no " + dtype + " peak in " + q.published_peaks);
    o.compute_scale = p0->flops_per_s / p1->flops_per_s;
    o.compute_note = "published dense " + dtype + " peaks, " + base_gpu + " over " + q.gpu;
  }
}

}  // namespace

PredictOutput run_predict(const PredictRequest& q) {
  std::string base_gpu;
  Json article;
  PredictBase b;
  try {
    b = load_base(q, base_gpu, article);
  } catch (const Json::exception& e) {  // a field of another type than the file's kind has
    throw ConfigError((q.result.empty() ? q.article : q.result) + ": malformed (" + e.what() + ")");
  }
  if (!dist::is_multi_rank_strategy(q.strategy)) {
    throw ConfigError("--strategy: \"" + q.strategy + "\" " +
                      (dist::find_strategy(q.strategy) || q.strategy == "auto" ? "runs one device" : "is no strategy") +
                      "; predict one of " + dist::multi_rank_strategy_list());
  }
  PredictOptions o = options_for(b, q.strategy);
  o.nodes = q.nodes;
  if (o.nodes < 1) throw ConfigError("--nodes: must be at least 1");
  if (!q.fsdp_sharding.empty()) {
    if (q.fsdp_sharding != "FULL_SHARD" && q.fsdp_sharding != "SHARD_GRAD_OP" && q.fsdp_sharding != "NO_SHARD") {
      throw ConfigError("--fsdp-sharding: \"" + q.fsdp_sharding + "\" (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD)");
    }
    o.knobs.fsdp_sharding = q.fsdp_sharding;
  }
  if (q.fsdp_prefetch >= 0) o.knobs.fsdp_prefetch = q.fsdp_prefetch == 1;
  if (q.bucket_mb < 0) throw ConfigError("--bucket-mb: must be > 0");
  if (q.bucket_mb > 0) o.knobs.bucket_mb = q.bucket_mb;
  // The communication model.
  Json links, calibration;
  if (!q.calibration.empty()) {
    calibration = read_or_refuse(q.calibration, "--calibration");
    validate_calibration(calibration, q.calibration);
  }
  if (!q.link.empty()) {
    links = read_or_refuse(reference_file(q.links_file).string(), "--links");
    o.intra = comm_model_from_links(links, q.link);
    if (b.device_kind == "cpu") {
      // CPU ranks on a faster link: still Gloo's collectives on the ranks' own cores.
      o.intra.overlaps_compute = false;
      o.intra.native_reduce_scatter = false;
      o.intra.bf16_reductions = false;
      o.intra.description += ", as Gloo on CPU ranks runs them";
    }
  } else if (calibration.is_object() && calibration.contains("comm")) {
    o.intra = comm_model_from_calibration(calibration["comm"], q.calibration);
    if (b.device_kind == "cuda" && calibration["comm"].value("backend", "") != "nccl") {
      throw ConfigError("--calibration: its collectives were fitted on " +
                        calibration["comm"].value("backend", "?") + ", the base ran on a GPU: give --link");
    }
  } else {
    throw ConfigError(b.device_kind == "cpu"
                          ? "predict: no communication model: give --calibration with a comm fit "
                            "(accel-bench calibrate --comm) or --link NAME"
                          : "predict: no communication model: give --link NAME (results/reference/links.json)");
  }
  if (o.nodes > 1) {
    if (q.inter_link.empty()) throw ConfigError("--nodes " + std::to_string(o.nodes) + ": give --inter-link NAME, the link between nodes");
    if (links.is_null()) links = read_or_refuse(q.links_file, "links");
    o.inter = comm_model_from_links(links, q.inter_link);
    o.inter.overlaps_compute = o.intra.overlaps_compute;
    o.inter.native_reduce_scatter = o.intra.native_reduce_scatter;
    o.inter.bf16_reductions = o.intra.bf16_reductions;
  } else {
    o.inter = o.intra;
  }
  compute_scaling(q, b, base_gpu, o);
  // The strategies' own copies run at the device's memory bandwidth: a
  // calibrated stream on CPU ranks, an article GPU's published one; not
  // charged on another device kind (--gpu), whose bandwidth is not known here.
  if (q.gpu.empty()) {
    if (b.device_kind == "cpu" && o.intra.colocation.stream_bytes_per_s > 0) {
      o.copy_bytes_per_s = o.intra.colocation.stream_bytes_per_s;
      o.copy_note = "calibrate's memory stream on one rank alone, " + q.calibration;
    } else if (b.memory_bytes_per_s > 0) {
      o.copy_bytes_per_s = b.memory_bytes_per_s;
      o.copy_note = "the optimizer's share of the GPU's memory bandwidth, " + q.article;
    }
  }
  o.price_per_device_hour = q.price_per_device_hour;
  if (q.price_per_device_hour && !(*q.price_per_device_hour >= 0)) throw ConfigError("--price-per-hour: must be >= 0");
  std::vector<int> counts = q.devices;
  if (counts.empty()) {  // 1, then 1..8 devices on each node
    counts.push_back(1);
    for (int n = 1; n <= 8; ++n) {
      if (n * o.nodes > 1) counts.push_back(n * o.nodes);
    }
  }
  const auto rows = predict(b, o, counts);
  // Inputs each within its range can still multiply past a double: never
  // printed as "inf".
  for (const auto& p : rows) {
    if (!std::isfinite(p.step_ms) || !std::isfinite(p.train_time_s) || !(p.step_ms > 0)) {
      throw ConfigError("predict: the prediction for " + std::to_string(p.devices) +
                        " devices is not a finite time (step " + format_double("%g", p.step_ms) +
                        " ms): the calibration's fits or the base's figures are beyond what a machine measures");
    }
  }

  PredictOutput out;
  out.json = prediction_json(b, o, rows);
  std::string t = "predict: " + o.strategy + " from " + b.name + "\n";
  for (const auto& a : prediction_assumptions(b, o)) t += "  - " + a + "\n";
  t += "\n" + prediction_table(b, rows);
  // Beside what was measured: the base itself, and a measured multi-device run.
  for (const auto& p : rows) {
    if (p.devices == 1 && o.compute_scale == 1.0 && b.measured_step_ms > 0) {
      t += "\n1 device: predicted step " + format_double("%.2f", p.step_ms) + " ms, the base measured " +
           format_double("%.2f", b.measured_step_ms) + " ms (" + pct(p.step_ms, b.measured_step_ms) + ")";
    }
  }
  if (!q.measured.empty()) {
    Json m = read_or_refuse(q.measured, "--measured");
    clean_strings(m);  // its name and strategy are printed
    if (!m.is_object()) throw ConfigError("--measured " + q.measured + ": not an accel-bench result.json (not an object)");
    // Read as every result.json is: typed, its figures possible.
    const auto rec = train::run_record_of(m, fs::path(q.measured).parent_path());
    if (rec.ok()) {
      if (const auto why = train::impossible_figure(rec, m); !why.empty()) throw ConfigError("--measured " + q.measured + ": " + why);
    }
    const int n = rec.world_size;
    const auto it = std::find_if(rows.begin(), rows.end(), [&](const Prediction& p) { return p.devices == n; });
    if (it == rows.end()) throw ConfigError("--measured: a run of " + std::to_string(n) + " devices, which --devices leaves out");
    const double step = rec.step_ms_mean.value_or(0.0);
    const double time_s = rec.train_time_s.value_or(0.0);
    if (!rec.ok() || step <= 0 || time_s <= 0) {
      throw ConfigError("--measured " + q.measured + ": not a finished run with step times");
    }
    t += "\n" + (rec.name.empty() ? q.measured : rec.name) + " (" + std::to_string(n) + " devices, " +
         (rec.strategy.empty() ? std::string("?") : rec.strategy) +
         "): step measured " + format_double("%.2f", step) + " ms, predicted " + format_double("%.2f", it->step_ms) + " ms (" +
         pct(it->step_ms, step) + "); training " + format_double("%.1f", time_s) + " s, predicted " +
         format_double("%.1f", it->train_time_s) + " s (" + pct(it->train_time_s, time_s) + ")";
    out.json["measured"] = {{"name", rec.name}, {"devices", n}, {"step_ms", step},
                            {"train_time_s", time_s}, {"predicted_step_ms", it->step_ms},
                            {"predicted_train_time_s", it->train_time_s}};
  }
  if (article.is_object()) {  // the article's own multi-device rungs of this strategy
    const Json rungs = article.value("rungs", Json::object());
    for (const auto& [id, r] : rungs.items()) {
      if (r.value("strategy", "") != o.strategy) continue;
      const int n = r.value("devices", 1);
      const auto it = std::find_if(rows.begin(), rows.end(), [&](const Prediction& p) { return p.devices == n; });
      if (it == rows.end()) continue;
      const double min = r.value("time_min", 0.0);
      t += "\nthe article's rung " + id + " (" + r.value("name", "") + "): " + format_double("%.2f", min) +
           " min measured, " + format_double("%.2f", it->train_time_s / 60.0) + " min predicted (" +
           pct(it->train_time_s / 60.0, min) + ")";
      out.json["article"].push_back({{"rung", id}, {"devices", n}, {"time_min", min},
                                     {"predicted_min", it->train_time_s / 60.0}});
    }
  }
  out.text = t + "\n";
  return out;
}

}  // namespace accel::machine
