// The report's predicted scaling: each multi-rank rung of a set predicted from
// the one-device rung before it (accel/machine/predict.h) with the set's comm
// fit, 1..8 devices, beside what the rung measured.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "accel/machine/peaks.h"
#include "accel/machine/predict.h"
#include "accel/plan/run_plan.h"
#include "accel/precision/catalog.h"
#include "accel/results/report.h"
#include "accel/util/errors.h"

namespace accel::results {

using machine::Prediction;
using machine::PredictBase;
using machine::PredictOptions;
using machine::base_from_result;
using machine::comm_model_from_calibration;
using machine::matmul_dtype;
namespace {

std::string model_key(const RunRecord& r) {
  return str_at(r.config, "model/arch") + "/" + str_at(r.config, "model/preset") + "/" +
         (r.batch_size ? std::to_string(*r.batch_size) : "?");
}

// A run's precision row by its canonical name ("bf16" and "bf16-mixed" are
// one row); an unknown name stands for itself.
std::string precision_of(const RunRecord& r) {
  const std::string name = str_at(r.config, "runtime/precision");
  const auto* row = precision::find_precision(name);
  return row != nullptr ? row->name : name;
}

const RunRecord* first_ok(const RungRuns& r) {
  for (const auto& run : r.repeats) {
    if (run.ok()) return &run;
  }
  return nullptr;
}

}  // namespace

std::vector<ScalingLine> predict_scaling(const ResultSet& set, const Json& calibration,
                                         std::vector<std::string>& notes) {
  std::vector<ScalingLine> out;
  const bool have_comm = calibration.is_object() && calibration.contains("comm");
  for (size_t i = 0; i < set.rungs.size(); ++i) {
    const auto* run = first_ok(set.rungs[i]);
    if (run == nullptr || run->world_size < 2 || !run->config.is_object()) continue;
    if (!have_comm) {
      notes.push_back("Predicted scaling: none (no comm fit in the set's peaks.json: `accel-bench "
                      "calibrate --comm --out SET/peaks.json`).");
      return out;
    }
    // The one-device rung before it with the same model, batch and precision:
    // the nearest whose threads are a rank's (its compute is a rank's own),
    // else the nearest (its compute scaled by the calibrated peaks).
    const int rank_threads = run->threads;
    const std::string strategy = run->strategy.empty() ? "ddp" : run->strategy;  // auto resolved
    const RunRecord* base = nullptr;
    std::string base_id;
    for (size_t j = i; j-- > 0;) {
      const auto* b = first_ok(set.rungs[j]);
      if (b == nullptr || b->world_size != 1 || !b->config.is_object()) continue;
      if (model_key(*b) != model_key(*run) || precision_of(*b) != precision_of(*run)) continue;
      const bool same_device = b->threads == rank_threads;
      if (base == nullptr || same_device) {
        base = b;
        base_id = set.rungs[j].id;
      }
      if (same_device) break;
    }
    if (base == nullptr) continue;
    ScalingLine line;
    line.rung = set.rungs[i].id;
    line.base = base_id;
    line.strategy = strategy;
    line.measured_devices = run->world_size;
    line.measured_samples_per_s = run->samples_per_s;
    line.measured_step_ms = run->step_ms_mean;
    line.measured_time_s = run->train_time_s;
    try {
      PredictBase b = base_from_result(*base, (base->dir / "result.json").string());
      // A set the sweep scaled to its budget: the base's batch cap is a share
      // of its batches, which N devices keep of theirs (as the sweep cut the
      // measured rung), not a count that binds no longer at N.
      if (const auto f = num_at(set.manifest, "budget/fraction"); f && *f > 0 && *f < 1) {
        for (const auto& e : set.manifest.value("rungs", Json::array())) {
          if (e.is_object() && e.value("id", "") == base_id && e.contains("budget_sets")) b.budget_fraction = *f;
        }
      }
      // The rung's own knobs (its config may differ from the base's), from its
      // plan; on the base's accelerator, as options_for sets the first bucket.
      PredictOptions o = options_for(b, strategy);
      const bool small_first = o.knobs.small_first_bucket;
      o.knobs = plan::plan_of_record(run->config, run->env, (run->dir / "result.json").string()).plan.knobs;
      o.knobs.small_first_bucket = small_first;
      o.intra = o.inter = comm_model_from_calibration(calibration["comm"], "peaks.json");
      const int per_rank = rank_threads;
      const Json peaks_table = calibration.value("cpu", Json::object());
      const auto dtype = matmul_dtype(b.precision);
      const auto peak = [&](int t) -> double {
        double best = 0;
        int at = 0;
        const Json at_dtype = peaks_table.is_object() ? peaks_table.value(dtype, Json::object()) : Json::object();
        if (!at_dtype.is_object()) return 0.0;
        for (const auto& [k, v] : at_dtype.items()) {
          const int n = machine::thread_count_key(k).value_or(0);
          if (n >= 1 && n <= t && n > at && v.is_number()) {
            at = n;
            best = v.get<double>();
          }
        }
        return best;
      };
      if (b.threads > 0 && per_rank > 0 && b.threads != per_rank && peak(b.threads) > 0 && peak(per_rank) > 0) {
        o.compute_scale = peak(b.threads) / peak(per_rank);
        o.compute_note = "calibrated " + dtype + " peaks, " + std::to_string(b.threads) + " thread(s) over " +
                         std::to_string(per_rank);
      }
      line.rows = predict(b, o, {1, 2, 3, 4, 5, 6, 7, 8});
      line.assumptions = prediction_assumptions(b, o);
    } catch (const std::exception& e) {
      notes.push_back("Predicted scaling of " + line.rung + ": " + e.what());
      continue;
    }
    out.push_back(std::move(line));
  }
  return out;
}

std::string scaling_markdown(const std::vector<ScalingLine>& lines) {
  if (lines.empty()) return "";
  std::string md =
      "\n## Predicted scaling\n\nEach multi-rank rung predicted from the one-device rung before it "
      "(`accel-bench predict`: its step split, the strategy's schedule and this machine's comm fit in "
      "peaks.json), beside what it measured. Chart: charts/scaling.png.\n\n"
      "| rung | from | strategy | devices | step (measured) | step (predicted) | off | training (measured) | training (predicted) | predicted efficiency at 8 |\n"
      "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& l : lines) {
    const auto it = std::find_if(l.rows.begin(), l.rows.end(),
                                 [&](const Prediction& p) { return p.devices == l.measured_devices; });
    if (it == l.rows.end()) continue;
    char row[512];
    const std::string off = l.measured_step_ms ? fmt_num(OptNum((it->step_ms / *l.measured_step_ms - 1) * 100), "%+.1f%%") : "n/a";
    std::snprintf(row, sizeof row, "| %s | %s | %s | %d | %s | %.1f ms | %s | %s | %s | %.0f%% |\n",
                  markdown_text(l.rung).c_str(), markdown_text(l.base).c_str(),
                  markdown_text(l.strategy).c_str(), l.measured_devices,
                  fmt_num(l.measured_step_ms, "%.1f ms").c_str(), it->step_ms, off.c_str(),
                  fmt_time(l.measured_time_s).c_str(), fmt_time(OptNum(it->train_time_s)).c_str(),
                  l.rows.back().efficiency * 100);
    md += row;
  }
  md += "\nAssumptions (" + markdown_text(lines.front().rung) + "):\n";
  for (const auto& a : lines.front().assumptions) md += "- " + markdown_text(a) + "\n";
  return md;
}

}  // namespace accel::results
