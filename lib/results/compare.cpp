#include "accel/results/compare.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

#include "accel/config/run_config.h"
#include "accel/results/report.h"
#include "accel/util/errors.h"

namespace accel::results {

using machine::format_double;
using machine::PeakTable;
using machine::Prediction;
using machine::PredictBase;
using machine::PredictOptions;
using machine::reference_file;
using machine::run_mfu;

Json comparable_config(const Json& config) {
  Json c = config.is_object() ? config : Json::object();
  c.erase("name");
  c.erase("description");
  for (const auto& [section, key] : {std::pair{"runtime", "threads"},
                                     std::pair{"runtime", "accelerator"},
                                     std::pair{"model", "init_path"}, std::pair{"data", "root"}}) {
    if (c.contains(section) && c[section].is_object()) c[section].erase(key);
  }
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

namespace {

struct Side {
  const RungRuns* rung = nullptr;
  std::vector<const RunRecord*> ok;
  Stat time, acc, mem;  // mem: the largest rank's peak
  std::string status() const {
    if (rung == nullptr) return "missing";
    if (!rung->needs.empty() && rung->repeats.empty()) return "needs " + rung->needs;
    if (ok.empty()) return rung->repeats.empty() ? "missing" : "failed";
    return ok.size() == rung->repeats.size() ? "ok" : "ok " + std::to_string(ok.size()) + "/" +
                                                          std::to_string(rung->repeats.size());
  }
};

Side side_of(const ResultSet& set, const std::string& id) {
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
  }
  s.time = stat_of(t);
  s.acc = stat_of(a);
  s.mem = stat_of(m);
  return s;
}

OptNum ratio(OptNum a, OptNum b) {
  if (!a || !b || *a <= 0) return std::nullopt;
  return *b / *a;
}

std::string set_row(const char* role, const ResultSet& s) {
  Json env;
  for (const auto* list : {&s.rungs, &s.upstream}) {
    for (const auto& r : *list) {
      for (const auto& run : r.repeats) {
        if (env.is_null() && run.env.is_object()) env = run.env;
      }
    }
  }
  std::string hw = str_at(env, "cpu_model", "?") + ", " + str_at(env, "cores", "?") + " cores";
  const int gpus = int(num_at(env, "gpu_count").value_or(0));
  if (gpus > 0) hw += ", " + std::to_string(gpus) + " x " + str_at(env, "gpu_name", "GPU");
  return std::string("| ") + role + " | " + s.dir.string() + " | " + s.machine_id + " | " + hw +
         " | " + str_at(env, "libtorch_version", "?") + " | " +
         str_at(env, "accel_bench_version", "?") + " (" + str_at(env, "git_sha", "?") + ") |\n";
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

std::string judge(const Side& b, const Side& o, const CompareBounds& bounds, CompareOutcome& out) {
  const auto [cb, co] = comparable_configs(b.ok.front()->config, o.ok.front()->config);
  if (cb != co) {
    ++out.not_comparable;
    return uncompared("not comparable (config differs: " + config_difference(cb, co) + ")", bounds,
                      out);
  }
  const auto tr = ratio(b.time.median, o.time.median);
  const auto mr = ratio(b.mem.median, o.mem.median);
  OptNum delta;
  if (b.acc.median && o.acc.median) delta = (*o.acc.median - *b.acc.median) * 100;
  // A bound whose measure a side lacks judged nothing.
  std::vector<std::string> missing;
  if (bounds.slower_pct && !tr) missing.push_back("training time (--fail-slower)");
  if ((bounds.acc_drop_points || bounds.acc_band_points) && !delta) {
    missing.push_back("test accuracy (--fail-accuracy-drop/--accuracy-band)");
  }
  if (bounds.memory_growth_pct && !mr) missing.push_back("peak memory (--fail-memory-growth)");
  if (!missing.empty()) {
    std::string why = "not compared: no ";
    for (size_t i = 0; i < missing.size(); ++i) why += (i ? ", " : "") + missing[i];
    return uncompared(why + " on both sides", bounds, out);
  }
  ++out.compared;
  std::vector<std::string> fails;
  char buf[160];
  if (bounds.slower_pct && tr && *tr > 1 + *bounds.slower_pct / 100) {
    std::snprintf(buf, sizeof(buf), "slower by %.1f%% (> %g%%)", (*tr - 1) * 100, *bounds.slower_pct);
    fails.push_back(buf);
  }
  if (bounds.acc_drop_points && delta && -*delta > *bounds.acc_drop_points) {
    std::snprintf(buf, sizeof(buf), "accuracy down %.2f points (> %g)", -*delta,
                  *bounds.acc_drop_points);
    fails.push_back(buf);
  }
  if (bounds.acc_band_points && delta && std::fabs(*delta) > *bounds.acc_band_points) {
    std::snprintf(buf, sizeof(buf), "accuracy off by %.2f points (band %g)", *delta,
                  *bounds.acc_band_points);
    fails.push_back(buf);
  }
  if (bounds.memory_growth_pct && mr && *mr > 1 + *bounds.memory_growth_pct / 100) {
    std::snprintf(buf, sizeof(buf), "memory up %.1f%% (> %g%%)", (*mr - 1) * 100,
                  *bounds.memory_growth_pct);
    fails.push_back(buf);
  }
  if (fails.empty()) return "ok";
  ++out.regressions;
  std::string v = "REGRESSION: ";
  for (size_t i = 0; i < fails.size(); ++i) v += (i ? "; " : "") + fails[i];
  return v;
}

}  // namespace

CompareOutcome compare_sets(const ResultSet& base, const ResultSet& other,
                            const CompareBounds& bounds) {
  CompareOutcome out;
  std::vector<std::string> ids;
  for (const auto* set : {&base, &other}) {
    for (const auto* list : {&set->upstream, &set->rungs}) {
      for (const auto& r : *list) {
        if (std::find(ids.begin(), ids.end(), r.id) == ids.end()) ids.push_back(r.id);
      }
    }
  }
  std::ostringstream md;
  md << "## " << base.dir.string() << " vs " << other.dir.string() << "\n\n"
     << "| set | path | machine | hardware | LibTorch | accel-bench |\n|---|---|---|---|---|---|\n"
     << set_row("base", base) << set_row("other", other) << "\n"
     << "| rung | base | other | time base | time other | time ratio | acc base | acc other "
        "| acc delta (points) | mem base | mem other | mem ratio | verdict |\n"
     << "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& id : ids) {
    const Side b = side_of(base, id), o = side_of(other, id);
    std::string verdict;
    if (b.rung == nullptr) {
      verdict = "new (no baseline)";
    } else if (b.ok.empty() && !b.rung->needs.empty() && b.rung->repeats.empty()) {
      // Left out by design where BASE was made (a CUDA rung on a CPU).
      verdict = o.ok.empty() ? "run on neither machine" : "new (no baseline: base " +
                                                              b.status() + ")";
    } else if (b.ok.empty()) {
      verdict = uncompared("base has no ok run (" + b.status() + ")", bounds, out);
    } else if (o.ok.empty()) {
      ++out.regressions;
      verdict = "REGRESSION: " + o.status() + " (ok in base)";
    } else {
      verdict = judge(b, o, bounds, out);
    }
    OptNum delta;
    if (b.acc.median && o.acc.median) delta = (*o.acc.median - *b.acc.median) * 100;
    md << "| " << id << " | " << b.status() << " | " << o.status() << " | "
       << fmt_time(b.time.median) << " | " << fmt_time(o.time.median) << " | "
       << fmt_num(ratio(b.time.median, o.time.median), "%.3fx") << " | " << fmt_pct(b.acc.median)
       << " | " << fmt_pct(o.acc.median) << " | " << fmt_num(delta, "%+.2f") << " | "
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
  sum << out.compared << " rungs compared, " << out.not_comparable << " not comparable, "
      << out.regressions << " regressions.";
  out.summary = sum.str();
  out.markdown = out.summary + "\n\n" + md.str() + "\n" + out.summary + "\n";
  return out;
}

}  // namespace accel::results
