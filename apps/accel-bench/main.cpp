// accel-bench: the command line. Parses arguments, dispatches to the library,
// and maps exceptions to one-line messages and exit codes:
//   0 ok, 2 usage/config/input errors (ConfigError, DataError: nothing
//   written), 1 run failures.
#include <malloc.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "accel/build_info.h"
#include "accel/config/run_config.h"
#include "accel/data/catalog.h"
#include "accel/models/family.h"
#include "accel/models/model.h"
#include "accel/results/losses.h"
#include "accel/metrics/hardware.h"
#include "accel/metrics/metrics.h"
#include "accel/machine/calibrate.h"
#include "accel/results/compare.h"
#include "accel/results/compare_run.h"
#include "accel/results/history.h"
#include "accel/machine/machine.h"
#include "accel/machine/peaks.h"
#include "accel/machine/predict.h"
#include "accel/results/result_set.h"
#include "accel/results/report.h"
#include "accel/ladder/estimate.h"
#include "accel/ladder/sweep.h"
#include "accel/ladder/tune.h"
#include "accel/results/summary.h"
#include "accel/dist/launcher.h"
#include "accel/train/checkpoint.h"
#include "accel/train/fabric.h"
#include "accel/train/checks.h"
#include "accel/train/launch_run.h"
#include "accel/train/result.h"
#include "accel/train/run.h"
#include "accel/util/child_process.h"
#include "accel/util/input_file.h"
#include "accel/train/signals.h"
#include "accel/train/work.h"
#include "accel/text/tokenizer.h"
#include "accel/text/tokenizers.h"
#include "accel/util/errors.h"
#include "accel/util/json_doc.h"
#include "accel/util/torch_compat.h"

namespace {

// What reaches the terminal from a result set or history: no control
// character but newlines and tabs (an escape sequence from a doctored
// result.json could clear the screen or paint a fake verdict).
std::string terminal_text(const std::string& s) { return accel::clean_text(s, std::string::npos, true); }

// A number option that must be finite and within (lo, hi] (`above` true) or
// [lo, hi]: CLI11's PositiveNumber and Range let "nan" and "inf" through.
CLI::Validator number_in(double lo, double hi, bool above, const std::string& unit = "") {
  std::ostringstream bounds;
  bounds.precision(15);
  bounds << (above ? "> " : "at least ") << lo << " and at most " << hi << (unit.empty() ? "" : " ") << unit;
  const std::string text = bounds.str();
  return CLI::Validator(
      [lo, hi, above, text](std::string& in) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(in, v) || !std::isfinite(v) || v < lo || (above && v <= lo) || v > hi) {
          return "\"" + in + "\" must be a number " + text;
        }
        return "";
      },
      "NUMBER " + text);
}

struct RunArgs {
  std::string config;
  std::vector<std::string> sets;
  std::string out;
  bool out_given = false;  // --out "" is an error, not the default
  std::string resume;
  bool force = false;
  bool dry_run = false;
  bool quiet = false;
  std::string profile;
  int profile_steps = 10;
  std::string calibration;  // this CPU's peaks (calibrate): warn where the precision cannot pay
};

std::filesystem::path default_out_dir(const accel::config::RunConfig& cfg,
                                      const std::string& config_path) {
  const std::string name =
      cfg.name.empty() ? std::filesystem::path(config_path).stem().string() : cfg.name;
  return std::filesystem::path("runs") / name;
}

int cmd_run(const RunArgs& a, int argc, char** argv) {
  if (a.out_given && a.out.empty()) {
    throw accel::ConfigError("--out: an empty path; give a folder, or leave --out out for runs/<name>");
  }
  const auto resolved = accel::config::load_config(a.config, a.sets);
  auto cfg = accel::config::to_run_config(resolved);
  cfg.runtime.devices = accel::train::resolve_devices(cfg.runtime);  // "auto": the GPUs
  accel::train::RunOptions opts;
  opts.out_dir = a.out.empty() ? default_out_dir(cfg, a.config) : std::filesystem::path(a.out);
  opts.dry_run = a.dry_run;
  opts.profile_dir = a.profile;
  opts.profile_steps = a.profile_steps;
  if (!a.calibration.empty()) {
    // The calibration's own figures, before anything runs: bf16 that this
    // CPU's matmuls do not run faster than fp32 cannot speed the step up.
    const auto peaks = accel::machine::PeakTable::load_named("", a.calibration, "--calibration");
    if (const auto note = peaks.precision_limit_note(cfg.runtime.precision, accel::train::plan_here(cfg).threads);
        !note.empty()) {
      opts.warnings.push_back(note);
    }
  }
  opts.overwrite = a.force;
  opts.log = a.quiet ? nullptr : &std::cout;
  const bool ranked = accel::dist::launch_env_from_environment().present();
  const bool launching = cfg.runtime.world_size() > 1 && !ranked;
  if (launching) accel::train::check_runnable(cfg);  // errors once, before any rank starts
  // --resume auto looks for checkpoints under the lock: no run adds one
  // meanwhile ("auto" until then lets the folder's earlier files pass).
  opts.resume = a.resume;
  accel::metrics::DirLock lock;
  if (!a.dry_run) lock = accel::train::lock_out_dir(opts, a.quiet ? nullptr : &std::cout);
  auto tidy_on_failure = [&](auto&& body) {
    try {
      return body();
    } catch (...) {
      lock.release_and_tidy();  // a run refused before writing leaves no empty folder
      throw;
    }
  };
  return tidy_on_failure([&] {
    if (a.resume == "auto") {
      opts.resume = accel::train::find_resume_checkpoint(opts.out_dir);
      if (opts.resume.empty() && std::cout.good() && !a.quiet) {
        std::cout << "== --resume auto: no valid checkpoint in " << opts.out_dir.string()
                  << "; starting from the beginning\n";
      }
      if (opts.resume.empty() && !a.dry_run) accel::train::check_out_dir(opts);
    }
    if (launching) {
      const auto started = std::filesystem::file_time_type::clock::now();
      const auto job = accel::train::launch_ranks(cfg, std::vector<std::string>(argv, argv + argc), &std::cerr);
      const int rc = job.exit_code;
      if (rc != 0 && rc != 2 && rc != accel::kInterruptedExitCode && !a.dry_run) {
        accel::train::record_launch_failure(opts.out_dir, resolved, job.failure, started, &std::cerr);
      }
      if (rc != 0) lock.release_and_tidy();
      return rc;
    }
    accel::train::install_stop_handlers();
    accel::train::run(cfg, resolved, opts);
    return 0;
  });
}

std::string error_prefix();

// Validates one config; prints the resolved config when asked. Environment
// problems (devices, inputs that exist only on the machine that will run it,
// a GPU box with CIFAR-10 and ImageNet weights) are reported, not failed.
void check_one_config(const std::string& path, const std::vector<std::string>& sets,
                      bool print_resolved) {
  const auto resolved = accel::config::load_config(path, sets);
  const auto cfg = accel::config::to_run_config(resolved);
  accel::train::check_runnable(cfg, /*check_environment=*/false);
  if (print_resolved) std::cout << resolved.dump(2) << "\n";
  try {
    accel::train::check_runnable(cfg, /*check_environment=*/true);
    std::cerr << path << ": valid\n";
  } catch (const accel::ConfigError& e) {
    std::cerr << path << ": valid; cannot run on this machine: " << e.what() << "\n";
  }
}

int cmd_config(bool explain, const std::vector<std::string>& checks,
               const std::vector<std::string>& sets) {
  if (explain) {
    std::cout << accel::config::explain_schema();
    return 0;
  }
  if (checks.empty()) {
    throw accel::ConfigError("config: give --explain or --check FILE...");
  }
  if (checks.size() == 1) {
    check_one_config(checks.front(), sets, /*print_resolved=*/true);
    return 0;
  }
  // Several files (a CI step over a folder of configs): check every one, a
  // line each, and fail if any is invalid.
  size_t invalid = 0;
  for (const auto& path : checks) {
    try {
      check_one_config(path, sets, /*print_resolved=*/false);
    } catch (const accel::ConfigError& e) {
      ++invalid;
      std::cerr << error_prefix() << terminal_text(e.what()) << "\n";
    } catch (const accel::DataError& e) {
      ++invalid;
      std::cerr << error_prefix() << terminal_text(e.what()) << "\n";
    }
  }
  if (invalid > 0) {
    throw accel::ConfigError("config --check: " + std::to_string(invalid) + " of " +
                             std::to_string(checks.size()) + " configs are invalid");
  }
  return 0;
}

int cmd_presets() {
  std::printf("%-16s %-10s %12s  %-26s %s\n", "preset", "arch", "params", "forward FLOPs", "shape");
  for (const auto& family : accel::models::model_families()) {
    for (const auto& row : family.preset_rows()) {
      char flops[64];
      if (row.flops >= 1e9) {
        std::snprintf(flops, sizeof flops, "%.3f GFLOP/%s", row.flops / 1e9, row.unit.c_str());
      } else {
        std::snprintf(flops, sizeof flops, "%.2f MFLOP/%s", row.flops / 1e6, row.unit.c_str());
      }
      std::printf("%-16s %-10s %12lld  %-26s %s\n", row.name.c_str(), family.info.arch.c_str(),
                  static_cast<long long>(row.params), flops, row.shape.c_str());
    }
  }
  std::printf("(params with each preset's own channels, classes and vocabulary; a run's head "
              "follows its data)\n");
  return 0;
}

struct TokenizeArgs {
  std::string vocab, text, tokenizer = "wordpiece";
  int64_t max_length = 0;
  bool cased = false;
};

int cmd_tokenize(const TokenizeArgs& a) {
  if (a.max_length != 0 && a.max_length < 2) {
    throw accel::ConfigError("--max-length: must be 0 (no limit) or >= 2 (the text's first id and its last), got " +
                             std::to_string(a.max_length));
  }
  const auto& row = accel::text::tokenizer_row(a.tokenizer);
  const std::filesystem::path vocab =
      a.vocab.empty() ? accel::data::default_vocab(a.tokenizer) : std::filesystem::path(a.vocab);
  if (!std::filesystem::exists(vocab)) {
    throw accel::ConfigError("--vocab: missing file " + vocab.string() +
                             (a.vocab.empty() && !row.vocab_hint.empty() ? " (" + row.vocab_hint + ")" : ""));
  }
  accel::text::TokenizerSpec spec;
  spec.vocab = vocab;
  spec.lowercase = !a.cased;
  const auto tok = row.make(spec);
  if (!a.text.empty()) {
    std::istringstream in(a.text);
    accel::text::tokenize_lines(in, std::cout, *tok, a.max_length, "--text");
  } else {
    accel::text::tokenize_lines(std::cin, std::cout, *tok, a.max_length, "stdin");
  }
  return 0;
}

// "accel-bench: error: ", naming the rank inside a multi-rank job (every
// rank may report its own failure; rank 0 alone prints progress).
std::string error_prefix() {
  const char* rank = std::getenv("RANK");
  const char* world = std::getenv("WORLD_SIZE");
  if (rank && world && std::string(world) != "1") {
    return std::string("accel-bench: rank ") + rank + ": error: ";
  }
  return "accel-bench: error: ";
}

// libgomp reads OMP_WAIT_POLICY once, when it is loaded, so it cannot be set
// from main(): re-exec once with it set. Spinning OpenMP workers (the default)
// collapse when anything else runs on the cores: a 2-thread ViT step of the
// CPU preset measured 3.3 s instead of 0.18 s next to a compiler on this 2-core
// machine. A user who prefers spinning sets OMP_WAIT_POLICY=ACTIVE.
// The process environment the libraries read once at load time, so it is set
// by re-executing this binary before anything runs:
// - OMP_WAIT_POLICY=PASSIVE unless set (spinning OpenMP workers made a
//   2-thread step 10x slower while one other process was busy);
// - OPENBLAS_CORETYPE unless set, when the loaded OpenBLAS does not know this
//   CPU and fell back to generic kernels (accel/metrics/hardware.h: 1.6x on
//   the fp32 train step of an Emerald Rapids Xeon with Debian 12's OpenBLAS);
//   ACCEL_OPENBLAS_CORETYPE_AUTO marks it so the result records it.
// Only the commands that train or measure need it (and sweep, whose child runs
// inherit it): a re-exec loads LibTorch twice, 0.55 s of the 1.15 s that
// `accel-bench --version` took on this 2-core machine, paid by every report,
// compare and config --check.
bool needs_prepared_environment(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.empty() || arg[0] == '-') continue;
    return arg == "run" || arg == "sweep" || arg == "calibrate" || arg == "env";
  }
  return false;
}

// glibc hands every allocation over 32 MiB (its largest dynamic mmap
// threshold) fresh pages from the kernel and returns them on free: a text
// step's 47 MB dense embedding gradient then page-faults its way in again
// every step (zero-filling it took 10.6 ms of a 155 ms bf16-mixed step on
// LibTorch 1.13, 3.8 ms with the threshold raised; bench/bf16_step.sh). Large
// blocks stay in the heap for reuse instead, as jemalloc or tcmalloc would
// keep them, unless the user set glibc's own MALLOC_MMAP_THRESHOLD_.
void keep_large_allocations() {
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr) return;
  ::mallopt(M_MMAP_THRESHOLD, 256 << 20);
  ::mallopt(M_TRIM_THRESHOLD, 1 << 30);
  ::setenv("ACCEL_MALLOC_KEEP", "mmap threshold 256 MiB, trim threshold 1 GiB", 1);
}

void prepare_environment(int argc, char** argv) {
  if (!needs_prepared_environment(argc, argv)) return;
  keep_large_allocations();
  bool again = false;
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
    ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    again = true;
  }
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr) {
    const auto type = accel::metrics::better_openblas_coretype(accel::metrics::openblas_core(),
                                                               accel::metrics::cpu_features());
    if (!type.empty()) {
      ::setenv("OPENBLAS_CORETYPE", type.c_str(), 1);
      ::setenv("ACCEL_OPENBLAS_CORETYPE_AUTO", "1", 1);
      again = true;
    }
  }
  if (again) ::execv("/proc/self/exe", argv);  // returns only on failure: carry on as is
  accel::metrics::apply_library_switches();
}

int cmd_compare_losses(const std::string& a, const std::string& b, double tolerance,
                       size_t first) {
  if (!(tolerance >= 0))  // also NaN, with which every comparison would pass
    throw accel::ConfigError("--tolerance: must be a number >= 0, got " + std::to_string(tolerance));
  auto ta = accel::results::read_loss_trace(a);
  auto tb = accel::results::read_loss_trace(b);
  for (auto* t : {&ta, &tb}) {
    if (first > 0 && t->steps.size() > first) {
      t->steps.resize(first);
      t->losses.resize(first);
    }
  }
  const auto d = accel::results::compare_losses(ta, tb);
  std::cout << d.summary() << " (tolerance " << tolerance << ")\n";
  if (!d.same_steps || d.compared == 0) {
    std::cerr << "accel-bench: error: the two runs' loss traces do not line up\n";
    return 1;
  }
  return d.max_abs <= tolerance ? 0 : 1;
}

// --- sweep, report, compare, calibrate (logic in lib/report) -------------------
struct LadderArgs {
  accel::ladder::SweepOptions sweep;
  std::vector<std::string> suites;
  bool plan = false, plan_json = false;
  std::string seeds;
  std::string repeats;  // sweep --repeats: N or "auto"
  std::string compare_format = "text";
  std::string compare_history;  // --history FILE
  int compare_window = 5;
  // history add / show / export
  std::vector<std::string> history_inputs;
  std::string history_db = accel::results::kDefaultHistoryFile;
  std::string history_machine, history_rung, history_measure = "training time", history_chart_dir, history_out;
  bool machine_id = false;
  std::string report_dir;
  accel::results::ReportOptions report;
  std::vector<std::string> compare_sets;
  accel::results::CompareBounds bounds;
  accel::machine::CalibrateOptions calibrate;
  std::string calibrate_out;
  bool calibrate_comm = false;
  std::string calibrate_noise;  // calibrate --noise SET
  std::string compare_noise;    // compare --noise FILE
  int comm_ranks = 2;
  std::string comm_backend = "gloo";
  int64_t comm_max_bytes = int64_t(64) << 20;
  accel::machine::PredictRequest predict;
  std::string predict_json;
  std::string predict_devices;
  double predict_price = -1;
  double report_price = -1;
  accel::ladder::TuneOptions tune;
  std::string tune_config, tune_budget, tune_space, tune_out, tune_calibration;
};

int cmd_sweep(LadderArgs& a) {
  if (a.machine_id) {
    std::cout << accel::machine::this_machine()["id"].get<std::string>() << "\n";
    return 0;
  }
  if (a.suites.empty()) throw accel::ConfigError("sweep: --suite FILE is required");
  if (!a.seeds.empty()) a.sweep.seeds = accel::ladder::parse_seeds(a.seeds);
  if (a.repeats == "auto") {
    a.sweep.adaptive = true;
  } else if (!a.repeats.empty()) {
    char* end = nullptr;
    const long n = std::strtol(a.repeats.c_str(), &end, 10);
    if (end == a.repeats.c_str() || *end != '\0' || n < 1 || n > 1000) {
      throw accel::ConfigError("--repeats: a whole number from 1 to 1000, or auto (got \"" + a.repeats + "\")");
    }
    a.sweep.repeats = int(n);
  }
  const std::vector<std::filesystem::path> suites(a.suites.begin(), a.suites.end());
  if (a.plan) {
    const auto plans = accel::ladder::plan_sweeps(a.sweep, suites);
    if (a.plan_json) {
      std::cout << accel::ladder::plans_json(plans).dump(2) << "\n";
    } else {
      std::cout << accel::ladder::plans_text(plans);
    }
    // A plan with a rung whose config does not resolve is a config error,
    // as the sweep would meet it: exit 2 after the plan is shown.
    int failed = 0, rungs = 0;
    for (const auto& p : plans.suites) {
      for (const auto& r : p.rungs) {
        ++rungs;
        if (r.value("status", "") == "failed") ++failed;
      }
    }
    if (failed > 0) {
      throw accel::ConfigError("sweep --plan: " + std::to_string(failed) + " of " + std::to_string(rungs) +
                               " rungs have a config that does not resolve (status failed above)");
    }
    return 0;
  }
  a.sweep.log = &std::cout;
  a.sweep.terminal = ::isatty(STDOUT_FILENO) != 0;
  bool failed = false;
  for (const auto& s : accel::ladder::run_sweeps(a.sweep, suites)) {
    if (s.stop_signal != 0) return accel::kInterruptedExitCode;  // resumable, as a run's
    failed = failed || s.failed > 0;
  }
  return failed ? 1 : 0;
}

int cmd_tune(LadderArgs& a) {
  auto& o = a.tune;
  o.config = a.tune_config;
  o.space = a.tune_space;
  o.out = a.tune_out;
  o.calibration = a.tune_calibration;
  if (!a.tune_budget.empty()) o.budget_s = accel::ladder::parse_duration_s(a.tune_budget);
  o.log = &std::cout;
  const auto out = accel::ladder::run_tune(o);
  if (out.interrupted) {
    std::cout << "tune: stopped; continue with the same command and --resume\n";
    return accel::kInterruptedExitCode;
  }
  return 0;
}

int cmd_report(LadderArgs& a) {
  if (a.report_price >= 0) a.report.price_per_hour = a.report_price;
  std::vector<std::string> failed;
  for (const auto& f : accel::results::write_reports(a.report_dir, a.report)) {
    std::cout << terminal_text(f.markdown) << "\n";
    if (!f.notice.empty()) std::cerr << f.notice << "\n";
    std::cerr << "report: wrote " << f.files.size() << " files under "
              << (a.report.out.empty() ? f.set_dir : a.report.out).string() << "\n";
    failed.insert(failed.end(), f.failed.begin(), f.failed.end());
  }
  if (!failed.empty()) {
    std::string names;
    for (const auto& n : failed) names += (names.empty() ? "" : ", ") + n;
    std::cerr << "accel-bench: error: report: " << names
              << " not written (the previous files are kept; see above)\n";
    return 1;
  }
  return 0;
}

int cmd_compare(const LadderArgs& a) {
  accel::results::CompareRequest q;
  q.sets = a.compare_sets;
  q.bounds = a.bounds;
  q.noise_file = a.compare_noise;
  q.history_db = a.compare_history;
  q.window = a.compare_window;
  const auto run = accel::results::run_compare(q);
  const auto& outcomes = run.outcomes;
  const accel::results::HistoryOutcome* hist = run.history_or_null();
  if (a.compare_format == "json") {
    std::cout << accel::results::compare_json(outcomes, hist).dump(2) << "\n";
  } else if (a.compare_format == "md") {
    std::cout << terminal_text(accel::results::compare_ci_markdown(outcomes, hist));
  } else if (a.compare_format == "html") {
    std::cout << accel::results::compare_html(outcomes, hist);
  } else {
    std::cout << terminal_text(accel::results::compare_text(outcomes, hist));
  }
  return accel::results::compare_exit_status(outcomes, hist);
}

int cmd_history(const LadderArgs& a, const std::string& action) {
  using Mode = accel::results::History::Mode;
  accel::results::History history(a.history_db, action == "add" ? Mode::read_write : Mode::read_only);
  if (action == "add") {
    const int added = history.add_inputs(a.history_inputs, std::cout);
    std::cout << "history: " << added << " runs added to " << a.history_db << "\n";
    return 0;
  }
  if (action == "show") {
    const auto runs = history.runs({a.history_machine, a.history_rung, ""});
    const auto points = accel::results::history_trend(runs, a.history_measure);
    std::cout << terminal_text(accel::results::trend_text(points, a.history_measure));
    if (!a.history_chart_dir.empty() && !points.empty()) {
      for (const auto& f : accel::results::trend_charts(points, a.history_measure, a.history_chart_dir)) {
        std::cerr << "history: wrote " << f.string() << "\n";
      }
    }
    return 0;
  }
  const auto lines = history.export_lines();
  if (a.history_out.empty()) {
    std::cout << lines;
  } else {
    accel::metrics::write_file_atomic(a.history_out, lines);
    std::cerr << "history: wrote " << a.history_out << "\n";
  }
  return 0;
}

std::filesystem::path calibrate_file(const LadderArgs& a) {
  return a.calibrate_out.empty()
             ? accel::machine::default_peaks_file(accel::machine::this_machine()["id"].get<std::string>())
             : std::filesystem::path(a.calibrate_out);
}

// calibrate --comm: starts its ranks (one thread each, as the ladder's ranks
// run), or, as one of them, times the collectives; rank 0 adds the fit to the
// peaks file as its "comm" block, keeping the matmul peaks there.
int cmd_calibrate_comm(LadderArgs& a, int argc, char** argv) {
  if (a.comm_ranks < 2) throw accel::ConfigError("--ranks: at least 2");
  if (a.comm_backend != "gloo" && a.comm_backend != "nccl") {
    throw accel::ConfigError("--backend: \"" + a.comm_backend + "\" (gloo or nccl)");
  }
  if (!accel::dist::backend_available(a.comm_backend)) {
    throw accel::ConfigError("--backend: \"" + a.comm_backend + "\" is not in this build");
  }
  const auto env = accel::dist::launch_env_from_environment();
  if (!env.present()) {
    accel::dist::LaunchOptions o;
    o.nprocs = a.comm_ranks;
    o.argv.assign(argv, argv + argc);
    o.argv[0] = "/proc/self/exe";
    o.log = &std::cerr;
    const auto outcome = accel::dist::launch_local(o);
    if (outcome.exit_code != 0) std::cerr << "accel-bench: " << outcome.message << "\n";
    return outcome.exit_code <= 3 ? outcome.exit_code : 1;
  }
  at::set_num_threads(1);
  accel::dist::CommOptions o;
  o.backend = a.comm_backend;
  o.rank = env.rank;
  o.world_size = env.world_size;
  o.master_addr = env.master_addr;
  o.master_port = env.master_port;
  if (env.num_nodes == 1) o.store_dir = env.store_dir;
  o.store_token = env.store_token;
  o.agent_store = env.agent_store;
  o.agent_attempt = env.agent_attempt;
  o.num_nodes = env.num_nodes;
  o.timeout = std::chrono::seconds(120);
  // Waits as the ladder's ranks wait (runtime.comm_wait auto): spinning while
  // every rank owns its core.
  if (env.local_world_size <= accel::metrics::available_cores()) o.spin = std::chrono::milliseconds(20);
  if (o.backend == "nccl") o.device = torch::Device(torch::kCUDA, int8_t(env.local_rank));
  auto comm = accel::dist::connect(o);
  accel::machine::CommCalibrateOptions c;
  c.log = &std::cerr;
  c.device = o.device;
  c.max_bytes = a.comm_max_bytes;
  const auto block = accel::machine::calibrate_comm(*comm, c);
  if (env.rank != 0) return 0;
  const auto out = calibrate_file(a);
  accel::machine::update_calibration_file(out, accel::machine::this_machine()["id"].get<std::string>(), {{"comm", block}});
  std::cout << out.string() << "\n";
  return 0;
}

// calibrate --noise SET: this machine's run-to-run spread, from a set of
// unchanged repeats, into the calibration file beside the peaks.
int cmd_calibrate_noise(const LadderArgs& a) {
  const auto set = accel::results::load_result_set(accel::results::single_result_set(a.calibrate_noise));
  const auto noise = accel::results::measure_noise(set);
  const std::filesystem::path out =
      a.calibrate_out.empty() ? accel::machine::default_peaks_file(set.machine_id) : std::filesystem::path(a.calibrate_out);
  accel::machine::update_calibration_file(out, set.machine_id, {{"noise", noise}});
  std::cout << "noise of " << set.machine_id << " from " << set.dir.string()
            << " (the smallest change a compare resolves, runs a side: 1 / 3 / 5):\n";
  for (const auto& [measure, m] : noise["machine"].items()) {
    // The task's metric: a share in points, another (a loss) in its own units.
    const bool metric = measure.rfind("test ", 0) == 0;
    const char* own = set.metric.proportion ? "%.2f points" : "%.4f";
    std::cout << "  " << measure << ": ";
    for (int n : {1, 3, 5}) {
      const double v = m.value("resolves_with_" + std::to_string(n), 0.0);
      std::cout << (n > 1 ? " / " : "")
                << accel::machine::format_double(metric ? own : "%.1f%%", metric ? v : v * 100);
    }
    std::cout << " (" << m.value("runs", 0) << " runs)\n";
  }
  for (const auto& w : noise.value("warnings", nlohmann::json::array())) {
    std::cerr << "calibrate: warning: " << terminal_text(w.get<std::string>()) << "\n";
  }
  std::cout << out.string() << "\n";
  return 0;
}

int cmd_calibrate(LadderArgs& a, int argc, char** argv) {
  if (a.calibrate_comm) return cmd_calibrate_comm(a, argc, argv);
  if (!a.calibrate_noise.empty()) return cmd_calibrate_noise(a);
  a.calibrate.log = &std::cerr;
  const auto doc = accel::machine::calibrate(a.calibrate);
  const auto out = calibrate_file(a);
  // The peaks replace the file's own; a comm fit and a noise already there stay.
  accel::machine::update_calibration_file(out, doc.value("machine_id", ""), doc);
  std::cout << out.string() << "\n";
  return 0;
}

int cmd_predict(LadderArgs& a) {
  auto& q = a.predict;
  if (!a.predict_devices.empty()) {
    std::stringstream ss(a.predict_devices);
    for (std::string part; std::getline(ss, part, ',');) {
      char* end = nullptr;
      const long n = std::strtol(part.c_str(), &end, 10);
      if (part.empty() || *end != '\0' || n < 1 || n > 100000) {
        throw accel::ConfigError("--devices: \"" + part + "\" is not a device count");
      }
      q.devices.push_back(int(n));
    }
  }
  if (a.predict_price >= 0) q.price_per_device_hour = a.predict_price;
  q.load_config = [](const std::string& file) { return accel::config::load_config(file, {}); };
  q.model_layout = accel::models::layout_of_config;
  const auto out = accel::machine::run_predict(q);
  std::cout << terminal_text(out.text);
  if (!a.predict_json.empty()) {
    accel::metrics::write_json_atomic(a.predict_json, out.json);
    std::cerr << "predict: wrote " << a.predict_json << "\n";
  }
  return 0;
}

void add_ladder_commands(CLI::App& app, LadderArgs& a) {
  auto* sweep = app.add_subcommand("sweep", "Run a suite's rungs (each as a child run) into OUT/<suite>/<machine-id>/");
  sweep->add_option("--suite", a.suites, "Suite file (JSON); several run one after the other");
  sweep->add_option("--repeats,--runs", a.repeats,
                    "Runs per rung (default 1, or one per seed); with a target, 3 or more give each rung an "
                    "MLPerf score (the fastest and slowest dropped). auto (with --against BASE): 3 runs a rung, "
                    "then one more round by round of each rung whose time against BASE is unresolved at "
                    "--fail-slower, until each resolves or --max-repeats / --max-minutes; each look at 95% "
                    "split over the looks --max-repeats allows");
  sweep->add_option("--against", a.sweep.against, "--repeats auto: BASE, the result set to resolve against");
  sweep->add_option("--fail-slower", a.sweep.against_slower_pct,
                    "--repeats auto: the bound (percent) a rung's time verdict is resolved against (default 7)");
  sweep->add_option("--max-repeats", a.sweep.max_repeats, "--repeats auto: runs a rung at most (default 6)")
      ->check(CLI::Range(accel::ladder::kAdaptiveFirstRuns, 1000));
  sweep->add_option("--max-minutes", a.sweep.max_minutes,
                    "--repeats auto: start no extra round after this many minutes of them (default 0: no cap)");
  sweep->add_option("--noise", a.sweep.noise,
                    "--repeats auto: this machine's noise (calibrate --noise), as compare --noise; by default "
                    "BASE's machine's calibration where the sets are of one machine");
  sweep->add_option("--timing-runs", a.sweep.timing_runs,
                    "With one run a rung: after the full runs, N short runs of each rung's config "
                    "(its warm-up and 12 steps, one evaluation batch), round-robin, whose speed "
                    "gives the report's and compare's speedups between-run intervals (default 0)")
      ->check(CLI::Range(0, 100));
  sweep->add_option("--seeds", a.seeds, "Comma-separated train.seed per repeat, e.g. 1,2,3");
  sweep->add_flag("--to-target", a.sweep.to_target,
                  "Train every rung to the suite's target_accuracy and stop there (train.target, "
                  "train.stop_at_target)");
  sweep->add_option("-o,--out", a.sweep.out, "Output root (default runs/sweep)");
  sweep->add_flag("--resume", a.sweep.resume, "Reuse finished runs whose resolved config is unchanged");
  sweep->add_flag("--rerun-upstream", a.sweep.rerun_upstream,
                  "Run upstream runs even where the suite has a committed one");
  sweep->add_option("-s,--set", a.sweep.sets, "Override a field in every run (repeatable)");
  sweep->add_flag("--machine-id", a.machine_id, "Print this machine's id and exit");
  sweep->add_option("--peaks", a.sweep.peaks,
                    "This machine's calibration (accel-bench calibrate --out FILE): the estimate "
                    "scales the suite's committed runs of another machine by it");
  sweep->add_flag("--plan", a.plan,
                  "Print what each rung would train and evaluate here and about how long it "
                  "would take; run nothing");
  sweep->add_flag("--json", a.plan_json, "--plan: print JSON instead of a table");
  sweep->add_option("--budget", a.sweep.budget_minutes,
                    "Minutes for all the runs: where the estimate exceeds it, every run whose "
                    "steps are not capped trains the same share of its batches (at least 30%) so "
                    "that they fit; said before anything runs")
      ->check(number_in(0, 1e7, false, "minutes (0: none)"));
  sweep->add_option("--run-timeout", a.sweep.run_timeout_s,
                    "Stop a rung's run after SECONDS (at most 30 days) and go on with the next (default: none)")
      ->check(number_in(0, accel::util::kMaxTimeoutS, true, "seconds (30 days)"));
  sweep->add_option("--only", a.sweep.only, "Run only these rungs (ids; the upstream runs as always)")
      ->delimiter(',');
  auto* tune = app.add_subcommand(
      "tune", "Find the setting of a run config that reaches a target validation accuracy soonest on this machine");
  tune->add_option("-c,--config", a.tune_config, "The base run config (JSON)")->required();
  tune->add_option("-s,--set", a.tune.sets, "Override a field of the base (repeatable)");
  tune->add_option("--target", a.tune.target, "The base's validation metric to reach: an accuracy (fraction), e.g. 0.80; a loss, e.g. 3.5")->required();
  tune->add_option("--budget", a.tune_budget, "Wall time for the whole search: 30m, 1h, 90s (default: none)");
  tune->add_option("--space", a.tune_space,
                   "Search space (JSON: global_batch, lr_rule, ranks, strategies, knobs, fields); default: "
                   "half, the base's and double global batch, the precisions, every ranks x threads split "
                   "and strategy with its knobs, the optimizer implementations");
  tune->add_option("-o,--out", a.tune_out, "Output folder (default runs/tune/<config name>)");
  tune->add_option("--calibration", a.tune_calibration,
                   "peaks.json with a comm fit (calibrate --comm): predict multi-rank settings and prune the slow ones");
  tune->add_flag("--resume", a.tune.resume, "Continue the tune in --out, reusing its finished runs");
  tune->add_option("--short-steps", a.tune.short_steps, "Steps of a throughput run (default 30)");
  tune->add_option("--confirm", a.tune.confirm, "Fastest settings trained to the target besides the base (default 2)");
  tune->add_option("--runs", a.tune.runs, "Runs to the target per confirmed setting, MLPerf-scored (default 5, at least 4)");
  tune->add_option("--eval-every", a.tune.eval_every_samples,
                   "Validate every N training samples in runs to the target (default: 25 of the base's steps)");
  auto* report = app.add_subcommand("report", "Report a result set: report.md, report.csv, charts/");
  report->add_option("dir", a.report_dir, "Result set, or a folder of sets")->required();
  report->add_option("-o,--out", a.report.out, "Write here instead of the set's folder");
  report->add_option("--peaks", a.report.published_peaks, "Published GPU peaks (JSON)");
  report->add_option("--calibration", a.report.calibration, "CPU peaks from accel-bench calibrate");
  report->add_option("--reference", a.report.reference, "The article's figures, for sets without a sweep.json");
  report->add_option("--gnuplot", a.report.gnuplot, "gnuplot program (charts as CSV only without it)");
  report->add_option("--price-per-hour", a.report_price,
                     "What a GPU (a CPU run: its machine) costs an hour: cost per run and per accuracy point")
      ->check(number_in(0, 1e9, false));
  report->add_option("--prices", a.report.prices, "Instead: a JSON file of {\"<machine-id>\": price}");
  report->add_flag("--html", a.report.html,
                   "Also report.html: one self-contained page (tables, charts inline, every run to drill into; "
                   "no script, opens from disk)");
  auto* compare = app.add_subcommand(
      "compare",
      "Compare result sets rung by rung, each change with its 95% interval (--confidence); exit 1 on a regression "
      "(a whole interval beyond a bound), 4 when a gate is unresolved (an interval straddles a bound)");
  compare->add_option("--format", a.compare_format,
                      "text (default: the full tables), md (the verdict first and one table, for a CI "
                      "summary), json (everything, for tooling) or html (one self-contained page)")
      ->check(CLI::IsMember({"text", "md", "json", "html"}));
  compare->add_option("sets", a.compare_sets, "BASE OTHER...")->required();
  compare->add_option("--fail-slower", a.bounds.slower_pct,
                      "Fail when a rung is PCT % slower beyond doubt (step time and training time)");
  compare->add_option("--fail-accuracy-drop", a.bounds.acc_drop_points,
                      "Fail when test accuracy (a share) drops by POINTS percentage points");
  compare->add_option("--fail-loss-rise", a.bounds.loss_rise,
                      "Fail when a test loss (a metric that is not a share: a language model's) rises by DELTA, "
                      "in its own units");
  compare->add_option("--fail-memory-growth", a.bounds.memory_growth_pct, "Fail when peak memory grows by PCT %");
  compare->add_option("--accuracy-band", a.bounds.acc_band_points, "Fail when accuracy differs by more than POINTS either way");
  compare->add_option("--history", a.compare_history,
                      "Also judge the last OTHER against a history (accel-bench history): the median of the last "
                      "--window sets of its machine, rung and config; a regression after two sets in a row beyond "
                      "a bound, suspicious after one");
  compare->add_option("--window", a.compare_window, "--history: sets in the baseline window (default 5)");
  compare->add_option("--noise", a.compare_noise,
                      "A calibration file with this machine's noise (calibrate --noise); by default "
                      "results/peaks/<machine-id>.json where both sets are of one machine and it has one");
  compare->add_option("--confidence", a.bounds.confidence,
                      "The intervals' two-sided level (default 0.95; a set made by --repeats auto is judged at "
                      "the level of its looks where that is higher)");
  compare->add_flag("--require-same-config", a.bounds.require_same_config, "Fail on rungs whose configs differ");
  compare->add_flag("--fail-counters", a.bounds.fail_counters,
                    "Fail on any change in a rung's exact work counters (op calls by op, counted FLOPs, "
                    "collectives, state bytes per rank), each named with both values");
  compare->add_flag("--allow-uncompared", a.bounds.allow_uncompared,
                    "With --fail-* or --accuracy-band, let rungs of BASE that could not be "
                    "compared pass (they fail by default)");
  auto* calibrate = app.add_subcommand("calibrate", "Measure dense matmul GFLOP/s (fp32, bf16) per thread count");
  calibrate->add_option("-o,--out", a.calibrate_out, "Output (default results/peaks/<machine-id>.json)");
  calibrate->add_option("--max-threads", a.calibrate.max_threads, "Up to this many threads (default: all cores)");
  calibrate->add_option("--size", a.calibrate.size, "Matrix side (default 1024)");
  calibrate->add_option("--min-seconds", a.calibrate.min_seconds, "Time per case (default 0.3)");
  calibrate->add_option("--noise", a.calibrate_noise,
                        "Instead: this machine's run-to-run noise from SET, a sweep of unchanged repeats "
                        "(sweep --repeats 5), into the file's \"noise\"; compare uses it for sides of one run");
  calibrate->add_flag("--comm", a.calibrate_comm,
                      "Instead: time all-reduce, all-gather and reduce-scatter between --ranks ranks "
                      "(4 KiB to 64 MiB) and fit latency + bytes / bandwidth to each, into the file's \"comm\"");
  calibrate->add_option("--ranks", a.comm_ranks, "--comm: ranks (default 2, one thread each)");
  calibrate->add_option("--backend", a.comm_backend, "--comm: gloo (default) or nccl");
  calibrate->add_option("--max-bytes", a.comm_max_bytes, "--comm: the largest message (default 64 MiB)")
      ->check(CLI::Range(int64_t(16384), int64_t(1) << 32));

  auto& q = a.predict;
  auto* predict = app.add_subcommand(
      "predict", "Predict step time, throughput, scaling and memory on more devices or nodes from a one-device run");
  predict->add_option("result", q.result, "result.json of a one-device run");
  predict->add_option("--article", q.article, "Instead: an article's reference (results/reference/*.json)");
  predict->add_option("--rung", q.rung, "--article: its one-device rung");
  predict->add_option("--devices", a.predict_devices, "Device counts, e.g. 2,4,8 (default 1..8)");
  predict->add_option("--nodes", q.nodes, "Nodes the devices spread over (default 1)");
  predict->add_option("--strategy", q.strategy, "ddp (default), fsdp, deepspeed_stage_1, deepspeed_stage_2");
  predict->add_option("--link", q.link, "A link of results/reference/links.json between devices");
  predict->add_option("--inter-link", q.inter_link, "--nodes > 1: the link between nodes");
  predict->add_option("--links", q.links_file, "The links table (default results/reference/links.json)");
  predict->add_option("--calibration", q.calibration,
                      "Peaks file with a comm fit (calibrate --comm) and CPU matmul peaks");
  predict->add_option("--peaks", q.published_peaks, "Published GPU peaks (default results/reference/dense-peaks.json)");
  predict->add_option("--threads-per-device", q.threads_per_device,
                      "CPU: ranks of this many threads (compute scaled by the calibrated peaks)");
  predict->add_option("--gpu", q.gpu, "Another GPU kind (compute scaled by its published peak)");
  predict->add_option("--compute-scale", q.compute_scale, "Per-device compute time x this")
      ->check(number_in(0, 1e6, true));
  predict->add_option("--fsdp-sharding", q.fsdp_sharding, "fsdp: FULL_SHARD, SHARD_GRAD_OP or NO_SHARD (default: the run's)");
  predict->add_option("--fsdp-prefetch", q.fsdp_prefetch, "fsdp: 1 or 0 (default: the run's)")->check(CLI::Range(0, 1));
  predict->add_option("--bucket-mb", q.bucket_mb, "ddp: bucket size (default: the run's)")
      ->check(number_in(0, 1e6, true, "MB"));
  predict->add_option("--measured", q.measured, "A measured multi-device result.json to set beside");
  predict->add_option("--price-per-hour", a.predict_price, "Price of one device for an hour: cost per row")
      ->check(number_in(0, 1e9, false));
  predict->add_option("--json", a.predict_json, "Also write the prediction as JSON here");
}

void add_history_commands(CLI::App& app, LadderArgs& a) {
  auto* history = app.add_subcommand("history", "A results history in SQLite: add sets, show a trend, export");
  history->require_subcommand(1);
  history->fallthrough();  // --db after add, show or export too
  history->add_option("--db", a.history_db, std::string("The history file (default ") +
                                                accel::results::kDefaultHistoryFile + ")");
  auto* add = history->add_subcommand("add", "Add result sets (or a history export's .jsonl); a run added twice is kept once");
  add->add_option("sets", a.history_inputs, "SET... (folders with sweep.json, or folders above them)")->required();
  auto* show = history->add_subcommand("show", "Print a measure's trend per result set, and chart it");
  show->add_option("--machine", a.history_machine, "Only this machine id");
  show->add_option("--rung", a.history_rung, "Only this rung");
  show->add_option("--measure", a.history_measure,
                   "training time (default), step time, samples/s, test accuracy, test loss or peak memory");
  show->add_option("--charts", a.history_chart_dir, "Also write history.svg/.png/.csv here");
  auto* exp = history->add_subcommand("export", "Write every run as JSON lines (history add reads them back)");
  exp->add_option("-o,--out", a.history_out, "Here instead of standard output");
}

// The ladder command that parsed, run; -1 when none of them.
int dispatch_ladder_commands(CLI::App& app, LadderArgs& a, int argc, char** argv) {
  if (app.got_subcommand("sweep")) return cmd_sweep(a);
  if (app.got_subcommand("tune")) return cmd_tune(a);
  if (app.got_subcommand("report")) return cmd_report(a);
  if (app.got_subcommand("compare")) return cmd_compare(a);
  if (app.got_subcommand("calibrate")) return cmd_calibrate(a, argc, argv);
  if (app.got_subcommand("predict")) return cmd_predict(a);
  if (auto* h = app.get_subcommand("history"); h->parsed()) {
    for (const char* action : {"add", "show", "export"}) {
      if (h->got_subcommand(action)) return cmd_history(a, action);
    }
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  prepare_environment(argc, argv);
  CLI::App app{"accel-bench: the PyTorch speedup ladder, measured on your hardware"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("accel-bench ") + ACCEL_VERSION +
                                        " (LibTorch " + accel::compat::torch_version() + ")");

  RunArgs run_args;
  auto* run = app.add_subcommand("run", "Train one run config and write its results");
  run->add_option("-c,--config", run_args.config, "Run config (JSON)")->required();
  run->add_option("-s,--set", run_args.sets, "Override a field: section.key=value (repeatable)");
  run->add_option("-o,--out", run_args.out, "Output folder (default: runs/<name>)");
  run->add_option("--resume", run_args.resume,
                  "Continue from this checkpoint (same model/data/optim config), or \"auto\": the newest valid one in --out");
  run->add_flag("--force", run_args.force, "Replace an existing result or checkpoint in --out");
  run->add_flag("--dry-run", run_args.dry_run,
                "Validate, load data, build the model and print the banner; train nothing");
  run->add_flag("-q,--quiet", run_args.quiet, "No progress output");
  run->add_option("--calibration", run_args.calibration,
                  "This CPU's peaks (accel-bench calibrate --out FILE): warn before the run where its "
                  "precision cannot pay here (bf16 matmuls measured no faster than fp32)");
  run->add_option("--profile", run_args.profile,
                  "Profile steps after train.warmup_steps: DIR/ops.txt and ops.csv (per-op calls and "
                  "self time), DIR/trace.json (Chrome trace), DIR/summary.txt (where a step goes)");
  run->add_option("--profile-steps", run_args.profile_steps, "Steps --profile records (default 10)")
      ->check(CLI::PositiveNumber);

  bool explain = false;
  std::vector<std::string> check;
  std::vector<std::string> check_sets;
  auto* config = app.add_subcommand("config", "Explain the config schema or check a config");
  config->add_flag("--explain", explain, "Print every field: type, default, doc");
  config->add_option("--check", check,
                     "Validate FILE and print the resolved config; with several files, a line each")
      ->expected(1, -1);
  config->add_option("-s,--set", check_sets, "Override a field before checking");

  auto* presets = app.add_subcommand("presets", "List the model presets of every family");

  TokenizeArgs tokenize_args;
  auto* tokenize = app.add_subcommand(
      "tokenize", "Print the ids of each input line as a run's data gets them (WordPiece: [CLS] ... [SEP]; "
                  "gguf-bpe: the text and <|endoftext|>), as Hugging Face's tokenizers gives them");
  tokenize->add_option("--tokenizer", tokenize_args.tokenizer, "A tokenizer row, as data.tokenizer (default wordpiece)")
      ->check(CLI::IsMember(accel::text::tokenizer_choices()));
  tokenize->add_option("--vocab", tokenize_args.vocab,
                       "Its file, as data.vocab (default: the installed one: the all-MiniLM-L6-v2 vocab.txt; "
                       "SmolLM2-135M-Instruct's GGUF)");
  tokenize->add_option("--max-length", tokenize_args.max_length,
                       "Truncate to N ids, keeping the ids that end a text (default 0: no limit)");
  tokenize->add_option("--text", tokenize_args.text, "Tokenize this text instead of stdin's lines");
  tokenize->add_flag("--cased", tokenize_args.cased, "Keep case and accents (a cased vocab)");

  std::vector<std::string> summary_files;
  auto* summary = app.add_subcommand("summary", "A Markdown table of result.json files");
  summary->add_option("results", summary_files, "result.json files")->required();

  std::string loss_a, loss_b;
  double tolerance = 1e-4;
  auto* compare_losses = app.add_subcommand(
      "compare-losses", "Compare two runs' per-step losses (metrics.csv); exit 1 beyond tolerance");
  compare_losses->add_option("a", loss_a, "Run folder or metrics.csv")->required();
  compare_losses->add_option("b", loss_b, "Run folder or metrics.csv")->required();
  compare_losses->add_option("--tolerance", tolerance, "Largest allowed |loss difference|");
  size_t first_steps = 0;
  compare_losses->add_option("--first", first_steps, "Compare only the first N logged steps");

  auto* env_cmd = app.add_subcommand(
      "env", "Print what accel-bench sees on this machine (the environment block of result.json)");

  std::string export_ckpt, export_out;
  bool export_force = false;
  auto* export_cmd = app.add_subcommand(
      "export", "Write a checkpoint's model weights as safetensors (for model.init)");
  export_cmd->add_option("checkpoint", export_ckpt, "Checkpoint file (checkpoint.ckpt)")->required();
  export_cmd->add_option("-o,--out", export_out, "safetensors file to write")->required();
  export_cmd->add_flag("--force", export_force, "Replace an existing file");

  LadderArgs ladder_args;
  add_ladder_commands(app, ladder_args);
  add_history_commands(app, ladder_args);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }

  try {
    if (run->parsed()) {
      run_args.out_given = run->get_option("--out")->count() > 0;
      return cmd_run(run_args, argc, argv);
    }
    if (config->parsed()) return cmd_config(explain, check, check_sets);
    if (presets->parsed()) return cmd_presets();
    if (tokenize->parsed()) return cmd_tokenize(tokenize_args);
    if (summary->parsed()) {
      std::cout << terminal_text(accel::results::summary_table({summary_files.begin(), summary_files.end()}));
      return 0;
    }
    if (compare_losses->parsed()) return cmd_compare_losses(loss_a, loss_b, tolerance, first_steps);
    if (env_cmd->parsed()) {
      std::cout << accel::metrics::environment(accel::metrics::default_threads(1)).dump(2) << "\n";
      return 0;
    }
    if (export_cmd->parsed()) {
      std::filesystem::path hf_config;
      const auto n = accel::train::export_weights(export_ckpt, export_out, export_force, &hf_config);
      std::cout << "wrote " << n << " tensors to " << export_out;
      if (!hf_config.empty()) std::cout << " and transformers' " << hf_config.string();
      std::cout << "\n";
      return 0;
    }
    if (const int rc = dispatch_ladder_commands(app, ladder_args, argc, argv); rc >= 0) return rc;
  } catch (const accel::ConfigError& e) {
    std::cerr << error_prefix() << terminal_text(e.what()) << "\n";
    return 2;
  } catch (const accel::DataError& e) {  // a corrupt input file: an input error like the above
    std::cerr << error_prefix() << terminal_text(e.what()) << "\n";
    return 2;
  } catch (const accel::Interrupted& e) {  // a graceful stop on request: resumable
    std::cerr << error_prefix() << terminal_text(e.what()) << " (resume with --resume auto)\n";
    return accel::kInterruptedExitCode;
  } catch (const std::exception& e) {
    std::cerr << error_prefix() << terminal_text(e.what()) << "\n";
    return 1;
  }
  return 2;
}
