// One run end to end on every rank: the Fabric (process context, precision,
// strategy), data, model, the training loop, checkpoints and resume, timing,
// metrics reduced over ranks, and (rank 0) the outputs.
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <optional>
#include <ostream>

#include "accel/data/loader.h"
#include "accel/metrics/hardware.h"
#include "accel/metrics/metrics.h"
#include "accel/metrics/profiler.h"
#include "accel/models/pretrained.h"
#include "accel/models/weights.h"
#include "accel/train/checkpoint.h"
#include "accel/train/device.h"
#include "accel/train/fabric.h"
#include "accel/train/result.h"
#include "accel/train/trainer.h"
#include "accel/util/errors.h"
#include "run_support.h"

namespace accel::train {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Running totals of the epoch in progress (part of a mid-epoch checkpoint).
struct EpochState {
  int64_t correct = 0, seen = 0, batches = 0;
  double loss_sum = 0, elapsed_s = 0;
};

struct EvalResult {
  Opt acc, loss;
};

// A trained step whose loss and accuracy still sit on the device: read back
// together at the next flush (every step on a CPU, where reading is free;
// on a GPU at log steps, epoch ends, checkpoints and stops only, so the host
// does not stall the device each step).
struct PendingStep {
  torch::Tensor loss;     // this rank's, float64, a copy (graph outputs are reused)
  torch::Tensor correct;  // int64 count over the batch's real samples
  int64_t valid = 0, step = 0, batch_index = 0;
  int epoch = 0;
  bool log = false;
};

class Run {
 public:
  Run(const config::RunConfig& cfg, const nlohmann::json& resolved, const RunOptions& opts)
      : cfg_(cfg), resolved_(resolved), opts_(opts) {}
  RunResult execute();

 private:
  void say(const std::string& line) { fabric_->print(line); }
  void setup();
  void init_weights(models::VisionTransformer& model);
  void resume();
  void train_epochs();
  bool train_batch(const data::Batch& batch, int epoch, EpochState& es, int64_t batches);
  bool flush_pending(EpochState& es, int64_t batches);
  void setup_graph();
  EvalResult evaluate(data::Loader& loader);
  void save(const std::filesystem::path& file, int epochs_done, const EpochState& es);
  void finish();
  void gather_rank_results();
  void profile_step_begin();
  void profile_step_end();
  void write_profile();
  void write_outputs();

  // The article's 01 (plain) and 03 (fabric) scripts differ in these lines.
  torch::Tensor forward(const torch::Tensor& x) {
    return plain_ ? forward_raw_(fabric_->to_device(x)) : fsetup_->model.forward(x);
  }
  torch::Tensor step_loss(const data::Batch& batch, const torch::Tensor& y, torch::Tensor& logits);

  const config::RunConfig& cfg_;
  const nlohmann::json& resolved_;
  const RunOptions& opts_;

  std::unique_ptr<Fabric> fabric_;
  bool zero_ = true;
  bool plain_ = false;
  data::Splits splits_;
  models::ViTSpec spec_;
  std::optional<Fabric::Setup> fsetup_;
  std::function<torch::Tensor(const torch::Tensor&)> forward_raw_;
  std::unique_ptr<data::Loader> train_loader_, val_loader_, test_loader_;
  std::unique_ptr<StepClock> clock_;
  std::unique_ptr<GraphedStep> graph_;  // runtime.cuda_graphs
  Capturable* capturable_ = nullptr;    // its optimizer
  bool defer_ = false;                  // read step metrics at flushes only (GPU)
  std::vector<PendingStep> pending_;
  std::unique_ptr<metrics::OpProfiler> profiler_;  // --profile
  int64_t profile_first_ = -1, profiled_ = 0;

  RunResult result_;
  std::vector<double> step_ms_;  // this rank's, after warm-up
  int64_t step_ = 0;             // batches trained
  int64_t opt_steps_ = 0;        // optimizer steps taken
  int64_t total_opt_steps_ = 0;  // for the LR schedule
  double train_time_s_ = 0;
  int start_epoch_ = 1;
  int nonfinite_ = 0;
  static constexpr int kMaxNonFiniteWithScaler = 10;
  EpochState resumed_epoch_;
};

torch::Tensor Run::step_loss(const data::Batch& batch, const torch::Tensor& y,
                             torch::Tensor& logits) {
  logits = forward(batch.x);
  return torch::cross_entropy_loss(logits, y);
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
  result_.init = {{"kind", m.init},
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
  fsetup_.emplace(fabric_->setup(model, [&](std::vector<torch::Tensor> params) {
    return make_optimizer(params, cfg_.optim, cfg_.runtime.cuda_graphs);
  }));
  auto* raw = model.get();
  forward_raw_ = [raw](const torch::Tensor& x) { return raw->forward(x); };
  clock_ = std::make_unique<StepClock>(fabric_->device());
  defer_ = clock_->on_device();
  if (cfg_.runtime.cuda_graphs) setup_graph();

  auto make = [&](const data::ImageSet& set, bool training) {
    data::LoaderOptions o = loader_options(cfg_, set, training, side);
    auto loader = fabric_->setup_dataloader(std::make_shared<const data::ImageSet>(set), o);
    if (!training && cfg_.train.eval_batch_size > o.batch_size && cfg_.train.eval_batch_size > 0) {
      say("== note: train.eval_batch_size " + std::to_string(cfg_.train.eval_batch_size) +
          " exceeds the " + std::to_string(set.size()) + " images of a split; using " +
          std::to_string(o.batch_size));
    }
    return loader;
  };
  train_loader_ = make(splits_.train, true);
  val_loader_ = make(splits_.val, false);
  test_loader_ = make(splits_.test, false);
  if (train_loader_->num_batches() == 0) {
    throw ConfigError("train.batch_size: " + std::to_string(cfg_.train.batch_size) +
                      " is larger than the " + std::to_string(train_loader_->num_samples()) +
                      " training samples per rank (drop_last leaves no batch)");
  }
  total_opt_steps_ = total_optimizer_steps(cfg_.train, train_loader_->num_batches());
  if (!opts_.resume.empty()) resume();

  result_.params = models::count_parameters(*model);
  result_.flops_per_sample = models::vit_forward_flops(spec_);
  result_.model = model_json(spec_);
  result_.data = {{"train", splits_.train.size()},
                  {"val", splits_.val.size()},
                  {"test", splits_.test.size()},
                  {"class_ids", splits_.class_ids},
                  {"train_batches_per_epoch", train_loader_->num_batches()}};
  result_.init_time_s = seconds_since(t0);
  say(model_line(spec_, result_.params, result_.flops_per_sample));
  say("== data: " + cfg_.data.dataset + " train " + std::to_string(splits_.train.size()) +
      " / val " + std::to_string(splits_.val.size()) + " / test " +
      std::to_string(splits_.test.size()) + " images at " + std::to_string(side) + "x" +
      std::to_string(side) + " | loop " + cfg_.train.loop + " | precision " +
      cfg_.runtime.precision + " | strategy " + fabric_->strategy().name() + " x " +
      std::to_string(fabric_->world_size()) + " rank(s)");
}

// The whole step as one function of static inputs, for capture: gradients
// zeroed in place (a graph keeps their addresses), the loop's own forward,
// backward and step lines, the learning rate read from the device.
void Run::setup_graph() {
  capturable_ = dynamic_cast<Capturable*>(&fsetup_->optimizer.inner());
  if (!capturable_) throw RunError("runtime.cuda_graphs: the optimizer is not capturable");
  graph_ = std::make_unique<GraphedStep>(
      fabric_->device(), [this](const torch::Tensor& x, const torch::Tensor& y) {
        auto& opt = fsetup_->optimizer;
        for (auto& p : opt.params()) {
          if (p.grad().defined()) p.grad().zero_();
        }
        auto logits = plain_ ? forward_raw_(x) : fsetup_->model.forward(x);
        auto loss = torch::cross_entropy_loss(logits, y);
        if (plain_) {
          loss.backward();
          opt.inner().step();
        } else {
          fabric_->backward(loss);
          opt.step();
        }
        return std::make_pair(loss.detach(), logits.detach());
      });
}

void Run::resume() {
  Checkpoint ckpt;
  try {
    ckpt = fabric_->load(opts_.resume, fsetup_->model, fsetup_->optimizer);
  } catch (const ConfigError&) {
    // The model or optimizer does not fit the checkpoint: name the config
    // fields that differ (model.depth, ...) rather than the first tensor.
    std::vector<std::string> differ;
    try {
      differ = resume_incompatibilities(read_checkpoint(opts_.resume).config, resolved_);
    } catch (const std::exception&) {
    }
    if (!differ.empty()) {
      throw ConfigError("--resume " + opts_.resume.string() +
                        ": the checkpoint was written with another " + join(differ, ", "));
    }
    throw;
  }
  const auto differ = resume_incompatibilities(ckpt.config, resolved_);
  if (!differ.empty()) {
    throw ConfigError("--resume " + opts_.resume.string() +
                      ": the checkpoint was written with another " + join(differ, ", "));
  }
  const auto& p = ckpt.progress;
  const auto& x = p.extra;
  if (p.batch_in_epoch > train_loader_->num_batches()) {
    throw ConfigError("--resume " + opts_.resume.string() + ": the checkpoint stopped after " +
                      std::to_string(p.batch_in_epoch) + " batches of epoch " +
                      std::to_string(p.epoch + 1) + ", but this run has only " +
                      std::to_string(train_loader_->num_batches()) +
                      " batches per epoch (train.limit_train_batches is lower)");
  }
  step_ = p.step;
  opt_steps_ = x.value("optimizer_steps", p.step);
  start_epoch_ = p.epoch + 1;
  train_time_s_ = x.value("train_time_s", 0.0);
  step_ms_ = x.value("step_ms", std::vector<double>{});
  result_.rows = rows_from_json(x.value("rows", nlohmann::json::array()));
  result_.epochs = epochs_from_json(x.value("epochs", nlohmann::json::array()));
  if (p.batch_in_epoch > 0) {
    const auto& e = x.at("epoch_state");
    resumed_epoch_ = {e.at("correct").get<int64_t>(), e.at("seen").get<int64_t>(),
                      p.batch_in_epoch, e.at("loss_sum").get<double>(),
                      e.at("elapsed_s").get<double>()};
  }
  result_.resumed_from = {{"path", opts_.resume.string()}, {"step", p.step},
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
  p.extra = {{"train_time_s", train_time_s_},
             {"step_ms", step_ms_},
             {"optimizer_steps", opt_steps_},
             {"rows", rows_to_json(result_.rows)},
             {"epochs", epochs_to_json(result_.epochs)},
             {"epoch_state",
              {{"correct", es.correct}, {"seen", es.seen}, {"loss_sum", es.loss_sum},
               {"elapsed_s", es.elapsed_s}}}};
  // check_out_dir refused a folder with another run's files before any work,
  // so every checkpoint here is this run's own (or the one it resumes).
  fabric_->save(file, fsetup_->model, fsetup_->optimizer, p, resolved_, /*overwrite=*/true);
}

EvalResult Run::evaluate(data::Loader& loader) {
  torch::NoGradGuard no_grad;
  fsetup_->model.eval();
  loader.start_epoch(0);
  // correct, seen, loss sum over the real (not padding) samples of every
  // rank, summed on the device and read once at the end.
  const auto on = torch::TensorOptions().device(fabric_->device());
  auto correct = torch::zeros({}, on.dtype(torch::kLong));
  auto loss_sum = torch::zeros({}, on.dtype(torch::kDouble));
  double seen = 0;
  while (auto batch = loader.next()) {
    auto logits = forward(batch->x);
    auto y = logits.device() == batch->y.device() ? batch->y
                                                   : batch->y.to(logits.device(), true);
    const int64_t n = batch->valid;
    if (n <= 0) continue;
    auto lg = logits.narrow(0, 0, n);
    auto yy = y.narrow(0, 0, n);
    loss_sum += torch::cross_entropy_loss(lg, yy, {}, at::Reduction::Sum, -100).to(torch::kDouble);
    correct += lg.argmax(1).eq(yy).sum();
    seen += double(n);
  }
  fsetup_->model.train();
  auto sums = torch::zeros({3}, torch::kDouble);
  sums[0] = double(correct.item<int64_t>());
  sums[1] = seen;
  sums[2] = loss_sum.item<double>();
  fabric_->all_reduce(sums, dist::ReduceOp::Sum);
  const double total = sums[1].item<double>();
  if (total <= 0) return {};
  return {sums[0].item<double>() / total, sums[2].item<double>() / total};
}

// One batch: forward, loss, backward and (at the end of an accumulation
// window) the optimizer step. Returns false when the run must stop here
// (a stop signal agreed by every rank).
bool Run::train_batch(const data::Batch& batch, int epoch, EpochState& es, int64_t batches) {
  const int k = cfg_.train.accumulate;
  const bool window_start = es.batches % k == 0;
  const bool window_end = (es.batches + 1) % k == 0 || es.batches + 1 == batches;
  auto& opt = fsetup_->optimizer;
  // The scopes name the parts of a step for --profile (free otherwise).
  RECORD_USER_SCOPE("accel::step");
  clock_->begin();
  const auto y = fabric_->to_device(batch.y);  // for the loss and the accuracy
  torch::Tensor logits, loss;
  if (graph_) {  // runtime.cuda_graphs: the lines below, captured once and replayed
    RECORD_USER_SCOPE("accel::graph_replay");
    set_learning_rate(opt.inner(), cfg_.optim, opt_steps_, total_opt_steps_);
    capturable_->before_step();
    std::tie(loss, logits) = graph_->run(batch.x, y);
  } else if (plain_) {  // cvpr2023 01_pytorch-vit.py
    {
      RECORD_USER_SCOPE("accel::forward");
      loss = step_loss(batch, y, logits);
    }
    {
      RECORD_USER_SCOPE("accel::backward");
      if (window_start) opt.zero_grad();
      (k > 1 ? loss / k : loss).backward();
    }
    if (window_end) {
      RECORD_USER_SCOPE("accel::optimizer");
      set_learning_rate(opt.inner(), cfg_.optim, opt_steps_, total_opt_steps_);
      opt.inner().step();
    }
  } else {  // 03_fabric-vit.py: the same lines, backward and step through Fabric
    {
      RECORD_USER_SCOPE("accel::forward");
      loss = step_loss(batch, y, logits);
    }
    {
      RECORD_USER_SCOPE("accel::backward");
      if (window_start) opt.zero_grad();
      auto no_sync = fabric_->no_backward_sync(!window_end);
      fabric_->backward(k > 1 ? loss / k : loss);
    }
    if (window_end) {
      RECORD_USER_SCOPE("accel::optimizer");
      if (cfg_.train.grad_clip > 0) fabric_->clip_gradients(fsetup_->model, opt, cfg_.train.grad_clip);
      set_learning_rate(opt.inner(), cfg_.optim, opt_steps_, total_opt_steps_);
      opt.step();
    }
  }
  if (window_end) ++opt_steps_;
  {
    RECORD_USER_SCOPE("accel::metrics");
    torch::NoGradGuard no_grad;
    const int64_t n = batch.valid;
    PendingStep p;
    p.loss = loss.detach().to(torch::kDouble, /*non_blocking=*/false, /*copy=*/true);
    p.correct = logits.narrow(0, 0, n).argmax(1).eq(y.narrow(0, 0, n)).sum();
    p.valid = n;
    p.step = step_;
    p.batch_index = es.batches;
    p.epoch = epoch;
    p.log = es.batches % cfg_.train.log_every == 0;
    pending_.push_back(std::move(p));
  }
  ++es.batches;
  ++step_;
  const auto& t = cfg_.train;
  const bool flush = !defer_ || pending_.back().log || es.batches == batches ||
                     (t.max_steps > 0 && step_ >= t.max_steps) ||
                     (t.checkpoint_every > 0 && step_ % t.checkpoint_every == 0) ||
                     (fabric_->world_size() == 1 && stop_signal_received());
  if (!flush) {
    clock_->end();
    return true;
  }
  return flush_pending(es, batches);
}

// --profile: record steps [warmup_steps, warmup_steps + profile_steps) of
// this run (counted from where it starts, so a resumed run profiles too).
void Run::profile_step_begin() {
  if (opts_.profile_dir.empty() || profiled_ >= opts_.profile_steps) return;
  if (profile_first_ < 0) profile_first_ = step_ + cfg_.train.warmup_steps;
  if (step_ == profile_first_ && !profiler_) {
    profiler_ = std::make_unique<metrics::OpProfiler>();
    profiler_->start();
  }
}

void Run::profile_step_end() {
  if (!profiler_ || !profiler_->running()) return;
  if (++profiled_ >= opts_.profile_steps) write_profile();
}

void Run::write_profile() {
  if (!profiler_ || !profiler_->running()) return;
  profiler_->stop();
  if (!zero_) return;
  const auto ops = profiler_->table();
  const double n = double(std::max<int64_t>(profiled_, 1));
  auto ms = [&](const char* scope) { return profiler_->total_us(scope) / 1e3 / n; };
  const double step = ms("accel::step"), fwd = ms("accel::forward"), bwd = ms("accel::backward"),
               opt = ms("accel::optimizer"), graph = ms("accel::graph_replay"),
               data = ms("accel::data");
  const double inside = fwd + bwd + opt + graph;
  const double outside = std::max(0.0, step - inside);
  char line[512];
  std::snprintf(line, sizeof(line),
                "== profile: %lld steps from step %lld, per step: %.2f ms = forward %.2f + backward "
                "%.2f + optimizer %.2f%s + outside %.2f (%.1f%%: metrics, logging, copies); "
                "waiting for data %.2f ms before it",
                static_cast<long long>(profiled_), static_cast<long long>(profile_first_), step, fwd,
                bwd, opt, graph > 0 ? (" + graph replay " + std::to_string(graph)).c_str() : "",
                outside, step > 0 ? 100.0 * outside / step : 0.0, data);
  std::string summary = std::string(line) + "\n";
  summary += "(host time; on a GPU kernels run asynchronously, so these times are launch "
             "and sync time, not kernel time)\n\n";
  const auto text = metrics::op_table_text(ops, 30);
  summary += text;
  std::filesystem::create_directories(opts_.profile_dir);
  metrics::write_file_atomic(opts_.profile_dir / "ops.csv", metrics::op_table_csv(ops));
  metrics::write_file_atomic(opts_.profile_dir / "ops.txt", metrics::op_table_text(ops, ops.size()));
  metrics::write_file_atomic(opts_.profile_dir / "trace.json", profiler_->chrome_trace());
  metrics::write_file_atomic(opts_.profile_dir / "summary.txt", summary);
  say(line);
  say(metrics::op_table_text(ops, 12) + "== profile written to " + opts_.profile_dir.string() +
      " (ops.txt, ops.csv, trace.json, summary.txt)");
}

// Reads the pending steps' losses and accuracies back (one sync), agrees on
// the global-batch losses and any stop request with the other ranks (one
// small all-reduce), ends the current step's timing, then checks, sums and
// logs each step in order. Returns false when the run must stop.
bool Run::flush_pending(EpochState& es, int64_t batches) {
  const auto count = int64_t(pending_.size());
  std::vector<torch::Tensor> ls, cs;
  for (const auto& p : pending_) {
    ls.push_back(p.loss);
    cs.push_back(p.correct);
  }
  auto losses = torch::stack(ls).to(torch::kCPU);
  const auto corrects = torch::stack(cs).to(torch::kCPU, torch::kLong);
  bool stop_requested = stop_signal_received();
  const int world = fabric_->world_size();
  if (world > 1) {
    // The loss of the global batch (mean over ranks) and whether any rank
    // was asked to stop, so every rank decides alike.
    auto v = torch::cat({losses, torch::tensor({stop_requested ? 1.0 : 0.0}, torch::kDouble)});
    fabric_->all_reduce(v, dist::ReduceOp::Sum);
    losses = v.narrow(0, 0, count) / world;
    stop_requested = v[count].item<double>() > 0;
  }
  clock_->end();
  const auto ms = clock_->take();
  if (int64_t(ms.size()) != count) throw RunError("step clock out of step with the batches");
  const auto loss_at = losses.accessor<double, 1>();
  const auto correct_at = corrects.accessor<int64_t, 1>();
  const int allowed = fabric_->scaler().enabled() ? kMaxNonFiniteWithScaler : 0;
  for (int64_t i = 0; i < count; ++i) {
    const auto& p = pending_[size_t(i)];
    const double loss_v = loss_at[i];
    nonfinite_ = std::isfinite(loss_v) ? 0 : nonfinite_ + 1;
    if (nonfinite_ > allowed) {
      pending_.clear();
      throw RunError("non-finite loss (" + std::to_string(loss_v) + ") at epoch " +
                     std::to_string(p.epoch) + ", batch " + std::to_string(p.batch_index) +
                     " after " + std::to_string(nonfinite_) + " such step(s) in a row");
    }
    if (p.step >= cfg_.train.warmup_steps) step_ms_.push_back(ms[size_t(i)]);
    es.correct += correct_at[i];
    es.seen += p.valid;
    es.loss_sum += loss_v;
    if (p.log) {
      char line[128];
      std::snprintf(line, sizeof(line), "Epoch: %04d/%04d | Batch %04lld/%04lld | Loss: %.4f",
                    p.epoch, cfg_.train.epochs, static_cast<long long>(p.batch_index),
                    static_cast<long long>(batches), loss_v);
      say(line);
      result_.rows.push_back({"step", p.step, p.epoch, loss_v, {}, {}, ms[size_t(i)]});
    }
  }
  pending_.clear();
  return !stop_requested;
}

void Run::train_epochs() {
  const int epochs = cfg_.train.epochs;
  const int64_t batches = train_loader_->num_batches();
  const int64_t max_steps = cfg_.train.max_steps;
  bool stop = max_steps > 0 && step_ >= max_steps;
  fsetup_->model.train();
  reset_peak_memory(fabric_->device());  // the timed region starts
  for (int epoch = start_epoch_; epoch <= epochs && !stop; ++epoch) {
    EpochState es = epoch == start_epoch_ ? resumed_epoch_ : EpochState{};
    auto segment = Clock::now();  // epoch time excludes checkpoint writing
    train_loader_->start_epoch(epoch - 1, es.batches);
    bool interrupted = false;
    for (;;) {
      profile_step_begin();
      std::optional<data::Batch> batch;
      {
        RECORD_USER_SCOPE("accel::data");
        batch = train_loader_->next();
      }
      if (!batch) break;
      interrupted = !train_batch(*batch, epoch, es, batches);
      profile_step_end();
      stop = max_steps > 0 && step_ >= max_steps;
      const bool periodic = cfg_.train.checkpoint_every > 0 &&
                            step_ % cfg_.train.checkpoint_every == 0;
      if ((periodic || stop || interrupted) && es.batches < batches) {
        es.elapsed_s += seconds_since(segment);
        if (periodic) save(periodic_checkpoint_path(opts_.out_dir, step_), epoch - 1, es);
        if (stop || interrupted) break;
        segment = Clock::now();
      }
      if (interrupted) break;
    }
    if (es.batches < batches) {  // stopped inside the epoch
      train_time_s_ += es.elapsed_s;
      if (cfg_.train.save_checkpoint || interrupted) {
        save(opts_.out_dir / "checkpoint.ckpt", epoch - 1, es);
      }
      if (interrupted) throw Interrupted("stopped by a signal after " + std::to_string(step_) + " steps");
      say("== stopped after " + std::to_string(step_) + " steps (train.max_steps), mid-epoch");
      return;
    }
    const auto val = evaluate(*val_loader_);
    es.elapsed_s += seconds_since(segment);
    train_time_s_ += es.elapsed_s;
    Opt train_acc = es.seen ? Opt(double(es.correct) / double(es.seen)) : Opt();
    if (fabric_->world_size() > 1) {
      auto t = torch::tensor({double(es.correct), double(es.seen)}, torch::kDouble);
      fabric_->all_reduce(t, dist::ReduceOp::Sum);
      train_acc = t[1].item<double>() > 0 ? Opt(t[0].item<double>() / t[1].item<double>()) : Opt();
    }
    const Opt mean_loss = es.batches ? Opt(es.loss_sum / double(es.batches)) : Opt();
    char line[160];
    std::snprintf(line, sizeof(line), "Epoch: %04d/%04d | Train acc.: %s | Val acc.: %s", epoch,
                  epochs, percent_or_na(train_acc).c_str(), percent_or_na(val.acc).c_str());
    say(line);
    std::snprintf(line, sizeof(line), "Time elapsed %.2f min", train_time_s_ / 60.0);
    say(line);
    result_.rows.push_back({"epoch", step_, epoch, mean_loss, train_acc, val.acc, {}});
    result_.epochs.push_back({epoch, train_acc, val.acc, val.loss, mean_loss, es.batches,
                              es.elapsed_s});
    const bool periodic = cfg_.train.checkpoint_every > 0 && step_ % cfg_.train.checkpoint_every == 0;
    if (periodic) save(periodic_checkpoint_path(opts_.out_dir, step_), epoch, EpochState{});
    if (interrupted || (cfg_.train.save_checkpoint && (stop || epoch == epochs))) {
      save(opts_.out_dir / "checkpoint.ckpt", epoch, EpochState{});
    }
    if (interrupted) throw Interrupted("stopped by a signal after epoch " + std::to_string(epoch));
  }
}

void Run::gather_rank_results() {
  // One entry per rank: peak memory and the model state it holds.
  const int world = fabric_->world_size();
  auto t = torch::zeros({world, 6}, torch::kDouble);
  const auto bytes = fabric_->strategy().state_bytes(fsetup_->optimizer.inner());
  const auto device_peak = peak_memory(fabric_->device());
  const int r = fabric_->global_rank();
  t[r][0] = double(metrics::peak_rss_bytes());
  t[r][1] = double(bytes.params);
  t[r][2] = double(bytes.grads);
  t[r][3] = double(bytes.optimizer);
  if (device_peak) {
    t[r][4] = double(device_peak->max_allocated);
    t[r][5] = double(device_peak->max_reserved);
  }
  fabric_->all_reduce(t, dist::ReduceOp::Sum);
  // On a GPU, memory as the article reports it: the caching allocator's max
  // allocated bytes (reserved beside it); on a CPU the process's peak RSS.
  result_.peak_memory_kind = device_peak ? "cuda_max_allocated" : "process_rss";
  result_.ranks.clear();
  for (int k = 0; k < world; ++k) {
    auto at = [&](int c) { return int64_t(t[k][c].item<double>()); };
    RankResult rr;
    rr.rank = k;
    rr.host_peak_rss_bytes = at(0);
    rr.param_bytes = at(1);
    rr.grad_bytes = at(2);
    rr.optimizer_bytes = at(3);
    rr.cuda_max_allocated_bytes = at(4);
    rr.cuda_max_reserved_bytes = at(5);
    rr.peak_memory_bytes = device_peak ? rr.cuda_max_allocated_bytes : rr.host_peak_rss_bytes;
    result_.ranks.push_back(rr);
  }
}

void Run::finish() {
  write_profile();  // a run shorter than the profile window: what was recorded
  const auto test = evaluate(*test_loader_);
  say("Test accuracy " + percent_or_na(test.acc));
  // The slowest rank's time for each step (one element-wise max over ranks).
  std::vector<double> slowest = step_ms_;
  if (fabric_->world_size() > 1 && !slowest.empty()) {
    auto t = torch::tensor(slowest, torch::kDouble);
    fabric_->all_reduce(t, dist::ReduceOp::Max);
    slowest.assign(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
  }
  const auto steps = metrics::spread(slowest);
  result_.status = "ok";
  result_.test_acc = test.acc;
  result_.test_loss = test.loss;
  result_.train_time_s = train_time_s_;
  result_.steps = step_;
  result_.step_time_ms = steps;
  if (steps.count > 0 && steps.mean > 0) {
    const double per_device = double(cfg_.train.batch_size) / (steps.mean / 1e3);
    result_.images_per_s_per_device = per_device;
    result_.images_per_s = per_device * fabric_->world_size();
    result_.model_flops_per_s = *result_.images_per_s * 3.0 * result_.flops_per_sample;
  }
  gather_rank_results();
  if (fabric_->scaler().enabled()) result_.grad_scaler = fabric_->scaler().state_dict();
  print_summary(result_, opts_.log && zero_ ? opts_.log : nullptr);
}

void Run::write_outputs() {
  if (!zero_) return;
  result_.finished_at = utc_now();
  metrics::write_file_atomic(opts_.out_dir / "metrics.csv", metrics_csv(result_.rows));
  metrics::write_json_atomic(opts_.out_dir / "result.json", to_json(result_));
}

RunResult Run::execute() {
  fabric_ = std::make_unique<Fabric>(cfg_.runtime, opts_.log);
  fabric_->launch(config_hash(resolved_));
  zero_ = fabric_->is_global_zero();
  plain_ = cfg_.train.loop == "plain";
  result_.name = cfg_.name;
  result_.started_at = utc_now();
  result_.config = resolved_;
  result_.loop = cfg_.train.loop;
  result_.strategy = fabric_->strategy().name();
  result_.device = fabric_->device().str();
  result_.world_size = fabric_->world_size();
  result_.threads = fabric_->threads();
  result_.env = run_environment(*fabric_);
  if (zero_ && opts_.log) print_banner(*opts_.log, result_.env, resolved_, *fabric_);
  const auto support = metrics::precision_support(
      cfg_.runtime.precision, fabric_->device().is_cuda() ? "cuda" : "cpu", metrics::cpu_features());
  result_.precision_support = support.support;
  if (support.emulated()) {
    result_.warnings.push_back(support.warning);
    say("warning: " + support.warning);
  }
  setup();  // loads data, builds the model, resumes: errors here write nothing
  if (opts_.dry_run) {
    say("== dry run: config valid, data and model ready; nothing trained or written");
    result_.status = "dry-run";
    return result_;
  }
  if (zero_) {
    std::filesystem::create_directories(opts_.out_dir);
    // Temp files a killed run left behind (their writer is gone).
    for (const auto& f : metrics::remove_stale_temp_files(opts_.out_dir)) {
      say("== removed " + f.string() + " (left by a killed run)");
    }
    metrics::write_json_atomic(opts_.out_dir / "config.json", resolved_);
  }
  try {
    train_epochs();
    finish();
  } catch (const Interrupted& e) {
    result_.status = "interrupted";
    result_.error = e.what();
    result_.train_time_s = train_time_s_;
    result_.steps = step_;
    write_outputs();
    say("== " + std::string(e.what()) + "; checkpoint and result.json written");
    throw;
  } catch (const std::exception& e) {
    result_.status = "failed";
    result_.error = e.what();
    result_.train_time_s = train_time_s_;
    result_.steps = step_;
    RankResult rr;
    rr.rank = fabric_->global_rank();
    rr.peak_memory_bytes = rr.host_peak_rss_bytes = metrics::peak_rss_bytes();
    result_.ranks = {rr};
    write_outputs();
    throw RunError(std::string("run failed: ") + e.what());
  }
  write_outputs();
  say("== wrote " + (opts_.out_dir / "result.json").string());
  return result_;
}

}  // namespace

RunResult run(const config::RunConfig& given, const nlohmann::json& resolved,
              const RunOptions& opts) {
  config::RunConfig cfg = given;
  cfg.runtime.devices = resolve_devices(cfg.runtime);
  check_runnable(cfg);
  if (!opts.dry_run) check_out_dir(opts);
  return Run(cfg, resolved, opts).execute();
}

}  // namespace accel::train
