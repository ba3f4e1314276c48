// Pieces of a run that are not the training loop (internal to lib/train):
// loader options, the LR schedule hook, names and paths, the banner and the
// closing summary, the config hash every rank compares at rendezvous.
#pragma once

#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/config/run_config.h"
#include "accel/data/loader.h"
#include "accel/models/vit.h"
#include "accel/train/fabric.h"
#include "accel/train/result.h"

namespace accel::train {

std::string utc_now();
std::string join(const std::vector<std::string>& items, const std::string& sep);

// Loader options of a split; evaluation batches are bounded by the split's
// size (a 2e9 eval_batch_size must not become one huge batch).
data::LoaderOptions loader_options(const config::RunConfig& cfg, const data::ImageSet& set,
                                   bool training, int side);

// Optimizer steps in the whole run (for the LR schedule).
int64_t total_optimizer_steps(const config::TrainConfig& train, int64_t batches_per_epoch);

// OUT/checkpoints/step-NNNNNNNN.ckpt (train.checkpoint_every).
std::filesystem::path periodic_checkpoint_path(const std::filesystem::path& out, int64_t step);

nlohmann::json model_json(const models::ViTSpec& spec);
std::string model_line(const models::ViTSpec& spec, int64_t params, double flops);

// A short hash of the resolved config (FNV-1a of its compact dump).
std::string config_hash(const nlohmann::json& resolved);

// metrics::environment plus the distributed layout and the device.
nlohmann::json run_environment(const Fabric& fabric);
void print_banner(std::ostream& out, const nlohmann::json& env, const nlohmann::json& resolved,
                  const Fabric& fabric);
// Memory, step time and throughput lines; nullptr = silent.
void print_summary(const RunResult& r, std::ostream* out);

}  // namespace accel::train
