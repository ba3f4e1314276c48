#include "accel/results/report.h"

#include <algorithm>
#include <map>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <set>

#include "accel/models/catalog.h"
#include "accel/plan/accelerator.h"
#include "accel/results/compare.h"
#include "accel/util/json_doc.h"

namespace accel::results {

using machine::PeakTable;
using machine::run_mfu;

Stat stat_of(std::vector<double> v) {
  Stat s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  s.n = int(n);
  s.min = v.front();
  s.max = v.back();
  s.median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  return s;
}

namespace {
bool recorded_for(const RunRecord& run, double target) {
  return run.target && std::fabs(run.target->value - target) < 1e-12;
}
}  // namespace

OptNum time_to_target(const RunRecord& run, double target) {
  if (recorded_for(run, target)) return run.target->reached ? run.target->time_s : std::nullopt;
  double t = 0;
  for (size_t i = 0; i < run.epoch_time_s.size(); ++i) {
    t += run.epoch_time_s[i];
    if (run.epoch_val_acc[i] != -1.0 && run.metric.reaches(run.epoch_val_acc[i], target)) return t;
  }
  return std::nullopt;
}

OptNum samples_to_target(const RunRecord& run, double target) {
  if (recorded_for(run, target) && run.target->reached) return run.target->samples;
  return std::nullopt;
}

namespace {
// Training samples between two validations of a run: train.val_every_steps x
// batch x ranks, else an epoch's; 0 when unknown.
double eval_interval_samples(const RunRecord& run) {
  const double batch = double(run.batch_size.value_or(0)) * run.world_size;
  const double every = num_at(run.config, "train/val_every_steps").value_or(0);
  if (every > 0 && batch > 0) return every * batch;
  if (run.epochs_done > 0 && run.steps > 0 && batch > 0) return double(run.steps) / run.epochs_done * batch;
  return 0;
}
}  // namespace

std::vector<TargetScore> score_to_target(const ResultSet& set) {
  std::vector<TargetScore> out;
  if (!set.target_accuracy) return out;
  const double target = *set.target_accuracy;
  for (const auto& r : set.rungs) {
    if (!r.comparable) continue;
    TargetScore s;
    s.id = r.id;
    std::vector<std::optional<double>> times, samples;
    for (const auto& run : r.repeats) {
      // The target is of the set's metric: a rung of another metric has none.
      if (!run.ok() || run.metric != set.metric) continue;
      ++s.runs;
      s.eval_interval = std::max(s.eval_interval, eval_interval_samples(run));
      const auto t = time_to_target(run, target);
      if (t) ++s.reached;
      times.push_back(t);
      samples.push_back(t ? samples_to_target(run, target) : std::nullopt);
    }
    if (s.runs == 0) continue;
    s.time_s = stats::olympic_score(times);
    // Samples only where every reaching run recorded them (runs with their own train.target).
    const bool all_samples =
        std::count_if(samples.begin(), samples.end(), [](const auto& v) { return v.has_value(); }) == s.reached;
    if (all_samples) s.samples = stats::olympic_score(samples);
    if (!r.article.empty() && set.reference.is_object()) {
      s.ref_time_min = num_at(set.reference, "rungs/" + r.article + "/time_min");
      s.ref_acc_pct = num_at(set.reference, "rungs/" + r.article + "/test_acc_pct");
    }
    out.push_back(std::move(s));
  }
  if (set.convergence_reference.empty()) return out;
  const TargetScore* ref = nullptr;
  for (const auto& s : out) {
    if (s.id == set.convergence_reference) ref = &s;
  }
  if (ref == nullptr) return out;
  const auto ref_samples = ref->samples;
  for (auto& s : out) {
    s.convergence = stats::convergence_check(ref_samples, s.samples, std::max(ref->eval_interval, s.eval_interval));
    if (s.convergence && s.time_s.valid) s.normalised_time_s = s.time_s.mean * s.convergence->normalisation;
  }
  return out;
}

namespace {

std::string status_of(const RungRuns& r, int ok) {
  if (!r.needs.empty() && r.repeats.empty()) return "needs " + r.needs;
  const int n = int(r.repeats.size());
  if (n == 0 && r.sweep_status == "excluded") return "not run (--only)";
  if (n == 0 && !r.skipped.empty()) return "skipped: " + r.skipped;
  if (n == 0) return r.sweep_status == "failed" ? "failed" : "missing";
  if (ok == n) return "ok";
  if (ok == 0) {
    for (const auto& run : r.repeats) {
      if (run.present && run.failure == "out_of_memory") return "out of memory";
    }
    for (const auto& run : r.repeats) {
      if (run.present) return "failed";
    }
    for (const auto& run : r.repeats) {
      if (run.status == "unreadable") return "unreadable";
    }
    return "missing";
  }
  return "ok " + std::to_string(ok) + "/" + std::to_string(n);
}

// Configuration columns from the first repeat that has a config.
void describe_config(RungRow& row, const RungRuns& r) {
  for (const auto& run : r.repeats) {
    if (!run.config.is_object()) continue;
    const int threads = int_at(run.env, "threads", int_at(run.config, "runtime/threads", 0));
    // The accelerator the run resolved (its plan's, else its device's row):
    // a host's ranks are billed by node, a device's by device.
    const auto accel = clean_text(run.accelerator, 200);
    const auto* row_of = plan::find_accelerator(run.accelerator);
    const bool host = row_of == nullptr || row_of->host;
    row.devices_threads = std::to_string(run.world_size) + " " + accel;
    if (host) row.devices_threads += " x " + (threads > 0 ? std::to_string(threads) : "?") + " thr";
    row.billed_units = host ? int_at(run.config, "runtime/num_nodes", 1, 1) : run.world_size;
    row.precision = clean_text(str_at(run.config, "runtime/precision", "?"), 200);
    row.strategy = run.strategy.empty() ? "?" : run.strategy;  // as the run resolved it
    row.epochs = num_at(run.config, "train/epochs");
    const auto init = run.config.contains("model") ? run.config["model"].value("init", Json("random"))
                                                   : Json("random");
    row.pretrained = !(init.is_string() && init.get<std::string>() == "random");
    row.family = clean_text(str_at(run.config, "model/arch"), 200);
    row.preset = clean_text(str_at(run.config, "model/preset"), 200);
    if (row.family.empty()) {
      if (const auto* f = models::family_of_preset(str_at(run.config, "model/preset"))) row.family = f->arch;
    }
    return;
  }
}

void reference_figures(RungRow& row, const Json& reference) {
  if (row.article.empty() || !reference.is_object()) return;
  const auto key = "rungs/" + row.article;
  row.ref_time_min = num_at(reference, key + "/time_min");
  row.ref_acc_pct = num_at(reference, key + "/test_acc_pct");
  row.ref_mem_gb = num_at(reference, key + "/memory_gb");
  row.ref_mem_ratio_prev = num_at(reference, key + "/memory_vs_prev");
  // A figure per technique: its own ratios, its own source.
  // An article's times give its speedups between any two of its rungs; a
  // figure given as a ratio stands only where the reference has no times.
  if (row.ref_time_min) return;
  const auto own = num_at(reference, key + "/speedup_vs_prev");
  if (own) row.ref_speedup_prev = own;
  const auto source = clean_text(str_at(reference, key + "/source"), 600);
  if (source.empty()) return;
  std::string figures;
  if (own) figures = fmt_num(own, "%.2fx") + " speed";
  if (row.ref_mem_ratio_prev) {
    const auto measure = clean_text(str_at(reference, key + "/memory_measure"), 200);
    figures += (figures.empty() ? "" : ", ") + fmt_num(row.ref_mem_ratio_prev, "%.2fx") + " less memory" +
               (measure.empty() ? "" : " (" + measure + ")");
  }
  const auto note = clean_text(str_at(reference, key + "/note"), 300);
  if (!figures.empty()) {
    figures += " over the step before";
  } else {
    figures = note.empty() ? "no single figure" : note;
  }
  const auto setup = clean_text(str_at(reference, key + "/setup"), 300);
  const auto hardware = clean_text(str_at(reference, key + "/hardware"), 200);
  row.ref_figure_note = row.article + ": " + figures + "; " +
                        (setup.empty() ? "" : setup + ", ") + (hardware.empty() ? "" : "on " + hardware + "; ") + source;
}

// The article's speedup between the same two rungs as ours: the article's
// time of `from`'s article rung over `to`'s.
OptNum article_speedup(const RungRow& from, const RungRow& to) {
  if (from.article.empty() || to.article.empty() || !from.ref_time_min || !to.ref_time_min ||
      !(*to.ref_time_min > 0)) {
    return std::nullopt;
  }
  return *from.ref_time_min / *to.ref_time_min;
}

// Two rungs a speedup may be taken between: the same model family (or one
// not known, as in results written before model.arch was resolved).
// One model: one family and one preset, where both are known.
bool same_family(const RungRow& a, const RungRow& b) {
  if (a.family.empty() || b.family.empty()) return true;
  return a.family == b.family && (a.preset.empty() || b.preset.empty() || a.preset == b.preset);
}

RungRow make_row(const RungRuns& r, const ResultSet& set, const PeakTable& peaks,
                 std::set<std::string>& peak_sources) {
  RungRow row;
  row.id = r.id;
  row.article = r.article;
  row.versus = r.versus;
  row.changes = r.changes;
  row.upstream = r.upstream;
  row.comparable = r.comparable;
  row.runs = int(r.repeats.size());
  row.metric = set.metric;
  for (const auto& run : r.repeats) {
    if (run.present) {
      row.metric = run.metric;
      break;
    }
  }
  describe_config(row, r);
  std::vector<double> time, acc, total, device, mfu, ttt, tokens, step, mem_max, j_step, j_sample, j_target;
  std::vector<std::vector<double>> mem;
  const RunRecord* only = nullptr;
  for (const auto& run : r.repeats) {
    if (!run.ok()) continue;
    ++row.ok_runs;
    only = &run;
    if (run.step_ms_median) step.push_back(*run.step_ms_median);
    row.most_steps = std::max(row.most_steps, run.steps);
    if (run.step_ms_median && run.batch_size && *run.batch_size > 0 && run.world_size > 0) {
      row.steady_values.push_back(*run.step_ms_median / 1000.0 / double(*run.batch_size * run.world_size));
    }
    if (!run.peak_memory_bytes.empty()) {
      mem_max.push_back(*std::max_element(run.peak_memory_bytes.begin(), run.peak_memory_bytes.end()) / 1e9);
    }
    if (run.train_time_s) time.push_back(*run.train_time_s);
    if (run.energy_j_per_step && run.energy_j_per_sample) {
      j_step.push_back(*run.energy_j_per_step);
      j_sample.push_back(*run.energy_j_per_sample);
      row.energy_source = run.energy_source;
    }
    if (run.energy_to_target_j) j_target.push_back(*run.energy_to_target_j);
    if (run.test_acc) acc.push_back(*run.test_acc);
    if (run.samples_per_s) total.push_back(*run.samples_per_s);
    if (run.tokens_per_s) tokens.push_back(*run.tokens_per_s);
    if (auto d = run.per_device_samples_per_s()) device.push_back(*d);
    if (auto m = run_mfu(run, peaks)) {
      mfu.push_back(*m);
      peak_sources.insert(peaks.for_run(run)->source);
      row.peak_source = peaks.for_run(run)->source;
    }
    if (set.target_accuracy && r.comparable && run.metric == set.metric) {
      if (auto t = time_to_target(run, *set.target_accuracy)) ttt.push_back(*t);
    }
    for (size_t k = 0; k < run.peak_memory_bytes.size(); ++k) {
      if (mem.size() <= k) mem.resize(k + 1);
      mem[k].push_back(run.peak_memory_bytes[k]);
    }
  }
  row.status = status_of(r, row.ok_runs);
  row.time_s = stat_of(time);
  row.speed = row.time_s.median;
  // One ok run and its timing runs: each timing run's speed against the full
  // run's over the same steps scales the full run's figures (the same
  // config, the same batches): between-run samples for the speedups.
  if (row.ok_runs == 1) row.timing_factors = timing_factors(r);
  row.speed_values = with_timing(time, row.timing_factors);
  if (!r.timing.empty() && row.ok_runs == 1) {  // each rung says its samples
    const size_t used = row.timing_factors.size();
    row.status += " + " + (used == r.timing.size() ? std::to_string(used)
                                                   : std::to_string(used) + "/" + std::to_string(r.timing.size())) +
                  " timing run" + (r.timing.size() == 1 ? "" : "s");
  }
  row.acc = stat_of(acc);
  row.ips_total = stat_of(total);
  row.ips_device = stat_of(device);
  row.tokens_total = stat_of(tokens);
  row.mfu = stat_of(mfu);
  row.ttt_s = stat_of(ttt);
  row.energy_j_per_step = stat_of(j_step);
  row.energy_j_per_sample = stat_of(j_sample);
  row.energy_to_target_j = stat_of(j_target);
  row.ttt_reached = int(ttt.size());
  for (const auto& per_rank : mem) row.mem_per_rank.push_back(*stat_of(per_rank).median);
  // The spread of each measure over the repeats (and one run's step time
  // over its own steps).
  auto add = [&](const std::string& measure, const char* unit, const std::vector<double>& v, double scale) {
    std::vector<double> scaled;
    for (double x : v) scaled.push_back(x * scale);
    if (auto sum = stats::summarize(scaled)) row.spread.push_back({measure, unit, *sum, std::nullopt});
  };
  add("step time", "ms", step, 1);
  if (row.ok_runs == 1 && !row.spread.empty() && only != nullptr) {
    row.spread.back().within_run = stats::block_bootstrap_median(step_times_after_warmup(*only));
  }
  add("samples/s", "1/s", total, 1);
  add("training time", "s", time, 1);
  add("time to target", "s", ttt, 1);
  const std::string metric_unit = row.metric.unit();
  add(metric_measure(row.metric), metric_unit.c_str(), acc, row.metric.scale());
  add("peak memory", "GB", mem_max, 1);
  reference_figures(row, set.reference);
  return row;
}

// The rung speedup_base is relative to: the one running the reference's
// "speedup_base" rung, else the first pretrained one; its speed must be
// known. Rungs of another model family get none.
std::string add_base_speedups(std::vector<RungRow>& rows, const Json& reference) {
  const auto key = reference.is_object() ? str_at(reference, "speedup_base", "") : std::string();
  const RungRow* base = nullptr;
  for (const auto& r : rows) {
    if (!key.empty() && r.article == key) base = &r;
  }
  for (const auto& r : rows) {
    if (base == nullptr && r.pretrained && r.comparable && r.speed) base = &r;
  }
  if (base == nullptr || !base->speed || *base->speed <= 0) return "";
  for (auto& r : rows) {
    if (!same_family(*base, r)) continue;
    r.ref_speedup_base = article_speedup(*base, r);
    if (r.comparable && r.speed && *r.speed > 0) r.speedup_base = *base->speed / *r.speed;
  }
  return base->id;
}

// Scratch for a rung: the first rung of its family running the article's
// rung 00, else its family's first rung that has a run (a rung that needs
// what this machine lacks ran nothing, and its family is not known).
const RungRow* scratch_of(const std::vector<RungRow>& rows, const RungRow& r) {
  for (const auto& s : rows) {
    if (s.article == "00" && s.runs > 0 && same_family(s, r)) return &s;
  }
  for (const auto& s : rows) {
    if (s.runs > 0 && s.speed && !s.family.empty() && same_family(s, r)) return &s;
  }
  for (const auto& s : rows) {
    if (s.runs > 0 && same_family(s, r)) return &s;
  }
  return nullptr;
}

// Each rung's speedups vs its scratch and the rung before (the last earlier
// comparable rung of its family with a speed, or the one the suite names as
// its "versus"), and the article's between the same two rungs.
void add_speedups(std::vector<RungRow>& rows) {
  for (size_t i = 0; i < rows.size(); ++i) {
    auto& r = rows[i];
    const RungRow* scratch = scratch_of(rows, r);
    const RungRow* prev = nullptr;
    for (size_t j = 0; j < i; ++j) {
      const auto& p = rows[j];
      const bool named = r.versus.empty() || p.id == r.versus;
      if (named && p.comparable && p.speed && *p.speed > 0 && same_family(p, r)) prev = &p;
    }
    if (scratch != nullptr) {
      r.scratch_id = scratch->id;
      r.ref_speedup_scratch = article_speedup(*scratch, r);
    }
    if (prev != nullptr) {
      r.prev_id = prev->id;
      // The article's between the same two rungs; a per-technique figure stands as given.
      if (!r.ref_speedup_prev) r.ref_speedup_prev = article_speedup(*prev, r);
      if (!prev->mem_per_rank.empty() && !r.mem_per_rank.empty()) {
        const double before = *std::max_element(prev->mem_per_rank.begin(), prev->mem_per_rank.end());
        const double now = *std::max_element(r.mem_per_rank.begin(), r.mem_per_rank.end());
        if (before > 0 && now > 0) r.mem_ratio_prev = before / now;
      }
    }
    if (!r.comparable || !r.speed || *r.speed <= 0) continue;
    if (scratch != nullptr && scratch->speed && *scratch->speed > 0) r.speedup_scratch = *scratch->speed / *r.speed;
    if (prev != nullptr) r.speedup_prev = *prev->speed / *r.speed;
  }
}

// A speedup (BASE's speed over ROW's: training times, or steady steps per
// sample) with its 95% interval, from the runs' values: Welch's t on the logs
// with repeats; a one-run side takes this machine's measured noise of that
// measure (calibrate --noise) where known, else the documented run-to-run
// floor (stats::kRunToRunFloorLog), so one run a side never claims more than
// runs show.
std::optional<RungRow::SpeedupInterval> speedup_interval(const RungRow& base, const RungRow& row, const Json& noise,
                                                         const std::string& measure) {
  if (base.speed_values.empty() || row.speed_values.empty()) return std::nullopt;
  stats::Sample b, o;
  b.values = base.speed_values;
  o.values = row.speed_values;
  const std::string noise_key = measure == kSpeedSteadyStep ? "step time" : "training time";
  const auto sd = num_at(noise, "machine/" + noise_key + "/sd");
  const auto runs = num_at(noise, "machine/" + noise_key + "/runs");
  if (sd && runs && std::isfinite(*sd) && *runs >= 2) {
    b.noise_sd_log = o.noise_sd_log = std::max(*sd, kNoiseFloorLog);
    b.noise_runs = o.noise_runs = int(bounded_int(*runs, 2, 1 << 20));
  } else if (b.values.size() < 2 && o.values.size() < 2) {
    // One run each and nothing measured: the documented floor. (Where a
    // rung has repeats, their own spread stands for both sides.)
    b.noise_sd_log = o.noise_sd_log = stats::kRunToRunFloorLog;
    b.noise_runs = o.noise_runs = 8;  // the floor's measurement had 8 repeats
    b.noise_source = o.noise_source = machine::format_double("a %.0f%% run-to-run floor (no measured noise)",
                                                    stats::kRunToRunFloorLog * 100);
  }
  const auto ratio = stats::ratio_interval(b, o);  // ROW / BASE in time
  if (!ratio || !(ratio->point > 0) || !(ratio->low > 0)) return std::nullopt;
  RungRow::SpeedupInterval s;
  s.iv.point = 1 / ratio->point;
  s.iv.low = 1 / ratio->high;
  s.iv.high = 1 / ratio->low;
  s.iv.method = ratio->method;
  s.verdict = s.iv.low > 1 ? "faster" : s.iv.high < 1 ? "slower" : "same within noise";
  return s;
}

void add_speedup_intervals(Report& rep) {
  auto find = [&](const std::string& id) -> const RungRow* {
    for (const auto& r : rep.rungs) {
      if (!id.empty() && r.id == id) return &r;
    }
    return nullptr;
  };
  const RungRow* base = find(rep.speedup_base);
  for (auto& r : rep.rungs) {
    if (!r.comparable || r.speed_values.empty()) continue;
    // A rung is its own scratch at exactly 1x: no interval to give.
    const RungRow* scratch = r.scratch_id == r.id ? nullptr : find(r.scratch_id);
    const RungRow* prev = find(r.prev_id);
    const auto& m = rep.speed_measure;
    if (r.speedup_scratch && scratch != nullptr) r.speedup_scratch_iv = speedup_interval(*scratch, r, rep.noise, m);
    if (r.speedup_prev && prev != nullptr) r.speedup_prev_iv = speedup_interval(*prev, r, rep.noise, m);
    if (r.speedup_base && base != nullptr) r.speedup_base_iv = speedup_interval(*base, r, rep.noise, m);
  }
}

// Where every comparable rung ran a fixed small number of steps, each with
// a steady step per sample, the speedups divide those (kFixedStepsMax).
void choose_speed_measure(Report& rep) {
  int rungs = 0;
  for (const auto& r : rep.rungs) {
    if (!r.comparable || r.ok_runs == 0) continue;
    ++rungs;
    if (r.most_steps <= 0 || r.most_steps > kFixedStepsMax || int(r.steady_values.size()) != r.ok_runs) return;
  }
  if (rungs == 0) return;
  rep.speed_measure = kSpeedSteadyStep;
  for (auto& r : rep.rungs) {
    r.speed_values = with_timing(r.steady_values, r.timing_factors);
    r.speed = stat_of(r.steady_values).median;
  }
}

// The machine and build of the set's first run; where later runs were made
// by another build (rungs added to a set afterwards), those builds and their rungs.
std::string machine_note(const ResultSet& set) {
  std::string first_sha, s;
  std::vector<std::pair<std::string, std::vector<std::string>>> others;  // sha -> rung ids, in order
  for (const auto* list : {&set.rungs, &set.upstream}) {
    for (const auto& r : *list) {
      for (const auto& run : r.repeats) {
        if (!run.env.is_object()) continue;
        const std::string sha = clean_text(str_at(run.env, "git_sha", "?"), 64);
        if (s.empty()) {
          first_sha = sha;
          s = "Machine " + set.machine_id + ": " + str_at(run.env, "cpu_model", "?") + ", " +
              str_at(run.env, "cores", "?") + " cores";
          const int gpus = int_at(run.env, "gpu_count", 0);
          if (gpus > 0) s += ", " + std::to_string(gpus) + " GPU(s)";
          s += "; LibTorch " + str_at(run.env, "libtorch_version", "?") + "; accel-bench " +
               str_at(run.env, "accel_bench_version", "?") + " (" + str_at(run.env, "git_sha", "?") +
               "); BLAS " + str_at(run.env, "blas", "?") + ".";
          continue;
        }
        if (sha == first_sha) continue;
        auto it = std::find_if(others.begin(), others.end(), [&](const auto& o) { return o.first == sha; });
        if (it == others.end()) it = others.insert(others.end(), {sha, {}});
        if (std::find(it->second.begin(), it->second.end(), r.id) == it->second.end()) it->second.push_back(r.id);
      }
    }
  }
  if (s.empty()) return "Machine " + set.machine_id + ".";
  for (const auto& [sha, ids] : others) {
    std::string list;
    for (const auto& id : ids) list += (list.empty() ? "" : ", ") + id;
    s += " Runs of another build, accel-bench " + sha + ": " + list + ".";
  }
  return s;
}

}  // namespace

Report build_report(const ResultSet& set, const PeakTable& peaks) {
  Report rep;
  rep.set = set;
  std::set<std::string> sources;
  for (const auto& r : set.upstream) rep.upstream.push_back(make_row(r, set, peaks, sources));
  for (const auto& r : set.rungs) rep.rungs.push_back(make_row(r, set, peaks, sources));
  for (const auto* rows : {&rep.upstream, &rep.rungs}) {
    for (const auto& row : *rows) rep.mixed_metrics = rep.mixed_metrics || row.metric != set.metric;
  }
  choose_speed_measure(rep);
  add_speedups(rep.rungs);
  rep.speedup_base = add_base_speedups(rep.rungs, set.reference);
  rep.notes.push_back(machine_note(set));
  if (rep.mixed_metrics) {
    std::set<std::string> names;
    for (const auto* rows : {&rep.upstream, &rep.rungs}) {
      for (const auto& row : *rows) names.insert(metric_measure(row.metric));
    }
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    rep.notes.push_back("Rungs of more than one task metric (" + list +
                        "): each rung's test metric is its own, a share as a percent and another named "
                        "with its value; the metric chart and the time to target are of the first run's metric (" +
                        metric_measure(set.metric) + ").");
  }
  rep.scaling = predict_scaling(set, peaks.calibration(), rep.notes);
  rep.targets = score_to_target(set);
  const auto& cal = peaks.calibration();
  if (cal.is_object() && cal.contains("noise") && cal["noise"].is_object() &&
      str_at(cal["noise"], "machine_id") == set.machine_id) {
    rep.noise = cal["noise"];
  }
  add_speedup_intervals(rep);
  {
    int fewest = 0, most = 0, timed = 0, timing_fewest = 0, timing_most = 0;
    int64_t steps = 0, timing_steps = 0;
    std::set<std::string> families;
    std::map<std::string, std::set<std::string>> presets;  // by family
    for (const auto& r : set.rungs) {
      for (const auto& t : r.timing) {
        if (t.ok()) timing_steps = std::max<int64_t>(timing_steps, t.steps);
      }
    }
    for (const auto& r : rep.rungs) {
      if (!r.family.empty() && r.ok_runs > 0) families.insert(r.family);
      if (!r.family.empty() && !r.preset.empty() && r.ok_runs > 0) presets[r.family].insert(r.preset);
      if (r.speed_values.empty()) continue;
      const int n = int(r.speed_values.size());
      fewest = fewest == 0 ? n : std::min(fewest, n);
      most = std::max(most, n);
      if (r.comparable) steps = std::max(steps, r.most_steps);  // the rungs choose_speed_measure read
      if (!r.timing_factors.empty()) {
        const int t = int(r.timing_factors.size());
        ++timed;
        timing_fewest = timing_fewest == 0 ? t : std::min(timing_fewest, t);
        timing_most = std::max(timing_most, t);
      }
    }
    auto range = [](int lo, int hi) {
      return lo == hi ? std::to_string(hi) : std::to_string(lo) + " to " + std::to_string(hi);
    };
    const bool steady = rep.speed_measure == kSpeedSteadyStep;
    const std::string what = steady ? "steady steps per sample (each run's median step after warm-up over its "
                                      "batch and ranks)"
                                    : "training times";
    if (timed > 0) {
      rep.notes.push_back(
          "Speedups: the ratio of the rungs' " + what + ", each rung's full run, with a 95% interval from " +
          range(fewest, most) + " between-run samples a rung (the status column's \"ok + N timing runs\"): the full run's and, "
          "for each of its " + range(timing_fewest, timing_most) +
          " timing runs (`sweep --timing-runs`: the same config, at most " + std::to_string(timing_steps) +
          " steps with the warm-up, one evaluation batch, run after every rung's full run, round-robin), that "
          "figure scaled by the timing run's median step over the full run's median over the same steps (the same "
          "batches). Welch's t on the logs" +
          (rep.noise.is_object() ? std::string(", pooled with this machine's measured noise (calibrate --noise)")
                                 : std::string()) +
          "; *same within noise* where the interval holds 1, *faster* or *slower* where it lies beyond. A rung "
          "without timing runs has its runs alone. Accuracy (its binomial interval), memory and the time columns "
          "are the full runs' alone.");
    } else if (most > 0) {
      rep.notes.push_back(
          std::string(steady ? "Speedups: the ratio of the rungs' steady steps per sample (each run's median step "
                               "after warm-up over its batch and ranks; the median of "
                             : "Speedups: the ratio of training times (the median of ") +
          range(fewest, most) +
          " ok run(s) a rung) with its 95% interval: Welch's t on the logs where both rungs have 2 or more runs, "
          "the other's spread where one has a single run, and with one run each " +
          (rep.noise.is_object() ? std::string("this machine's measured noise (calibrate --noise)")
                                 : machine::format_double("a %.0f%% run-to-run floor a side (this machine's "
                                                          "noise not measured)", stats::kRunToRunFloorLog * 100)) +
          "; *same within noise* where the interval holds 1, *faster* or *slower* where it lies beyond." +
          (steady ? " Every rung ran at most " + std::to_string(steps) +
                        " steps, so a training time is mostly warm-up, setup and first-step work: it is shown, "
                        "not divided."
                  : std::string()));
    }
    if (families.size() > 1) {
      std::string names;
      for (const auto& f : families) names += (names.empty() ? "" : ", ") + f;
      rep.notes.push_back("The set holds rungs of " + std::to_string(families.size()) + " model families (" + names +
                          "): a speedup is only taken between two rungs of one family, each family's first rung "
                          "its scratch; other work is not faster or slower, only different.");
    }
    for (const auto& [family, names] : presets) {
      if (names.size() < 2) continue;
      std::string list;
      for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
      rep.notes.push_back("The " + family + " rungs build " + std::to_string(names.size()) + " models (model.preset " +
                          list + "): a speedup is only taken between two rungs of one model, its first rung "
                          "its scratch.");
    }
  }
  if (sources.empty()) {
    rep.notes.push_back("MFU: n/a (no peak for this hardware: run `accel-bench calibrate` on a "
                        "CPU machine; GPU peaks come from results/reference/dense-peaks.json).");
  }
  for (const auto& s : sources) rep.notes.push_back("MFU peak: " + s + ".");
  if (const auto f = num_at(set.manifest, "budget/fraction"); f && *f < 1) {
    char text[320];
    std::snprintf(text, sizeof(text),
                  "Scaled to the sweep's %.0f-minute budget on this machine (`sweep --budget`): "
                  "every rung whose steps were not capped trained %.0f%% of its batches per "
                  "epoch (train.limit_train_batches; set-up and evaluations whole), so the "
                  "accuracies are not the full ladder's; the speedups compare like with like.",
                  num_at(set.manifest, "budget/minutes").value_or(0), *f * 100);
    rep.notes.push_back(text);
  }
  for (const auto& r : set.rungs) {
    const bool emulated = std::any_of(r.repeats.begin(), r.repeats.end(), [](const RunRecord& x) {
      return x.ok() && x.precision_support == "emulated";
    });
    if (emulated) {
      rep.notes.push_back(r.id + ": no MFU: its precision is emulated on this CPU, so the only "
                          "\"peak\" to divide by is the emulation's own speed, which says "
                          "nothing of the hardware.");
    }
    // A precision the calibration measured as not paying here: the reason
    // beside the rung's slowdown, with the two figures.
    for (const auto& run : r.repeats) {
      if (!run.ok() || run.device != "cpu") continue;
      const auto note = peaks.precision_limit_note(clean_text(str_at(run.config, "runtime/precision"), 64),
                                                   std::max(1, run.threads));
      const bool said = std::any_of(run.warnings.begin(), run.warnings.end(), [](const std::string& w) {
        return w.rfind("bf16 matmuls measured", 0) == 0;  // the run warned of it already (shown above)
      });
      if (!note.empty() && !said) rep.notes.push_back(r.id + ": " + note + ".");
      break;
    }
  }
  if (set.reference.is_object()) {
    const auto label = clean_text(str_at(set.reference, "label", "article"), 40);
    std::string title = (label.empty() ? std::string("article") : label) + " figures";
    title[0] = char(std::toupper(static_cast<unsigned char>(title[0])));
    rep.notes.push_back(title + ": " + str_at(set.reference, "source", "?") + "; " +
                        str_at(set.reference, "hardware", "") + ".");
    for (const auto& row : rep.rungs) {
      if (!row.ref_figure_note.empty()) rep.notes.push_back(row.id + " beside " + row.ref_figure_note + ".");
    }
  }
  for (const auto* rows : {&set.upstream, &set.rungs}) {
    for (const auto& r : *rows) {
      if (!r.committed.empty()) {
        rep.notes.push_back(r.id + ": the committed run in " + r.committed +
                            " (same config), not rerun by this sweep.");
      }
      if (!r.emulated_note.empty()) {
        std::string sets;
        for (const auto& v : r.emulated_sets) sets += (sets.empty() ? "" : " ") + v;
        rep.notes.push_back(r.id + ": " + r.emulated_note + " (ran with " + sets + ")" +
                            (r.comparable ? "." : "; cut short, so no speedup is given."));
      }
      if (!r.budget_cuts.empty()) {
        std::string cuts;
        for (const auto& c : r.budget_cuts) cuts += (cuts.empty() ? "" : "; ") + c;
        rep.notes.push_back(r.id + ": to fit the sweep's budget, " + cuts + ".");
      }
      std::set<std::string> seen;
      for (const auto& run : r.repeats) {
        for (const auto& w : run.warnings) {
          if (seen.insert(w).second) rep.notes.push_back(r.id + ": " + w + ".");
        }
      }
      for (const auto& run : r.repeats) {
        if (run.present && !run.ok()) {
          rep.notes.push_back(r.id + " failed (" + run.dir.string() + "): " + run.error);
        }
        if (run.status == "unreadable") {
          rep.unreadable.push_back(run.error);
          rep.notes.push_back(r.id + ": result unreadable: " + run.error);
        }
      }
    }
  }
  return rep;
}

void add_costs(Report& r, double price, const std::string& note) {
  r.price_per_hour = price;
  r.price_note = note;
  for (auto& row : r.rungs) {
    if (!row.time_s.median) continue;
    row.cost = price * row.billed_units * *row.time_s.median / 3600.0;
    // Per point of a share; a loss has no points to buy.
    if (row.metric.proportion && row.acc.median && *row.acc.median > 0) {
      row.cost_per_point = *row.cost / (*row.acc.median * 100);
    }
  }
}

std::string fmt_num(OptNum v, const char* format) {
  if (!v) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, *v);
  return buf;
}

std::string fmt_time(OptNum s) {
  if (!s) return "n/a";
  return *s < 120 ? fmt_num(s, "%.1f s") : fmt_num(*s / 60, "%.2f min");
}

std::string fmt_pct(OptNum f) { return f ? fmt_num(*f * 100, "%.2f%%") : "n/a"; }

std::string fmt_metric(const train::MetricFacts& metric, OptNum v) { return v ? metric.shown(*v) : "n/a"; }

std::string fmt_gb(OptNum b) { return b ? fmt_num(*b / 1e9, "%.2f GB") : "n/a"; }

}  // namespace accel::results
