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
#include "accel/util/errors.h"

namespace accel::train {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string fmt(const char* format, double a, double b = 0, double c = 0, double d = 0) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), format, a, b, c, d);
  return buf;
}

// One row of metrics.csv: a logged step or an epoch summary.
struct MetricRow {
  std::string kind;  // "step" | "epoch"
  int64_t step = 0;
  int epoch = 0;
  double loss = NAN, train_acc = NAN, val_acc = NAN, step_time_ms = NAN;
};

std::string metrics_csv(const std::vector<MetricRow>& rows) {
  std::ostringstream out;
  out << "kind,step,epoch,loss,train_acc,val_acc,step_time_ms\n";
  auto cell = [&](double v) {
    if (!std::isnan(v)) out << std::setprecision(8) << v;
  };
  for (const auto& r : rows) {
    out << r.kind << ',' << r.step << ',' << r.epoch << ',';
    cell(r.loss);
    out << ',';
    cell(r.train_acc);
    out << ',';
    cell(r.val_acc);
    out << ',';
    cell(r.step_time_ms);
    out << '\n';
  }
  return out.str();
}

struct EvalResult {
  double acc = 0, loss = 0;
  int64_t samples = 0;
};

EvalResult evaluate(models::VisionTransformer& model, data::Loader& loader) {
  torch::NoGradGuard no_grad;
  model->eval();
  loader.start_epoch(0);
  int64_t correct = 0, seen = 0;
  double loss_sum = 0;
  while (auto batch = loader.next()) {
    auto logits = model->forward(batch->x);
    loss_sum += torch::cross_entropy_loss(logits, batch->y, {}, at::Reduction::Sum, -100)
                    .item<double>();
    correct += logits.argmax(1).eq(batch->y).sum().item<int64_t>();
    seen += batch->y.size(0);
  }
  model->train();
  EvalResult r;
  r.samples = seen;
  if (seen > 0) {
    r.acc = double(correct) / double(seen);
    r.loss = loss_sum / double(seen);
  }
  return r;
}

nlohmann::json spread_json(const metrics::Spread& s) {
  return {{"median", s.median}, {"p10", s.p10}, {"p90", s.p90}, {"mean", s.mean},
          {"count", s.count}};
}

}  // namespace

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
    const std::vector<torch::Tensor>& params, const config::OptimConfig& o) {
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

int resolve_threads(const config::RuntimeConfig& runtime, int local_ranks) {
  if (runtime.threads > 0) return runtime.threads;
  return std::max(1, metrics::available_cores() / std::max(1, local_ranks));
}

void check_runnable(const config::RunConfig& cfg) {
  const auto& rt = cfg.runtime;
  if (rt.accelerator == "cuda" && !torch::cuda::is_available()) {
    throw ConfigError("runtime.accelerator: \"cuda\" requested but this LibTorch (" +
                      std::string(TORCH_VERSION) + ") sees no CUDA device");
  }
  if (rt.devices != 1 || rt.num_nodes != 1) {
    throw ConfigError("runtime.devices/num_nodes: multi-device training is not in this build "
                      "yet; use devices=1, num_nodes=1");
  }
  if (rt.strategy != "auto" && rt.strategy != "single") {
    throw ConfigError("runtime.strategy: \"" + rt.strategy +
                      "\" is not in this build yet; use \"auto\" or \"single\"");
  }
  if (rt.precision != "32-true") {
    throw ConfigError("runtime.precision: \"" + rt.precision +
                      "\" is not in this build yet; use \"32-true\"");
  }
  if (cfg.model.init != "random") {
    throw ConfigError("model.init: \"" + cfg.model.init +
                      "\" is not in this build yet; use \"random\"");
  }
  if (cfg.model.preset != "custom") models::vit_preset(cfg.model.preset);
  data::check_data_files(cfg.data);
}

// ---------------------------------------------------------------------------

namespace {

class Run {
 public:
  Run(const config::RunConfig& cfg, const nlohmann::json& resolved, const RunOptions& opts)
      : cfg_(cfg), resolved_(resolved), opts_(opts) {}

  nlohmann::json execute();

 private:
  void say(const std::string& line) {
    if (opts_.log) *opts_.log << line << std::endl;
  }
  void banner(const nlohmann::json& env);
  void setup();
  void train_epochs();
  void finish();
  void write_outputs();

  const config::RunConfig& cfg_;
  const nlohmann::json& resolved_;
  const RunOptions& opts_;

  int threads_ = 1;
  data::Splits splits_;
  models::ViTSpec spec_;
  models::VisionTransformer model_{nullptr};
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<data::Loader> train_loader_, val_loader_, test_loader_;

  nlohmann::json result_;
  std::vector<MetricRow> rows_;
  std::vector<double> step_ms_;  // after warm-up
  int64_t step_ = 0;
  double train_time_s_ = 0;
};

void Run::banner(const nlohmann::json& env) {
  say("== accel-bench " + env["accel_bench_version"].get<std::string>() + " (" +
      env["git_sha"].get<std::string>() + ") | LibTorch " +
      env["libtorch_version"].get<std::string>() + " | " +
      env["compiler"].get<std::string>());
  say("== hardware: " + env["cpu_model"].get<std::string>() + " | cores " +
      std::to_string(env["cores"].get<int>()) + " | threads " + std::to_string(threads_) +
      " | BLAS " + env["blas"].get<std::string>() +
      (env["cuda_available"].get<bool>()
           ? " | GPUs " + std::to_string(env["gpu_count"].get<int>())
           : std::string(" | no GPU")));
  say("== resolved config:");
  for (const auto& [section, body] : resolved_.items()) say("   " + section + ": " + body.dump());
}

void Run::setup() {
  auto t0 = Clock::now();
  splits_ = data::load_splits(cfg_.data, cfg_.train.seed);
  const int channels = int(splits_.train.images.size(1));
  spec_ = resolve_model_spec(cfg_.model, channels, splits_.train.num_classes);
  const int side = resolve_image_size(cfg_, spec_);

  torch::manual_seed(cfg_.train.seed);
  model_ = models::VisionTransformer(spec_);
  optimizer_ = make_optimizer(model_->parameters(), cfg_.optim);

  auto make = [&](const data::ImageSet& set, bool training) {
    data::LoaderOptions o;
    o.batch_size = training ? cfg_.train.batch_size
                            : (cfg_.train.eval_batch_size > 0 ? cfg_.train.eval_batch_size
                                                              : cfg_.train.batch_size);
    o.shuffle = training;
    o.drop_last = training;
    o.seed = cfg_.train.seed;
    o.prefetch = cfg_.data.prefetch;
    o.resize = side;
    o.normalize = cfg_.data.normalize;
    o.limit_batches = training ? cfg_.train.limit_train_batches : cfg_.train.limit_eval_batches;
    return std::make_unique<data::Loader>(std::make_shared<const data::ImageSet>(set), o);
  };
  train_loader_ = make(splits_.train, true);
  val_loader_ = make(splits_.val, false);
  test_loader_ = make(splits_.test, false);
  if (train_loader_->num_batches() == 0) {
    throw ConfigError("train.batch_size: " + std::to_string(cfg_.train.batch_size) +
                      " is larger than the " + std::to_string(splits_.train.size()) +
                      " training samples (drop_last leaves no batch)");
  }

  const auto params = models::count_parameters(*model_);
  result_["params"] = params;
  result_["flops_per_sample"] = models::vit_forward_flops(spec_);
  result_["model"] = {{"image_size", spec_.image_size}, {"in_channels", spec_.in_channels},
                      {"patch_size", spec_.patch_size}, {"dim", spec_.dim},
                      {"depth", spec_.depth},           {"heads", spec_.heads},
                      {"mlp_dim", spec_.mlp_dim},       {"num_classes", spec_.num_classes},
                      {"seq_length", spec_.seq_length()}};
  result_["data"] = {{"train", splits_.train.size()},
                     {"val", splits_.val.size()},
                     {"test", splits_.test.size()},
                     {"class_ids", splits_.class_ids},
                     {"train_batches_per_epoch", train_loader_->num_batches()}};
  result_["init_time_s"] = seconds_since(t0);
  say("== model: ViT " + std::to_string(spec_.image_size) + "px patch " +
      std::to_string(spec_.patch_size) + ", dim " + std::to_string(spec_.dim) + ", depth " +
      std::to_string(spec_.depth) + ", heads " + std::to_string(spec_.heads) + ", mlp " +
      std::to_string(spec_.mlp_dim) + ", " + std::to_string(spec_.num_classes) +
      " classes | " + std::to_string(params) + " parameters | " +
      fmt("%.3f GFLOP/sample fwd", result_["flops_per_sample"].get<double>() / 1e9));
  say("== data: " + cfg_.data.dataset + " train " + std::to_string(splits_.train.size()) +
      " / val " + std::to_string(splits_.val.size()) + " / test " +
      std::to_string(splits_.test.size()) + " images at " + std::to_string(side) + "x" +
      std::to_string(side));
}

void Run::train_epochs() {
  const int epochs = cfg_.train.epochs;
  const int64_t batches = train_loader_->num_batches();
  model_->train();
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    const auto epoch_start = Clock::now();
    train_loader_->start_epoch(epoch - 1);
    int64_t correct = 0, seen = 0, batch_idx = 0;
    double loss_sum = 0;
    while (auto batch = train_loader_->next()) {
      const auto t0 = Clock::now();
      auto logits = model_->forward(batch->x);
      auto loss = torch::cross_entropy_loss(logits, batch->y);
      optimizer_->zero_grad();
      loss.backward();
      optimizer_->step();
      const double loss_v = loss.item<double>();
      const double ms = seconds_since(t0) * 1e3;
      if (!std::isfinite(loss_v)) {
        throw RunError("loss is " + std::to_string(loss_v) + " at epoch " +
                       std::to_string(epoch) + ", batch " + std::to_string(batch_idx));
      }
      if (step_ >= cfg_.train.warmup_steps) step_ms_.push_back(ms);
      {
        torch::NoGradGuard no_grad;
        correct += logits.argmax(1).eq(batch->y).sum().item<int64_t>();
      }
      seen += batch->y.size(0);
      loss_sum += loss_v;
      if (batch_idx % cfg_.train.log_every == 0) {
        char line[128];
        std::snprintf(line, sizeof(line), "Epoch: %04d/%04d | Batch %04lld/%04lld | Loss: %.4f",
                      epoch, epochs, static_cast<long long>(batch_idx),
                      static_cast<long long>(batches), loss_v);
        say(line);
        rows_.push_back({"step", step_, epoch, loss_v, NAN, NAN, ms});
      }
      ++batch_idx;
      ++step_;
    }
    const auto val = evaluate(model_, *val_loader_);
    const double epoch_s = seconds_since(epoch_start);
    train_time_s_ += epoch_s;
    const double train_acc = seen ? double(correct) / double(seen) : 0.0;
    const double mean_loss = batch_idx ? loss_sum / double(batch_idx) : 0.0;
    say(fmt("Epoch: %04.0f/%04.0f | Train acc.: %.2f%% | Val acc.: %.2f%%", epoch, epochs,
            train_acc * 100, val.acc * 100));
    say(fmt("Time elapsed %.2f min", train_time_s_ / 60.0));
    rows_.push_back({"epoch", step_, epoch, mean_loss, train_acc, val.acc, NAN});
    result_["epochs"].push_back({{"epoch", epoch},
                                 {"train_acc", train_acc},
                                 {"val_acc", val.acc},
                                 {"val_loss", val.loss},
                                 {"loss", mean_loss},
                                 {"steps", batch_idx},
                                 {"time_s", epoch_s}});
  }
}

void Run::finish() {
  const auto test = evaluate(model_, *test_loader_);
  say(fmt("Test accuracy %.2f%%", test.acc * 100));
  const auto steps = metrics::spread(step_ms_);
  const double images = double(step_ms_.size()) * double(cfg_.train.batch_size);
  const double step_s = steps.mean * double(steps.count) / 1e3;
  const double images_per_s = step_s > 0 ? images / step_s : 0.0;
  const int64_t peak = metrics::peak_rss_bytes();
  result_["status"] = "ok";
  result_["test_acc"] = test.acc;
  result_["test_loss"] = test.loss;
  result_["train_time_s"] = train_time_s_;
  result_["steps"] = step_;
  result_["step_time_ms"] = spread_json(steps);
  result_["images_per_s"] = images_per_s;
  result_["model_flops_per_s"] = images_per_s * 3.0 * result_["flops_per_sample"].get<double>();
  result_["peak_memory_bytes"] = nlohmann::json::array({peak});
  result_["peak_memory_kind"] = "process_rss";
  say(fmt("Memory used: %.2f GB (peak RSS)", double(peak) / 1e9));
  say(fmt("Step time: median %.2f ms (p10 %.2f, p90 %.2f) | %.1f images/s", steps.median,
          steps.p10, steps.p90, images_per_s));
}

void Run::write_outputs() {
  result_["finished_at"] = utc_now();
  metrics::write_file_atomic(opts_.out_dir / "metrics.csv", metrics_csv(rows_));
  metrics::write_json_atomic(opts_.out_dir / "result.json", result_);
}

nlohmann::json Run::execute() {
  threads_ = resolve_threads(cfg_.runtime);
  at::set_num_threads(threads_);
  const auto env = metrics::environment(threads_);
  result_ = {{"schema_version", 1},    {"name", cfg_.name},    {"status", "running"},
             {"started_at", utc_now()}, {"config", resolved_}, {"env", env},
             {"epochs", nlohmann::json::array()}};
  banner(env);
  setup();  // loads data, builds the model: errors here write nothing
  if (opts_.dry_run) {
    say("== dry run: config valid, data and model ready; nothing trained or written");
    result_["status"] = "dry-run";
    return result_;
  }
  std::filesystem::create_directories(opts_.out_dir);
  metrics::write_json_atomic(opts_.out_dir / "config.json", resolved_);
  try {
    train_epochs();
    finish();
  } catch (const std::exception& e) {
    result_["status"] = "failed";
    result_["error"] = e.what();
    result_["train_time_s"] = train_time_s_;
    result_["peak_memory_bytes"] = nlohmann::json::array({metrics::peak_rss_bytes()});
    write_outputs();
    throw RunError(std::string("run failed: ") + e.what());
  }
  write_outputs();
  say("== wrote " + (opts_.out_dir / "result.json").string());
  return result_;
}

}  // namespace

nlohmann::json run(const config::RunConfig& cfg, const nlohmann::json& resolved,
                   const RunOptions& opts) {
  check_runnable(cfg);
  return Run(cfg, resolved, opts).execute();
}

}  // namespace accel::train
