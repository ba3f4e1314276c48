// `accel-bench tune` (accel/ladder/tune.h): candidates, pruning, short
// throughput runs, confirmation to the target, ranking and the winner.
#include "accel/ladder/tune.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <ostream>
#include <set>
#include <sstream>

#include "accel/config/run_config.h"
#include "accel/dist/catalog.h"
#include "accel/ladder/child_run.h"
#include "accel/machine/machine.h"
#include "accel/machine/predict.h"
#include "accel/metrics/hardware.h"
#include "accel/metrics/metrics.h"
#include "accel/precision/catalog.h"
#include "accel/train/result.h"
#include "accel/train/task.h"
#include "accel/util/child_process.h"
#include "accel/util/errors.h"
#include "accel/util/hash.h"
#include "accel/util/json_doc.h"

namespace accel::ladder {

namespace fs = std::filesystem;
namespace st = results::stats;

double parse_duration_s(const std::string& text) {
  const auto bad = [&] {
    return ConfigError("--budget: \"" + text + "\" is not a duration (e.g. 30m, 1h, 90s, 1h30m, or minutes)");
  };
  if (text.empty()) throw bad();
  double total = 0;
  size_t i = 0;
  bool any = false;
  while (i < text.size()) {
    // Plain decimal digits only: stod would take " 5", "0x10" and "1e308".
    size_t used = 0;
    while (i + used < text.size() && (std::isdigit(static_cast<unsigned char>(text[i + used])) || text[i + used] == '.')) {
      ++used;
    }
    const std::string digits = text.substr(i, used);
    if (used == 0 || used > 12 || std::count(digits.begin(), digits.end(), '.') > 1 || digits == ".") throw bad();
    const double v = std::stod(digits);
    i += used;
    double unit = 60;  // a bare number: minutes
    if (i < text.size()) {
      const char c = text[i++];
      if (c == 'h') {
        unit = 3600;
      } else if (c == 'm') {
        unit = 60;
      } else if (c == 's') {
        unit = 1;
      } else {
        throw bad();
      }
    } else if (any) {
      throw bad();  // "1h30": the unit of 30 is unsaid
    }
    total += v * unit;
    any = true;
  }
  // From a second to a year: 1e-300 s or 1e9 h budget nothing a tune can keep to.
  if (!(total >= 1) || total > 366.0 * 86400) {
    throw ConfigError("--budget: \"" + text + "\" is outside 1 s to 366 days");
  }
  return total;
}

TuneMachine this_tune_machine(const Json& base, const plan::MachineFacts& facts) {
  TuneMachine m;
  m.cores = std::max(1, facts.cores);
  const auto& row = plan::resolve_accelerator(config::to_run_config(base).runtime.accelerator, facts);
  m.device = row.kind;
  // Only a 16-bit dtype can be emulated: the bf16 rows, then the fp16 ones.
  std::vector<std::string> low;
  for (const char* dtype : {"bf16", "fp16"}) {
    for (const auto& row : precision::precision_catalog()) {
      if (row.low() == dtype) low.push_back(row.name);
    }
  }
  for (const auto& p : low) {
    const auto s = metrics::precision_support(p, row.host ? "cpu" : row.kind, facts.cpu);
    if (s.emulated()) {
      m.emulated.push_back(p);
      if (m.emulated_note.empty()) m.emulated_note = s.warning;
    }
  }
  return m;
}

namespace {

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

using machine::format_double;

// The most memory any rank of a run held (nullopt: not recorded).
std::optional<double> peak_per_rank(const train::RunRecord& rec) {
  if (rec.peak_memory_bytes.empty()) return std::nullopt;
  return *std::max_element(rec.peak_memory_bytes.begin(), rec.peak_memory_bytes.end());
}

// A JSON value as a --set value ("bf16-mixed", 24, true).
std::string set_value(const Json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

std::vector<Json> list_of(const Json& space, const char* key, std::vector<Json> fallback) {
  if (!space.is_object() || !space.contains(key)) return fallback;
  const auto& v = space[key];
  if (!v.is_array() || v.empty()) {
    throw ConfigError(std::string("tune space: \"") + key + "\" must be a non-empty list");
  }
  return std::vector<Json>(v.begin(), v.end());
}

// One placement: ranks x threads, a strategy and a knob variant.
struct Placement {
  int ranks = 1, threads = 0;
  std::string strategy = "single";
  std::vector<std::string> knob_sets;  // e.g. runtime.bucket_mb=5
  std::string pruned;
};

}  // namespace

std::vector<Setting> tune_space(const Json& base, const Json& space, const TuneMachine& m, std::string* lr_rule_out) {
  if (!space.is_null() && !space.is_object()) throw ConfigError("tune space: expected a JSON object");
  if (space.is_object()) {
    for (const auto& [k, v] : space.items()) {
      static const std::set<std::string> known = {"global_batch", "lr_rule", "ranks", "strategies", "knobs", "fields"};
      if (!known.count(k)) {
        throw ConfigError("tune space: unknown key \"" + k + "\" (known: global_batch, lr_rule, ranks, strategies, knobs, fields)");
      }
    }
  }
  // The base read typed, through the one reader of a resolved config.
  const auto cfg = config::to_run_config(base);
  const auto& rt = cfg.runtime;
  const int base_ranks = rt.world_size();  // devices "auto" counts one a node, as the base's own sets keep it
  const int64_t base_global = cfg.train.batch_size * base_ranks;
  const std::string base_precision = rt.precision;
  // Global batches: half, the base's, double (a global batch keeps learning
  // the same whatever the ranks it is split over).
  std::vector<Json> batches = {Json(base_global)};
  if (base_global / 2 >= 2) batches.insert(batches.begin(), Json(base_global / 2));
  batches.push_back(Json(base_global * 2));
  batches = list_of(space, "global_batch", batches);
  std::string rule = "sqrt";
  if (space.is_object() && space.contains("lr_rule")) {
    if (!space["lr_rule"].is_string()) throw ConfigError("tune space: \"lr_rule\" must be sqrt, linear or fixed");
    rule = space["lr_rule"].get<std::string>();
    if (rule != "sqrt" && rule != "linear" && rule != "fixed") {
      throw ConfigError("tune space: lr_rule \"" + rule + "\" (sqrt, linear or fixed)");
    }
  }
  if (lr_rule_out) *lr_rule_out = rule;
  // Ranks: every count that divides the cores (threads = cores / ranks).
  std::vector<Json> ranks_default;
  const auto* found = plan::find_accelerator(m.device);
  if (found == nullptr) throw ConfigError("tune: the machine's accelerator \"" + m.device + "\" is no row");
  const auto& row = *found;
  for (int r = 1; r <= m.cores; ++r) {
    if (row.host ? m.cores % r == 0 : r == 1) ranks_default.push_back(r);
  }
  const auto ranks = list_of(space, "ranks", ranks_default);
  std::vector<Json> strategies_default;
  for (const auto& s : dist::strategy_catalog()) {
    if (!s.one_rank) strategies_default.push_back(s.name);
  }
  const auto strategies = list_of(space, "strategies", strategies_default);
  const bool knobs = !space.is_object() || !space.contains("knobs") || space["knobs"] == true;
  // Other fields: precision and the optimizer's implementation by default.
  std::vector<std::pair<std::string, std::vector<Json>>> fields;
  std::vector<Json> precisions = {"32-true", "bf16-mixed"};
  if (!row.host) precisions.push_back("16-mixed");  // fp16 autocast with a scaler: a device's
  if (std::find(precisions.begin(), precisions.end(), Json(base_precision)) == precisions.end()) {
    precisions.insert(precisions.begin(), base_precision);
  }
  fields.push_back({"runtime.precision", precisions});
  const std::string& opt = cfg.optim.name;
  if (row.host && (opt == "adam" || opt == "adamw")) {
    fields.push_back({"optim.implementation", {"fused", "torch"}});
  }
  if (row.graphs) fields.push_back({"runtime.cuda_graphs", {false, true}});
  if (!row.host) fields.push_back({"runtime.matmul_precision", {"highest", "high"}});
  if (space.is_object() && space.contains("fields")) {
    if (!space["fields"].is_object()) throw ConfigError("tune space: \"fields\" must be an object of field: [values]");
    for (const auto& [k, v] : space["fields"].items()) {
      if (k == "train.batch_size" || k == "runtime.devices" || k == "runtime.threads" || k == "runtime.strategy") {
        throw ConfigError("tune space: fields." + k + ": set through global_batch, ranks and strategies");
      }
      if (!v.is_array() || v.empty()) throw ConfigError("tune space: fields." + k + " must be a non-empty list");
      auto it = std::find_if(fields.begin(), fields.end(), [&](const auto& f) { return f.first == k; });
      if (it != fields.end()) {
        it->second.assign(v.begin(), v.end());
      } else {
        fields.push_back({k, std::vector<Json>(v.begin(), v.end())});
      }
    }
  }
  // Placements.
  std::vector<Placement> placements;
  for (const auto& rj : ranks) {
    if (!rj.is_number_integer() || rj.get<int>() < 1) throw ConfigError("tune space: ranks must be positive integers");
    const int r = rj.get<int>();
    const int threads = std::max(1, m.cores / r);
    if (r == 1) {
      placements.push_back({1, threads, "single", {}, ""});
      continue;
    }
    for (const auto& sj : strategies) {
      if (!sj.is_string()) throw ConfigError("tune space: strategies must be names");
      const auto* info = dist::find_strategy(sj.get<std::string>());
      if (info == nullptr || info->one_rank) {
        throw ConfigError("tune space: strategies: \"" + sj.get<std::string>() + "\" is not a multi-rank strategy (" +
                          dist::multi_rank_strategy_list() + ")");
      }
      std::vector<std::vector<std::string>> variants = {{}};
      if (knobs) {
        for (const auto& k : info->knobs) {
          for (size_t i = 1; i < k.values.size(); ++i) {  // the first value is the default
            std::string v = k.values[i];
            if (v.size() >= 2 && v.front() == '"') v = v.substr(1, v.size() - 2);
            variants.push_back({k.field + "=" + v});
          }
        }
      }
      for (const auto& v : variants) {
        Placement p{r, threads, info->name, v, ""};
        if (r * threads > m.cores || r > m.cores) {
          p.pruned = std::to_string(r) + " ranks x " + std::to_string(threads) + " thread(s) on " +
                     std::to_string(m.cores) + " cores: more ranks than cores only take turns on them";
        }
        placements.push_back(p);
      }
    }
  }
  // The cross product.
  std::vector<Setting> out;
  const double base_lr = cfg.optim.lr;
  std::vector<size_t> idx(fields.size(), 0);
  for (const auto& bj : batches) {
    if (!bj.is_number_integer() || bj.get<int64_t>() < 1) throw ConfigError("tune space: global_batch must be positive integers");
    const int64_t gb = bj.get<int64_t>();
    for (const auto& p : placements) {
      std::fill(idx.begin(), idx.end(), 0);
      for (;;) {
        Setting s;
        s.global_batch = gb;
        s.ranks = p.ranks;
        s.threads = p.threads;
        s.strategy = p.strategy;
        s.pruned = p.pruned;
        if (s.pruned.empty() && gb % p.ranks != 0) {
          s.pruned = "global batch " + std::to_string(gb) + " does not split over " + std::to_string(p.ranks) + " ranks";
        }
        const int64_t per = std::max<int64_t>(1, gb / p.ranks);
        s.sets.push_back("train.batch_size=" + std::to_string(per));
        double lr = base_lr;
        if (rule == "sqrt") lr = base_lr * std::sqrt(double(gb) / double(base_global));
        if (rule == "linear") lr = base_lr * double(gb) / double(base_global);
        s.sets.push_back("optim.lr=" + format_double("%.6g", lr));
        s.sets.push_back("runtime.devices=" + std::to_string(p.ranks));
        s.sets.push_back("runtime.threads=" + std::to_string(p.threads));
        // One rank under the base's own "auto" (single there) keeps it, so the
        // base's setting resolves to the base's config.
        if (!(p.ranks == 1 && rt.strategy == "auto")) s.sets.push_back("runtime.strategy=" + p.strategy);
        for (const auto& k : p.knob_sets) s.sets.push_back(k);
        std::vector<std::string> extra;
        for (size_t f = 0; f < fields.size(); ++f) {
          const auto& v = fields[f].second[idx[f]];
          s.sets.push_back(fields[f].first + "=" + set_value(v));
          if (fields[f].first == "runtime.precision") s.precision = set_value(v);
          else extra.push_back(fields[f].first + "=" + set_value(v));
        }
        // Mixed precision and several ranks need the Fabric loop (the plain
        // loop is the article's one-device fp32 script); it computes the same.
        if (s.precision != "32-true" || p.ranks > 1) s.sets.push_back("train.loop=fabric");
        if (s.pruned.empty() && std::count(m.emulated.begin(), m.emulated.end(), s.precision)) {
          s.pruned = s.precision + " is emulated on this hardware: " + m.emulated_note;
        }
        s.label = "global batch " + std::to_string(gb) + ", " + s.precision + ", " + std::to_string(p.ranks) +
                  (p.ranks == 1 ? " rank" : " ranks") + " x " + std::to_string(p.threads) + " thr" +
                  (p.ranks > 1 ? ", " + p.strategy : "") +
                  (p.knob_sets.empty() ? "" : " (" + join(p.knob_sets, ", ") + ")") +
                  (extra.empty() ? "" : ", " + join(extra, ", "));
        s.id = util::fnv1a_hex(join(s.sets, "\n")).substr(0, 10);
        out.push_back(std::move(s));
        size_t f = 0;
        for (; f < fields.size(); ++f) {
          if (++idx[f] < fields[f].second.size()) break;
          idx[f] = 0;
        }
        if (f == fields.size()) break;
      }
    }
  }
  // The base: the first candidate that is the base's own setting where the
  // space holds it; else added.
  Setting base_setting;
  base_setting.is_base = true;
  base_setting.global_batch = base_global;
  base_setting.ranks = base_ranks;
  base_setting.threads = rt.threads;
  base_setting.precision = base_precision;
  base_setting.strategy = dist::resolve_strategy(rt.strategy, base_ranks);
  base_setting.label = "base (global batch " + std::to_string(base_global) + ", " + base_precision + ", " +
                       std::to_string(base_ranks) + (base_ranks == 1 ? " rank" : " ranks") + ")";
  base_setting.id = "base";
  out.insert(out.begin(), base_setting);
  return out;
}

std::optional<size_t> rank_rows(std::vector<TuneRow>& rows) {
  std::vector<size_t> ranked;
  for (size_t i = 0; i < rows.size(); ++i) {
    auto& r = rows[i];
    r.rank = 0;
    if (!r.confirmed) {
      r.verdict = r.samples_per_s ? "measured only (not confirmed to the target)" : r.verdict;
      continue;
    }
    if (!r.time_to_target.valid) {
      r.verdict = "no score: " + r.time_to_target.why;
      continue;
    }
    if (!r.is_base) {
      if (!r.convergence) {
        r.verdict = "not ranked: no convergence check (samples to target unknown)";
        continue;
      }
      if (r.convergence->verdict == "faster") {
        r.verdict = "not ranked: converges faster than the base allows (samples to target " +
                    format_double("%.0f", r.convergence->mean) + ", at least " + format_double("%.0f", r.convergence->min_mean) +
                    " allowed): a suspect evaluation or a change that learned differently";
        continue;
      }
    }
    ranked.push_back(i);
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [&](size_t a, size_t b) { return rows[a].time_to_target.mean < rows[b].time_to_target.mean; });
  for (size_t k = 0; k < ranked.size(); ++k) {
    auto& r = rows[ranked[k]];
    r.rank = int(k + 1);
    r.verdict = k == 0 ? "winner" : "ranked";
    if (r.is_base && k == 0) r.verdict = "winner (the base itself)";
    if (r.convergence && r.convergence->verdict == "slower") {
      r.verdict += "; converges significantly slower than the base (samples to target " +
                   format_double("%.0f", r.convergence->mean) + ", at most " + format_double("%.0f", r.convergence->max_mean) +
                   " within the test): its time to target pays for the extra samples";
    }
  }
  if (ranked.empty()) return std::nullopt;
  return ranked.front();
}

namespace {

// Row order in the table: ranked first, then the rest by measured throughput.
std::vector<size_t> table_order(const std::vector<TuneRow>& rows) {
  std::vector<size_t> order(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto& x = rows[a];
    const auto& y = rows[b];
    if ((x.rank > 0) != (y.rank > 0)) return x.rank > 0;
    if (x.rank > 0) return x.rank < y.rank;
    if (x.confirmed != y.confirmed) return x.confirmed;
    return x.samples_per_s.value_or(-1) > y.samples_per_s.value_or(-1);
  });
  return order;
}

std::string opt_num(const std::optional<double>& v, const char* f) { return v ? format_double(f, *v) : "-"; }

std::string time_text(double s) { return s >= 120 ? format_double("%.2f min", s / 60) : format_double("%.1f s", s); }

// A setting's one-rank twin key: its global batch, precision and every set
// that is not the runtime's, its batch or its loop.
std::string single_key(const Setting& s) {
  std::string k = std::to_string(s.global_batch) + "|" + s.precision;
  for (const auto& set : s.sets) {
    if (set.rfind("runtime.", 0) == 0 || set.rfind("train.batch_size", 0) == 0 || set.rfind("train.loop", 0) == 0)
      continue;
    k += "|" + set;
  }
  return k;
}

class Tuner {
 public:
  explicit Tuner(const TuneOptions& o) : o_(o) {}
  TuneOutcome run();

 private:
  void say(const std::string& line) {
    if (o_.log) *o_.log << line << "\n" << std::flush;
  }
  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count() + spent_before_;
  }
  bool fits(double estimate_s, const std::string& what);
  // A run of the base with `sets` in OUT/runs/<name>; its record (reused
  // under --resume when ok with the same resolved config).
  train::RunRecord run(const std::string& name, const std::vector<std::string>& sets, const std::string& label);
  std::string dry_run(const std::vector<std::string>& sets, const std::string& name);
  // --resume: the run in OUT/runs/<name> is ok with this config (reused, so
  // no budget, dry run or measuring share stands in its way).
  bool reusable(const std::string& name, const std::vector<std::string>& sets) const;
  void save();
  // Writes tune.md (returned) and winner.json.
  std::string write_outputs(const std::optional<size_t>& winner);
  std::vector<std::string> short_sets() const;
  std::vector<std::string> target_sets(int i) const;
  std::optional<double> predict(const Setting& s, const fs::path& single_result);

  // The three stages of run(): the space resolved and pruned by the facts
  // and the schema, OUT claimed (prune); short throughput runs of what is
  // left, one-rank settings first, multi-rank ones pruned by prediction where
  // a calibration allows (measure); the base and the fastest run to the
  // target and scored (confirm). measure and confirm return false when a
  // signal stopped them (tune.json then says "interrupted").
  void prune();
  bool measure();
  void prune_by_prediction(std::vector<size_t>& order);
  bool measure_one(TuneRow& row);
  bool confirm();
  // A confirmed setting's runs: time and samples to the target (nullopt: not
  // reached), the test accuracies of the runs that reached it.
  struct ConfirmedSide {
    std::vector<std::optional<double>> times, samples;
    std::vector<double> test_accs;
  };
  using Confirmed = std::map<size_t, ConfirmedSide>;  // by row
  void score(const Confirmed& runs, int64_t every_samples);
  Setting& setting_of(const std::string& id);
  bool stopped();
  double short_estimate() const;

  const TuneOptions& o_;
  fs::path dir_;
  metrics::DirLock lock_;  // on OUT while the tune writes it
  Json base_;
  TuneMachine machine_;
  std::string lr_rule_;
  std::vector<Setting> settings_;
  std::vector<TuneRow> rows_;
  Json state_ = Json::object();  // tune.json
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
  double spent_before_ = 0;
  std::vector<double> short_wall_, target_wall_;
  int64_t eval_every_steps_base_ = 0;
  int failed_ = 0;
  int stop_signal_ = 0;
  std::vector<std::string> not_run_;
  std::string base_twin_;  // the candidate that resolved to the base's config ("" = none)
  train::MetricFacts metric_;  // the base's task's metric, which the target is of
  bool predicts_ = false;  // --calibration has a comm fit: multi-rank settings are predicted
  // "batch|precision|extras" -> the folder of its one-rank short run
  std::map<std::string, fs::path> single_result_;
  int total_ = 0, done_ = 0;  // settings to measure, and taken so far
};

std::vector<std::string> Tuner::short_sets() const {
  return {"train.max_steps=" + std::to_string(o_.short_steps), "train.save_checkpoint=false",
          "train.checkpoint_every=0", "train.limit_eval_batches=1", "train.val_every_steps=0",
          "train.test_weights=last", "train.target=0", "train.stop_at_target=false",
          "train.warmup_steps=" + std::to_string(std::min(5, std::max(1, o_.short_steps / 4)))};
}

std::vector<std::string> Tuner::target_sets(int i) const {
  return {"train.target=" + format_double("%.17g", o_.target), "train.stop_at_target=true", "train.save_checkpoint=false",
          "train.checkpoint_every=0", "train.seed=" + std::to_string(base_["train"]["seed"].get<uint64_t>() + uint64_t(i))};
}

bool Tuner::reusable(const std::string& name, const std::vector<std::string>& sets) const {
  if (!o_.resume) return false;
  auto all = o_.sets;
  all.insert(all.end(), sets.begin(), sets.end());
  return earlier_run(dir_ / "runs" / name, config::load_config(o_.config, all), o_.resume) == Earlier::Reuse;
}

bool Tuner::fits(double estimate_s, const std::string& what) {
  if (!(o_.budget_s > 0)) return true;
  if (elapsed() + estimate_s <= o_.budget_s) return true;
  not_run_.push_back(what + ": not run, the budget (" + time_text(o_.budget_s) + ") would be exceeded (estimated " +
                     time_text(estimate_s) + " with " + time_text(std::max(0.0, o_.budget_s - elapsed())) + " left)");
  say("  " + not_run_.back());
  return false;
}

std::string Tuner::dry_run(const std::vector<std::string>& sets, const std::string& name) {
  std::vector<std::string> argv = {o_.exe.string(), "run", "-c", o_.config.string(), "--dry-run", "-q",
                                   "--out", (dir_ / "runs" / name).string()};
  for (const auto& s : o_.sets) argv.insert(argv.end(), {"--set", s});
  for (const auto& s : sets) argv.insert(argv.end(), {"--set", s});
  fs::create_directories(dir_ / "logs");
  const auto child = util::run_child(argv, dir_ / "logs" / (name + ".dry-run.log"), [](const std::string&) {});
  if (child.stop_signal != 0) stop_signal_ = child.stop_signal;
  if (child.exit_code == 0) return "";
  return child.last_line.empty() ? "refused (exit " + std::to_string(child.exit_code) + ")" : child.last_line;
}

train::RunRecord Tuner::run(const std::string& name, const std::vector<std::string>& sets, const std::string& label) {
  const fs::path dir = dir_ / "runs" / name;
  auto all = o_.sets;
  all.insert(all.end(), sets.begin(), sets.end());
  const Json resolved = config::load_config(o_.config, all);
  // Under --resume, as the sweep: an ok run of this resolved config is
  // reused, one a signal stopped continues from its checkpoint.
  train::RunRecord prior;
  const auto earlier = earlier_run(dir, resolved, o_.resume, false, &prior);
  if (earlier == Earlier::Reuse) {
    say("  " + label + ": reused (resolved config unchanged)");
    return prior;
  }
  ChildRun child_run;
  child_run.exe = o_.exe;
  child_run.config = o_.config;
  child_run.dir = dir;
  child_run.sets = all;
  child_run.args = {"-q"};
  child_run.continue_run = earlier == Earlier::Continue;
  if (child_run.continue_run) say("  " + label + ": continuing the interrupted run from its checkpoint");
  const auto done = run_child_run(child_run);
  if (done.status == "interrupted") {
    stop_signal_ = done.child.stop_signal;
    say("  " + label + ": interrupted by signal " + std::to_string(done.child.stop_signal));
    return done.record;
  }
  if (done.status == "failed") {
    ++failed_;
    say("  " + label + ": FAILED (exit " + std::to_string(done.child.exit_code) + "): " + done.error +
        " [log: " + (dir / "run.log").string() + "]");
  }
  state_["walls"][name] = done.wall_s;
  return done.record;
}

std::optional<double> Tuner::predict(const Setting& s, const fs::path& single_result) {
  if (o_.calibration.empty() || s.ranks <= 1) return std::nullopt;
  machine::PredictRequest q;
  q.result = single_result.string();
  q.devices = {s.ranks};
  q.strategy = s.strategy;
  q.calibration = o_.calibration.string();
  q.threads_per_device = s.threads;
  try {
    for (const auto& set : s.sets) {
      const auto eq = set.find('=');
      const auto k = set.substr(0, eq), v = set.substr(eq + 1);
      if (k == "runtime.fsdp_sharding") q.fsdp_sharding = v;
      if (k == "runtime.bucket_mb") q.bucket_mb = std::stod(v);
      if (k == "runtime.fsdp_prefetch") q.fsdp_prefetch = v == "true" ? 1 : 0;
    }
    const auto out = machine::run_predict(q);
    for (const auto& r : out.json.at("rows")) {
      if (r.value("devices", 0) == s.ranks) return r.value("samples_per_s", 0.0);
    }
  } catch (const std::exception& e) {
    say("  " + s.label + ": no prediction (" + e.what() + ")");
  }
  return std::nullopt;
}

void Tuner::save() {
  Json rows = Json::array();
  for (const auto& r : rows_) {
    Json j = {{"id", r.id}, {"label", r.label}, {"is_base", r.is_base}, {"confirmed", r.confirmed},
              {"verdict", r.verdict}, {"rank", r.rank}};
    const auto put = [&](const char* k, const std::optional<double>& v) { j[k] = v ? Json(*v) : Json(nullptr); };
    put("predicted_samples_per_s", r.predicted_samples_per_s);
    put("samples_per_s", r.samples_per_s);
    put("memory_per_rank_bytes", r.memory_per_rank_bytes);
    put("test_acc", r.test_acc);
    if (r.confirmed) {
      j["time_to_target"] = {{"valid", r.time_to_target.valid}, {"mean_s", r.time_to_target.mean},
                             {"kept_s", r.time_to_target.kept}, {"why", r.time_to_target.why},
                             {"runs", r.time_to_target.runs}, {"misses", r.time_to_target.misses}};
      if (r.time_to_target.ci_low) j["time_to_target"]["ci95_s"] = {*r.time_to_target.ci_low, *r.time_to_target.ci_high};
      j["samples_to_target"] = {{"valid", r.samples_to_target.valid}, {"mean", r.samples_to_target.mean},
                                {"kept", r.samples_to_target.kept}};
      if (r.convergence) {
        const auto& c = *r.convergence;
        j["convergence"] = {{"verdict", c.verdict}, {"mean", c.mean}, {"ref_mean", c.ref_mean}, {"ref_sd", c.ref_sd},
                            {"min_mean", c.min_mean}, {"max_mean", c.max_mean}, {"t", c.t},
                            {"normalisation", c.normalisation}};
      }
    }
    rows.push_back(j);
  }
  state_["rows"] = rows;
  Json pruned = Json::array();
  for (const auto& s : settings_) {
    if (!s.pruned.empty()) pruned.push_back({{"id", s.id}, {"label", s.label}, {"why", s.pruned}});
  }
  state_["pruned"] = pruned;
  state_["not_run"] = not_run_;
  state_["elapsed_s"] = elapsed();
  metrics::write_json_atomic(dir_ / "tune.json", state_);
}

std::string Tuner::write_outputs(const std::optional<size_t>& winner) {
  std::ostringstream md;
  md << "# tune: " << base_.value("name", o_.config.stem().string()) << " to " << metric_.shown(o_.target)
     << " validation " << metric_.name << "\n\n"
     << "Machine " << state_.value("machine_id", "?") << ", " << machine_.cores << " cores; "
     << "started " << state_.value("started_at", "?") << "; " << time_text(elapsed()) << " spent"
     << (o_.budget_s > 0 ? " of a " + time_text(o_.budget_s) + " budget" : "") << ". Base config "
     << o_.config.string() << (o_.sets.empty() ? "" : " with " + join(o_.sets, " ")) << ".\n\n"
     << "Learning rate: " << lr_rule_ << " rule in the global batch ("
     << (lr_rule_ == "sqrt" ? "lr x sqrt(global batch / the base's)"
                            : lr_rule_ == "linear" ? "lr x global batch / the base's" : "the base's lr unchanged")
     << "). Throughput: one run of " << o_.short_steps << " steps per setting (one sample on a shared machine). "
     << "Time to target: " << o_.runs << " runs per confirmed setting (seeds shared), MLPerf's olympic mean "
     << "(the fastest and the slowest dropped), training with its validations up to the one that reached the "
     << "target; convergence: samples to target against the base's by MLPerf's one-sided two-sample t-test at "
     << "p = 0.05; a setting that converges faster than the base allows is never ranked, one significantly "
        "slower is ranked and named (its time pays for the extra samples).\n\n"
     << "| rank | setting | predicted samples/s | measured samples/s | time to target | 95% interval | "
        "samples to target | test " << metric_.short_name() << " | memory/rank | verdict |\n|---|---|---|---|---|---|---|---|---|---|\n";
  for (const size_t i : table_order(rows_)) {
    const auto& r = rows_[i];
    md << "| " << (r.rank > 0 ? std::to_string(r.rank) : "-") << " | " << r.label << " | "
       << opt_num(r.predicted_samples_per_s, "%.1f") << " | " << opt_num(r.samples_per_s, "%.1f") << " | ";
    if (r.confirmed && r.time_to_target.valid) {
      md << time_text(r.time_to_target.mean) << " | "
         << (r.time_to_target.ci_low ? time_text(*r.time_to_target.ci_low) + " - " + time_text(*r.time_to_target.ci_high)
                                     : "-")
         << " | " << (r.samples_to_target.valid ? format_double("%.0f", r.samples_to_target.mean) : "-") << " | ";
    } else {
      md << "- | - | - | ";
    }
    md << (r.test_acc ? metric_.shown(*r.test_acc) : "-") << " | "
       << (r.memory_per_rank_bytes ? format_double("%.2f GB", *r.memory_per_rank_bytes / 1e9) : "-") << " | " << r.verdict
       << " |\n";
  }
  if (winner) {
    const auto& w = rows_[*winner];
    const TuneRow* base = nullptr;
    for (const auto& r : rows_) {
      if (r.is_base) base = &r;
    }
    md << "\nWinner: " << w.label << ", time to target " << time_text(w.time_to_target.mean);
    if (base && base->confirmed && base->time_to_target.valid && base != &w) {
      md << " against the base's " << time_text(base->time_to_target.mean) << " ("
         << format_double("%.2fx", base->time_to_target.mean / w.time_to_target.mean) << ")";
    }
    md << ". Its config: winner.json (`accel-bench run -c " << (dir_ / "winner.json").string() << "`).\n";
  } else {
    md << "\nNo winner: no setting was confirmed to the target.\n";
  }
  md << "\n## Pruned before any run\n\n";
  int pruned = 0;
  for (const auto& s : settings_) {
    if (s.pruned.empty()) continue;
    ++pruned;
    md << "- " << s.label << ": " << s.pruned << "\n";
  }
  if (pruned == 0) md << "None.\n";
  if (!not_run_.empty()) {
    md << "\n## Not run\n\n";
    for (const auto& n : not_run_) md << "- " << n << "\n";
  }
  metrics::write_file_atomic(dir_ / "tune.md", md.str());
  if (winner) {
    const auto& w = rows_[*winner];
    const Setting* s = nullptr;
    for (const auto& x : settings_) {
      if (x.id == w.id) s = &x;
    }
    Json cfg = {{"extends", fs::absolute(o_.config).lexically_normal().string()},
                {"name", base_.value("name", std::string("run")) + "-tuned"},
                {"description", "accel-bench tune's winner to " + format_double("%.4g", o_.target) + " validation " + metric_.name + " on " +
                                    state_.value("machine_id", std::string("?")) + ": " + w.label}};
    auto sets = o_.sets;
    if (s) sets.insert(sets.end(), s->sets.begin(), s->sets.end());
    // Validated as it was confirmed: every eval_every_samples training samples.
    if (s && state_.contains("eval_every_samples")) {
      sets.push_back("train.val_every_steps=" +
                     std::to_string(std::max<int64_t>(1, state_["eval_every_samples"].get<int64_t>() / s->global_batch)));
    }
    for (const auto& set : sets) {
      const auto eq = set.find('=');
      const auto path = set.substr(0, eq);
      const auto dot = path.find('.');
      Json v = parse_json_or_discarded(set.substr(eq + 1));
      if (v.is_discarded()) v = set.substr(eq + 1);
      if (dot == std::string::npos) {
        cfg[path] = v;
      } else {
        cfg[path.substr(0, dot)][path.substr(dot + 1)] = v;
      }
    }
    metrics::write_json_atomic(dir_ / "winner.json", cfg);
    try {
      config::load_config(dir_ / "winner.json", {});
    } catch (const std::exception& e) {
      throw RunError("tune: the winner's config does not load (" + std::string(e.what()) + ")");
    }
  }
  return md.str();
}

TuneOutcome Tuner::run() {
  prune();
  if (!measure()) return {dir_, true, "", {}, failed_};
  if (!confirm()) return {dir_, true, "", {}, failed_};
  const auto winner = rank_rows(rows_);
  state_["status"] = "done";
  save();
  const std::string md = write_outputs(winner);
  say("");
  say(md);
  return {dir_, false, winner ? rows_[*winner].label : "", winner ? dir_ / "winner.json" : fs::path(), failed_};
}

Setting& Tuner::setting_of(const std::string& id) {
  for (auto& s : settings_) {
    if (s.id == id) return s;
  }
  throw RunError("tune: no setting " + id);
}

bool Tuner::stopped() {
  if (stop_signal_ == 0) return false;
  state_["status"] = "interrupted";
  save();
  return true;
}

double Tuner::short_estimate() const {
  if (short_wall_.empty()) return 0.0;
  double s = 0;
  for (double w : short_wall_) s += w;
  return s / double(short_wall_.size());
}

void Tuner::prune() {
  if (!(o_.target > 0 && o_.target <= train::kMaxMetric)) {
    throw ConfigError("--target: the base's validation metric to reach, > 0 (an accuracy in (0, 1], e.g. 0.80)");
  }
  if (o_.runs < 4) {
    throw ConfigError("--runs: at least 4 (an olympic score drops the fastest and the slowest, and the "
                      "convergence check needs two runs left a side)");
  }
  if (o_.short_steps < 2) throw ConfigError("--short-steps: at least 2");
  if (o_.confirm < 0) throw ConfigError("--confirm: 0 or more");
  base_ = config::load_config(o_.config, o_.sets);
  // The metric the base's task validates by (accuracy for classification).
  metric_ = train::task_metric(base_.contains("train") ? base_["train"].value("task", std::string("classification"))
                                                        : std::string("classification"));
  if (metric_.proportion && o_.target > 1) {
    throw ConfigError("--target: " + format_double("%g", o_.target) + " is above 1, but the base's " + metric_.name +
                      " is a fraction (0.80 for 80%)");
  }
  const Json machine = machine::this_machine();
  machine_ = this_tune_machine(base_, plan::facts_from_env(machine["env"]));
  const Json space = o_.space.empty() ? Json() : read_json_file(o_.space);
  settings_ = tune_space(base_, space, machine_, &lr_rule_);
  // The base as it runs (threads 0 = the cores a rank has, said explicitly, so
  // a candidate that is the base's own setting resolves to the same config
  // and is measured once); every candidate resolved: what the schema refuses
  // is pruned with its message.
  if (base_["runtime"].value("threads", 0) == 0) {
    const int ranks = settings_.front().ranks;
    settings_.front().sets.push_back("runtime.threads=" + std::to_string(std::max(1, machine_.cores / std::max(1, ranks))));
  }
  const auto resolve = [&](const Setting& s) {
    auto all = o_.sets;
    all.insert(all.end(), s.sets.begin(), s.sets.end());
    return config::load_config(o_.config, all);
  };
  const std::string base_hash = config::config_hash(resolve(settings_.front()));
  std::set<std::string> seen = {base_hash};
  for (auto& s : settings_) {
    if (s.is_base || !s.pruned.empty()) continue;
    try {
      const auto h = config::config_hash(resolve(s));
      if (!seen.insert(h).second) {
        s.pruned = h == base_hash ? "the base's own setting" : "the same config as another";
        if (h == base_hash) base_twin_ = s.id;
      }
    } catch (const ConfigError& e) {
      s.pruned = std::string("the config refuses it: ") + e.what();
    }
  }
  predicts_ = false;
  if (!o_.calibration.empty()) {
    const Json cal = read_json_file(o_.calibration);  // names a bad file now
    predicts_ = cal.is_object() && cal.contains("comm");
  }
  dir_ = o_.out.empty() ? fs::path("runs/tune") / base_.value("name", o_.config.stem().string()) : o_.out;
  // OUT is this tune's for its life, as a sweep's set is: a second tune into
  // it (with --resume or without) is refused, naming the holder's pid, before
  // it reads tune.json.
  lock_ = metrics::DirLock(dir_, "tune");
  const Json request = {{"config", fs::absolute(o_.config).lexically_normal().string()}, {"sets", o_.sets},
                        {"target", o_.target}, {"space", space}, {"short_steps", o_.short_steps},
                        {"runs", o_.runs}, {"confirm", o_.confirm}, {"eval_every_samples", o_.eval_every_samples}};
  if (fs::exists(dir_ / "tune.json")) {
    if (!o_.resume) {
      throw ConfigError(dir_.string() + " holds a tune already (tune.json): continue it with --resume, or give "
                        "another --out");
    }
    Json prior;
    try {
      prior = read_json_file(dir_ / "tune.json");
    } catch (...) {
      lock_.release_and_tidy();
      throw;
    }
    if (!prior.is_object() || prior.value("request", Json()) != request) {
      throw ConfigError("--resume " + dir_.string() + ": tune.json was made by another request (config, sets, target, "
                        "space or run counts differ)");
    }
    spent_before_ = prior.value("elapsed_s", 0.0);
    state_ = prior;
  }
  fs::create_directories(dir_);
  state_["request"] = request;
  state_["machine_id"] = machine["id"];
  if (!state_.contains("started_at")) state_["started_at"] = metrics::utc_now();
  state_["lr_rule"] = lr_rule_;
  state_["status"] = "running";
  int candidates = 0, pruned = 0;
  for (const auto& s : settings_) (s.pruned.empty() ? candidates : pruned) += 1;
  say("tune: " + o_.config.string() + " to " + metric_.shown(o_.target) + " validation " + metric_.name + " on " +
      machine["id"].get<std::string>() + " (" + std::to_string(machine_.cores) + " cores) -> " + dir_.string());
  say("  " + std::to_string(settings_.size() - 1) + " settings: " + std::to_string(pruned) + " pruned by the facts, " +
      std::to_string(candidates - 1) + " candidates besides the base; lr rule " + lr_rule_ +
      (o_.budget_s > 0 ? "; budget " + time_text(o_.budget_s) : ""));
  if (!predicts_) {
    say(std::string("  ") + (o_.calibration.empty() ? "no --calibration" : o_.calibration.string() + " has no comm fit") +
        ": multi-rank settings are measured without a prediction (accel-bench calibrate --comm)");
  }
  rows_.clear();
  for (const auto& s : settings_) {
    if (!s.pruned.empty()) continue;
    TuneRow r;
    r.id = s.id;
    r.label = s.label;
    r.is_base = s.is_base;
    rows_.push_back(r);
  }
}

bool Tuner::measure() {
  // The base, then single-rank candidates, then multi-rank ones worth it.
  total_ = int(rows_.size());
  done_ = 0;
  for (int pass = 0; pass < 2; ++pass) {  // pass 0: one rank; pass 1: several
    std::vector<size_t> order;
    for (size_t i = 0; i < rows_.size(); ++i) {
      const auto& s = setting_of(rows_[i].id);
      if ((pass == 0) == (s.ranks == 1 || s.is_base)) order.push_back(i);
    }
    if (pass == 1) prune_by_prediction(order);
    for (const size_t i : order) {
      if (!measure_one(rows_[i])) return false;
    }
  }
  rows_.erase(std::remove_if(rows_.begin(), rows_.end(), [&](const TuneRow& r) { return !setting_of(r.id).pruned.empty(); }),
              rows_.end());
  return true;
}

void Tuner::prune_by_prediction(std::vector<size_t>& order) {
  // Predicted first (no run): the slow ones pruned, the rest measured fastest first.
  for (const size_t i : order) {
    auto& row = rows_[i];
    auto& s = setting_of(row.id);
    const auto it = single_result_.find(single_key(s));
    if (!predicts_ || it == single_result_.end()) continue;
    row.predicted_samples_per_s = predict(s, it->second / "result.json");
    const auto single = train::read_run_record(it->second);
    if (row.predicted_samples_per_s && single.samples_per_s &&
        *row.predicted_samples_per_s < 0.8 * *single.samples_per_s) {
      s.pruned = "predicted " + format_double("%.1f", *row.predicted_samples_per_s) + " samples/s, below 80% of the " +
                 format_double("%.1f", *single.samples_per_s) + " one rank measured at this batch and precision";
      row.verdict = "pruned by prediction";
      ++done_;
      say("[" + std::to_string(done_) + "/" + std::to_string(total_) + "] " + s.label + ": " + s.pruned);
    }
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return rows_[a].predicted_samples_per_s.value_or(0) > rows_[b].predicted_samples_per_s.value_or(0);
  });
}

bool Tuner::measure_one(TuneRow& row) {
  // Measuring takes at most this share of a budget: the rest confirms.
  const double measure_share = 0.4;
  auto& s = setting_of(row.id);
  if (!s.pruned.empty()) return true;
  ++done_;
  const std::string head = "[" + std::to_string(done_) + "/" + std::to_string(total_) + "] " + s.label;
  auto sets = s.sets;
  for (const auto& x : short_sets()) sets.push_back(x);
  const bool reuse = reusable("short-" + s.id, sets);
  if (!reuse && o_.budget_s > 0 && !s.is_base && elapsed() > measure_share * o_.budget_s) {
    not_run_.push_back(head + ": not measured, the measuring share of the budget (" +
                       format_double("%.0f%%", measure_share * 100) + ") is spent; the rest confirms to the target");
    say(not_run_.back());
    return true;
  }
  if (!s.is_base && !reuse) {
    if (const auto why = dry_run(s.sets, s.id); !why.empty()) {
      if (stopped()) return false;
      s.pruned = "refused before any work: " + why;
      say(head + ": " + s.pruned);
      return true;
    }
  }
  const double left = o_.budget_s > 0 ? o_.budget_s - elapsed() : 0;
  const int remaining = total_ - done_ + 1;
  if (!reuse && !fits(short_estimate(), head)) return true;
  say(head + ": throughput (" + std::to_string(o_.short_steps) + " steps)" +
      (short_wall_.empty() ? "" : ", about " + time_text(short_estimate() * remaining) + " of throughput runs left") +
      (o_.budget_s > 0 ? ", " + time_text(left) + " of the budget left" : ""));
  const auto t0 = std::chrono::steady_clock::now();
  const auto rec = run("short-" + s.id, sets, s.label);
  short_wall_.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  if (stopped()) return false;
  if (s.is_base && !rec.ok()) {
    save();
    throw RunError("tune: the base config's throughput run failed: " + rec.error + " [" +
                   (dir_ / "runs" / ("short-" + s.id) / "run.log").string() + "]");
  }
  if (rec.ok()) {
    row.samples_per_s = rec.samples_per_s;
    row.memory_per_rank_bytes = peak_per_rank(rec);
    say("  " + format_double("%.1f", rec.samples_per_s.value_or(0)) + " samples/s" +
        (row.predicted_samples_per_s ? " (predicted " + format_double("%.1f", *row.predicted_samples_per_s) + ")" : ""));
    if (s.ranks == 1) single_result_.emplace(single_key(s), dir_ / "runs" / ("short-" + s.id));
    // The base's run stands for its one-rank twin, which is not run again:
    // the multi-rank settings of the base's batch and precision are predicted from it.
    if (s.is_base && !base_twin_.empty()) {
      single_result_.emplace(single_key(setting_of(base_twin_)), dir_ / "runs" / ("short-" + s.id));
    }
  } else {
    row.verdict = "failed: " + rec.error;
  }
  save();
  return true;
}

bool Tuner::confirm() {
  // The base and the fastest measured, to the target.
  std::vector<size_t> by_speed;
  for (size_t i = 0; i < rows_.size(); ++i) {
    if (!rows_[i].is_base && rows_[i].samples_per_s) by_speed.push_back(i);
  }
  std::stable_sort(by_speed.begin(), by_speed.end(),
                   [&](size_t a, size_t b) { return *rows_[a].samples_per_s > *rows_[b].samples_per_s; });
  std::vector<size_t> chosen;
  for (size_t i = 0; i < rows_.size(); ++i) {
    if (rows_[i].is_base) chosen.push_back(i);
  }
  for (size_t k = 0; k < by_speed.size() && int(k) < o_.confirm; ++k) chosen.push_back(by_speed[k]);
  // Validation every N samples, the same for every setting.
  const int64_t base_global = setting_of("base").global_batch;
  const int64_t every_samples = o_.eval_every_samples > 0 ? o_.eval_every_samples : 25 * base_global;
  state_["eval_every_samples"] = every_samples;
  state_["base_global_batch"] = base_global;
  Confirmed runs;
  double base_run_s = 0;
  for (int i = 0; i < o_.runs; ++i) {
    for (const size_t c : chosen) {
      auto& row = rows_[c];
      const auto& s = setting_of(row.id);
      const std::string head = "to target, run " + std::to_string(i + 1) + "/" + std::to_string(o_.runs) + ": " + s.label;
      // A run's time scales as the base's by throughput (none measured yet: no estimate).
      const auto base_row = std::find_if(rows_.begin(), rows_.end(), [](const TuneRow& r) { return r.is_base; });
      double estimate = base_run_s;
      if (base_run_s > 0 && row.samples_per_s && base_row->samples_per_s) {
        estimate = base_run_s * *base_row->samples_per_s / *row.samples_per_s;
      }
      auto sets = s.sets;
      const auto extra = target_sets(i);
      sets.insert(sets.end(), extra.begin(), extra.end());
      sets.push_back("train.val_every_steps=" + std::to_string(std::max<int64_t>(1, every_samples / s.global_batch)));
      if (!reusable("target-" + s.id + "-r" + std::to_string(i + 1), sets) && !fits(estimate, head)) continue;
      say(head + (estimate > 0 ? " (about " + time_text(estimate) + ")" : ""));
      const auto t0 = std::chrono::steady_clock::now();
      const std::string name = "target-" + s.id + "-r" + std::to_string(i + 1);
      const auto rec = run(name, sets, s.label);
      double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      // A reused run took no time now: its first wall time is in tune.json.
      if (state_.contains("walls") && state_["walls"].contains(name)) wall = state_["walls"][name].get<double>();
      if (row.is_base && base_run_s == 0) base_run_s = wall;
      if (stopped()) return false;
      row.confirmed = true;
      auto& side = runs[c];
      if (!rec.ok()) {
        side.times.push_back(std::nullopt);
        side.samples.push_back(std::nullopt);
        continue;
      }
      const bool reached = rec.target && rec.target->reached;
      side.times.push_back(reached ? rec.target->time_s : std::nullopt);
      side.samples.push_back(reached ? rec.target->samples : std::nullopt);
      if (reached && rec.test_acc) side.test_accs.push_back(*rec.test_acc);
      if (!row.memory_per_rank_bytes) row.memory_per_rank_bytes = peak_per_rank(rec);
      save();
      say(reached ? "  reached at step " + format_double("%.0f", rec.target->step.value_or(0)) + " in " +
                        time_text(rec.target->time_s.value_or(0)) + ", test " +
                        metric_.short_name() + " " + metric_.shown(rec.test_acc.value_or(0))
                  : "  did not reach the target");
    }
  }
  score(runs, every_samples);
  return true;
}

void Tuner::score(const Confirmed& runs, int64_t every_samples) {
  const TuneRow* base_row = nullptr;
  for (const auto& [c, side] : runs) {
    if (!side.test_accs.empty()) rows_[c].test_acc = st::median(side.test_accs);
    rows_[c].time_to_target = st::olympic_score(side.times);
    rows_[c].samples_to_target = st::olympic_score(side.samples);
    if (rows_[c].is_base) base_row = &rows_[c];
  }
  if (!base_row) return;
  // The validation grid of each side: every_samples rounded to its global batch's steps.
  const auto grid = [&](const TuneRow& r) {
    const int64_t gb = setting_of(r.id).global_batch;
    return double(std::max<int64_t>(1, every_samples / gb) * gb);
  };
  for (const auto& [c, side] : runs) {
    rows_[c].convergence = st::convergence_check(base_row->samples_to_target, rows_[c].samples_to_target,
                                                 std::max(grid(*base_row), grid(rows_[c])));
  }
}

}  // namespace

TuneOutcome run_tune(const TuneOptions& options) {
  TuneOptions o = options;
  if (o.exe.empty()) o.exe = fs::read_symlink("/proc/self/exe");
  Tuner t(o);
  return t.run();
}

}  // namespace accel::ladder
