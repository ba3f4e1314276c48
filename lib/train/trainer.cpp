#include "accel/train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "accel/data/loader.h"
#include "accel/metrics/metrics.h"
#include "accel/precision/precision.h"
#include "accel/train/checkpoint.h"
#include "accel/train/device.h"
#include "accel/train/fabric.h"
#include "accel/util/errors.h"

namespace accel::train {

// ---------------------------------------------------------------------------

models::ViTSpec resolve_model_spec(const config::ModelConfig& m, int data_channels,
                                   int data_classes) {
  models::ViTSpec s;
  if (m.preset != "custom") s = models::vit_preset(m.preset);
  auto take = [](int& field, int value) {
    if (value > 0) field = value;
  };
  take(s.image_size, m.image_size);
  take(s.patch_size, m.patch_size);
  take(s.dim, m.dim);
  take(s.depth, m.depth);
  take(s.heads, m.heads);
  take(s.mlp_dim, m.mlp_dim);
  if (m.preset == "custom") {
    for (auto [name, v] : {std::pair{"image_size", m.image_size}, {"patch_size", m.patch_size},
                          {"dim", m.dim}, {"depth", m.depth}, {"heads", m.heads},
                          {"mlp_dim", m.mlp_dim}}) {
      if (v <= 0) {
        throw ConfigError(std::string("model.") + name +
                          ": required when model.preset is \"custom\"");
      }
    }
  }
  if (m.in_channels > 0 && m.in_channels != data_channels) {
    throw ConfigError("model.in_channels: " + std::to_string(m.in_channels) +
                      " but the dataset has " + std::to_string(data_channels) +
                      " channel(s)");
  }
  s.in_channels = data_channels;
  if (m.num_classes > 0 && m.num_classes < data_classes) {
    throw ConfigError("model.num_classes: " + std::to_string(m.num_classes) +
                      " is fewer than the " + std::to_string(data_classes) +
                      " classes the data yields");
  }
  s.num_classes = m.num_classes > 0 ? m.num_classes : data_classes;
  s.dropout = m.dropout;
  s.attention_dropout = m.attention_dropout;
  models::validate_spec(s);
  return s;
}

int resolve_image_size(const config::RunConfig& cfg, const models::ViTSpec& spec) {
  if (cfg.data.resize > 0 && cfg.data.resize != spec.image_size) {
    throw ConfigError("data.resize: " + std::to_string(cfg.data.resize) +
                      " does not match model.image_size " + std::to_string(spec.image_size) +
                      " (0 resizes to the model's size)");
  }
  return spec.image_size;
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(
    const std::vector<torch::Tensor>& params, const config::OptimConfig& o, bool capturable) {
  if (capturable) {
    if (o.name != "adam" && o.name != "adamw") {
      throw ConfigError("optim.name: \"" + o.name + "\" cannot run inside a CUDA Graph "
                        "(runtime.cuda_graphs supports adam and adamw)");
    }
    return make_capturable_adam(params, o.lr, o.beta1, o.beta2, o.eps, o.weight_decay,
                                o.name == "adamw");
  }
  if (o.name == "adam") {
    return std::make_unique<torch::optim::Adam>(
        params, torch::optim::AdamOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(
                    o.weight_decay));
  }
  if (o.name == "adamw") {
    return std::make_unique<torch::optim::AdamW>(
        params, torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(
                    o.weight_decay));
  }
  if (o.name == "sgd") {
    return std::make_unique<torch::optim::SGD>(
        params,
        torch::optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.weight_decay));
  }
  throw ConfigError("optim.name: unknown optimizer \"" + o.name + "\"");
}

namespace {

// What a captured train step cannot hold: host decisions inside the step
// (GradScaler's skip, clipping's norm), several ranks' collectives, and
// optimizers without a device-side step.
void check_graphable(const config::RunConfig& cfg) {
  const auto& rt = cfg.runtime;
  auto refuse = [](const std::string& field, const std::string& why) {
    throw ConfigError(field + ": " + why + " (runtime.cuda_graphs captures the whole step)");
  };
  if (rt.accelerator == "cpu") refuse("runtime.accelerator", "\"cpu\" has no CUDA Graphs; use \"cuda\"");
  if (rt.world_size() > 1 || rt.strategy == "ddp" || rt.strategy == "fsdp") {
    refuse("runtime.strategy", "CUDA Graphs run on one device here (strategy single, devices 1)");
  }
  if (cfg.optim.name != "adam" && cfg.optim.name != "adamw") {
    refuse("optim.name", "\"" + cfg.optim.name + "\" has no capturable step; use adam or adamw");
  }
  if (cfg.train.grad_clip > 0) refuse("train.grad_clip", "clipping reads the norm on the host");
  if (cfg.train.accumulate > 1) refuse("train.accumulate", "accumulation windows are not captured");
  if (rt.precision == "16-mixed") {
    refuse("runtime.precision", "16-mixed's GradScaler decides on the host whether to step");
  }
}

}  // namespace

void check_runnable(const config::RunConfig& cfg, bool check_environment) {
  if (cfg.model.preset != "custom") models::vit_preset(cfg.model.preset);
  const auto& rt = cfg.runtime;
  // The plain loop is the article's pure-PyTorch fp32 script on one device;
  // other precisions and gradient clipping go through the Fabric-style facade,
  // as in the article (rungs 03 onwards).
  if (cfg.train.loop == "plain" && rt.precision != "32-true") {
    throw ConfigError("runtime.precision: \"" + rt.precision +
                      "\" needs train.loop \"fabric\" (the plain loop is the article's fp32 "
                      "script)");
  }
  if (cfg.train.loop == "plain" && cfg.train.grad_clip > 0) {
    throw ConfigError("train.grad_clip: gradient clipping needs train.loop \"fabric\"");
  }
  const int world = rt.world_size();
  if (cfg.train.loop == "plain" && (world > 1 || rt.strategy == "ddp" || rt.strategy == "fsdp")) {
    throw ConfigError("runtime.strategy: \"" + rt.strategy + "\" on " + std::to_string(world) +
                      " rank(s) needs train.loop \"fabric\" (the plain loop is the article's "
                      "one-device script)");
  }
  if (rt.strategy == "single" && world > 1) {
    throw ConfigError("runtime.strategy: \"single\" runs one process, but runtime.devices x "
                      "runtime.num_nodes is " + std::to_string(world) + "; use \"ddp\" or \"fsdp\"");
  }
  const int k = cfg.train.accumulate;
  if (rt.cuda_graphs) check_graphable(cfg);
  if (k > 1 && cfg.train.checkpoint_every % k != 0) {
    throw ConfigError("train.checkpoint_every: " + std::to_string(cfg.train.checkpoint_every) +
                      " must be a multiple of train.accumulate " + std::to_string(k) +
                      " (a checkpoint cannot hold half-accumulated gradients)");
  }
  if (k > 1 && cfg.train.max_steps % k != 0) {
    throw ConfigError("train.max_steps: " + std::to_string(cfg.train.max_steps) +
                      " must be a multiple of train.accumulate " + std::to_string(k));
  }
  if (!check_environment) return;
  const auto device = resolve_device(rt.accelerator);
  if (rt.cuda_graphs && !device.is_cuda()) {
    throw ConfigError("runtime.cuda_graphs: needs a CUDA device, but runtime.accelerator \"" +
                      rt.accelerator + "\" resolves to " + device.str() + " here");
  }
  precision::check_supported(precision::make_policy(rt.precision), device.type());
  if (world > 1) resolve_backend(rt, device);
  if (cfg.model.init != "random" && !std::filesystem::is_regular_file(cfg.model.init_path)) {
    throw ConfigError("model.init_path: no such file: " + cfg.model.init_path);
  }
  data::check_data_files(cfg.data);
}

namespace {

// Leaf paths (a.b.c) under `ptr` where the two documents differ.
void diff_paths(const nlohmann::json& a, const nlohmann::json& b, const std::string& path,
                std::vector<std::string>& out) {
  if (a.is_object() && b.is_object()) {
    std::vector<std::string> keys;
    for (const auto& kv : a.items()) keys.push_back(kv.key());
    for (const auto& kv : b.items())
      if (!a.contains(kv.key())) keys.push_back(kv.key());
    for (const auto& k : keys) {
      const auto none = nlohmann::json();
      diff_paths(a.contains(k) ? a.at(k) : none, b.contains(k) ? b.at(k) : none,
                 path.empty() ? k : path + "." + k, out);
    }
    return;
  }
  if (a != b) out.push_back(path + " (" + a.dump() + " in the checkpoint, " + b.dump() + " now)");
}

}  // namespace

std::vector<std::string> resume_incompatibilities(const nlohmann::json& saved,
                                                  const nlohmann::json& current) {
  // What decides the trajectory; epochs, limits, logging, threads, and the
  // rank layout and strategy (checkpoints hold the full single-device state)
  // may change.
  static const char* kMustMatch[] = {"/model",      "/data",           "/optim",
                                     "/train/seed", "/train/batch_size", "/train/loop",
                                     "/train/grad_clip", "/train/accumulate",
                                     "/runtime/precision"};
  std::vector<std::string> differ;
  for (const char* ptr : kMustMatch) {
    const nlohmann::json::json_pointer p(ptr);
    const auto none = nlohmann::json();
    std::string path = std::string(ptr).substr(1);
    std::replace(path.begin(), path.end(), '/', '.');
    diff_paths(saved.contains(p) ? saved.at(p) : none, current.contains(p) ? current.at(p) : none,
               path, differ);
  }
  return differ;
}

}  // namespace accel::train
