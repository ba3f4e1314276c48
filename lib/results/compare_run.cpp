#include "accel/results/compare_run.h"

#include <cmath>
#include <filesystem>
#include <utility>

#include "accel/machine/peaks.h"
#include "accel/machine/predict.h"
#include "accel/util/errors.h"
#include "accel/util/json_doc.h"

namespace accel::results {

Json compare_noise(const std::string& noise_file, const ResultSet& base, const ResultSet& other) {
  if (!noise_file.empty()) {
    const auto doc = read_json_file(noise_file);
    if (!doc.is_object() || !doc.contains("noise") || !doc["noise"].is_object()) {
      throw ConfigError("--noise " + noise_file + ": no \"noise\" (make it with calibrate --noise SET)");
    }
    return doc["noise"];
  }
  if (base.machine_id != other.machine_id) return Json();
  const auto file = machine::default_peaks_file(base.machine_id);
  if (!std::filesystem::is_regular_file(file)) return Json();
  const auto doc = read_json_file(file);
  return doc.is_object() && doc.contains("noise") && doc["noise"].is_object() ? doc["noise"] : Json();
}

CompareRun run_compare(const CompareRequest& q) {
  for (const auto& [flag, b] : {std::pair{"--fail-slower", q.bounds.slower_pct},
                                 std::pair{"--fail-accuracy-drop", q.bounds.acc_drop_points},
                                 std::pair{"--fail-loss-rise", q.bounds.loss_rise},
                                 std::pair{"--fail-memory-growth", q.bounds.memory_growth_pct},
                                 std::pair{"--accuracy-band", q.bounds.acc_band_points}}) {
    // inf would make every change "same": a gate that can never fail.
    if (b && !(*b >= 0 && std::isfinite(*b))) {
      throw ConfigError(std::string(flag) + ": must be a finite number >= 0 (got " +
                        machine::format_double("%g", *b) + ")");
    }
  }
  if (!(q.bounds.confidence >= 0.5 && q.bounds.confidence < 1)) {
    throw ConfigError("--confidence: a level from 0.5 to below 1, as 0.99 (got " +
                      machine::format_double("%g", q.bounds.confidence) + ")");
  }
  if (q.sets.size() < 2) throw ConfigError("compare: give BASE and at least one OTHER");
  const auto base = load_result_set(single_result_set(q.sets.front()));
  CompareRun out;
  for (size_t i = 1; i < q.sets.size(); ++i) {
    const auto other = load_result_set(single_result_set(q.sets[i]));
    auto bounds = q.bounds;
    const auto noise = compare_noise(q.noise_file, base, other);
    if (!noise.is_null()) bounds.noise = noise;
    out.outcomes.push_back(compare_sets(base, other, bounds));
  }
  if (!q.history_db.empty()) {
    if (!std::filesystem::exists(q.history_db)) throw ConfigError("--history " + q.history_db + ": no such file");
    if (q.window < 1) throw ConfigError("--window: must be at least 1");
    const History history(q.history_db, History::Mode::read_only);
    const auto other = load_result_set(single_result_set(q.sets.back()));
    out.history = judge_against_history(history.runs(), other, q.window, q.bounds);
  }
  return out;
}

}  // namespace accel::results
