// One run end to end: data, model, the training loop (plain or through the
// Fabric-style facade), checkpoints and resume, timing, outputs.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <iomanip>
#include <optional>
#include <ostream>
#include <sstream>

#include "accel/data/loader.h"
#include "accel/metrics/metrics.h"
#include "accel/models/pretrained.h"
#include "accel/models/weights.h"
#include "accel/train/checkpoint.h"
#include "accel/train/fabric.h"
#include "accel/train/trainer.h"
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

// One row of metrics.csv: a logged step or an epoch summary. NaN = empty cell.
struct MetricRow {
  std::string kind;  // "step" | "epoch"
  int64_t step = 0;
  int epoch = 0;
  double loss = NAN, train_acc = NAN, val_acc = NAN, step_time_ms = NAN;
};

nlohmann::json row_to_json(const MetricRow& r) {
  auto num = [](double v) { return std::isnan(v) ? nlohmann::json() : nlohmann::json(v); };
  return {r.kind, r.step, r.epoch, num(r.loss), num(r.train_acc), num(r.val_acc),
          num(r.step_time_ms)};
}
MetricRow row_from_json(const nlohmann::json& j) {
  auto num = [](const nlohmann::json& v) { return v.is_null() ? NAN : v.get<double>(); };
  return {j[0].get<std::string>(), j[1].get<int64_t>(), j[2].get<int>(),
          num(j[3]),               num(j[4]),           num(j[5]), num(j[6])};
}

std::string metrics_csv(const std::vector<MetricRow>& rows) {
  std::ostringstream out;
  out << "kind,step,epoch,loss,train_acc,val_acc,step_time_ms\n";
  auto cell = [&](double v) {
    if (!std::isnan(v)) out << std::setprecision(9) << v;
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

nlohmann::json spread_json(const metrics::Spread& s) {
  return {{"median", s.median}, {"p10", s.p10}, {"p90", s.p90}, {"mean", s.mean},
          {"count", s.count}};
}

// Running totals of the epoch in progress (part of a mid-epoch checkpoint).
struct EpochState {
  int64_t correct = 0, seen = 0, batches = 0;
  double loss_sum = 0, elapsed_s = 0;
};

struct EvalResult {
  double acc = 0, loss = 0;
};

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
  void init_weights(models::VisionTransformer& model);
  void resume();
  void train_epochs();
  EvalResult evaluate(data::Loader& loader);
  void save(const std::filesystem::path& file, int epochs_done, const EpochState& es);
  // OUT/checkpoints/step-NNNNNNNN.ckpt for the current step (train.checkpoint_every).
  std::filesystem::path periodic_checkpoint() const {
    char name[48];
    std::snprintf(name, sizeof(name), "step-%08lld.ckpt", static_cast<long long>(step_));
    return opts_.out_dir / "checkpoints" / name;
  }
  void finish();
  void write_outputs();

  // The two loops differ only here, as the article's 01 and 03 scripts do.
  torch::Tensor forward(const torch::Tensor& x) {
    return fabric_ ? fsetup_->model.forward(x) : model_->forward(x);
  }
  std::pair<torch::Tensor, torch::Tensor> train_step(const data::Batch& batch);
  torch::optim::Optimizer& optimizer() {
    return fabric_ ? fsetup_->optimizer.inner() : *optimizer_;
  }

  const config::RunConfig& cfg_;
  const nlohmann::json& resolved_;
  const RunOptions& opts_;

  int threads_ = 1;
  data::Splits splits_;
  models::ViTSpec spec_;
  models::VisionTransformer model_{nullptr};
  std::unique_ptr<torch::optim::Optimizer> optimizer_;  // plain loop
  std::unique_ptr<Fabric> fabric_;                      // fabric loop
  std::optional<Fabric::Setup> fsetup_;
  std::unique_ptr<data::Loader> train_loader_, val_loader_, test_loader_;

  nlohmann::json result_;
  std::vector<MetricRow> rows_;
  std::vector<double> step_ms_;  // after warm-up
  int64_t step_ = 0;
  double train_time_s_ = 0;
  int start_epoch_ = 1;         // first epoch this process runs
  int nonfinite_ = 0;           // consecutive steps with a non-finite loss
  static constexpr int kMaxNonFiniteWithScaler = 10;
  EpochState resumed_epoch_;    // partial epoch carried over by --resume
};

std::pair<torch::Tensor, torch::Tensor> Run::train_step(const data::Batch& batch) {
  if (!fabric_) {  // cvpr2023 01_pytorch-vit.py
    auto logits = model_->forward(batch.x);
    auto loss = torch::cross_entropy_loss(logits, batch.y);
    optimizer_->zero_grad();
    loss.backward();
    optimizer_->step();
    return {logits, loss};
  }
  // 03_fabric-vit.py: the same lines, with backward (and the step) through Fabric.
  auto& model = fsetup_->model;
  auto& opt = fsetup_->optimizer;
  auto logits = model.forward(batch.x);
  auto loss = torch::cross_entropy_loss(logits, fabric_->to_device(batch.y));
  opt.zero_grad();
  fabric_->backward(loss);
  if (cfg_.train.grad_clip > 0) fabric_->clip_gradients(model, opt, cfg_.train.grad_clip);
  opt.step();
  return {logits, loss};
}

void Run::banner(const nlohmann::json& env) {
  say("== accel-bench " + env["accel_bench_version"].get<std::string>() + " (" +
      env["git_sha"].get<std::string>() + ") | LibTorch " +
      env["libtorch_version"].get<std::string>() + " | " + env["compiler"].get<std::string>());
  say("== hardware: " + env["cpu_model"].get<std::string>() + " | cores " +
      std::to_string(env["cores"].get<int>()) + " | threads " + std::to_string(threads_) +
      " | BLAS " + env["blas"].get<std::string>() + " | OMP_WAIT_POLICY " +
      env["omp_wait_policy"].get<std::string>() +
      (env["cuda_available"].get<bool>() ? " | GPUs " + std::to_string(env["gpu_count"].get<int>())
                                         : std::string(" | no GPU")));
  say("== resolved config:");
  for (const auto& [section, body] : resolved_.items()) say("   " + section + ": " + body.dump());
}

void Run::init_weights(models::VisionTransformer& model) {
  const auto& m = cfg_.model;
  if (m.init == "random") return;
  models::LoadReport report;
  if (m.init == "checkpoint") {
    const auto ckpt = read_checkpoint(m.init_path);
    report = models::apply_named_tensors(model, ckpt.model_tensors(), m.init_strict, m.init_path);
  } else {
    report = models::load_pretrained(model, m.init_path,
                                     models::weight_format_from_string(m.init_format),
                                     m.init_strict);
  }
  std::string line = report.summary();
  if (m.init_head == "replace" && !report.head_replaced) {
    model->replace_head(model->spec().num_classes);
    report.head_replaced = true;
    line += "; head replaced (model.init_head \"replace\")";
  }
  say("== init: " + line);
  result_["init"] = {{"kind", m.init},
                     {"path", m.init_path},
                     {"loaded", report.loaded},
                     {"head_replaced", report.head_replaced},
                     {"source_classes", report.source_classes},
                     {"missing", report.missing},
                     {"unexpected", report.unexpected}};
}

void Run::setup() {
  auto t0 = Clock::now();
  splits_ = data::load_splits(cfg_.data, cfg_.train.seed);
  spec_ = resolve_model_spec(cfg_.model, int(splits_.train.images.size(1)),
                             splits_.train.num_classes);
  const int side = resolve_image_size(cfg_, spec_);

  torch::manual_seed(cfg_.train.seed);
  auto model = models::VisionTransformer(spec_);
  init_weights(model);
  auto make_opt = [&](std::vector<torch::Tensor> params) {
    return make_optimizer(params, cfg_.optim);
  };
  if (cfg_.train.loop == "fabric") {
    fsetup_.emplace(fabric_->setup(model, make_opt));
  } else {
    optimizer_ = make_opt(model->parameters());
  }
  model_ = model;

  auto make = [&](const data::ImageSet& set, bool training) {
    data::LoaderOptions o;
    o.batch_size = training || cfg_.train.eval_batch_size == 0 ? cfg_.train.batch_size
                                                               : cfg_.train.eval_batch_size;
    o.shuffle = o.drop_last = training;
    o.seed = cfg_.train.seed;
    o.prefetch = cfg_.data.prefetch;
    o.resize = side;
    o.normalize = cfg_.data.normalize;
    o.limit_batches = training ? cfg_.train.limit_train_batches : cfg_.train.limit_eval_batches;
    auto shared = std::make_shared<const data::ImageSet>(set);
    return fabric_ ? fabric_->setup_dataloader(shared, o)
                   : std::make_unique<data::Loader>(shared, o);
  };
  train_loader_ = make(splits_.train, true);
  val_loader_ = make(splits_.val, false);
  test_loader_ = make(splits_.test, false);
  if (train_loader_->num_batches() == 0) {
    throw ConfigError("train.batch_size: " + std::to_string(cfg_.train.batch_size) +
                      " is larger than the " + std::to_string(splits_.train.size()) +
                      " training samples (drop_last leaves no batch)");
  }
  if (!opts_.resume.empty()) resume();

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
  result_["loop"] = cfg_.train.loop;
  result_["init_time_s"] = seconds_since(t0);
  say("== model: ViT " + std::to_string(spec_.image_size) + "px patch " +
      std::to_string(spec_.patch_size) + ", dim " + std::to_string(spec_.dim) + ", depth " +
      std::to_string(spec_.depth) + ", heads " + std::to_string(spec_.heads) + ", mlp " +
      std::to_string(spec_.mlp_dim) + ", " + std::to_string(spec_.num_classes) + " classes | " +
      std::to_string(params) + " parameters | " +
      fmt("%.3f GFLOP/sample fwd", result_["flops_per_sample"].get<double>() / 1e9));
  say("== data: " + cfg_.data.dataset + " train " + std::to_string(splits_.train.size()) +
      " / val " + std::to_string(splits_.val.size()) + " / test " +
      std::to_string(splits_.test.size()) + " images at " + std::to_string(side) + "x" +
      std::to_string(side) + " | loop " + cfg_.train.loop + " | precision " +
      cfg_.runtime.precision);
}

void Run::resume() {
  Checkpoint ckpt = fabric_ ? fabric_->load(opts_.resume, fsetup_->model, fsetup_->optimizer)
                            : read_checkpoint(opts_.resume);
  const auto differ = resume_incompatibilities(ckpt.config, resolved_);
  if (!differ.empty()) {
    std::string list;
    for (const auto& d : differ) list += (list.empty() ? "" : ", ") + d;
    throw ConfigError("--resume " + opts_.resume.string() +
                      ": the checkpoint was written with another " + list);
  }
  if (!fabric_) restore_for_resume(ckpt, *model_, *optimizer_);
  const auto& p = ckpt.progress;
  const auto& x = p.extra;
  step_ = p.step;
  start_epoch_ = p.epoch + 1;
  train_time_s_ = x.value("train_time_s", 0.0);
  step_ms_ = x.value("step_ms", std::vector<double>{});
  for (const auto& r : x.value("rows", nlohmann::json::array())) rows_.push_back(row_from_json(r));
  result_["epochs"] = x.value("epochs", nlohmann::json::array());
  if (p.batch_in_epoch > 0) {
    const auto& e = x.at("epoch_state");
    resumed_epoch_ = {e.at("correct").get<int64_t>(), e.at("seen").get<int64_t>(),
                      p.batch_in_epoch, e.at("loss_sum").get<double>(),
                      e.at("elapsed_s").get<double>()};
  }
  result_["resumed_from"] = {{"path", opts_.resume.string()}, {"step", p.step},
                             {"epoch", p.epoch}, {"batch_in_epoch", p.batch_in_epoch}};
  say("== resumed from " + opts_.resume.string() + " at step " + std::to_string(p.step) +
      " (epoch " + std::to_string(start_epoch_) + ", batch " +
      std::to_string(p.batch_in_epoch) + ")");
}

void Run::save(const std::filesystem::path& file, int epochs_done, const EpochState& es) {
  TrainProgress p;
  p.epoch = epochs_done;
  p.step = step_;
  p.batch_in_epoch = es.batches;
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : rows_) rows.push_back(row_to_json(r));
  p.extra = {{"train_time_s", train_time_s_},
             {"step_ms", step_ms_},
             {"rows", rows},
             {"epochs", result_["epochs"]},
             {"epoch_state",
              {{"correct", es.correct}, {"seen", es.seen}, {"loss_sum", es.loss_sum},
               {"elapsed_s", es.elapsed_s}}}};
  if (fabric_) {
    fabric_->save(file, fsetup_->model, fsetup_->optimizer, p, resolved_, opts_.overwrite);
  } else {
    save_checkpoint(file, *model_, *optimizer_, nlohmann::json::object(), p, resolved_,
                    opts_.overwrite);
  }
}

EvalResult Run::evaluate(data::Loader& loader) {
  torch::NoGradGuard no_grad;
  model_->eval();
  loader.start_epoch(0);
  int64_t correct = 0, seen = 0;
  double loss_sum = 0;
  while (auto batch = loader.next()) {
    auto logits = forward(batch->x);
    auto y = logits.device() == batch->y.device() ? batch->y : batch->y.to(logits.device());
    loss_sum += torch::cross_entropy_loss(logits, y, {}, at::Reduction::Sum, -100).item<double>();
    correct += logits.argmax(1).eq(y).sum().item<int64_t>();
    seen += y.size(0);
  }
  model_->train();
  return seen ? EvalResult{double(correct) / double(seen), loss_sum / double(seen)} : EvalResult{};
}

void Run::train_epochs() {
  const int epochs = cfg_.train.epochs;
  const int64_t batches = train_loader_->num_batches();
  const int64_t max_steps = cfg_.train.max_steps;
  bool stop = max_steps > 0 && step_ >= max_steps;
  model_->train();
  for (int epoch = start_epoch_; epoch <= epochs && !stop; ++epoch) {
    EpochState es = epoch == start_epoch_ ? resumed_epoch_ : EpochState{};
    auto segment = Clock::now();  // epoch time excludes checkpoint writing
    train_loader_->start_epoch(epoch - 1, es.batches);
    while (auto batch = train_loader_->next()) {
      const auto t0 = Clock::now();
      auto [logits, loss] = train_step(*batch);
      const double loss_v = loss.item<double>();
      const double ms = seconds_since(t0) * 1e3;
      // A GradScaler skips steps with inf/NaN gradients, so a run with one can
      // recover from a few bad losses; without one the weights are already
      // poisoned. Either way a loss that stays non-finite ends the run.
      nonfinite_ = std::isfinite(loss_v) ? 0 : nonfinite_ + 1;
      const int allowed = fabric_ && fabric_->scaler().enabled() ? kMaxNonFiniteWithScaler : 0;
      if (nonfinite_ > allowed) {
        throw RunError("non-finite loss (" + std::to_string(loss_v) + ") at epoch " +
                       std::to_string(epoch) + ", batch " + std::to_string(es.batches) + " after " +
                       std::to_string(nonfinite_) + " such step(s) in a row");
      }
      if (step_ >= cfg_.train.warmup_steps) step_ms_.push_back(ms);
      {
        torch::NoGradGuard no_grad;
        es.correct += logits.argmax(1).cpu().eq(batch->y).sum().item<int64_t>();
      }
      es.seen += batch->y.size(0);
      es.loss_sum += loss_v;
      if (es.batches % cfg_.train.log_every == 0) {
        char line[128];
        std::snprintf(line, sizeof(line), "Epoch: %04d/%04d | Batch %04lld/%04lld | Loss: %.4f",
                      epoch, epochs, static_cast<long long>(es.batches),
                      static_cast<long long>(batches), loss_v);
        say(line);
        rows_.push_back({"step", step_, epoch, loss_v, NAN, NAN, ms});
      }
      ++es.batches;
      ++step_;
      stop = max_steps > 0 && step_ >= max_steps;
      const bool periodic = cfg_.train.checkpoint_every > 0 &&
                            step_ % cfg_.train.checkpoint_every == 0;
      if ((periodic || stop) && es.batches < batches) {
        es.elapsed_s += seconds_since(segment);
        if (periodic) save(periodic_checkpoint(), epoch - 1, es);
        if (stop) break;
        segment = Clock::now();
      }
    }
    if (es.batches < batches) {  // stopped by max_steps inside the epoch
      if (cfg_.train.save_checkpoint) save(opts_.out_dir / "checkpoint.ckpt", epoch - 1, es);
      say("== stopped after " + std::to_string(step_) + " steps (train.max_steps), mid-epoch");
      return;
    }
    const auto val = evaluate(*val_loader_);
    es.elapsed_s += seconds_since(segment);
    train_time_s_ += es.elapsed_s;
    const double train_acc = es.seen ? double(es.correct) / double(es.seen) : 0.0;
    const double mean_loss = es.batches ? es.loss_sum / double(es.batches) : 0.0;
    say(fmt("Epoch: %04.0f/%04.0f | Train acc.: %.2f%% | Val acc.: %.2f%%", epoch, epochs,
            train_acc * 100, val.acc * 100));
    say(fmt("Time elapsed %.2f min", train_time_s_ / 60.0));
    rows_.push_back({"epoch", step_, epoch, mean_loss, train_acc, val.acc, NAN});
    result_["epochs"].push_back({{"epoch", epoch},
                                 {"train_acc", train_acc},
                                 {"val_acc", val.acc},
                                 {"val_loss", val.loss},
                                 {"loss", mean_loss},
                                 {"steps", es.batches},
                                 {"time_s", es.elapsed_s}});
    const bool periodic = cfg_.train.checkpoint_every > 0 && step_ % cfg_.train.checkpoint_every == 0;
    if (periodic) save(periodic_checkpoint(), epoch, EpochState{});
    if (cfg_.train.save_checkpoint && (stop || epoch == epochs)) {
      save(opts_.out_dir / "checkpoint.ckpt", epoch, EpochState{});
    }
  }
}

void Run::finish() {
  const auto test = evaluate(*test_loader_);
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
  if (fabric_ && fabric_->scaler().enabled()) {
    result_["grad_scaler"] = fabric_->scaler().state_dict();
  }
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
  if (cfg_.train.loop == "fabric") {
    FabricOptions fo;
    fo.accelerator = cfg_.runtime.accelerator;
    fo.devices = cfg_.runtime.devices;
    fo.num_nodes = cfg_.runtime.num_nodes;
    fo.strategy = cfg_.runtime.strategy;
    fo.precision = cfg_.runtime.precision;
    fo.threads = cfg_.runtime.threads;
    fabric_ = std::make_unique<Fabric>(fo, opts_.log);
    fabric_->launch();
    threads_ = fabric_->threads();
  } else {
    threads_ = resolve_threads(cfg_.runtime);
    at::set_num_threads(threads_);
  }
  const auto env = metrics::environment(threads_);
  result_ = {{"schema_version", 1},    {"name", cfg_.name},    {"status", "running"},
             {"started_at", utc_now()}, {"config", resolved_}, {"env", env},
             {"epochs", nlohmann::json::array()}};
  banner(env);
  setup();  // loads data, builds the model, resumes: errors here write nothing
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
    result_["steps"] = step_;
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
