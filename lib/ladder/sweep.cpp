#include "accel/ladder/sweep.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include "accel/config/run_config.h"
#include "accel/metrics/hardware.h"
#include "accel/metrics/metrics.h"
#include "accel/ladder/child_run.h"
#include "accel/ladder/estimate.h"
#include "accel/machine/machine.h"
#include "accel/machine/peaks.h"
#include "accel/machine/predict.h"
#include "accel/plan/accelerator.h"
#include "accel/results/compare.h"
#include "accel/results/compare_run.h"
#include "accel/plan/run_plan.h"
#include "accel/ladder/progress.h"
#include "accel/ladder/suite.h"
#include "accel/train/work.h"
#include "accel/util/errors.h"
#include "accel/util/child_process.h"

namespace fs = std::filesystem;

namespace accel::ladder {

using machine::this_machine;
using results::read_run;
namespace {

// A run's test metric: "test acc 85.20%", "test loss 7.0512".
std::string test_metric(const train::RunRecord& run) {
  return "test " + run.metric.short_name() + " " + (run.test_acc ? run.metric.shown(*run.test_acc) : std::string("n/a"));
}

// What a budget cuts beyond the floor's share of the training batches, in
// the order of what they buy least per minute: first the steps of the rungs
// cut short where their precision is emulated (their accuracy is not the
// rung's already; more steps only refine a speed known to be poor), then
// the timing runs (between-run samples: intervals, not figures), one a
// rung at a time, then the evaluations (the accuracy's resolution).
struct BudgetCuts {
  bool short_emulated = false;
  int timing_runs = -1;       // -1: --timing-runs as given
  double eval_fraction = 1;   // the share of the evaluation batches kept
};
constexpr int64_t kShortSteps = 6;  // an emulated rung's steps when shortened: 2 warm-up, 4 timed

// A rung as this machine will run it: the --set values (the suite's, the
// rung's, the command line's; then the where_emulated ones), its resolved
// config, or why it will not run.
struct Prepared {
  std::string error;  // a config the sets made invalid
  std::string skip;   // what this machine lacks ("CUDA"), or ""
  Json resolved;      // without the where_emulated values
  std::vector<std::string> sets, emulated_sets;
  std::vector<std::string> budget_sets;  // --budget: the share of its training batches it keeps
  Json emulated;      // the manifest's where_emulated record, or null
  std::string precision;
  // What a run gets (init: the upstream's weights).
  std::vector<std::string> run_sets(const std::vector<std::string>& init) const {
    auto all = sets;
    all.insert(all.end(), init.begin(), init.end());
    all.insert(all.end(), emulated_sets.begin(), emulated_sets.end());
    all.insert(all.end(), budget_sets.begin(), budget_sets.end());
    return all;
  }
};

// One suite's sweep. Several suites of one command share the progress
// output, the ETA and the budget (run_sweeps).
class Sweep {
 public:
  Sweep(const SweepOptions& o, const fs::path& suite, Progress& progress, EtaTracker& eta,
        const Json& machine)
      : opts_(o), suite_(load_suite(suite)), progress_(progress), eta_(eta), machine_(machine),
        facts_(plan::facts_from_env(machine["env"])) {
    if (opts_.to_target && !suite_.target_accuracy) {
      throw ConfigError("--to-target: " + suite.string() + " has no target_accuracy to train to");
    }
  }

  // What each rung will do here (nothing run, nothing written); its runs are
  // added to the ETA. fraction < 1: every run whose steps are not capped
  // keeps that share of its training batches per epoch (--budget).
  SweepPlan make_plan(double fraction, const BudgetCuts& cuts = {});
  // Runs the suite as planned by the last make_plan.
  SweepSummary run(const SweepPlan& plan, std::chrono::steady_clock::time_point started);

 private:
  bool excluded(const SuiteRung& r) const;  // not among --only
  Json plan_entry(const SuiteRung& r) const;
  Prepared prepare(const SuiteRung& r) const;
  // The rung's work and estimate; its "planned" record for sweep.json.
  Json plan_rung(const SuiteRung& r, const Prepared& p, bool upstream);
  bool committed_matches(const SuiteRung& r, const Json& resolved, std::string* why) const;
  int repeats_of(bool upstream) const;
  // A rung ready to run: the sets of every repeat (its seed aside), where
  // its record goes, and whether every repeat so far ended ok.
  struct Job {
    const SuiteRung* rung = nullptr;
    Json* entry = nullptr;  // into manifest_, whose arrays never change size while jobs live
    std::vector<std::string> sets;
    std::vector<std::string> timing;  // a timing run's sets beyond `sets`; empty: none
    bool upstream = false;
    bool all_ok = true;
  };
  // Prepares a rung; nullopt when it is done already (failed to resolve,
  // skipped, its committed run used), its entry then says so.
  std::optional<Job> start_rung(const SuiteRung& r, Json& entry, bool upstream);
  // The rung's repeat i (0-based); false when a signal stopped the sweep.
  bool run_repeat(Job& job, int i);
  // The rung's timing run i (0-based); false when a signal stopped the sweep.
  bool run_timing(Job& job, int i);
  // Adaptive repeats after the first round-robin (SweepOptions::adaptive).
  void run_adaptive(std::vector<Job>& jobs);
  // An upstream run committed with the suite: copied in when its config matches.
  bool use_committed(const SuiteRung& r, const Json& resolved, Json& entry);
  // One run: reuse it (--resume, same config) or spawn it. Returns its record.
  Json run_one(const SuiteRung& r, const std::vector<std::string>& sets, const std::string& rel,
               const std::string& label, bool need_checkpoint);
  std::string skip_reason(const SuiteRung& r, const Json& resolved) const;
  std::string upstream_for(const SuiteRung& r, const Json& resolved) const;
  void save() { metrics::write_json_atomic(set_dir_ / "sweep.json", manifest_); }

  std::string eta_label(const std::string& label) const { return suite_.name + ":" + label; }

  SweepOptions opts_;
  Suite suite_;
  Progress& progress_;
  EtaTracker& eta_;
  Json machine_, manifest_;
  plan::MachineFacts facts_;  // machine_'s, for the accelerator rows' rule
  fs::path set_dir_;
  SweepSummary summary_;
  std::optional<Estimator> estimator_;
  std::optional<machine::PeakTable> peaks_;  // opts_.peaks, loaded once
  std::map<std::string, train::SplitSizes> sizes_;  // by data section and seed
  int timing_runs() const { return cuts_.timing_runs >= 0 ? cuts_.timing_runs : opts_.timing_runs; }
  double fraction_ = 1;
  BudgetCuts cuts_;
  std::map<std::string, std::vector<std::string>> budget_sets_;   // by rung id
  std::map<std::string, std::vector<std::string>> budget_notes_;  // by rung id: what the cuts did
  // A batch series' first rung whose run ran out of memory, by series:
  // no rung of the series at that batch or larger runs after it.
  struct OutOfMemory {
    std::string rung;
    int64_t batch = 0;
  };
  std::map<std::string, OutOfMemory> oom_at_;
  // Whether the run of a batch series' rung is left out after an earlier one
  // ran out of memory; if so its record says why.
  bool after_out_of_memory(Job& job, const std::string& label);
  // A rung's status once its runs are done: ok, failed, or out_of_memory (a
  // batch series' rung whose only failures ran out of memory).
  static std::string entry_status(const Job& job);
  std::chrono::steady_clock::time_point started_;
  metrics::DirLock lock_;  // on the set's folder while the sweep writes it
};

Json Sweep::plan_entry(const SuiteRung& r) const {
  Json e = {{"id", r.id}, {"changes", r.changes}, {"config", r.config.string()},
            {"status", "pending"}, {"runs", Json::array()}};
  if (!r.article.empty()) e["article"] = r.article;
  if (!r.init_from.empty()) e["init_from"] = r.init_from;
  if (!r.needs.empty()) e["needs"] = r.needs;
  if (!r.versus.empty()) e["versus"] = r.versus;
  if (!r.series.empty()) e["batch_series"] = {{"series", r.series}, {"batch", r.batch}};
  return e;
}

std::string Sweep::skip_reason(const SuiteRung& r, const Json& resolved) const {
  std::string needs = r.needs;
  std::transform(needs.begin(), needs.end(), needs.begin(), ::toupper);
  if (r.config.empty()) return r.needs.empty() ? "no config" : r.needs;
  // A rung that needs an accelerator this machine has none of ("needs":
  // "CUDA"), or whose config names one, or more devices than there are.
  for (const auto& row : plan::accelerator_catalog()) {
    std::string kind = row.kind;
    std::transform(kind.begin(), kind.end(), kind.begin(), ::toupper);
    if (needs == kind && facts_.devices_of(row.kind) == 0) return kind;
  }
  const auto& row = plan::resolve_accelerator(str_at(resolved, "runtime/accelerator", "cpu"), facts_);
  if (!row.host) {
    std::string kind = row.kind;
    std::transform(kind.begin(), kind.end(), kind.begin(), ::toupper);
    const int have = facts_.devices_of(row.kind);
    if (have == 0) return kind;
    // A named accelerator's devices must be there; "auto" takes the ones there are.
    const int devices = int_at(resolved, "runtime/devices", 1, 1, 1 << 20);
    if (str_at(resolved, "runtime/accelerator") != "auto" && devices > have) return std::to_string(devices) + (row.kind == "cuda" ? " GPUs" : " " + row.kind + " devices");
  }
  return "";
}

std::string Sweep::upstream_for(const SuiteRung& r, const Json& resolved) const {
  if (!r.init_from.empty()) return r.init_from;
  if (resolved["model"].value("init", "random") != "checkpoint") return "";
  const auto folder = fs::path(resolved["model"].value("init_path", "")).parent_path().filename();
  for (const auto& u : suite_.upstream) {
    if (u.id == folder.string()) return u.id;
  }
  return "";
}

Prepared Sweep::prepare(const SuiteRung& r) const {
  Prepared p;
  if (const auto it = budget_sets_.find(r.id); it != budget_sets_.end()) p.budget_sets = it->second;
  p.sets = suite_.sets;
  p.sets.insert(p.sets.end(), r.sets.begin(), r.sets.end());
  const bool upstream = std::any_of(suite_.upstream.begin(), suite_.upstream.end(),
                                    [&](const SuiteRung& u) { return u.id == r.id; });
  if (opts_.to_target && !upstream) {
    char target[40];
    std::snprintf(target, sizeof target, "%.17g", *suite_.target_accuracy);
    p.sets.push_back(std::string("train.target=") + target);
    p.sets.push_back("train.stop_at_target=true");
  }
  p.sets.insert(p.sets.end(), opts_.sets.begin(), opts_.sets.end());
  if (!r.config.empty()) {
    try {
      p.resolved = config::load_config(r.config.string(), p.sets);
    } catch (const ConfigError& e) {
      p.error = e.what();
      return p;
    }
  }
  p.skip = skip_reason(r, p.resolved);
  if (!p.skip.empty()) return p;
  plan::RunPlan run_plan;
  try {
    run_plan = plan::plan_run(config::to_run_config(p.resolved), facts_);
  } catch (const ConfigError& e) {
    p.error = e.what();
    return p;
  }
  // The suite's target is of the rungs' task metric: a fraction for accuracy.
  if (suite_.target_accuracy && *suite_.target_accuracy > 1 && run_plan.task.proportion) {
    p.error = "target_accuracy " + machine::format_double("%g", *suite_.target_accuracy) + " of " + suite_.file.string() +
              " is above 1, but this rung's " + run_plan.task.metric + " is a fraction (0.85 for 85%)";
    return p;
  }
  p.precision = run_plan.precision.row->name;
  if (!r.where_emulated.empty()) {
    if (run_plan.precision.emulated) {
      p.emulated_sets = r.where_emulated;
      p.emulated = {{"precision", p.precision},
                    {"set", r.where_emulated},
                    {"note", r.where_emulated_note},
                    {"comparable", r.where_emulated_comparable}};
    }
  }
  return p;
}

bool Sweep::committed_matches(const SuiteRung& r, const Json& resolved, std::string* why) const {
  if (r.committed.empty() || opts_.rerun_upstream) return false;
  const auto& c = r.committed;
  const auto prior = read_run(c);
  if (!fs::exists(c / "model.safetensors") || !prior.ok()) {
    if (why) *why = "the committed run in " + c.string() + " lacks model.safetensors or an ok result.json";
    return false;
  }
  // The committed config resolved again by today's schema: fields added since
  // it was made take their defaults, so a new field does not invalidate it
  // (a default that changed, or an edited config, does).
  Json committed_config;
  try {
    committed_config = config::resolve_config(prior.config, c);
  } catch (const ConfigError&) {
    committed_config = prior.config;  // a field since removed: not the same config
  }
  if (config::config_hash(committed_config) != config::config_hash(resolved)) {
    if (why) *why = "the committed run in " + c.string() + " was made by another config";
    return false;
  }
  return true;
}

std::vector<std::string> timing_sets(const Json& resolved, int64_t steps) {
  const auto& t = resolved["train"];
  const int64_t warmup = t.value("warmup_steps", int64_t(5));
  const int64_t accumulate = std::max<int64_t>(1, t.value("accumulate", int64_t(1)));
  int64_t capped = std::min<int64_t>(steps, warmup + kTimingSteps);
  capped = (capped + accumulate - 1) / accumulate * accumulate;  // max_steps: whole optimizer steps
  if (capped > steps || capped - warmup < 4) return {};  // too few timed steps to say a speed
  return {"train.max_steps=" + std::to_string(capped), "train.limit_eval_batches=1",
          "train.val_every_steps=0", "train.checkpoint_every=0", "train.save_checkpoint=false",
          "train.target=0", "train.stop_at_target=false"};
}

int Sweep::repeats_of(bool upstream) const {
  if (upstream) return 1;
  if (opts_.adaptive) return kAdaptiveFirstRuns;
  return opts_.repeats > 0 ? opts_.repeats : std::max<int>(1, int(opts_.seeds.size()));
}

Json Sweep::plan_rung(const SuiteRung& r, const Prepared& prepared, bool upstream) {
  Json out = {{"id", r.id}};
  Prepared p = prepared;
  if (!p.error.empty()) {
    out["status"] = "failed";
    out["error"] = p.error;
    return out;
  }
  if (!p.skip.empty()) {
    out["status"] = "skipped";
    out["needs"] = p.skip;
    return out;
  }
  if (upstream && committed_matches(r, p.resolved, nullptr)) {
    out["status"] = "committed";
    return out;
  }
  out["status"] = "run";
  out["runs"] = repeats_of(upstream);
  try {
    RunShape shape;
    train::SplitSizes sizes;
    int world = 1;
    // The work of the run as configured, then (--budget) with its share of
    // the training batches.
    for (int pass = 0; pass < 2; ++pass) {
      const Json resolved = config::load_config(r.config.string(), p.run_sets({}));
      const auto cfg = config::to_run_config(resolved);
      shape.rung = r.id;
      shape.precision = cfg.runtime.precision;
      // Priced apart in the ETA: a precision this CPU emulates (not a rung
      // where_emulated moved to 32-true).
      // The run plan on the machine the set describes: its world, threads and precision support.
      const auto run_plan = plan::plan_run(cfg, facts_);
      shape.emulated = run_plan.precision.emulated;
      shape.threads = run_plan.threads;
      world = run_plan.world();
      const std::string key = resolved["data"].dump() + "|" + std::to_string(cfg.train.seed);
      auto it = sizes_.find(key);
      if (it == sizes_.end()) {
        it = sizes_.emplace(key, train::split_sizes(cfg.data, cfg.train.seed)).first;
      }
      sizes = it->second;
      shape.work = train::plan_work(cfg, sizes, world);
      // A run whose steps train.max_steps caps is cut already: not scaled.
      const bool scalable = cfg.train.max_steps == 0 ||
                            cfg.train.max_steps >= int64_t(cfg.train.epochs) * shape.work.batches_per_epoch;
      out["scalable"] = scalable;
      if (pass == 1) break;
      std::vector<std::string> sets, notes;
      if (fraction_ < 1 && scalable && shape.work.batches_per_epoch > 0) {
        const auto keep = std::max<int64_t>(
            1, int64_t(std::floor(fraction_ * double(shape.work.batches_per_epoch))));
        sets.push_back("train.limit_train_batches=" + std::to_string(keep));
        out["scaled"] = {{"fraction", fraction_},
                         {"batches_per_epoch", shape.work.batches_per_epoch},
                         {"set", sets}};
      }
      const bool cut_short = !p.emulated.is_null() && !p.emulated.value("comparable", true);
      if (cuts_.short_emulated && cut_short && shape.work.steps > kShortSteps) {
        sets.push_back("train.max_steps=" + std::to_string(kShortSteps));
        sets.push_back("train.warmup_steps=" + std::to_string(std::min(cfg.train.warmup_steps, 2)));
        notes.push_back(p.precision + " is emulated on this CPU: shortened from " + std::to_string(shape.work.steps) +
                        " to " + std::to_string(kShortSteps) + " steps");
      }
      if (cuts_.eval_fraction < 1) {
        const int64_t per_pass = std::max(shape.work.val_samples_per_pass, shape.work.test_samples_per_pass);
        const int64_t bs = std::max<int64_t>(1, train::eval_batch_size(cfg.train, std::max<int64_t>(1, per_pass / world)));
        const int64_t batches = (per_pass / std::max(1, world) + bs - 1) / bs;
        const auto kept = std::max<int64_t>(1, int64_t(std::ceil(cuts_.eval_fraction * double(batches))));
        if (kept < batches) {
          sets.push_back("train.limit_eval_batches=" + std::to_string(kept));
          notes.push_back("its evaluations cut to " + std::to_string(kept) + " of their " + std::to_string(batches) +
                          " batches");
        }
      }
      if (sets.empty()) break;
      p.budget_sets = sets;
      budget_sets_[r.id] = sets;
      if (!notes.empty()) {
        budget_notes_[r.id] = notes;
        out["budget_cuts"] = notes;
      }
    }
    const auto& w = shape.work;
    out["precision"] = shape.precision;
    out["emulated"] = shape.emulated;              // the precision runs emulated here
    out["where_emulated"] = !p.emulated.is_null();  // the rung's where_emulated settings apply
    out["ranks"] = world;
    out["threads"] = shape.threads;
    // What this CPU's calibration says the precision cannot buy, before it runs.
    if (!opts_.peaks.empty()) {
      if (!peaks_) peaks_ = machine::PeakTable::load("", opts_.peaks);
      if (const auto note = peaks_->precision_limit_note(shape.precision, shape.threads); !note.empty()) {
        out["limit_note"] = note;
      }
    }
    out["work"] = {{"steps", w.steps},
                   {"batches_per_epoch", w.batches_per_epoch},
                   {"train_samples", w.train_samples},
                   {"val_passes", w.val_passes},
                   {"val_samples", w.val_samples()},
                   {"test_passes_max", w.test_passes},
                   {"test_samples_per_pass", w.test_samples_per_pass},
                   {"forward_units", w.forward_units()}};
    out["estimate_s"] = nullptr;
    std::optional<Estimate> est;
    if (estimator_) {
      std::string from;
      est = estimator_->estimate(shape, &from);
      if (est) {
        const Estimate e = *est;
        out["estimate_from"] = from;
        out["estimate_s"] = e.seconds(w);
        out["estimate"] = {{"fixed_s", e.fixed_s},
                           {"train_s", e.train_s(w)},
                           {"eval_s", e.seconds(w) - e.fixed_s - e.train_s(w)}};
      }
    }
    // Its timing runs: the same config, the steps capped (between-run
    // samples of its speed); none for a rung cut short where emulated.
    const bool comparable = p.emulated.is_null() || p.emulated.value("comparable", true);
    if (timing_runs() > 0 && !upstream && comparable) {
      const auto all = p.run_sets({});
      const auto capped = timing_sets(config::load_config(r.config.string(), all), w.steps);
      if (!capped.empty()) {
        auto with = all;
        with.insert(with.end(), capped.begin(), capped.end());
        const auto wt = train::plan_work(config::to_run_config(config::load_config(r.config.string(), with)),
                                         sizes, world);
        Json t = {{"runs", timing_runs()}, {"set", capped}, {"steps", wt.steps}, {"estimate_s", nullptr}};
        if (est) {
          t["estimate_s"] = est->seconds(wt);
          t["estimate"] = {{"fixed_s", est->fixed_s},
                           {"train_s", est->train_s(wt)},
                           {"eval_s", est->seconds(wt) - est->fixed_s - est->train_s(wt)}};
        }
        out["timing"] = t;
      }
    }
  } catch (const std::exception& e) {  // data missing or unreadable: the run will say so
    out["status"] = "failed";
    out["error"] = e.what();
  }
  return out;
}

Json Sweep::run_one(const SuiteRung& r, const std::vector<std::string>& sets,
                    const std::string& rel, const std::string& label, bool need_checkpoint) {
  const fs::path dir = set_dir_ / rel;
  const Json resolved = config::load_config(r.config.string(), sets);
  Json rec = {{"dir", rel}, {"config_hash", config::config_hash(resolved)}, {"sets", sets}};
  // Under --resume: an ok run of this resolved config is reused, an interrupted one continues.
  train::RunRecord prior;
  const auto earlier = earlier_run(dir, resolved, opts_.resume, need_checkpoint, &prior);
  if (earlier == Earlier::Reuse) {
    rec["status"] = "reused";
    progress_.note(label + ": reused (resolved config unchanged), " + test_metric(prior));
    ++summary_.reused;
    return rec;
  }
  ChildRun run;
  run.exe = opts_.exe;
  run.config = r.config;
  run.dir = dir;
  run.sets = sets;
  run.continue_run = earlier == Earlier::Continue;
  if (run.continue_run) progress_.note(label + ": continuing the interrupted run from its checkpoint");
  if (!opts_.peaks.empty()) {  // the run warns where its precision cannot pay here
    run.args = {"--calibration", fs::absolute(opts_.peaks).string()};
  }
  run.timeout_s = opts_.run_timeout_s;
  run.on_event = [&](const std::string& ev) { progress_.event(ev); };
  const auto cfg = config::to_run_config(resolved);
  progress_.start(label, cfg.train.batch_size, cfg.train.epochs);
  const auto done = run_child_run(run);
  const auto& child = done.child;
  const double wall = done.wall_s;
  const auto& result = done.record;
  rec["exit_code"] = child.exit_code;
  rec["wall_s"] = wall;
  char took[64];
  std::snprintf(took, sizeof(took), "%.1f s", wall);
  if (done.status == "interrupted") {
    // Stopped on request: the run checkpointed (exit 3) or was killed by a
    // second signal; either way the sweep stops after recording it.
    summary_.stop_signal = child.stop_signal;
    summary_.stopped_rung = label;
    rec["status"] = "interrupted";
    rec["signal"] = child.stop_signal;
    rec["checkpoint"] = fs::exists(dir / "checkpoint.ckpt");
    progress_.finish("interrupted by signal " + std::to_string(child.stop_signal) + " after " +
                     took + (child.exit_code == 3 ? " (checkpoint written)" : "") +
                     "; continue with sweep --resume");
  } else if (done.status == "ok") {
    rec["status"] = "ok";
    ++summary_.ok;
    progress_.finish(std::string("ok in ") + took + ", " + test_metric(result));
  } else {
    rec["status"] = "failed";
    rec["error"] = done.error;
    if (result.failure == "out_of_memory") rec["failure"] = result.failure;
    if (child.timed_out) rec["timed_out"] = true;
    ++summary_.failed;
    progress_.finish("FAILED (exit " + std::to_string(child.exit_code) + ") after " + took +
                     ": " + rec["error"].get<std::string>() + " [log: " +
                     (dir / "run.log").string() + "]");
  }
  return rec;
}

bool Sweep::use_committed(const SuiteRung& r, const Json& resolved, Json& entry) {
  if (r.committed.empty() || opts_.rerun_upstream) return false;
  std::string why;
  if (!committed_matches(r, resolved, &why)) {
    progress_.note(r.id + ": " + why + "; running it");
    return false;
  }
  const auto& c = r.committed;
  const auto prior = read_run(c);
  const fs::path dir = set_dir_ / r.id;
  fs::create_directories(dir);
  for (const char* f : {"config.json", "result.json", "metrics.csv"}) {
    if (fs::exists(c / f)) fs::copy_file(c / f, dir / f, fs::copy_options::overwrite_existing);
  }
  entry["status"] = "committed";
  entry["committed"] = c.string();
  entry["weights"] = fs::absolute(c / "model.safetensors").lexically_normal().string();
  entry["runs"].push_back({{"dir", r.id}, {"status", "committed"}});
  progress_.note(r.id + ": committed run " + c.string() + " (same config; " +
                 test_metric(prior) + "), not rerun; --rerun-upstream runs it");
  ++summary_.reused;
  return true;
}

std::optional<Sweep::Job> Sweep::start_rung(const SuiteRung& r, Json& entry, bool upstream) {
  auto fail = [&](const std::string& why) -> std::optional<Job> {
    entry["status"] = "failed";
    entry["error"] = why;
    ++summary_.failed;
    progress_.note(r.id + ": FAILED: " + why);
    return std::nullopt;
  };
  const Prepared p = prepare(r);
  if (!p.error.empty()) return fail(p.error);
  if (!p.skip.empty()) {
    entry["status"] = "skipped";
    entry["needs"] = p.skip;
    ++summary_.skipped;
    progress_.note(r.id + ": skipped (needs " + p.skip + ")");
    return std::nullopt;
  }
  if (upstream && use_committed(r, p.resolved, entry)) return std::nullopt;
  std::vector<std::string> init;
  if (const auto up = upstream_for(r, p.resolved); !up.empty()) {
    const Json* up_entry = nullptr;
    for (const auto& u : manifest_["upstream"]) {
      if (u["id"] == up) up_entry = &u;
    }
    const auto up_status = up_entry ? (*up_entry)["status"].get<std::string>() : "";
    if (up_status == "committed") {
      init.push_back("model.init=safetensors");
      init.push_back("model.init_path=" + (*up_entry)["weights"].get<std::string>());
    } else if (up_status == "ok") {
      init.push_back("model.init=checkpoint");
      init.push_back("model.init_path=" + (set_dir_ / up / "checkpoint.ckpt").string());
    } else {
      return fail("upstream run " + up + " did not finish");
    }
  }
  if (!p.budget_sets.empty()) entry["budget_sets"] = p.budget_sets;
  if (const auto it = budget_notes_.find(r.id); it != budget_notes_.end()) {
    entry["budget_cuts"] = it->second;
    std::string cuts;
    for (const auto& c : it->second) cuts += (cuts.empty() ? "" : "; ") + c;
    progress_.note(r.id + ": to fit the budget, " + cuts);
  }
  if (!p.emulated.is_null()) {
    entry["where_emulated"] = p.emulated;
    std::string added;
    for (const auto& v : p.emulated_sets) added += (added.empty() ? "" : " ") + v;
    progress_.note(r.id + ": " + p.precision + " is emulated on this CPU; running with " + added);
  }
  Job job;
  job.rung = &r;
  job.entry = &entry;
  job.sets = p.run_sets(init);
  job.upstream = upstream;
  if (!upstream && entry.contains("planned") && entry["planned"].contains("timing")) {
    for (const auto& v : entry["planned"]["timing"]["set"]) job.timing.push_back(v.get<std::string>());
  }
  return job;
}

std::string Sweep::entry_status(const Job& job) {
  if (job.all_ok) return "ok";
  // A batch series' end: every failed run of it ran out of memory.
  for (const auto& run : (*job.entry)["runs"]) {
    if (run.value("status", "") == "failed" && run.value("failure", "") != "out_of_memory") return "failed";
  }
  return job.rung->series.empty() ? "failed" : "out_of_memory";
}

bool Sweep::after_out_of_memory(Job& job, const std::string& label) {
  const SuiteRung& r = *job.rung;
  if (job.upstream || r.series.empty()) return false;
  const auto it = oom_at_.find(r.series);
  if (it == oom_at_.end() || r.batch < it->second.batch) return false;
  Json& entry = *job.entry;
  job.timing.clear();
  eta_.done(eta_label(label), std::nullopt);
  if (entry["status"] == "skipped") return true;  // said at its first repeat
  if (entry["runs"].empty()) {  // never ran: skipped, saying why
    entry["status"] = "skipped";
    entry["skipped"] = "batch " + std::to_string(it->second.batch) + " ran out of memory (" + it->second.rung + ")";
    ++summary_.skipped;
    progress_.note(label + ": skipped: " + entry["skipped"].get<std::string>());
  } else {  // its own earlier run ran out: this one would too
    entry["status"] = entry_status(job);
    progress_.note(label + ": not run: " + it->second.rung + " ran out of memory at batch " +
                   std::to_string(it->second.batch));
  }
  save();
  return true;
}

bool Sweep::run_repeat(Job& job, int i) {
  const SuiteRung& r = *job.rung;
  Json& entry = *job.entry;
  const int repeats = repeats_of(job.upstream);
  auto run_sets = job.sets;
  if (!job.upstream && !opts_.seeds.empty()) {
    run_sets.push_back("train.seed=" + std::to_string(opts_.seeds[size_t(i) % opts_.seeds.size()]));
  }
  const std::string rel = repeats > 1 ? r.id + "/r" + std::to_string(i + 1) : r.id;
  const std::string label = repeats > 1 ? r.id + " r" + std::to_string(i + 1) : r.id;
  if (after_out_of_memory(job, label)) return true;
  Json rec;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    rec = run_one(r, run_sets, rel, label, job.upstream);
  } catch (const std::exception& e) {  // a config the --set made invalid, spawn failure
    rec = {{"dir", rel}, {"status", "failed"}, {"error", e.what()}};
    ++summary_.failed;
    progress_.note(label + ": FAILED: " + e.what());
  }
  // Only a run that ran to its end says how fast this machine is.
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  eta_.done(eta_label(label), rec["status"] == "ok" ? std::optional<double>(took) : std::nullopt);
  job.all_ok = job.all_ok && rec["status"] != "failed";
  if (!job.upstream && !r.series.empty() && rec.value("failure", "") == "out_of_memory") {
    auto& at = oom_at_[r.series];
    if (at.rung.empty() || r.batch < at.batch) at = {r.id, r.batch};
    entry["out_of_memory"] = true;
    --summary_.failed;
    ++summary_.out_of_memory;
    progress_.note(label + ": out of memory at batch " + std::to_string(r.batch) + ": no larger batch of " +
                   r.series + " runs");
  }
  // The runs stay in repeat order (r1, r2, ...) whatever order they ran in.
  entry["runs"].push_back(rec);
  if (summary_.stop_signal != 0) {
    entry["status"] = "interrupted";
    save();
    return false;
  }
  if (i + 1 >= repeats) entry["status"] = entry_status(job);  // adaptive repeats go beyond
  save();
  if (eta_.total() > 1) {
    progress_.note(eta_.line(std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count()));
  }
  return true;
}

bool Sweep::run_timing(Job& job, int i) {
  const SuiteRung& r = *job.rung;
  Json& entry = *job.entry;
  auto sets = job.sets;
  if (!opts_.seeds.empty()) sets.push_back("train.seed=" + std::to_string(opts_.seeds.front()));
  sets.insert(sets.end(), job.timing.begin(), job.timing.end());
  const std::string rel = r.id + "/timing/t" + std::to_string(i + 1);
  const std::string label = r.id + " t" + std::to_string(i + 1);
  Json rec;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    rec = run_one(r, sets, rel, label, false);
  } catch (const std::exception& e) {
    rec = {{"dir", rel}, {"status", "failed"}, {"error", e.what()}};
    ++summary_.failed;
    progress_.note(label + ": FAILED: " + e.what());
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  eta_.done(eta_label(label), rec["status"] == "ok" ? std::optional<double>(took) : std::nullopt);
  if (!entry.contains("timing_runs")) entry["timing_runs"] = Json::array();
  entry["timing_runs"].push_back(rec);
  save();
  if (summary_.stop_signal != 0) return false;
  if (eta_.total() > 1) {
    progress_.note(eta_.line(std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count()));
  }
  return true;
}

void Sweep::run_adaptive(std::vector<Job>& jobs) {
  const auto base = results::load_result_set(results::single_result_set(opts_.against));
  results::CompareBounds bounds;
  bounds.slower_pct = opts_.against_slower_pct;
  bounds.allow_uncompared = true;  // a rung BASE lacks is not ours to resolve
  // Each look at its share of the error: a verdict from any look holds at 95%.
  const int looks = results::adaptive_looks(kAdaptiveFirstRuns, opts_.max_repeats);
  bounds.confidence = results::adaptive_confidence(kAdaptiveFirstRuns, opts_.max_repeats);
  const auto started = std::chrono::steady_clock::now();
  auto minutes = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() / 60;
  };
  auto ids = [](const std::vector<results::AdaptiveRound::Open>& v) {
    std::string s;
    for (const auto& o : v) {
      s += (s.empty() ? "" : ", ") + o.rung + " (" + std::to_string(o.runs) + " runs" +
           (o.repeats_needed ? ", about " + std::to_string(*o.repeats_needed) + " a side resolve it" : "") + ")";
    }
    return s;
  };
  const std::string against = "against " + base.dir.string() + " at " +
                              machine::format_double("%g%%", opts_.against_slower_pct) + " (" +
                              results::confidence_text(bounds.confidence) + " intervals)";
  Json record = {{"against", base.dir.string()},         {"fail_slower_pct", opts_.against_slower_pct},
                 {"first_runs", kAdaptiveFirstRuns},     {"max_repeats", opts_.max_repeats},
                 {"max_minutes", opts_.max_minutes},     {"looks", looks},
                 {"confidence", bounds.confidence},      {"rounds", Json::array()}};
  // Said before the first look, so that a set cut short is judged at its level too.
  manifest_["adaptive"] = record;
  int extra = 0;
  results::AdaptiveRound open;
  std::string stopped_by = "every rung resolved";
  for (int k = kAdaptiveFirstRuns;; ++k) {
    manifest_["adaptive"] = record;
    save();
    const auto current = results::load_result_set(set_dir_);
    open = results::adaptive_round(
        results::compare_sets(base, current, [&] {
          auto b = bounds;
          b.noise = results::compare_noise(opts_.noise.string(), base, current);
          return b;
        }()),
        opts_.max_repeats);
    if (open.run.empty()) {
      if (!open.at_cap.empty()) stopped_by = "the cap of " + std::to_string(opts_.max_repeats) + " runs a rung";
      break;
    }
    if (opts_.max_minutes > 0 && minutes() >= opts_.max_minutes) {
      stopped_by = "the cap of " + machine::format_double("%g", opts_.max_minutes) + " minutes";
      break;
    }
    if (summary_.stop_signal != 0) {
      stopped_by = "a signal";
      break;
    }
    progress_.note("adaptive repeats: unresolved " + against + ": " + ids(open.run) + "; run " +
                   std::to_string(k + 1) + " of each");
    Json round = {{"run", Json::array()}};
    for (const auto& o : open.run) round["run"].push_back(o.rung);
    record["rounds"].push_back(round);
    bool stopped = false;
    int ran = 0;
    for (auto& job : jobs) {
      const bool wanted = std::any_of(open.run.begin(), open.run.end(),
                                      [&](const auto& o) { return o.rung == job.rung->id; });
      if (!wanted || !job.all_ok) continue;  // a rung with a failed run is not run again
      ++extra;
      ++ran;
      if (!run_repeat(job, k)) {
        stopped = true;
        break;
      }
    }
    if (stopped) {
      stopped_by = "a signal";
      break;
    }
    if (ran == 0) {
      stopped_by = "failed runs (the open rungs have one)";
      break;
    }
  }
  record["extra_runs"] = extra;
  record["extra_minutes"] = minutes();
  record["stopped_by"] = stopped_by;
  Json left = Json::array();
  for (const auto* v : {&open.run, &open.at_cap}) {
    for (const auto& o : *v) left.push_back({{"rung", o.rung}, {"runs", o.runs},
                                             {"repeats_needed", o.repeats_needed ? Json(*o.repeats_needed) : Json()}});
  }
  record["unresolved"] = left;
  manifest_["adaptive"] = record;
  save();
  progress_.note("adaptive repeats " + against + ": " + std::to_string(extra) + " extra runs, " +
                 duration_text(minutes() * 60) + "; stopped by " + stopped_by +
                 (left.empty() ? std::string() : "; still unresolved: " + ids(open.run) +
                                                     (open.run.empty() || open.at_cap.empty() ? "" : ", ") +
                                                     ids(open.at_cap)));
}

bool Sweep::excluded(const SuiteRung& r) const {
  return !opts_.only.empty() &&
         std::find(opts_.only.begin(), opts_.only.end(), r.id) == opts_.only.end();
}

SweepPlan Sweep::make_plan(double fraction, const BudgetCuts& cuts) {
  fraction_ = fraction;
  cuts_ = cuts;
  budget_sets_.clear();
  budget_notes_.clear();
  SweepPlan out;
  out.suite = suite_.name;
  out.machine_id = machine_["id"].get<std::string>();
  if (opts_.adaptive) {
    out.adaptive = "then, round by round, one more run of each rung whose time against " + opts_.against.string() +
                   " is unresolved at " + machine::format_double("%g%%", opts_.against_slower_pct) + ", to " +
                   std::to_string(opts_.max_repeats) + " runs a rung" +
                   (opts_.max_minutes > 0 ? " or " + machine::format_double("%g", opts_.max_minutes) +
                                                " minutes of extra rounds"
                                          : std::string()) +
                   " (not in the estimate); each look at " +
                   results::confidence_text(results::adaptive_confidence(kAdaptiveFirstRuns, opts_.max_repeats)) +
                   " (" + results::confidence_text(results::stats::kConfidence) + " split over " +
                   std::to_string(results::adaptive_looks(kAdaptiveFirstRuns, opts_.max_repeats)) + " looks)";
  }
  if (!estimator_) estimator_.emplace(suite_.results, opts_.peaks, out.machine_id);
  out.basis = estimator_->basis();
  out.total_s = 0.0;
  for (const auto& [list, up] : {std::pair{&suite_.upstream, true}, std::pair{&suite_.rungs, false}}) {
    for (const auto& r : *list) {
      if (!up && excluded(r)) {
        out.rungs.push_back({{"id", r.id}, {"status", "excluded"}});
        continue;
      }
      const Json pl = plan_rung(r, prepare(r), up);
      out.rungs.push_back(pl);
      if (pl["status"] != "run") continue;
      const int n = pl["runs"].get<int>();
      for (int i = 0; i < n; ++i) {
        const std::string label = n > 1 ? r.id + " r" + std::to_string(i + 1) : r.id;
        const auto est = pl["estimate_s"].is_number()
                             ? std::optional<double>(pl["estimate_s"].get<double>())
                             : std::nullopt;
        eta_.plan(eta_label(label), est, pl.value("emulated", false));
        ++out.runs;
        if (est) {
          *out.total_s += *est;
        } else {
          ++out.unestimated;
        }
      }
      if (!pl.contains("timing")) continue;
      const auto& t = pl["timing"];
      for (int i = 0; i < t.value("runs", 0); ++i) {
        const auto est = t["estimate_s"].is_number() ? std::optional<double>(t["estimate_s"].get<double>())
                                                      : std::nullopt;
        eta_.plan(eta_label(r.id + " t" + std::to_string(i + 1)), est, pl.value("emulated", false));
        ++out.runs;
        ++out.timing_runs;
        if (est) {
          *out.total_s += *est;
          out.timing_s += *est;
        } else {
          ++out.unestimated;
        }
      }
    }
  }
  if (out.unestimated == out.runs) out.total_s.reset();
  return out;
}

SweepSummary Sweep::run(const SweepPlan& planned, std::chrono::steady_clock::time_point started) {
  started_ = started;
  if (opts_.exe.empty()) opts_.exe = fs::read_symlink("/proc/self/exe");
  set_dir_ = sweep_set_dir(opts_.out, suite_.name, machine_["id"].get<std::string>());
  summary_.set_dir = set_dir_;
  // One sweep writes a set at a time (a second would truncate the first's
  // run logs, rerun its rungs and race on sweep.json): refused naming the
  // holder's pid, as `run` refuses a second run into its --out.
  lock_ = metrics::DirLock(set_dir_, "sweep");
  manifest_ = {{"schema_version", 1},
               {"suite", suite_.name},
               {"suite_file", suite_.file.string()},
               {"description", suite_.description},
               {"machine_id", machine_["id"]},
               {"machine", machine_},
               {"repeats", opts_.repeats},
               {"seeds", opts_.seeds},
               {"sets", opts_.sets},
               {"suite_sets", suite_.sets},
               {"started_at", metrics::utc_now()},
               {"upstream", Json::array()},
               {"rungs", Json::array()}};
  manifest_["target_accuracy"] =
      suite_.target_accuracy ? Json(*suite_.target_accuracy) : Json(nullptr);
  manifest_["convergence_reference"] = suite_.convergence_reference;
  manifest_["to_target"] = opts_.to_target;
  manifest_["reference"] = suite_.reference;
  for (const auto& u : suite_.upstream) manifest_["upstream"].push_back(plan_entry(u));
  for (const auto& r : suite_.rungs) manifest_["rungs"].push_back(plan_entry(r));
  progress_.note("suite " + suite_.name + " on " + machine_["id"].get<std::string>() + " -> " +
                 set_dir_.string());
  // What each rung will do here and, where a committed set says, about how long.
  for (const auto& [key, up] : {std::pair{"upstream", true}, std::pair{"rungs", false}}) {
    for (size_t i = 0; i < manifest_[key].size(); ++i) {
      const Json& pl = planned.rungs[(up ? 0 : suite_.upstream.size()) + i];
      manifest_[key][i]["planned"] = pl;
    }
  }
  manifest_["estimate_basis"] = planned.basis;
  if (planned.budget_s > 0) {
    manifest_["budget"] = {{"minutes", planned.budget_s / 60},
                           {"fraction", planned.fraction},
                           {"estimate_unscaled_s", planned.unscaled_s ? Json(*planned.unscaled_s) : Json(nullptr)},
                           {"cuts", planned.cuts}};
  }
  save();
  // Upstream runs first (the rungs start from them), each once.
  for (size_t i = 0; i < suite_.upstream.size() && summary_.stop_signal == 0; ++i) {
    if (auto job = start_rung(suite_.upstream[i], manifest_["upstream"][i], true)) run_repeat(*job, 0);
    save();
  }
  // Then the rungs round-robin: every rung's run 1, then every rung's run 2,
  // ... so that whatever drifts on a shared machine over the sweep (its
  // load, its clock, the page cache) falls on every rung alike instead of on
  // one rung's repeats (docs/COMPARE.md).
  std::vector<Job> jobs;
  for (size_t i = 0; i < suite_.rungs.size() && summary_.stop_signal == 0; ++i) {
    if (excluded(suite_.rungs[i])) {
      manifest_["rungs"][i]["status"] = "excluded";
      continue;
    }
    if (auto job = start_rung(suite_.rungs[i], manifest_["rungs"][i], false)) jobs.push_back(std::move(*job));
  }
  save();
  const int repeats = repeats_of(false);
  for (int k = 0; k < repeats && summary_.stop_signal == 0; ++k) {
    for (auto& job : jobs) {
      if (!run_repeat(job, k)) break;
    }
  }
  if (opts_.adaptive && summary_.stop_signal == 0) run_adaptive(jobs);
  // Then the timing runs, round-robin too, of every rung whose full run ended ok.
  for (int k = 0; k < timing_runs() && summary_.stop_signal == 0; ++k) {
    for (auto& job : jobs) {
      if (job.timing.empty() || !job.all_ok) continue;
      if (!run_timing(job, k)) break;
    }
  }
  // A signal stopped the sweep mid-round: a rung with some of its runs is
  // interrupted (sweep --resume runs the rest); one not reached stays pending.
  for (auto& job : jobs) {
    Json& e = *job.entry;
    if (e["status"] == "pending" && !e["runs"].empty()) e["status"] = "interrupted";
  }
  if (summary_.stop_signal != 0) {
    manifest_["stopped_at"] = metrics::utc_now();
    manifest_["stopped_by_signal"] = summary_.stop_signal;
    save();
    progress_.note("stopped by signal " + std::to_string(summary_.stop_signal) + " during " +
                   summary_.stopped_rung + "; sweep --resume continues it from its checkpoint");
    return summary_;
  }
  manifest_["finished_at"] = metrics::utc_now();
  save();
  progress_.note(std::to_string(summary_.ok) + " ran ok, " + std::to_string(summary_.reused) +
                 " reused, " + std::to_string(summary_.failed) + " failed, " +
                 std::to_string(summary_.skipped) + " skipped" +
                 (summary_.out_of_memory > 0
                      ? ", " + std::to_string(summary_.out_of_memory) + " out of memory (where a batch series ends)"
                      : std::string()) +
                 "; results in " + set_dir_.string());
  return summary_;
}

}  // namespace

fs::path sweep_set_dir(const fs::path& out, const std::string& suite,
                       const std::string& machine_id) {
  return out / suite / machine_id;
}

std::vector<uint64_t> parse_seeds(const std::string& text) {
  std::vector<uint64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    try {
      out.push_back(std::stoull(item, &used));
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || item[0] == '-') {
      throw ConfigError("--seeds: \"" + text + "\": expected numbers separated by commas");
    }
  }
  if (out.empty()) throw ConfigError("--seeds: give at least one seed");
  return out;
}

namespace {

// A run may keep no less than this share of its training batches under a
// budget: below it the ladder's rungs would learn too little to say anything.
constexpr double kBudgetFloor = 0.3;

// --only names rungs of the suites.
void check_only(const SweepOptions& opts, const std::vector<fs::path>& suites) {
  for (const auto& id : opts.only) {
    std::string ids;
    bool known = false;
    for (const auto& file : suites) {
      for (const auto& r : load_suite(file).rungs) {
        known = known || r.id == id;
        ids += (ids.empty() ? "" : ", ") + r.id;
      }
    }
    if (!known) throw ConfigError("--only: \"" + id + "\" is not a rung of the suite (its rungs: " + ids + ")");
  }
}

// The suites of one command: their plans, one budget, one ETA, one progress output.
class Sweeps {
 public:
  Sweeps(const SweepOptions& o, const std::vector<fs::path>& suites)
      : opts_(o), progress_(o.log ? *o.log : null_, o.terminal) {
    if (opts_.repeats < 0) throw ConfigError("--repeats: must be at least 1");
    if (opts_.timing_runs < 0) throw ConfigError("--timing-runs: must be 0 or more");
    if (opts_.adaptive) {
      if (opts_.against.empty()) throw ConfigError("--repeats auto: give --against BASE_SET, the set to resolve against");
      if (suites.size() != 1) throw ConfigError("--repeats auto: one --suite (BASE is one suite's set)");
      if (!opts_.seeds.empty()) throw ConfigError("--repeats auto: give no --seeds (every repeat runs the same seed)");
      if (opts_.timing_runs > 0) {
        throw ConfigError("--timing-runs: with --repeats auto the repeats are the between-run samples");
      }
      if (opts_.max_repeats < kAdaptiveFirstRuns) {
        throw ConfigError("--max-repeats: at least " + std::to_string(kAdaptiveFirstRuns));
      }
      if (!(opts_.against_slower_pct >= 0 && std::isfinite(opts_.against_slower_pct))) {
        throw ConfigError("--fail-slower: must be a finite number >= 0");
      }
      if (!(opts_.max_minutes >= 0 && std::isfinite(opts_.max_minutes))) {
        throw ConfigError("--max-minutes: must be a finite number >= 0 (0: no cap)");
      }
      // There and readable, its sweep.json included, before any run is spent.
      results::adaptive_level(results::load_result_set(results::single_result_set(opts_.against)));
    } else if (!opts_.against.empty()) {
      throw ConfigError("--against: only with --repeats auto");
    }
    if (opts_.timing_runs > 0 && std::max<int>(opts_.repeats, int(opts_.seeds.size())) > 1) {
      throw ConfigError("--timing-runs: with several runs a rung (--repeats, --seeds) the runs are the "
                        "between-run samples; give one or the other");
    }
    if (!(opts_.budget_minutes >= 0)) throw ConfigError("--budget: minutes must be a number > 0");
    if (!(opts_.run_timeout_s >= 0 && opts_.run_timeout_s <= util::kMaxTimeoutS)) {
      throw ConfigError("--run-timeout: seconds must be a number from 0 (none) to " +
                        std::to_string(int64_t(util::kMaxTimeoutS)) + " (30 days)");
    }
    if (suites.empty()) throw ConfigError("sweep: --suite FILE is required");
    check_only(opts_, suites);
    if (!opts_.peaks.empty()) machine::PeakTable::load_named("", opts_.peaks, "--peaks");  // there and valid
    machine_ = this_machine();
    for (const auto& file : suites) {
      sweeps_.push_back(std::make_unique<Sweep>(opts_, file, progress_, eta_, machine_));
    }
  }

  SweepPlans plan() {
    SweepPlans plans = plan_all(1.0);
    plans.unscaled_s = plans.total_s;
    if (opts_.budget_minutes > 0) {
      plans.budget_s = opts_.budget_minutes * 60;
      std::vector<RunCost> costs;
      for (const auto& suite : plans.suites) {
        for (const auto& r : suite.rungs) {
          if (r.value("status", "") != "run" || !r.contains("estimate")) continue;
          RunCost c;
          c.fixed_s = r["estimate"].value("fixed_s", 0.0);
          c.train_s = r["estimate"].value("train_s", 0.0);
          c.eval_s = r["estimate"].value("eval_s", 0.0);
          c.scalable = r.value("scalable", false);
          for (int i = 0; i < r.value("runs", 1); ++i) costs.push_back(c);
          // Timing runs: their steps are capped, so the budget cannot scale them.
          if (r.contains("timing") && r["timing"].contains("estimate")) {
            const auto& e = r["timing"]["estimate"];
            const RunCost t{e.value("fixed_s", 0.0), e.value("train_s", 0.0), e.value("eval_s", 0.0), false};
            for (int i = 0; i < r["timing"].value("runs", 0); ++i) costs.push_back(t);
          }
        }
      }
      const double f = budget_fraction(costs, plans.budget_s, kBudgetFloor);
      if (f < 1) {
        eta_ = EtaTracker();
        const auto unscaled = plans.unscaled_s;
        plans = plan_all(f);
        plans.unscaled_s = unscaled;
        plans.budget_s = opts_.budget_minutes * 60;
        plans.fraction = f;
      }
      // Even the floor does not fit: cut beyond it, what buys least per
      // minute first (BudgetCuts), until the runs fit or nothing is left.
      if (plans.fraction < 1 && plans.total_s && *plans.total_s > plans.budget_s * 1.01) {
        std::vector<std::pair<BudgetCuts, std::string>> stages;
        BudgetCuts c;
        c.short_emulated = true;
        stages.push_back({c, "the rungs cut short where their precision is emulated run " +
                                 std::to_string(kShortSteps) + " steps"});
        for (int t = opts_.timing_runs - 1; t >= 0; --t) {
          c.timing_runs = t;
          stages.push_back({c, t > 0 ? std::to_string(t) + " timing run" + (t == 1 ? "" : "s") + " a rung"
                                     : "no timing runs"});
        }
        c.eval_fraction = kBudgetFloor;
        stages.push_back({c, "evaluations cut to " + std::to_string(int(kBudgetFloor * 100)) + "% of their batches"});
        const auto unscaled = plans.unscaled_s;
        const auto floor_s = plans.total_s;
        const double fraction = plans.fraction;
        std::vector<std::string> cuts;
        double before = floor_s.value_or(0);
        for (const auto& [stage, what] : stages) {
          eta_ = EtaTracker();
          plans = plan_all(fraction, stage);
          const double now = plans.total_s.value_or(0);
          if (now < before - 1e-9) cuts.push_back(what);  // a stage that cut nothing here is not said
          before = now;
          if (!plans.total_s || now <= opts_.budget_minutes * 60 * 1.01) break;
        }
        plans.unscaled_s = unscaled;
        plans.budget_s = opts_.budget_minutes * 60;
        plans.fraction = fraction;
        plans.floor_s = floor_s;
        plans.cuts = cuts;
      }
    }
    for (auto& p : plans.suites) {
      p.budget_s = plans.budget_s;
      p.fraction = plans.fraction;
      p.unscaled_s = plans.unscaled_s;
      p.cuts = plans.cuts;
    }
    return plans;
  }

  std::vector<SweepSummary> run() {
    const SweepPlans plans = plan();
    for (const auto& line : plans_summary(plans)) progress_.note(line);
    const auto started = std::chrono::steady_clock::now();
    std::vector<SweepSummary> out;
    for (size_t i = 0; i < sweeps_.size(); ++i) {
      out.push_back(sweeps_[i]->run(plans.suites[i], started));
      if (out.back().stop_signal != 0) break;
    }
    return out;
  }

 private:
  SweepPlans plan_all(double fraction, const BudgetCuts& cuts = {}) {
    SweepPlans plans;
    plans.total_s = 0.0;
    for (auto& sweep : sweeps_) {
      plans.suites.push_back(sweep->make_plan(fraction, cuts));
      const auto& p = plans.suites.back();
      plans.runs += p.runs;
      plans.unestimated += p.unestimated;
      if (p.total_s) *plans.total_s += *p.total_s;
    }
    if (plans.unestimated == plans.runs) plans.total_s.reset();
    return plans;
  }

  SweepOptions opts_;
  std::ostringstream null_;
  Progress progress_;
  EtaTracker eta_;
  Json machine_;
  std::vector<std::unique_ptr<Sweep>> sweeps_;
};

}  // namespace

SweepPlans plan_sweeps(const SweepOptions& opts, const std::vector<fs::path>& suites) {
  return Sweeps(opts, suites).plan();
}

std::vector<SweepSummary> run_sweeps(const SweepOptions& opts, const std::vector<fs::path>& suites) {
  return Sweeps(opts, suites).run();
}

SweepSummary run_sweep(const SweepOptions& opts) { return run_sweeps(opts, {opts.suite}).front(); }

std::string plan_summary(const SweepPlan& p) {
  std::string s = p.suite + ": " + std::to_string(p.runs) + (p.runs == 1 ? " run" : " runs");
  if (p.total_s) {
    s += ", about " + duration_text(*p.total_s);
    if (p.unestimated > 0) s += " + " + std::to_string(p.unestimated) + " not estimated";
    s += " (" + p.basis + ")";
  } else {
    s += "; no estimate (" +
         (p.basis.empty() ? std::string("the suite names no committed result set (its \"results\") "
                                        "of this machine, or of one calibrated when this one "
                                        "is: `accel-bench calibrate`, then --peaks FILE")
                          : "no committed run of these rungs in " + p.basis) +
         ")";
  }
  return s;
}

std::vector<std::string> plans_summary(const SweepPlans& plans) {
  std::vector<std::string> out;
  for (const auto& p : plans.suites) out.push_back("plan: " + plan_summary(p));
  if (plans.budget_s > 0 && plans.unscaled_s) {
    const std::string budget = duration_text(plans.budget_s);
    if (plans.fraction < 1) {
      char f[32];
      std::snprintf(f, sizeof(f), "%.0f%%", plans.fraction * 100);
      out.push_back("budget " + budget + ": as configured the runs would take about " +
                    duration_text(*plans.unscaled_s) + " on this machine, so every run whose " +
                    "steps are not capped trains " + f + " of its batches per epoch " +
                    "(train.limit_train_batches; set-up and evaluation unchanged): about " +
                    duration_text(plans.floor_s.value_or(plans.total_s.value_or(0))) +
                    (plans.floor_s.value_or(plans.total_s.value_or(0)) > plans.budget_s * 1.01
                         ? ", over the budget: no run trains less than " +
                               std::to_string(int(kBudgetFloor * 100)) + "%"
                         : "") +
                    ". Accuracies are then not the full ladder's, and compare finds the configs "
                    "changed; run without --budget for the full ladder");
      if (!plans.cuts.empty()) {
        std::string cuts;
        for (const auto& c : plans.cuts) cuts += (cuts.empty() ? "" : "; then ") + c;
        const double total = plans.total_s.value_or(0);
        out.push_back("budget " + budget + ": beyond that floor, what buys least per minute is cut first: " + cuts +
                      " (each rung's cuts are in the plan above and in its report): about " + duration_text(total) +
                      (total > plans.budget_s * 1.01 ? ", still over the budget with nothing left to cut" : ""));
      }
    } else {
      out.push_back("budget " + budget + ": the runs fit as configured");
    }
  } else if (plans.budget_s > 0) {
    out.push_back("budget " + duration_text(plans.budget_s) +
                  ": no estimate to fit it by; the runs go as configured");
  }
  if (plans.suites.size() > 1) {
    std::string s = "all suites: " + std::to_string(plans.runs) + " runs";
    if (plans.total_s) s += ", about " + duration_text(*plans.total_s);
    if (plans.unestimated > 0) s += " (" + std::to_string(plans.unestimated) + " not estimated)";
    out.push_back(s);
  }
  return out;
}

std::string plan_text(const SweepPlan& p) {
  std::ostringstream out;
  out << "sweep plan: " << p.suite << " on " << p.machine_id << "\n";
  char line[256];
  std::snprintf(line, sizeof(line), "  %-16s %-12s %-9s %7s %8s %12s %14s %9s\n", "rung",
                "precision", "ranks/thr", "steps", "trained", "validated", "tested (max)",
                "estimate");
  out << line;
  bool emulated = false, scaled = false;
  for (const auto& r : p.rungs) {
    const auto id = r.value("id", "");
    const auto status = r.value("status", "");
    if (status != "run") {
      const std::string why = status == "committed"  ? "committed run, not rerun"
                              : status == "skipped"  ? "skipped: needs " + r.value("needs", "?")
                              : status == "excluded" ? "not run (--only)"
                                                     : "FAILED: " + r.value("error", "?");
      std::snprintf(line, sizeof(line), "  %-16s %s\n", id.c_str(), why.c_str());
      out << line;
      continue;
    }
    const auto& w = r["work"];
    emulated = emulated || r.value("where_emulated", false);
    scaled = scaled || r.contains("scaled") || r.contains("budget_cuts");
    const std::string prec = r.value("precision", "") + (r.value("where_emulated", false) ? "*" : "") +
                             (r.contains("scaled") || r.contains("budget_cuts") ? "+" : "");
    const std::string ranks =
        std::to_string(r.value("ranks", 1)) + "x" + std::to_string(r.value("threads", 1));
    const int64_t vp = w.value("val_passes", int64_t(0));
    const std::string val = std::to_string(vp) + " x " +
                            std::to_string(vp > 0 ? w.value("val_samples", int64_t(0)) / vp : 0);
    const std::string test = std::to_string(w.value("test_passes_max", 0)) + " x " +
                             std::to_string(w.value("test_samples_per_pass", int64_t(0)));
    const std::string est = r["estimate_s"].is_number()
                                ? duration_text(r["estimate_s"].get<double>()) +
                                      (r.value("runs", 1) > 1 ? " each" : "")
                                : "?";
    std::snprintf(line, sizeof(line), "  %-16s %-12s %-9s %7lld %8lld %12s %14s %9s\n", id.c_str(),
                  prec.c_str(), ranks.c_str(), static_cast<long long>(w.value("steps", int64_t(0))),
                  static_cast<long long>(w.value("train_samples", int64_t(0))), val.c_str(),
                  test.c_str(), est.c_str());
    out << line;
  }
  if (emulated) out << "  * emulated on this CPU: the rung's where_emulated settings apply\n";
  if (scaled) out << "  + scaled to the budget (below)\n";
  for (const auto& r : p.rungs) {
    if (r.contains("limit_note") && r["limit_note"].is_string()) {
      out << "  ! " << r.value("id", "") << ": " << r["limit_note"].get<std::string>() << "\n";
    }
    if (r.contains("budget_cuts") && r["budget_cuts"].is_array()) {
      std::string cuts;
      for (const auto& c : r["budget_cuts"]) cuts += (cuts.empty() ? "" : "; ") + c.get<std::string>();
      out << "  + " << r.value("id", "") << ", to fit the budget: " << cuts << "\n";
    }
  }
  int most_runs = 1;
  for (const auto& r : p.rungs) {
    if (r.value("status", "") == "run" && !r.value("upstream", false)) most_runs = std::max(most_runs, r.value("runs", 1));
  }
  if (most_runs > 1) {
    out << "  the " << most_runs << " runs of each rung go round-robin: every rung's r1, then every rung's r2, ...\n";
  }
  if (!p.adaptive.empty()) out << "  " << p.adaptive << "\n";
  if (p.timing_runs > 0) {
    int rungs = 0, per = 0;
    int64_t steps = 0;
    for (const auto& r : p.rungs) {
      if (!r.contains("timing")) continue;
      ++rungs;
      per = r["timing"].value("runs", 0);
      steps = std::max<int64_t>(steps, r["timing"].value("steps", int64_t(0)));
    }
    out << "  then " << per << " timing run" << (per == 1 ? "" : "s") << " of each of " << rungs
        << " rungs, round-robin (the rung's config, at most " << steps
        << " steps, one evaluation batch): between-run samples of its speed"
        << (p.timing_s > 0 ? ", about " + duration_text(p.timing_s) + " in all" : std::string()) << "\n";
  }
  out << "  " << plan_summary(p) << "\n";
  return out.str();
}

std::string plans_text(const SweepPlans& plans) {
  std::string out;
  for (const auto& p : plans.suites) out += plan_text(p);
  const auto lines = plans_summary(plans);
  for (size_t i = plans.suites.size(); i < lines.size(); ++i) out += lines[i] + "\n";
  return out;
}

Json plans_json(const SweepPlans& plans) {
  Json suites = Json::array();
  for (const auto& p : plans.suites) {
    suites.push_back({{"suite", p.suite},
                      {"machine_id", p.machine_id},
                      {"runs", p.runs},
                      {"estimate_s", p.total_s ? Json(*p.total_s) : Json(nullptr)},
                      {"not_estimated", p.unestimated},
                      {"basis", p.basis},
                      {"rungs", p.rungs}});
  }
  return {{"suites", suites},
          {"runs", plans.runs},
          {"not_estimated", plans.unestimated},
          {"estimate_s", plans.total_s ? Json(*plans.total_s) : Json(nullptr)},
          {"unscaled_estimate_s", plans.unscaled_s ? Json(*plans.unscaled_s) : Json(nullptr)},
          {"budget_s", plans.budget_s > 0 ? Json(plans.budget_s) : Json(nullptr)},
          {"fraction", plans.fraction},
          {"floor_estimate_s", plans.floor_s ? Json(*plans.floor_s) : Json(nullptr)},
          {"cuts", plans.cuts}};
}

}  // namespace accel::ladder
