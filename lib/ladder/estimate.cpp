#include "accel/ladder/estimate.h"

#include <algorithm>
#include <cstdio>

#include "accel/config/run_config.h"
#include "accel/util/errors.h"

namespace fs = std::filesystem;

namespace accel::ladder {

using machine::PeakTable;
using machine::matmul_dtype;
using results::find_result_sets;
using results::load_result_set;
using results::ResultSet;
using results::RungRuns;
using results::RunRecord;
namespace {

// The wall time the sweep recorded for a rung's first run, or nullopt.
std::optional<double> recorded_wall(const ResultSet& set, const std::string& id) {
  for (const char* key : {"rungs", "upstream"}) {
    if (!set.manifest.is_object() || !set.manifest.contains(key)) continue;
    for (const auto& entry : set.manifest[key]) {
      if (str_at(entry, "id") != id || !entry.contains("runs") || !entry["runs"].is_array()) {
        continue;
      }
      for (const auto& run : entry["runs"]) {
        if (auto w = num_at(run, "wall_s"); w && *w > 0) return w;
      }
    }
  }
  return std::nullopt;
}

// The rate a run's step is priced at: a CPU training step is not bound by
// its matmuls' peak, so a lower precision that runs natively is priced as
// fp32 (bf16-mixed steps measured 1.1-1.4x faster than 32-true where the
// bf16 matmul peak is 2-4x fp32's); one slower than fp32 (emulated: LibTorch
// converting to fp32 and back) is priced by its own measured rate, which it
// is bound by (a 2-core AVX2 CPU's text step 34x slower in bf16-mixed, its
// bf16 matmul 38x). nullopt: the calibration lacks it.
std::optional<double> priced_peak(const PeakTable& peaks, const std::string& dtype, int threads) {
  const auto fp32 = peaks.calibrated_cpu("fp32", threads);
  const auto own = peaks.calibrated_cpu(dtype, threads);
  if (!fp32) return std::nullopt;
  if (own && own->flops_per_s < fp32->flops_per_s) return own->flops_per_s;
  return fp32->flops_per_s;
}

}  // namespace

Estimator::Estimator(const fs::path& results, const fs::path& calibration,
                     const std::string& machine_id) {
  here_ = PeakTable::load("", calibration);
  if (results.empty() || !fs::is_directory(results)) return;
  // This machine's own committed set first; then, when this machine is
  // calibrated, the other calibrated ones, newest first.
  std::vector<std::pair<std::string, Reference>> others;
  for (const auto& dir : find_result_sets(results)) {
    if (!fs::exists(dir / "sweep.json")) continue;
    Reference ref;
    try {
      ref.set = load_result_set(dir);
    } catch (const ConfigError&) {
      continue;
    }
    ref.peaks = PeakTable::load("", dir / "peaks.json");
    if (ref.set.machine_id == machine_id) {
      ref.same_machine = true;
      if (!here_.calibration().is_object()) here_ = ref.peaks;
      refs_.insert(refs_.begin(), std::move(ref));
      continue;
    }
    if (calibration.empty() || !ref.peaks.calibration().is_object()) continue;
    const auto when = str_at(ref.set.manifest, "finished_at", str_at(ref.set.manifest, "started_at"));
    others.emplace_back(when, std::move(ref));
  }
  std::sort(others.begin(), others.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  for (auto& o : others) refs_.push_back(std::move(o.second));
  if (refs_.empty()) return;
  const auto& first = refs_.front();
  basis_ = "each rung's planned work against its run in " + first.set.dir.string() +
           (first.same_machine ? " (this machine's)"
                               : ", scaled by the two machines' matmul peaks (that set's "
                                 "peaks.json, this machine's " + calibration.string() + ")");
  if (refs_.size() > 1) basis_ += ", else in another committed set";
}

std::optional<Estimate> Estimator::estimate(const RunShape& run, std::string* source) const {
  for (const auto& ref : refs_) {
    if (auto e = from(ref, run)) {
      if (source != nullptr) *source = ref.set.dir.string();
      return e;
    }
  }
  return std::nullopt;
}

std::optional<Estimate> Estimator::from(const Reference& ref, const RunShape& run) const {
  const RungRuns* rung = ref.set.find(run.rung);
  if (rung == nullptr) return std::nullopt;
  const RunRecord* rec = nullptr;
  for (const auto& r : rung->repeats) {
    if (r.ok()) {
      rec = &r;
      break;
    }
  }
  if (rec == nullptr || !rec->config.is_object() || !rec->data.is_object()) return std::nullopt;
  // Its work, planned as this run's is (its config resolved by today's schema).
  config::RunConfig cfg;
  try {
    cfg = config::to_run_config(config::resolve_config(rec->config, rec->dir));
  } catch (const ConfigError&) {
    return std::nullopt;
  }
  train::SplitSizes sizes;
  sizes.train = int64_t(num_at(rec->data, "train").value_or(0));
  sizes.val = int64_t(num_at(rec->data, "val").value_or(0));
  sizes.test = int64_t(num_at(rec->data, "test").value_or(0));
  const auto theirs = train::plan_work(cfg, sizes, rec->world_size);
  if (theirs.forward_units() <= 0) return std::nullopt;
  const double init = rec->init_time_s.value_or(0.0);
  const double wall = recorded_wall(ref.set, run.rung).value_or(rec->train_time_s.value_or(0.0) + init);
  if (wall <= 0) return std::nullopt;
  // Matmul speed there over here, for the dtype and threads each ran with.
  const auto their_dtype = matmul_dtype(cfg.runtime.precision);
  const auto our_dtype = matmul_dtype(run.precision);
  const int their_threads = rec->threads > 0 ? rec->threads : 1;
  double speed = 1.0;
  const auto there = priced_peak(ref.peaks, their_dtype, their_threads);
  const auto here = priced_peak(here_, our_dtype, run.threads);
  if (there && here && *here > 0) {
    speed = *there / *here;
  } else if (!(ref.same_machine && their_dtype == our_dtype && their_threads == run.threads)) {
    return std::nullopt;
  }
  Estimate e;
  e.fixed_s = init;
  e.per_unit_s = std::max(0.0, wall - init) * speed / theirs.forward_units();
  return e;
}

double budget_fraction(const std::vector<RunCost>& runs, double budget_s, double floor) {
  double fixed = 0, scalable = 0;
  for (const auto& r : runs) {
    fixed += r.fixed_s + r.eval_s + (r.scalable ? 0.0 : r.train_s);
    if (r.scalable) scalable += r.train_s;
  }
  // Within the estimate's own error of the budget, the runs go as configured:
  // a ladder cut by a few percent would only stop comparing with others.
  if (fixed + scalable <= budget_s * kBudgetSlack || scalable <= 0) return 1.0;
  return std::clamp((budget_s - fixed) / scalable, floor, 1.0);
}

void EtaTracker::plan(const std::string& label, std::optional<double> estimate_s, bool emulated) {
  runs_.push_back({label, estimate_s, emulated, false, false, 0});
}

void EtaTracker::done(const std::string& label, std::optional<double> seconds) {
  for (auto& r : runs_) {
    if (r.label == label && !r.done) {
      r.done = true;
      r.measured = seconds.has_value();
      r.actual = seconds.value_or(0.0);
      return;
    }
  }
}

// Actual over estimated time of the finished runs of the kind (emulated or
// not), or of all finished ones when none of the kind has finished; 1 before.
double EtaTracker::factor(bool emulated) const {
  double est[2] = {0, 0}, act[2] = {0, 0};
  for (const auto& r : runs_) {
    if (!r.done || !r.measured || !r.estimate || *r.estimate <= 0) continue;
    est[r.emulated] += *r.estimate;
    act[r.emulated] += r.actual;
  }
  if (est[emulated] > 0) return act[emulated] / est[emulated];
  if (est[0] + est[1] > 0) return (act[0] + act[1]) / (est[0] + est[1]);
  return 1.0;
}

double EtaTracker::remaining_s() const {
  double s = 0;
  for (const auto& r : runs_) {
    if (!r.done && r.estimate) s += *r.estimate * factor(r.emulated);
  }
  return s;
}

int EtaTracker::unknown_remaining() const {
  return int(std::count_if(runs_.begin(), runs_.end(),
                           [](const Run& r) { return !r.done && !r.estimate; }));
}

int EtaTracker::finished() const {
  return int(std::count_if(runs_.begin(), runs_.end(), [](const Run& r) { return r.done; }));
}

std::string EtaTracker::line(double elapsed_s) const {
  std::string s = std::to_string(finished()) + " of " + std::to_string(total()) +
                  " runs done in " + duration_text(elapsed_s);
  const int unknown = unknown_remaining();
  const int left = total() - finished();
  if (left == 0) return s;
  if (unknown < left) s += "; about " + duration_text(remaining_s()) + " left";
  if (unknown > 0) {
    s += std::string(unknown < left ? " + " : "; ") + std::to_string(unknown) +
         (unknown == 1 ? " run" : " runs") + " not estimated";
  }
  return s;
}

std::string duration_text(double seconds) {
  if (!(seconds >= 0) || seconds > 1e7) return "?";
  const long t = long(seconds + 0.5);
  char buf[32];
  if (t >= 3600) {
    std::snprintf(buf, sizeof(buf), "%ldh%02ldm", t / 3600, (t / 60) % 60);
  } else if (t >= 60) {
    std::snprintf(buf, sizeof(buf), "%ldm%02lds", t / 60, t % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%lds", t);
  }
  return buf;
}

}  // namespace accel::ladder
