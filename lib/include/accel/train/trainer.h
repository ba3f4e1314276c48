// The single-device training core: the plain loop of cvpr2023's scripts
// (forward, cross-entropy, backward, optimizer step, a log line every
// log_every batches, train/val accuracy per epoch, test accuracy at the end),
// timed as the article times it (training + per-epoch validation; test not),
// plus step-time statistics, throughput and peak memory.
#pragma once

#include <filesystem>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "accel/config/run_config.h"
#include "accel/data/dataset.h"
#include "accel/models/vit.h"
#include "accel/train/result.h"

namespace accel::train {

// The model spec a config asks for: the preset, overridden by every non-zero
// model field, with in_channels and num_classes taken from the data when 0.
// Throws ConfigError naming the field on a mismatch with the data.
models::ViTSpec resolve_model_spec(const config::ModelConfig& model, int data_channels,
                                   int data_classes);

// The image side the loader must produce: data.resize, or the model's size.
int resolve_image_size(const config::RunConfig& cfg, const models::ViTSpec& spec);

// capturable: an Adam/AdamW whose step a CUDA Graph can hold (train/device.h);
// ConfigError for other optimizers.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(
    const std::vector<torch::Tensor>& params, const config::OptimConfig& optim,
    bool capturable = false);

// Checks everything that can be checked before any work: the model preset and
// the loop/precision pairing, and (check_environment) what depends on this
// machine and build: accelerator, devices, strategy and precision support, and
// that the data and init files exist. Throws ConfigError.
void check_runnable(const config::RunConfig& cfg, bool check_environment = true);

struct RunOptions {
  std::filesystem::path out_dir;  // result.json, config.json, metrics.csv, checkpoint.ckpt
  bool dry_run = false;           // validate, print the banner, train nothing
  bool overwrite = false;         // replace results and checkpoints already in out_dir
  std::filesystem::path resume;   // continue the run saved in this checkpoint
  std::ostream* log = nullptr;    // progress lines (rank 0); nullptr = silent
  // Record the ops of profile_steps steps after train.warmup_steps and write
  // ops.txt, ops.csv, trace.json and summary.txt here (rank 0); "" = off.
  std::filesystem::path profile_dir;
  int profile_steps = 10;
};

// The never-overwrite rule, checked before any work: out_dir must be a folder
// (or creatable: its nearest existing ancestor a writable folder), and unless
// overwrite or resume, hold no result.json, checkpoint.ckpt or
// checkpoints/step-*.ckpt of an earlier run. Throws ConfigError naming --out.
void check_out_dir(const RunOptions& opts);

// `--resume auto`: the newest checkpoint in out_dir that reads and verifies
// (checkpoint.ckpt or checkpoints/step-*.ckpt, the highest step first);
// empty when there is none.
std::filesystem::path find_resume_checkpoint(const std::filesystem::path& out_dir);

// The learning rate of optimizer step `step` (0-based) of `total`:
// optim.lr for scheduler "none"; "cosine": linear warm-up over
// optim.warmup_steps from lr/warmup, then cosine decay to optim.min_lr.
double scheduled_lr(const config::OptimConfig& optim, int64_t step, int64_t total);
// Sets every param group's lr to scheduled_lr (nothing for "none").
void set_learning_rate(torch::optim::Optimizer& optimizer, const config::OptimConfig& optim,
                       int64_t step, int64_t total);

// Stop requests (SIGTERM, SIGINT, SIGUSR1) for a graceful stop: the handler
// sets a flag the loop checks after each step; a second SIGTERM/SIGINT ends
// the process at once. install_stop_handlers is for the process entry point.
void install_stop_handlers();
bool stop_signal_received();
void request_stop();  // as a signal would (tests)

// The resolved-config paths that must match between a checkpoint and the run
// resuming it (model, data, optimizer, seed, batch size, loop, precision).
// Returns the paths that differ, down to the field (model.dim); empty when
// the run may resume.
std::vector<std::string> resume_incompatibilities(const nlohmann::json& saved,
                                                  const nlohmann::json& current);

// Runs one config end to end on this rank (several ranks: each process calls
// it; rank 0 writes) and writes out_dir/{config.json, metrics.csv,
// result.json}. A failure after the outputs folder was created writes
// result.json with status "failed" and rethrows as RunError; a stop request
// writes a checkpoint and status "interrupted" and throws Interrupted.
RunResult run(const config::RunConfig& cfg, const nlohmann::json& resolved,
              const RunOptions& opts);

}  // namespace accel::train
