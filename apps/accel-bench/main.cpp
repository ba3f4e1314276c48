// accel-bench: the command line. Parses arguments, dispatches to the library,
// and maps exceptions to one-line messages and exit codes:
//   0 ok, 2 usage/config/input errors (nothing written), 1 run failures.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "accel/build_info.h"
#include "accel/config/run_config.h"
#include "accel/models/vit.h"
#include "accel/report/losses.h"
#include "accel/report/summary.h"
#include "accel/train/trainer.h"
#include "accel/util/errors.h"
#include "accel/util/torch_compat.h"

namespace {

struct RunArgs {
  std::string config;
  std::vector<std::string> sets;
  std::string out;
  std::string resume;
  bool force = false;
  bool dry_run = false;
  bool quiet = false;
};

std::filesystem::path default_out_dir(const accel::config::RunConfig& cfg,
                                      const std::string& config_path) {
  const std::string name =
      cfg.name.empty() ? std::filesystem::path(config_path).stem().string() : cfg.name;
  return std::filesystem::path("runs") / name;
}

int cmd_run(const RunArgs& a) {
  const auto resolved = accel::config::load_config(a.config, a.sets);
  const auto cfg = accel::config::to_run_config(resolved);
  accel::train::RunOptions opts;
  opts.out_dir = a.out.empty() ? default_out_dir(cfg, a.config) : std::filesystem::path(a.out);
  opts.dry_run = a.dry_run;
  opts.overwrite = a.force;
  opts.resume = a.resume;
  opts.log = a.quiet ? nullptr : &std::cout;
  for (const char* kept : {"result.json", "checkpoint.ckpt"}) {
    if (!a.dry_run && !a.force && std::filesystem::exists(opts.out_dir / kept)) {
      throw accel::ConfigError("--out " + opts.out_dir.string() + ": already holds a " + kept +
                               "; choose another --out or pass --force to replace it");
    }
  }
  accel::train::run(cfg, resolved, opts);
  return 0;
}

int cmd_config(bool explain, const std::string& check, const std::vector<std::string>& sets) {
  if (explain) {
    std::cout << accel::config::explain_schema();
    return 0;
  }
  if (check.empty()) {
    throw accel::ConfigError("config: give --explain or --check FILE");
  }
  const auto resolved = accel::config::load_config(check, sets);
  const auto cfg = accel::config::to_run_config(resolved);
  accel::train::check_runnable(cfg, /*check_environment=*/false);
  std::cout << resolved.dump(2) << "\n";
  // Devices and inputs may exist only on the machine that will run it (a GPU
  // box with CIFAR-10 and ImageNet weights): report, don't fail.
  try {
    accel::train::check_runnable(cfg, /*check_environment=*/true);
    std::cerr << check << ": valid\n";
  } catch (const accel::ConfigError& e) {
    std::cerr << check << ": valid; cannot run on this machine: " << e.what() << "\n";
  }
  return 0;
}

int cmd_presets() {
  std::printf("%-16s %6s %5s %5s %5s %5s %6s %13s %14s\n", "preset", "image", "patch", "dim",
              "depth", "heads", "mlp", "params", "GFLOP/img fwd");
  for (const auto& name : accel::models::vit_preset_names()) {
    const auto s = accel::models::vit_preset(name);
    std::printf("%-16s %6d %5d %5d %5d %5d %6d %13lld %14.3f\n", name.c_str(), s.image_size,
                s.patch_size, s.dim, s.depth, s.heads, s.mlp_dim,
                static_cast<long long>(accel::models::vit_param_count(s)),
                accel::models::vit_forward_flops(s) / 1e9);
  }
  std::printf("(params with the preset's channels and classes: %s)\n",
              "vit_b_*/vit_l_16 3 channels, 1000 classes; vit_tiny_fmnist 1 channel, 10");
  return 0;
}

// libgomp reads OMP_WAIT_POLICY once, when it is loaded, so it cannot be set
// from main(): re-exec once with it set. Spinning OpenMP workers (the default)
// collapse when anything else runs on the cores: a 2-thread ViT step of the
// CPU preset measured 3.3 s instead of 0.18 s next to a compiler on this 2-core
// machine. A user who prefers spinning sets OMP_WAIT_POLICY=ACTIVE.
void ensure_passive_omp_wait(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  ::execv("/proc/self/exe", argv);  // returns only on failure: carry on as is
}

int cmd_compare_losses(const std::string& a, const std::string& b, double tolerance,
                       size_t first) {
  auto ta = accel::report::read_loss_trace(a);
  auto tb = accel::report::read_loss_trace(b);
  for (auto* t : {&ta, &tb}) {
    if (first > 0 && t->steps.size() > first) {
      t->steps.resize(first);
      t->losses.resize(first);
    }
  }
  const auto d = accel::report::compare_losses(ta, tb);
  std::cout << d.summary() << " (tolerance " << tolerance << ")\n";
  if (!d.same_steps || d.compared == 0) {
    std::cerr << "accel-bench: error: the two runs' loss traces do not line up\n";
    return 1;
  }
  return d.max_abs <= tolerance ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  ensure_passive_omp_wait(argv);
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
                  "Continue the run saved in this checkpoint (same model/data/optim config)");
  run->add_flag("--force", run_args.force, "Replace an existing result or checkpoint in --out");
  run->add_flag("--dry-run", run_args.dry_run,
                "Validate, load data, build the model and print the banner; train nothing");
  run->add_flag("-q,--quiet", run_args.quiet, "No progress output");

  bool explain = false;
  std::string check;
  std::vector<std::string> check_sets;
  auto* config = app.add_subcommand("config", "Explain the config schema or check a config");
  config->add_flag("--explain", explain, "Print every field: type, default, doc");
  config->add_option("--check", check, "Validate FILE and print the resolved config");
  config->add_option("-s,--set", check_sets, "Override a field before checking");

  auto* presets = app.add_subcommand("presets", "List the model presets");

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

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }

  try {
    if (run->parsed()) return cmd_run(run_args);
    if (config->parsed()) return cmd_config(explain, check, check_sets);
    if (presets->parsed()) return cmd_presets();
    if (summary->parsed()) {
      std::cout << accel::report::summary_table({summary_files.begin(), summary_files.end()});
      return 0;
    }
    if (compare_losses->parsed()) return cmd_compare_losses(loss_a, loss_b, tolerance, first_steps);
  } catch (const accel::ConfigError& e) {
    std::cerr << "accel-bench: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "accel-bench: error: " << e.what() << "\n";
    return 1;
  }
  return 2;
}
