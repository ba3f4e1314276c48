#include "accel/results/compare.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "accel/config/run_config.h"
#include "accel/results/history.h"
#include "accel/results/report.h"
#include "accel/util/errors.h"
#include "accel/util/json_doc.h"

namespace accel::results {

using machine::format_double;

Json comparable_config(const Json& config) {
  Json c = config.is_object() ? config : Json::object();
  c.erase("name");
  c.erase("description");
  for (const auto& [section, key] : {std::pair{"runtime", "threads"},
                                     std::pair{"runtime", "accelerator"},
                                     std::pair{"model", "init_path"}, std::pair{"data", "root"},
                                     // fault injection: named on the verdict line instead
                                     std::pair{"train", "inject_delay"}}) {
    if (c.contains(section) && c[section].is_object()) c[section].erase(key);
  }
  config::drop_added_defaults(c);  // history's stored hashes predate them
  return c;
}

std::pair<Json, Json> comparable_configs(const Json& a, const Json& b) {
  // Resolved again by today's schema, as the sweep does for committed
  // upstream runs: a field added since a result set was made takes its
  // default, so older sets stay comparable (a changed default, an edited
  // config or a removed field still differs). Both or neither: a config
  // today's schema refuses is compared as written.
  try {
    return {comparable_config(config::resolve_config(a, ".")),
            comparable_config(config::resolve_config(b, "."))};
  } catch (const ConfigError&) {
    return {comparable_config(a), comparable_config(b)};
  }
}

std::string config_difference(const Json& a, const Json& b, size_t limit) {
  const Json fa = a.flatten(), fb = b.flatten();
  std::vector<std::string> diffs;
  auto path_of = [](std::string p) {  // "/train/epochs" -> "train.epochs"
    std::replace(p.begin(), p.end(), '/', '.');
    return p.empty() ? p : p.substr(1);
  };
  for (const auto& [k, v] : fa.items()) {
    if (!fb.contains(k)) {
      diffs.push_back(path_of(k) + ": " + v.dump() + " vs (none)");
    } else if (fb[k] != v) {
      diffs.push_back(path_of(k) + ": " + v.dump() + " vs " + fb[k].dump());
    }
  }
  for (const auto& [k, v] : fb.items()) {
    if (!fa.contains(k)) diffs.push_back(path_of(k) + ": (none) vs " + v.dump());
  }
  std::string out;
  for (size_t i = 0; i < diffs.size() && i < limit; ++i) out += (i ? "; " : "") + diffs[i];
  if (diffs.size() > limit) out += "; +" + std::to_string(diffs.size() - limit) + " more";
  return out;
}

std::map<std::string, double> run_counters(const RunRecord& run) {
  std::map<std::string, double> out;
  const auto& c = run.counters;
  if (c.is_object()) {
    if (auto v = num_at(c, "op_calls")) out["op calls"] = *v;
    if (c.contains("op_calls_by_op") && c["op_calls_by_op"].is_object()) {
      for (const auto& [k, v] : c["op_calls_by_op"].items()) {
        if (v.is_number()) out["op calls: " + k] = v.get<double>();
      }
    }
    if (auto v = num_at(c, "flops_counted")) out["flops counted"] = *v;
    if (c.contains("flops_counted_by_op") && c["flops_counted_by_op"].is_object()) {
      for (const auto& [k, v] : c["flops_counted_by_op"].items()) {
        if (v.is_number()) out["flops counted: " + k] = v.get<double>();
      }
    }
    if (auto v = num_at(c, "flops_analytic")) out["flops analytic"] = *v;
    if (auto v = num_at(c, "allocations/count")) out["tensor allocations"] = *v;
    if (auto v = num_at(c, "allocations/bytes")) out["tensor bytes allocated"] = *v;
    if (auto v = num_at(c, "allocations/peak_bytes")) out["tensor bytes live at most"] = *v;
  }
  const auto& comm = run.comm_per_step;
  if (comm.is_object() && comm.contains("collectives") && comm["collectives"].is_array()) {
    if (auto v = num_at(comm, "bytes")) out["collective bytes per step"] = *v;
    for (const auto& col : comm["collectives"]) {
      const std::string key = "collective " + str_at(col, "op") + "/" + str_at(col, "primitive") + " " +
                              str_at(col, "bytes") + " B: calls per step";
      if (auto v = num_at(col, "per_step")) out[key] += *v;
    }
  }
  for (const auto& r : run.ranks) {
    const std::string k = "rank " + std::to_string(r.rank) + " ";
    out[k + "param bytes"] = double(r.param_bytes);
    out[k + "grad bytes"] = double(r.grad_bytes);
    out[k + "optimizer bytes"] = double(r.optimizer_bytes);
  }
  return out;
}

namespace {

// The log spread (or points, for the task's metric) this machine's noise gives a
// rung's measure: the rung's own where measured, else the machine's.
std::optional<std::pair<double, int>> noise_of(const Json& noise, const std::string& rung, const std::string& measure) {
  if (!noise.is_object()) return std::nullopt;
  for (const std::string& path : {"rungs/" + rung + "/" + measure, "machine/" + measure}) {
    const auto sd = num_at(noise, path + "/sd");
    const auto runs = num_at(noise, path + "/runs");
    if (sd && runs && std::isfinite(*sd) && *sd >= 0) {
      // Never narrower than the floor, whatever the file says (a rung's
      // copies spread 0; files made before the floor hold that).
      const double floored = measure.rfind("test ", 0) == 0 ? *sd : std::max(*sd, kNoiseFloorLog);
      return std::make_pair(floored, int(bounded_int(*runs, 1, 1 << 20)));
    }
  }
  return std::nullopt;
}

}  // namespace

namespace {

// A gated row's verdict that fails its bound.
bool beyond_bound(const MeasureRow& r) {
  return r.verdict == "slower" || r.verdict == "less accurate" || r.verdict == "outside band" ||
         r.verdict == "larger" || r.verdict.rfind("worse ", 0) == 0;
}

}  // namespace

int adaptive_looks(int first_runs, int max_runs) { return std::max(1, max_runs - first_runs + 1); }

double adaptive_confidence(int first_runs, int max_runs) {
  return 1 - (1 - stats::kConfidence) / adaptive_looks(first_runs, max_runs);
}

std::optional<double> adaptive_level(const ResultSet& set) {
  if (!set.manifest.is_object() || !set.manifest.contains("adaptive")) return std::nullopt;
  const auto file = (set.dir / "sweep.json").string();
  const Json& a = set.manifest["adaptive"];
  if (!a.is_object()) throw ConfigError(file + ": \"adaptive\" must be an object");
  if (a.contains("confidence")) {
    const auto c = num_at(set.manifest, "adaptive/confidence");
    if (!c || !(*c >= stats::kConfidence && *c < 1)) {
      throw ConfigError(file + ": adaptive.confidence must be a number from " +
                        format_double("%g", stats::kConfidence) + " to below 1");
    }
    return *c;
  }
  // Made before the looks were split: their level from the looks it allowed.
  const auto first = num_at(set.manifest, "adaptive/first_runs"), cap = num_at(set.manifest, "adaptive/max_repeats");
  if (first && cap && *first >= 1 && *cap >= *first && *cap <= 1000) {
    return adaptive_confidence(int(*first), int(*cap));
  }
  throw ConfigError(file + ": adaptive has neither confidence nor first_runs and max_repeats");
}

std::string confidence_text(double confidence) { return format_double("%.4g%%", confidence * 100); }

AdaptiveRound adaptive_round(const CompareOutcome& outcome, int max_runs) {
  // Per rung, in the outcome's order: open while a gated time row is
  // unresolved and no gated row of the rung failed its bound.
  std::vector<std::string> order;
  std::map<std::string, AdaptiveRound::Open> open;
  std::set<std::string> settled;
  for (const auto& r : outcome.rows) {
    if (!r.gated) continue;
    if (beyond_bound(r)) settled.insert(r.rung);
    if (r.verdict != "unresolved" || (r.measure != "step time" && r.measure != "training time")) continue;
    auto [it, fresh] = open.try_emplace(r.rung);
    if (fresh) order.push_back(r.rung);
    auto& o = it->second;
    o.rung = r.rung;
    o.runs = std::max(o.runs, r.other_runs);
    if (r.repeats_needed) o.repeats_needed = std::max(o.repeats_needed.value_or(0), *r.repeats_needed);
  }
  AdaptiveRound out;
  for (const auto& id : order) {
    if (settled.count(id)) continue;
    const auto& o = open[id];
    (o.runs < max_runs ? out.run : out.at_cap).push_back(o);
  }
  return out;
}

Json measure_noise(const ResultSet& set) {
  const std::string metric = metric_measure(set.metric);  // in points, not a log
  // A task metric (each rung's own: a set may hold several) is in its own
  // units, never a log, and has no floor.
  auto is_metric = [](const std::string& measure) { return measure.rfind("test ", 0) == 0; };
  Json rungs = Json::object();
  std::map<std::string, std::vector<double>> per_measure;
  std::map<std::string, int> runs_of;
  int measured = 0;
  for (const auto& rung : set.rungs) {
    std::map<std::string, std::vector<double>> v;
    int ok = 0;
    for (const auto& run : rung.repeats) {
      if (!run.ok()) continue;
      ++ok;
      if (run.step_ms_median && *run.step_ms_median > 0) v["step time"].push_back(std::log(*run.step_ms_median));
      if (run.train_time_s && *run.train_time_s > 0) v["training time"].push_back(std::log(*run.train_time_s));
      if (!run.peak_memory_bytes.empty()) {
        v["peak memory"].push_back(std::log(*std::max_element(run.peak_memory_bytes.begin(), run.peak_memory_bytes.end())));
      }
      if (run.test_acc) v[metric_measure(run.metric)].push_back(*run.test_acc * run.metric.scale());
    }
    if (ok < 3) continue;
    ++measured;
    Json r = Json::object();
    for (const auto& [measure, values] : v) {
      const auto s = stats::summarize(values);
      if (!s || s->n < 3) continue;
      r[measure] = {{"sd", s->sd}, {"runs", s->n}};
      per_measure[measure].push_back(s->sd);
      runs_of[measure] = runs_of.count(measure) ? std::min(runs_of[measure], s->n) : s->n;
    }
    rungs[rung.id] = r;
  }
  if (measured == 0) {
    throw ConfigError(set.dir.string() + ": no rung with 3 or more ok runs: make the set with `accel-bench sweep "
                      "--repeats 5` (unchanged runs) to measure this machine's noise");
  }
  Json machine = Json::object();
  Json warnings = Json::array();
  for (const auto& [measure, sds] : per_measure) {
    double sd = stats::median(sds);
    Json m = {{"runs", runs_of[measure]}};
    // Repeats that time alike to the digit measure the clock, not the
    // machine: a zero spread would give one-run compares zero-width
    // intervals. Times and memory keep at least kNoiseFloorLog.
    if (!is_metric(measure) && sd < kNoiseFloorLog) {
      m["measured_sd"] = sd;
      m["floored"] = true;
      warnings.push_back(measure + ": the repeats spread " + format_double("%.2g", sd) +
                         " (sd of the log), below the floor of " + format_double("%g", kNoiseFloorLog) +
                         ", which is used instead (repeats this alike are more likely copies than a quiet machine)");
      sd = kNoiseFloorLog;
    }
    m["sd"] = sd;
    // The smallest change a compare resolves at this spread, per runs a side.
    for (int n : {1, 3, 5}) {
      m["resolves_with_" + std::to_string(n)] =
          is_metric(measure) ? stats::smallest_resolved_difference(sd, n)  // points, or the metric's units
                            : stats::smallest_resolved_change(sd, n);
    }
    machine[measure] = m;
  }
  return {{"set", set.dir.string()}, {"machine_id", set.machine_id}, {"suite", set.suite},
          {"scale", "sd: of the log for times and memory, of " +
                        std::string(set.metric.proportion ? "percentage points" : "its own units") + " for " + metric},
          {"rungs", rungs}, {"machine", machine}, {"warnings", warnings}};
}

std::string counter_value(OptNum v) {
  if (!v) return "(none)";
  return std::fabs(*v - std::round(*v)) < 1e-9 && std::fabs(*v) < 1e15 ? format_double("%.0f", *v)
                                                                          : format_double("%.6g", *v);
}

namespace {

// The counters that differ between two runs (exactly), in name order.
std::vector<CounterChange> counter_changes(const std::string& rung, const RunRecord& b, const RunRecord& o) {
  const auto cb = run_counters(b), co = run_counters(o);
  std::vector<CounterChange> out;
  for (const auto& [k, v] : cb) {
    const auto it = co.find(k);
    if (it == co.end()) {
      out.push_back({rung, k, v, std::nullopt});
    } else if (it->second != v) {
      out.push_back({rung, k, v, it->second});
    }
  }
  for (const auto& [k, v] : co) {
    if (!cb.count(k)) out.push_back({rung, k, std::nullopt, v});
  }
  std::sort(out.begin(), out.end(), [](const CounterChange& x, const CounterChange& y) { return x.counter < y.counter; });
  return out;
}

struct Side {
  const RungRuns* rung = nullptr;
  std::vector<const RunRecord*> ok;
  Stat time, acc, mem;  // mem: the largest rank's peak
  // Per ok run, for the intervals.
  stats::Sample step_ms, train_s, mem_bytes;
  std::vector<double> accs;
  double test_samples = 0;  // per run (the smallest), 0 when unknown
  // Time to the suite's target validation metric, of the ok runs that
  // reached it (epoch by epoch), and how many did not.
  stats::Sample to_target;
  int missed_target = 0;
  int timing = 0;  // timing runs among step_ms's and train_s's samples (timing_factors)
  std::string status() const {
    if (rung == nullptr) return "missing";
    if (left_out()) return "not run (--only)";
    if (!rung->needs.empty() && rung->repeats.empty()) return "needs " + rung->needs;
    if (ok.empty()) {
      if (rung->repeats.empty()) return "missing";
      // A record refused as read (impossible figures, not JSON): its reason.
      for (const auto& run : rung->repeats) {
        if (run.status == "unreadable") return "unreadable: " + markdown_text(run.error);
      }
      return "failed";
    }
    return ok.size() == rung->repeats.size() ? "ok" : "ok " + std::to_string(ok.size()) + "/" +
                                                          std::to_string(rung->repeats.size());
  }
  // Left out of its sweep on purpose (`sweep --only`): not run, so not failed.
  bool left_out() const { return rung != nullptr && rung->repeats.empty() && rung->sweep_status == "excluded"; }
};

Side side_of(const ResultSet& set, const std::string& id, OptNum target) {
  Side s;
  s.rung = set.find(id);
  if (s.rung == nullptr) return s;
  std::vector<double> t, a, m;
  for (const auto& run : s.rung->repeats) {
    if (!run.ok()) continue;
    s.ok.push_back(&run);
    if (run.train_time_s) t.push_back(*run.train_time_s);
    if (run.test_acc) a.push_back(*run.test_acc);
    if (!run.peak_memory_bytes.empty()) {
      m.push_back(*std::max_element(run.peak_memory_bytes.begin(), run.peak_memory_bytes.end()));
    }
    if (run.step_ms_median) s.step_ms.values.push_back(*run.step_ms_median);
    if (target && run.metric == set.metric) {  // the target is of the set's metric
      if (const auto t = time_to_target(run, *target)) {
        s.to_target.values.push_back(*t);
      } else {
        ++s.missed_target;
      }
    }
    const auto n = num_at(run.work, "test/samples");
    if (n && *n > 0) s.test_samples = s.test_samples > 0 ? std::min(s.test_samples, *n) : *n;
  }
  s.time = stat_of(t);
  s.acc = stat_of(a);
  s.mem = stat_of(m);
  s.train_s.values = t;
  s.mem_bytes.values = m;
  s.accs = a;
  // One run and its timing runs: their speeds are the between-run samples.
  if (s.ok.size() == 1) {
    const auto factors = timing_factors(*s.rung);
    s.timing = int(factors.size());
    s.train_s.values = with_timing(s.train_s.values, factors);
    s.step_ms.values = with_timing(s.step_ms.values, factors);
  }
  if (s.ok.size() == 1 && s.step_ms.values.size() == 1) {
    // One run: its own steps after warm-up give its step time an interval.
    if (const auto iv = stats::block_bootstrap_median(step_times_after_warmup(*s.ok.front()));
        iv && iv->low > 0) {
      s.step_ms.within_run_se_log =
          (std::log(iv->high) - std::log(iv->low)) / (2 * stats::normal_quantile(0.975));
    }
  }
  return s;
}

OptNum ratio(OptNum a, OptNum b) {
  if (!a || !b || *a <= 0) return std::nullopt;
  return *b / *a;
}

std::string set_row(const char* role, const ResultSet& s) {
  const Json env = s.env();
  std::string hw = str_at(env, "cpu_model", "?") + ", " + str_at(env, "cores", "?") + " cores";
  const int gpus = int_at(env, "gpu_count", 0);
  if (gpus > 0) hw += ", " + std::to_string(gpus) + " x " + str_at(env, "gpu_name", "GPU");
  auto cell = [](const std::string& s) { return markdown_text(clean_text(s, 400)); };
  return std::string("| ") + role + " | " + cell(s.dir.string()) + " | " + cell(s.machine_id) + " | " + cell(hw) +
         " | " + cell(str_at(env, "libtorch_version", "?")) + " | " + cell(str_at(env, "accel_bench_version", "?")) +
         " (" + cell(str_at(env, "git_sha", "?")) + ") |\n";
}

// The verdict of a rung both sides ran; adds to the outcome's counters.
// A rung of BASE the bounds could not judge: a failure under a gate unless
// the user allows it.
std::string uncompared(const std::string& why, const CompareBounds& bounds, CompareOutcome& out) {
  ++out.uncompared;
  if (bounds.require_same_config || (bounds.gates() && !bounds.allow_uncompared)) {
    ++out.regressions;
    return "FAIL: " + why;
  }
  return why;
}

// A side's samples: "3", or with timing runs "1+2t".
std::string runs_cell(int samples, int timing) {
  return timing > 0 ? std::to_string(samples - timing) + "+" + std::to_string(timing) + "t" : std::to_string(samples);
}

bool has_spread(const stats::Interval& iv) { return iv.low < iv.high || iv.method != "one run a side: no spread"; }

std::string change_text(const MeasureRow& r) {
  if (!r.change) return "n/a";
  const auto& c = *r.change;
  // A share's difference in points; another metric's (a loss) in its units, finer.
  const char* d = r.unit.empty() ? "%+.4f" : "%+.2f";
  const char* f = r.difference ? d : "%.3fx";
  std::string t = format_double(f, c.point);
  if (c.low < c.high) t += " [" + format_double(r.difference ? d : "%.3f", c.low) + ", " +
                           format_double(r.difference ? d : "%.3f", c.high) + "]";
  return t;
}

// A ratio row (time, memory): its interval and, under a bound, its verdict.
MeasureRow ratio_row(const std::string& rung, const std::string& measure, const std::string& unit,
                     double scale, stats::Sample b, stats::Sample o,
                     const std::optional<double>& bound_pct, const char* worse, const char* better,
                     bool judge_point, const Json& noise, double confidence) {
  // This machine's measured noise: the spread of a one-run side, and more
  // degrees of freedom for the sides' own (stats::ratio_interval).
  if (const auto n = noise_of(noise, rung, measure)) {
    b.noise_sd_log = o.noise_sd_log = n->first;
    b.noise_runs = o.noise_runs = n->second;
  }
  MeasureRow r;
  r.rung = rung;
  r.measure = measure;
  r.unit = unit;
  auto med = [&](const stats::Sample& s) -> OptNum {
    const auto m = stats::summarize(s.values);
    return m ? OptNum(m->median * scale) : std::nullopt;
  };
  r.base = med(b);
  r.other = med(o);
  r.base_runs = int(b.values.size());
  r.other_runs = int(o.values.size());
  r.change = stats::ratio_interval(b, o, confidence);
  if (!bound_pct || !r.change) return r;
  r.gated = true;
  const double bound = *bound_pct / 100;
  if (!has_spread(*r.change) && !judge_point) {
    r.verdict = "unresolved";
    r.note = "one run a side and no spread: run with --repeats 3 (or more)";
    return r;
  }
  // One run a side and this machine's noise unmeasured: the interval is the
  // runs' own steps, which says how steady each run was, not where a second
  // run would land (unchanged code on an unchanged config once read 1.38x
  // "slower" between two sweeps of a 2-core machine). Shown, never judged.
  if (b.values.size() == 1 && o.values.size() == 1 && !b.noise_sd_log) {
    r.verdict = "unresolved";
    r.note = "one run a side: within-run interval only, no run-to-run noise; run with --repeats 3, or give "
             "this machine's noise (calibrate --noise; compare --noise FILE)";
    return r;
  }
  switch (stats::judge_higher_is_worse(*r.change, bound)) {
    case stats::Verdict::worse: r.verdict = worse; break;
    case stats::Verdict::better: r.verdict = better; break;
    case stats::Verdict::same:
      r.verdict = "same";
      // Within the bound, yet a change beyond doubt: said, so that "same"
      // never hides a slowdown the gate tolerates.
      if (has_spread(*r.change) && r.change->low > 1) {
        r.note = std::string(worse) + " beyond doubt, within " + format_double("%g%%", *bound_pct);
      } else if (has_spread(*r.change) && r.change->high < 1) {
        r.note = std::string(better) + " beyond doubt, within " + format_double("%g%%", *bound_pct);
      }
      break;
    case stats::Verdict::unresolved: {
      r.verdict = "unresolved";
      auto sd = stats::log_spread(b, o);
      if (!sd && b.noise_sd_log) sd = b.noise_sd_log;
      if (sd) {
        r.repeats_needed = stats::repeats_needed(*sd, std::log1p(bound), confidence);
        r.note = "straddles " + format_double("%g%%", *bound_pct) + "; " +
                 std::to_string(*r.repeats_needed) + " runs a side resolve a change of that size";
      } else {
        r.note = "straddles " + format_double("%g%%", *bound_pct) +
                 " (within-run interval only); run with --repeats 3 to measure the spread";
      }
      break;
    }
  }
  return r;
}

// The task's metric on the test split: a share (accuracy) in points, by the
// difference of two proportions; another metric (a loss) in its own units,
// by the difference of two means. A bound is judged in the metric's better
// direction and each kind has its own: --fail-accuracy-drop a drop in a
// share, --fail-loss-rise a rise in a loss.
MeasureRow accuracy_row(const std::string& rung, const Side& b, const Side& o, const CompareBounds& bounds) {
  const train::MetricFacts& metric = b.ok.front()->metric;
  const std::optional<double> drop = bounds.metric_drop(metric);
  const double scale = metric.scale();
  MeasureRow r;
  r.rung = rung;
  r.measure = metric_measure(metric);
  r.unit = metric.unit();
  r.difference = true;
  auto mean = [&](const std::vector<double>& v) -> OptNum {
    const auto m = stats::summarize(v);
    return m ? OptNum(m->mean * scale) : std::nullopt;
  };
  r.base = mean(b.accs);
  r.other = mean(o.accs);
  r.base_runs = int(b.accs.size());
  r.other_runs = int(o.accs.size());
  r.change = metric.proportion ? stats::accuracy_difference(b.accs, b.test_samples, o.accs, o.test_samples,
                                                            bounds.confidence)
                               : stats::mean_difference(b.accs, o.accs, bounds.confidence);
  if (r.change && !drop && !bounds.acc_band_points && (bounds.acc_drop_points || bounds.loss_rise)) {
    // A bound of the other kind only (a mixed set's accuracy gate): said, not judged.
    r.note = std::string("not judged: ") + (metric.proportion ? "--fail-accuracy-drop" : "--fail-loss-rise") +
             " bounds a " + (metric.proportion ? "share" : metric.name);
  }
  if (!r.change || !(drop || bounds.acc_band_points)) return r;
  r.gated = true;
  if (r.change->method == "no spread") {
    r.verdict = "unresolved";
    r.note = metric.proportion ? "no spread: the runs name no test-set size and have one seed a side"
                               : "no spread: a " + metric.name + " needs 2 or more seeds on each side (base " +
                                     std::to_string(r.base_runs) + ", other " + std::to_string(r.other_runs) + ")";
    return r;
  }
  // The spread of one run's metric, scaled: the seeds' where there are
  // several, else (a share) the test set's binomial one.
  std::optional<double> sd;
  for (const auto* s : {&b, &o}) {
    const auto m = stats::summarize(s->accs);
    if (m && m->n >= 2) sd = std::max(sd.value_or(0.0), m->sd * scale);
  }
  if (!sd && metric.proportion && b.test_samples > 0 && r.base) {
    const double p = *r.base / 100;
    sd = std::sqrt(p * (1 - p) / b.test_samples) * 100;
  }
  // The change as "higher is better" reads it: a loss's is turned over.
  stats::Interval better = *r.change;
  if (!metric.higher_is_better) {
    better.point = -r.change->point;
    better.low = -r.change->high;
    better.high = -r.change->low;
  }
  const bool accuracy = metric.proportion;  // the verdict's words
  const std::string worse_word = accuracy ? "less accurate" : "worse " + metric.name;
  const std::string better_word = accuracy ? "more accurate" : "better " + metric.name;
  std::vector<std::string> worse;
  bool unresolved = false;
  std::optional<double> resolve_at;
  if (drop) {
    const auto v = stats::judge_lower_is_worse(better, *drop);
    if (v == stats::Verdict::worse) worse.push_back(worse_word);
    if (v == stats::Verdict::unresolved) unresolved = true, resolve_at = *drop;
    if (v == stats::Verdict::better && !bounds.acc_band_points) r.verdict = better_word;
  }
  if (bounds.acc_band_points) {
    const auto v = stats::judge_band(*r.change, *bounds.acc_band_points);
    if (v == stats::Verdict::worse) worse.push_back("outside band");
    if (v == stats::Verdict::unresolved) {
      unresolved = true;
      resolve_at = std::min(resolve_at.value_or(*bounds.acc_band_points), *bounds.acc_band_points);
    }
  }
  if (!worse.empty()) {
    r.verdict = worse.front();
  } else if (unresolved) {
    r.verdict = "unresolved";
    if (sd && resolve_at) r.repeats_needed = stats::repeats_needed(*sd, *resolve_at, bounds.confidence);
    r.note = "straddles the bound" + (r.repeats_needed ? "; " + std::to_string(*r.repeats_needed) +
                                                             " seeds a side resolve a change of its size"
                                                       : std::string());
  } else if (r.verdict.empty()) {
    r.verdict = "same";
  }
  return r;
}

std::string judge(const Side& b, const Side& o, const CompareBounds& bounds, CompareOutcome& out,
                  const std::string& id) {
  const auto [cb, co] = comparable_configs(b.ok.front()->config, o.ok.front()->config);
  if (cb != co) {
    ++out.not_comparable;
    // The configs' own values, in a table cell: as text, never markup.
    return uncompared("not comparable (config differs: " + markdown_text(clean_text(config_difference(cb, co), 1000)) +
                          ")",
                      bounds, out);
  }
  const auto tr = ratio(b.time.median, o.time.median);
  const auto mr = ratio(b.mem.median, o.mem.median);
  OptNum delta;
  if (b.acc.median && o.acc.median) delta = (*o.acc.median - *b.acc.median) * b.ok.front()->metric.scale();
  // A bound whose measure a side lacks judged nothing.
  std::vector<std::string> missing;
  const bool step_times = !b.step_ms.values.empty() && !o.step_ms.values.empty();
  if (bounds.slower_pct && !tr && !step_times) {
    missing.push_back("training or step time (--fail-slower)");
  }
  if ((bounds.metric_drop(b.ok.front()->metric) || bounds.acc_band_points) && !delta) {
    missing.push_back(metric_measure(b.ok.front()->metric) +
                      (b.ok.front()->metric.proportion ? " (--fail-accuracy-drop/--accuracy-band)"
                                                       : " (--fail-loss-rise/--accuracy-band)"));
  }
  if (bounds.memory_growth_pct && !mr) missing.push_back("peak memory (--fail-memory-growth)");
  if (bounds.fail_counters &&
      (!b.ok.front()->counters.is_object() || !o.ok.front()->counters.is_object())) {
    missing.push_back("work counters (--fail-counters)");
  }
  if (!missing.empty()) {
    std::string why = "not compared: no ";
    for (size_t i = 0; i < missing.size(); ++i) why += (i ? ", " : "") + missing[i];
    return uncompared(why + " on both sides", bounds, out);
  }
  ++out.compared;
  std::vector<MeasureRow> rows;
  rows.push_back(ratio_row(id, "step time", "ms", 1, b.step_ms, o.step_ms, bounds.slower_pct, "slower",
                           "faster", false, bounds.noise, bounds.confidence));
  rows.push_back(ratio_row(id, "training time", "s", 1, b.train_s, o.train_s, bounds.slower_pct, "slower",
                           "faster", false, bounds.noise, bounds.confidence));
  for (auto* r : {&rows[0], &rows[1]}) {
    r->base_timing = std::min(b.timing, std::max(0, r->base_runs - 1));
    r->other_timing = std::min(o.timing, std::max(0, r->other_runs - 1));
    if (r->change && (r->base_timing > 0 || r->other_timing > 0)) {
      r->change->method += " (timing runs: base " + std::to_string(r->base_timing) + ", other " +
                           std::to_string(r->other_timing) + ")";
    }
  }
  // Time to the suite's target, shown with its interval, not gated: epoch
  // by epoch it moves in whole epochs (a gate on it belongs to a score over
  // several runs).
  if (!b.to_target.values.empty() && !o.to_target.values.empty()) {
    auto r = ratio_row(id, "time to target", "s", 1, b.to_target, o.to_target, std::nullopt, "slower",
                       "faster", false, Json(), bounds.confidence);
    if (b.missed_target + o.missed_target > 0) {
      r.note = "runs that missed the target: base " + std::to_string(b.missed_target) + ", other " +
               std::to_string(o.missed_target);
    }
    rows.push_back(std::move(r));
  }
  rows.push_back(accuracy_row(id, b, o, bounds));
  // Peak memory needs a spread too: a CPU run's peak RSS moved 2-9% (sd of
  // the log) between unchanged runs on a 2-core machine.
  rows.push_back(ratio_row(id, "peak memory", "GB", 1e-9, b.mem_bytes, o.mem_bytes, bounds.memory_growth_pct,
                           "larger", "smaller", false, bounds.noise, bounds.confidence));
  // The speed gate: judged by the time measures that have an interval; a
  // measure with one run a side and no spread is left to the other.
  auto* step = &rows[0];
  auto* train = &rows[1];
  if (bounds.slower_pct) {
    for (auto* r : {step, train}) {
      if (r->change && r->verdict == "unresolved" && !has_spread(*r->change)) {
        auto* other_row = r == step ? train : step;
        if (other_row->change && has_spread(*other_row->change)) {
          r->verdict = "not judged";
          r->note = "one run a side and no spread; judged by " + other_row->measure;
          r->gated = false;
        }
      }
    }
  }
  std::vector<std::string> fails, open;
  for (const auto& r : rows) {
    if (!r.gated) continue;
    const std::string what = r.measure + " " + change_text(r);
    if (beyond_bound(r)) {
      const double bnd = r.difference  // the task's metric, in points
                             ? (r.unit.empty() ? bounds.loss_rise : bounds.acc_drop_points)
                                   .value_or(bounds.acc_band_points.value_or(0))
                         : r.measure == "peak memory" ? bounds.memory_growth_pct.value_or(0)
                                                      : bounds.slower_pct.value_or(0);
      fails.push_back(r.verdict + ": " + what + (r.difference ? format_double(r.unit.empty() ? " (> %g)" : " (> %g points)", bnd)
                                                             : format_double(" (> %g%%)", bnd)));
    } else if (r.verdict == "unresolved") {
      open.push_back(what + ": " + r.note);
    }
  }
  for (auto& r : rows) out.rows.push_back(std::move(r));
  // The exact counters: the first ok run of each side (every repeat of one
  // config counts the same).
  const auto changes = counter_changes(id, *b.ok.front(), *o.ok.front());
  if (bounds.fail_counters && !changes.empty()) {
    std::string what = "counters changed: ";
    for (size_t i = 0; i < changes.size() && i < 5; ++i) {
      what += (i ? "; " : "") + changes[i].counter + " " + counter_value(changes[i].base) + " -> " +
              counter_value(changes[i].other);
    }
    if (changes.size() > 5) what += "; +" + std::to_string(changes.size() - 5) + " more";
    fails.push_back(what);
  }
  out.counter_changes.insert(out.counter_changes.end(), changes.begin(), changes.end());
  if (!fails.empty()) {
    ++out.regressions;
    std::string v = "REGRESSION: ";
    for (size_t i = 0; i < fails.size(); ++i) v += (i ? "; " : "") + fails[i];
    return v;
  }
  if (!open.empty()) {
    ++out.unresolved;
    std::string v = "UNRESOLVED: ";
    for (size_t i = 0; i < open.size(); ++i) v += (i ? "; " : "") + open[i];
    return v;
  }
  return "ok";
}

}  // namespace

CompareOutcome compare_sets(const ResultSet& base, const ResultSet& other,
                            const CompareBounds& asked) {
  CompareOutcome out;
  CompareBounds bounds = asked;
  // OTHER made by adaptive repeats (against BASE, as a gate runs them):
  // judged at the level its looks were. BASE's own looks were against
  // another set; they do not lower what this comparison may claim.
  adaptive_level(base);  // readable, or an error that names the file
  std::string level_note;
  if (const auto c = adaptive_level(other); c && *c > bounds.confidence) {
    bounds.confidence = *c;
    level_note = "NOTE: other was made by adaptive repeats: every interval here is " + confidence_text(*c) +
                 ", the level each of its looks was judged at (" + confidence_text(stats::kConfidence) +
                 " split over them). ";
  }
  out.confidence = bounds.confidence;
  out.base_dir = base.dir.string();
  out.other_dir = other.dir.string();
  out.base_machine = base.machine_id;
  out.other_machine = other.machine_id;
  std::vector<std::string> ids;
  for (const auto* set : {&base, &other}) {
    for (const auto* list : {&set->upstream, &set->rungs}) {
      for (const auto& r : *list) {
        if (std::find(ids.begin(), ids.end(), r.id) == ids.end()) ids.push_back(r.id);
      }
    }
  }
  // Rungs of more than one task metric (the smoke suite's accuracy and
  // loss rungs): each row by its own, the column "metric".
  bool mixed = false;
  for (const auto* set : {&base, &other}) {
    for (const auto& rung : set->rungs) {
      for (const auto& run : rung.repeats) mixed = mixed || (run.present && run.metric != base.metric);
    }
  }
  const std::string metric_head = mixed ? std::string("metric") : base.metric.short_name();
  std::ostringstream md;
  md << "## " << base.dir.string() << " vs " << other.dir.string() << "\n\n"
     << "| set | path | machine | hardware | LibTorch | accel-bench |\n|---|---|---|---|---|---|\n"
     << set_row("base", base) << set_row("other", other) << "\n"
     << "| rung | base | other | time base | time other | time ratio | " << metric_head << " base | "
     << metric_head << " other | " << metric_head
     << (mixed ? " delta" : base.metric.proportion ? " delta (points)" : " delta")
     << " | mem base | mem other | mem ratio | verdict |\n"
     << "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  // Time to target: the base's suite target, else the other's.
  const OptNum target = base.target_accuracy ? base.target_accuracy : other.target_accuracy;
  std::map<std::string, std::set<double>> injected;  // side -> the fault injections its runs carry
  for (const auto& id : ids) {
    const Side b = side_of(base, id, target), o = side_of(other, id, target);
    for (const auto& [role, side] : {std::pair{"base", &b}, std::pair{"other", &o}}) {
      for (const auto* run : side->ok) {
        if (run->inject_delay > 0) injected[role].insert(run->inject_delay);
      }
    }
    std::string verdict;
    if ((b.rung == nullptr || b.left_out()) && (o.rung == nullptr || o.left_out())) {
      // A rung neither side's sweep ran (`--only` on both): nothing to judge, nothing lost.
      verdict = "run on neither side (--only)";
    } else if (b.rung == nullptr) {
      verdict = "new (no baseline)";
    } else if (b.left_out()) {
      // No baseline, as for a rung base lacks: nothing to judge OTHER by.
      verdict = o.ok.empty() ? "run on neither side (base not run (--only), other " + o.status() + ")"
                             : "new (no baseline: base not run (--only))";
    } else if (b.ok.empty() && !b.rung->needs.empty() && b.rung->repeats.empty()) {
      // Left out by design where BASE was made (a CUDA rung on a CPU).
      verdict = o.ok.empty() ? "run on neither machine" : "new (no baseline: base " +
                                                              b.status() + ")";
    } else if (b.ok.empty()) {
      verdict = uncompared("base has no ok run (" + b.status() + ")", bounds, out);
    } else if (o.left_out()) {
      // Chosen away where OTHER was made, not broken: not compared (a gate
      // fails on it unless --allow-uncompared), but no regression.
      verdict = uncompared("other not run (--only)", bounds, out);
    } else if (o.ok.empty()) {
      ++out.regressions;
      verdict = "REGRESSION: " + o.status() + " (ok in base)";
    } else {
      verdict = judge(b, o, bounds, out, id);
    }
    OptNum delta;
    // The rung's task metric (a share in points, a loss as itself), named
    // where the sets hold several.
    const train::MetricFacts& metric =
        !b.ok.empty() ? b.ok.front()->metric : !o.ok.empty() ? o.ok.front()->metric : base.metric;
    if (b.acc.median && o.acc.median) delta = (*o.acc.median - *b.acc.median) * metric.scale();
    auto shown = [&](OptNum v) {
      const std::string cell = fmt_metric(metric, v);
      return mixed && !metric.proportion && v ? metric.name + " " + cell : cell;
    };
    md << "| " << id << " | " << b.status() << " | " << o.status() << " | "
       << fmt_time(b.time.median) << " | " << fmt_time(o.time.median) << " | "
       << fmt_num(ratio(b.time.median, o.time.median), "%.3fx") << " | " << shown(b.acc.median)
       << " | " << shown(o.acc.median) << " | " << fmt_num(delta, metric.proportion ? "%+.2f" : "%+.4f")
       << " | "
       << fmt_gb(b.mem.median) << " | " << fmt_gb(o.mem.median) << " | "
       << fmt_num(ratio(b.mem.median, o.mem.median), "%.3fx") << " | " << verdict << " |\n";
  }
  std::ostringstream sum;
  if (out.uncompared > 0 && bounds.gates()) {
    sum << (bounds.allow_uncompared && !bounds.require_same_config
                ? "WARNING: " + std::to_string(out.uncompared) +
                      " rungs of base were not compared (allowed by --allow-uncompared); "
                : "FAIL: " + std::to_string(out.uncompared) +
                      " rungs of base were not compared, which fails a gate (see the verdicts; "
                      "--allow-uncompared accepts them); ");
  }
  if (out.regressions == 0 && out.unresolved > 0) {
    sum << "UNRESOLVED: " << out.unresolved
        << " rungs straddle a bound (no regression beyond doubt; more repeats resolve them); ";
  }
  std::ostringstream note;
  // Where this machine's noise exceeds a bound, say so on the verdict line, before the tables.
  if (bounds.noise.is_object() && bounds.slower_pct) {
    for (const char* m : {"step time", "training time"}) {
      const auto one = num_at(bounds.noise, std::string("machine/") + m + "/resolves_with_1");
      const auto three = num_at(bounds.noise, std::string("machine/") + m + "/resolves_with_3");
      if (one && *one * 100 > *bounds.slower_pct) {
        note << "NOTE: this machine's noise (" << markdown_text(clean_text(str_at(bounds.noise, "set"), 400)) << ") resolves " << m
            << " changes above " << format_double("%.1f%%", *one * 100) << " with one run a side"
            << (three ? ", " + format_double("%.1f%%", *three * 100) + " with 3" : std::string()) << "; --fail-slower is "
            << format_double("%g%%", *bounds.slower_pct) << ". ";
      }
    }
  }
  // Sets of other machines or suites are compared as asked (CI across GPUs
  // does exactly that), but never without saying so.
  if (base.machine_id != other.machine_id) {
    note << "NOTE: the sets are of different machines (" << markdown_text(base.machine_id) << ", "
         << markdown_text(other.machine_id) << "): a change may be the machine's. ";
  }
  if (base.suite != other.suite) {
    note << "NOTE: the sets are of different suites (" << markdown_text(base.suite) << ", "
         << markdown_text(other.suite) << "): only rungs of one id are compared. ";
  }
  note << level_note;
  for (const auto& [role, delays] : injected) {
    note << "NOTE: " << role << "'s runs carry fault injection (train.inject_delay";
    for (const double d : delays) note << " " << format_double("%g", d);
    note << ": every step made slower by that fraction of its time on purpose). ";
  }
  sum << note.str();
  sum << out.compared << " rungs compared, " << out.not_comparable << " not comparable, "
      << out.regressions << " regressions, " << out.unresolved << " unresolved.";
  out.summary = sum.str();
  if (!out.rows.empty()) {
    md << "\n| rung | measure | base | other | runs | change [" << confidence_text(out.confidence)
       << " interval] | verdict | how |\n"
       << "|---|---|---|---|---|---|---|---|\n";
    for (const auto& r : out.rows) {
      const char* f = r.unit == "ms" ? "%.1f" : r.unit == "s" ? "%.1f" : r.unit.empty() ? "%.4f" : "%.2f";
      md << "| " << r.rung << " | " << r.measure << (r.unit.empty() ? "" : " (" + r.unit + ")") << " | "
         << fmt_num(r.base, f) << " | "
         << fmt_num(r.other, f) << " | " << runs_cell(r.base_runs, r.base_timing) << " / "
         << runs_cell(r.other_runs, r.other_timing) << " | " << change_text(r)
         << " | " << (r.verdict.empty() ? "-" : r.verdict) << (r.note.empty() ? "" : ": " + r.note) << " | "
         << (r.change ? r.change->method : "") << " |\n";
    }
  }
  if (!out.counter_changes.empty()) {
    md << "\nExact work counters that differ (one step after warm-up; any change is a change in "
          "what the step does, or in the LibTorch that runs it):\n\n"
       << "| rung | counter | base | other |\n|---|---|---|---|\n";
    for (const auto& c : out.counter_changes) {
      md << "| " << markdown_text(c.rung) << " | " << markdown_text(c.counter) << " | " << counter_value(c.base)
         << " | " << counter_value(c.other) << " |\n";
    }
  }
  out.markdown = out.summary + "\n\n" + md.str() + "\n" + out.summary + "\n";
  return out;
}

int compare_exit_status(const std::vector<CompareOutcome>& outcomes, const HistoryOutcome* history) {
  int regressions = history != nullptr ? history->regressions : 0, unresolved = 0;
  for (const auto& o : outcomes) {
    regressions += o.regressions;
    unresolved += o.unresolved;
  }
  if (regressions > 0) return 1;
  return unresolved > 0 ? kUnresolvedExitCode : 0;
}

namespace {

const char* verdict_word(int status) {
  return status == 0 ? "PASS" : status == 1 ? "FAIL" : "UNRESOLVED";
}

}  // namespace

namespace {

// The history's verdict line (its table's first line).
std::string history_head(const HistoryOutcome& h) {
  return h.markdown.substr(0, h.markdown.find('\n'));
}

}  // namespace

std::string compare_ci_markdown(const std::vector<CompareOutcome>& outcomes, const HistoryOutcome* history) {
  const int status = compare_exit_status(outcomes, history);
  std::ostringstream md;
  md << "**" << verdict_word(status) << "**";
  // The summaries are this program's own words, with a set's text in them
  // escaped where it was put in (escaping twice would undo it: "\\[").
  for (const auto& o : outcomes) md << " " << o.summary;
  if (history != nullptr) md << " " << history_head(*history) << ".";
  // One level for every comparison, else each one's named in the note below.
  std::set<std::string> levels;
  for (const auto& o : outcomes) levels.insert(confidence_text(o.confidence));
  const std::string level = levels.size() == 1 ? *levels.begin() + " " : std::string();
  md << "\n\n| base -> other | rung | measure | base | other | change [" << level << "interval] | verdict |\n"
     << "|---|---|---|---|---|---|---|\n";
  for (const auto& o : outcomes) {
    const std::string pair = markdown_text(o.base_machine + " -> " + o.other_machine);
    for (const auto& r : o.rows) {
      const char* f = r.unit == "%" || r.unit == "GB" ? "%.2f" : r.unit.empty() ? "%.4f" : "%.1f";
      md << "| " << pair << " | " << markdown_text(r.rung) << " | " << r.measure
         << (r.unit.empty() ? "" : " (" + r.unit + ")") << " | "
         << fmt_num(r.base, f) << " | " << fmt_num(r.other, f) << " | " << change_text(r) << " | "
         << (r.verdict.empty() ? "-" : r.verdict) << " |\n";
    }
  }
  std::string all;
  for (const auto& l : levels) all += (all.empty() ? "" : " or ") + l;
  md << "\nVerdicts come from the " << (levels.empty() ? confidence_text(stats::kConfidence) : all)
     << " interval, not the point: *slower* / *less accurate* / *larger* "
        "when the whole interval lies beyond the bound, *unresolved* when it straddles it (exit "
     << kUnresolvedExitCode << "), *same* / *faster* otherwise.\n";
  if (history != nullptr) md << "\n" << history->markdown;
  return md.str();
}

std::string compare_text(const std::vector<CompareOutcome>& outcomes, const HistoryOutcome* history) {
  std::string out;
  // The first line carries the whole verdict, as the other formats' do: a
  // reader (or `head -1` in a CI step) that stops there misses no regression.
  if (history != nullptr) {
    out += std::string(verdict_word(compare_exit_status(outcomes, history))) + ":";
    for (const auto& o : outcomes) out += " " + o.summary;
    out += " " + history_head(*history) + ".\n\n";
  }
  for (const auto& o : outcomes) out += o.markdown + "\n";
  if (history != nullptr) out += "\n" + history->markdown;
  return out;
}

Json compare_json(const std::vector<CompareOutcome>& outcomes, const HistoryOutcome* history) {
  Json doc = {{"exit_status", compare_exit_status(outcomes, history)}, {"comparisons", Json::array()}};
  if (history != nullptr) {
    Json h = {{"regressions", history->regressions}, {"suspicious", history->suspicious},
              {"summary", history_head(*history)}, {"verdicts", Json::array()}};
    for (const auto& v : history->verdicts) {
      h["verdicts"].push_back({{"rung", v.rung}, {"measure", v.measure}, {"verdict", v.verdict},
                               {"value", v.value ? Json(*v.value) : Json()},
                               {"window_median", v.baseline ? Json(*v.baseline) : Json()},
                               {"window_sets", v.window_sets}});
    }
    doc["history"] = h;
  }
  auto num = [](const OptNum& v) { return v ? Json(*v) : Json(); };
  for (const auto& o : outcomes) {
    Json c = {{"base", o.base_dir},           {"other", o.other_dir},
              {"base_machine", o.base_machine}, {"other_machine", o.other_machine},
              {"summary", o.summary},         {"compared", o.compared},
              {"not_comparable", o.not_comparable}, {"uncompared", o.uncompared},
              {"regressions", o.regressions}, {"unresolved", o.unresolved},
              {"confidence", o.confidence}, {"rows", Json::array()}};
    for (const auto& r : o.rows) {
      Json row = {{"rung", r.rung},          {"measure", r.measure},   {"unit", r.unit},
                  {"base", num(r.base)},     {"other", num(r.other)},  {"base_runs", r.base_runs},
                  {"other_runs", r.other_runs},  {"base_timing_runs", r.base_timing},
                  {"other_timing_runs", r.other_timing}, {"kind", r.difference ? "difference" : "ratio"},
                  {"verdict", r.verdict},    {"note", r.note},         {"gated", r.gated},
                  {"repeats_needed", r.repeats_needed ? Json(*r.repeats_needed) : Json()}};
      if (r.change) {
        row["change"] = {{"point", r.change->point}, {"low", r.change->low}, {"high", r.change->high},
                         {"confidence", r.change->confidence}, {"method", r.change->method}};
      }
      c["rows"].push_back(row);
    }
    c["counter_changes"] = Json::array();
    for (const auto& ch : o.counter_changes) {
      c["counter_changes"].push_back({{"rung", ch.rung}, {"counter", ch.counter}, {"base", num(ch.base)},
                                      {"other", num(ch.other)}});
    }
    doc["comparisons"].push_back(c);
  }
  return doc;
}

}  // namespace accel::results
