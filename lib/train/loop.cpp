// The epoch loop of a run (run_state.h): each batch through the TrainStep,
// its loss and accuracy kept on the device until a flush, validation per
// epoch, periodic and final checkpoints, stop requests, --profile.
#include <limits>
#include <optional>
#include <thread>
#include <cmath>
#include <cstdio>

#include <ATen/record_function.h>

#include "accel/train/checks.h"
#include "accel/train/signals.h"
#include "accel/train/work.h"
#include "accel/util/errors.h"
#include "run_state.h"

namespace accel::train::detail {

EvalResult Run::evaluate(data::Loader& loader, EvalCount& count) {
  pause_energy();  // an evaluation is not a timed step
  const auto t0 = Clock::now();
  torch::NoGradGuard no_grad;
  fsetup_->model.eval();
  loader.start_epoch(0);
  // The task's metric sum, seen (its units: samples, or a language model's
  // tokens), loss sum over the real (not padding) samples of every rank,
  // summed on the device and read once at the end.
  const auto on = torch::TensorOptions().device(fabric_->device());
  auto metric = torch::zeros({}, on.dtype(torch::kDouble));
  auto loss_sum = torch::zeros({}, on.dtype(torch::kDouble));
  auto seen = torch::zeros({}, on.dtype(torch::kDouble));
  int64_t samples = 0;
  const bool in_model = loss_in_model(cfg_);
  while (auto batch = loader.next()) {
    const int64_t n = batch->valid;
    if (in_model) {
      // The model makes the mean loss of the real rows (train.loss_chunk_tokens):
      // their inputs alone, the sum its mean times their units (none: none).
      if (n <= 0) continue;
      data::Inputs rows;
      for (const auto& [name, t] : batch->inputs) rows.emplace(name, t.narrow(0, 0, n));
      const auto yy = fabric_->to_device(batch->y.narrow(0, 0, n));
      const auto mean = step_fn_->forward(with_labels(std::move(rows), yy)).to(torch::kDouble);
      const auto units = task_->units(yy);
      const auto sum = torch::where(units > 0, mean * units, torch::zeros_like(mean));
      loss_sum += sum;
      metric += sum;
      seen += units;
      samples += n;
      continue;
    }
    auto logits = step_fn_->forward(batch->inputs);
    auto y = logits.device() == batch->y.device() ? batch->y
                                                   : batch->y.to(logits.device(), true);
    if (n <= 0) continue;
    auto lg = logits.narrow(0, 0, n);
    auto yy = y.narrow(0, 0, n);
    loss_sum += task_->loss_sum(lg, yy);
    metric += task_->metric_sum(lg, yy).to(torch::kDouble);
    seen += task_->units(yy);
    samples += n;
  }
  fsetup_->model.train();
  auto sums = torch::zeros({4}, torch::kDouble);
  sums[0] = metric.item<double>();
  sums[1] = seen.item<double>();
  sums[2] = loss_sum.item<double>();
  sums[3] = double(samples);
  fabric_->all_reduce(sums, dist::ReduceOp::Sum);
  const double total = sums[1].item<double>();
  ++count.passes;
  count.samples += int64_t(sums[3].item<double>());
  count.time_s += seconds_since(t0);
  if (total <= 0) return {};
  return {sums[0].item<double>() / total, sums[2].item<double>() / total};
}

bool Run::check_target(const EvalResult& val, int epoch, double elapsed_s) {
  const auto& t = cfg_.train;
  if (!(t.target > 0)) return false;
  ++target_evaluations_;
  if (target_reached_ || !val.acc || !task_->reaches(*val.acc, t.target)) return false;
  target_reached_ = true;
  target_step_ = step_;
  target_samples_ = samples_trained();
  target_epoch_ = epoch;
  target_time_s_ = elapsed_s;
  target_val_acc_ = *val.acc;
  // Training with its validations up to here, as target_time_s_ (the
  // validation just read its result back: the device is synced). A resumed
  // run's energy before the resume is not known.
  if (samples_before_ == 0) energy_to_target_ = energy_.training_joules();
  say("== target reached: validation " + task_->shown(val.acc) + (task_->info.higher_is_better ? " >= " : " <= ") +
      task_->shown(t.target) +
      " at step " + std::to_string(step_) + " (" + std::to_string(target_samples_) +
      " samples, " + std::to_string(int64_t(std::lround(elapsed_s))) + " s of training and validation)");
  stopped_at_target_ = t.stop_at_target;
  return t.stop_at_target;
}

nlohmann::json Run::target_json() const {
  const auto& t = cfg_.train;
  if (!(t.target > 0)) return nullptr;
  nlohmann::json j = {{"metric", t.target_metric},
                      {"value", t.target},
                      {"reached", target_reached_},
                      {"evaluations", target_evaluations_},
                      {"stopped", stopped_at_target_}};
  if (target_reached_) {
    j["step"] = target_step_;
    j["samples"] = target_samples_;
    j["time_s"] = target_time_s_;
    j["epoch"] = target_epoch_;
    j["val_acc"] = target_val_acc_;
  }
  return j;
}

nlohmann::json Run::best_json() const {
  if (!best_acc_) return nullptr;
  return {{"val_acc", *best_acc_}, {"epoch", best_epoch_}, {"step", best_step_}};
}

bool Run::track_best(const EvalResult& val, int epoch) {
  if (!best_val() || !val.acc || (best_acc_ && !task_->better(*val.acc, *best_acc_))) return false;
  best_acc_ = val.acc;
  best_epoch_ = epoch;
  best_step_ = step_;
  best_on_disk_ = false;
  // Every rank keeps the full weights (FSDP gathers them) for the test pass.
  auto& s = fabric_->strategy();
  auto full = s.gather_full_state(fsetup_->optimizer.inner());
  best_weights_.clear();
  torch::NoGradGuard no_grad;
  const auto& m = fsetup_->model.module();
  for (const auto& kv : m.named_parameters()) best_weights_[kv.key()] = kv.value().detach().clone();
  for (const auto& kv : m.named_buffers()) best_weights_[kv.key()] = kv.value().detach().clone();
  s.release_full_state(full);
  return true;
}

// The model holds the best weights right after track_best chose them: a
// checkpoint of this moment is the best one.
void Run::write_best(int epochs_done, const EpochState& es) {
  if (!writes_checkpoints() || best_on_disk_ || best_weights_.empty()) return;
  save(opts_.out_dir / "best.ckpt", epochs_done, es);
  best_on_disk_ = true;
}

// A run stopped by a signal that saves no checkpoints of its own still
// writes one to resume from: its best weights go beside it.
void Run::persist_best_before_exit(int epochs_done, const EpochState& es) {
  if (best_on_disk_ || best_weights_.empty()) return;
  load_weights(best_weights_);
  save(opts_.out_dir / "best.ckpt", epochs_done, es);
  best_on_disk_ = true;
}

// Copies full weights into the model on every rank (FSDP and ZeRO: into
// their shards too).
void Run::load_weights(const models::NamedTensors& weights) {
  auto& s = fabric_->strategy();
  auto& opt = fsetup_->optimizer.inner();
  auto full = s.gather_full_state(opt);
  models::apply_named_tensors(*built_.module, weights, /*strict=*/true, "best-validation weights");
  s.scatter_full_state(full, opt);
  s.release_full_state(full);
}

// One batch through the step, its metrics kept for the next flush. Returns
// false when the run must stop here (a stop signal agreed by every rank).
bool Run::train_batch(const data::Batch& batch, int epoch, EpochState& es, int64_t batches) {
  StepWindow w;
  w.accumulate = cfg_.train.accumulate;
  w.first = es.batches % w.accumulate == 0;
  w.last = (es.batches + 1) % w.accumulate == 0 || es.batches + 1 == batches;
  w.opt_step = opt_steps_;
  w.total_opt_steps = total_opt_steps_;
  RECORD_USER_SCOPE("accel::step");
  dist::Comm* comm = fabric_->context().comm.get();
  if (comm != nullptr) comm->take_counts();  // evaluation's and checkpoints' are not the step's
  const bool measured = step_ >= cfg_.train.warmup_steps;
  // The counted step: every op of its step function (forward, backward,
  // optimizer) counted, not timed by the counting (see counted_step()).
  std::optional<metrics::StepCounter> counter;
  std::optional<metrics::CpuAllocationCounter> cpu_allocations;
  std::optional<DeviceAllocationCounter> device_allocations;
  if (step_ == counted_step() && !(profiler_ && profiler_->running())) {
    counter.emplace();
    counter->start();
    if (DeviceAllocationCounter::available(fabric_->device())) {
      device_allocations.emplace(fabric_->device());
      device_allocations->start();
    } else {
      cpu_allocations.emplace();
      cpu_allocations->start();
    }
  }
  step_host_begin_ = Clock::now();
  clock_->begin();
  const auto y = fabric_->to_device(batch.y);  // for the loss and the task's metric
  const StepOutput out = step_fn_->run(batch, y, w);
  if (counter) {
    const auto ops = counter->stop();
    const auto allocations = cpu_allocations ? cpu_allocations->stop() : device_allocations->stop();
    record_counts(ops, allocations, batch);
  }
  if (w.last) ++opt_steps_;
  flops_sum_ += built_.module->forward_flops(batch.inputs);
  samples_sum_ += double(batch.y.size(0));
  tokens_sum_ += double(batch.tokens);
  if (batch.y.dim() == 2) positions_sum_ += double(batch.y.numel());  // a token stream's next tokens [B, S]
  {
    RECORD_USER_SCOPE("accel::metrics");
    torch::NoGradGuard no_grad;
    const int64_t n = batch.valid;
    PendingStep p;
    p.loss = out.loss.detach().to(torch::kDouble, /*non_blocking=*/false, /*copy=*/true);
    const auto units = task_->units(y.narrow(0, 0, n));
    // A metric that is the loss: the step's mean loss times its units where
    // every row is real (no second cross-entropy over the logits), or where
    // the model made the loss and gave no logits (its mean then counts the
    // rows a rank repeats to fill its last batch, as the loss trained on does).
    const auto metric = task_->metric_is_loss && (n == y.size(0) || !out.logits.defined())
                            ? out.loss.detach().to(torch::kDouble) * units
                            : task_->metric_sum(out.logits.narrow(0, 0, n), y.narrow(0, 0, n)).to(torch::kDouble);
    p.metric = torch::stack({metric, units});
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
  bool go = true;
  if (flush) {
    go = flush_pending(es, batches);
  } else {
    inject_delay();
    clock_->end();
  }
  if (comm != nullptr && measured) {
    for (const auto& c : comm->take_counts()) comm_calls_[{c.op, c.primitive, c.bytes}] += c.calls;
    ++comm_steps_;
  }
  return go;
}

// train.inject_delay: the step is made slower by a known fraction of its own
// time, as the last thing inside its timed region (just before the step
// clock ends it), so that a gate can be tested against a slowdown of known
// size: the step time grows by that fraction, the run's time by less. The
// device is synchronised first so that the time slept on is the step's work,
// not its launch.
void Run::inject_delay() {
  if (!(cfg_.train.inject_delay > 0)) return;
  synchronize(fabric_->device());
  const auto took = Clock::now() - step_host_begin_;
  std::this_thread::sleep_for(
      std::chrono::duration_cast<Clock::duration>(took * cfg_.train.inject_delay));
}

int64_t Run::counted_step() const {
  const auto& t = cfg_.train;
  int64_t total = train_loader_ ? train_loader_->num_batches() * t.epochs : 0;
  if (t.max_steps > 0) total = std::min(total, t.max_steps);
  return train::counted_step(t, total, step_fn_ ? step_fn_->eager_steps()
                                                : std::numeric_limits<int64_t>::max());
}

void Run::record_counts(const metrics::StepCounts& c,
                        const std::optional<metrics::AllocationCounts>& allocations,
                        const data::Batch& batch) {
  nlohmann::json calls = nlohmann::json::object(), flops = nlohmann::json::object();
  int64_t total = 0;
  for (const auto& [name, n] : c.calls) {
    calls[name] = n;
    total += n;
  }
  for (const auto& [name, f] : c.flops) flops[name] = f;
  // What the model's own count says the step does: forward, and backward at
  // twice the forward (input and weight gradients).
  const double analytic = 3.0 * built_.module->forward_flops(batch.inputs);
  const double counted = c.matmul_flops();
  result_.counters = {{"step", step_},
                      {"op_calls", total},
                      {"op_calls_by_op", calls},
                      {"flops_counted", counted},
                      {"flops_counted_by_op", flops},
                      {"flops_analytic", analytic},
                      {"flops_counted_over_analytic", analytic > 0 ? nlohmann::json(counted / analytic)
                                                                   : nlohmann::json()}};
  if (allocations) {
    result_.counters["allocations"] = {{"count", allocations->allocations},
                                       {"bytes", allocations->bytes},
                                       {"peak_bytes", allocations->peak_bytes},
                                       {"source", allocations->source}};
  }
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
  say(metrics::write_step_profile(*profiler_, profiled_, profile_first_, opts_.profile_dir));
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
    cs.push_back(p.metric);
  }
  auto losses = torch::stack(ls).to(torch::kCPU);
  const auto metrics = torch::stack(cs).to(torch::kCPU, torch::kDouble);
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
  inject_delay();
  clock_->end();
  const auto times = clock_->take();
  if (int64_t(times.size()) != count) throw RunError("step clock out of step with the batches");
  const auto loss_at = losses.accessor<double, 1>();
  const auto metric_at = metrics.accessor<double, 2>();  // [step][metric sum, units]
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
    const StepTime& t = times[size_t(i)];
    if (p.step >= cfg_.train.warmup_steps && p.step != counted_step()) {
      step_ms_.push_back(t.total_ms);
      if (t.split) {
        for (int k = 0; k < kStepPhases; ++k) phase_sum_ms_[k] += t.phase_ms[k];
        other_sum_ms_ += t.other_ms();
        split_total_ms_ += t.total_ms;
        ++split_steps_;
      }
    }
    es.metric_sum += metric_at[i][0];
    es.seen += int64_t(std::llround(metric_at[i][1]));
    es.loss_sum += loss_v;
    if (p.log) {
      console_.step(p.epoch, cfg_.train.epochs, p.batch_index, batches, loss_v);
      result_.rows.push_back({"step", p.step, p.epoch, loss_v, {}, {}, t.total_ms});
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
  start_energy();
  for (int epoch = start_epoch_; epoch <= epochs && !stop; ++epoch) {
    EpochState es = epoch == start_epoch_ ? resumed_epoch_ : EpochState{};
    auto segment = Clock::now();  // epoch time excludes checkpoint writing
    train_loader_->start_epoch(epoch - 1, es.batches);
    bool interrupted = false;
    for (;;) {
      profile_step_begin();
      // The wall-clock window opens once the warm-up's work is done.
      const bool measured = step_ >= cfg_.train.warmup_steps;
      if (step_ == cfg_.train.warmup_steps) synchronize(fabric_->device());
      // Opened after the warm-up's sync, or after an evaluation or checkpoint
      // (each ends reading back from the device): no sync of its own.
      if (measured) energy_.open();
      const auto fetched = Clock::now();
      std::optional<data::Batch> batch;
      {
        RECORD_USER_SCOPE("accel::data");
        batch = train_loader_->next();
      }
      if (!batch) break;
      interrupted = !train_batch(*batch, epoch, es, batches);
      if (measured) {
        wall_s_ += seconds_since(fetched);
        wall_samples_ += double(batch->y.size(0));
        ++energy_steps_;
      }
      profile_step_end();
      stop = max_steps > 0 && step_ >= max_steps;
      const int64_t every = cfg_.train.val_every_steps;
      if (every > 0 && step_ % every == 0 && es.batches < batches && !interrupted) {
        // Mid-epoch validation (the epoch's end has its own), timed as training.
        const auto val = evaluate(*val_loader_, val_count_);
        say("== validation at step " + std::to_string(step_) + ": " + task_->shown(val.acc));
        result_.rows.push_back({"val", step_, epoch, val.loss, {}, val.acc, {}});
        const bool at_target = check_target(val, epoch, train_time_s_ + es.elapsed_s + seconds_since(segment));
        if (track_best(val, epoch)) {
          es.elapsed_s += seconds_since(segment);
          write_best(epoch - 1, es);
          segment = Clock::now();
        }
        stop = stop || at_target;
      }
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
      if (interrupted) {
        persist_best_before_exit(epoch - 1, es);
        throw Interrupted("stopped by a signal after " + std::to_string(step_) + " steps");
      }
      say("== stopped after " + std::to_string(step_) + " steps (" +
          (stopped_at_target_ ? "train.stop_at_target" : "train.max_steps") + "), mid-epoch");
      return;
    }
    const auto val = evaluate(*val_loader_, val_count_);
    es.elapsed_s += seconds_since(segment);
    train_time_s_ += es.elapsed_s;
    Opt train_acc = es.seen ? Opt(es.metric_sum / double(es.seen)) : Opt();
    if (fabric_->world_size() > 1) {
      auto t = torch::tensor({es.metric_sum, double(es.seen)}, torch::kDouble);
      fabric_->all_reduce(t, dist::ReduceOp::Sum);
      train_acc = t[1].item<double>() > 0 ? Opt(t[0].item<double>() / t[1].item<double>()) : Opt();
    }
    const Opt mean_loss = es.batches ? Opt(es.loss_sum / double(es.batches)) : Opt();
    console_.epoch(epoch, epochs, train_acc, val.acc, train_time_s_, task_);
    result_.rows.push_back({"epoch", step_, epoch, mean_loss, train_acc, val.acc, {}});
    result_.epochs.push_back({epoch, train_acc, val.acc, val.loss, mean_loss, es.batches,
                              es.elapsed_s});
    if (check_target(val, epoch, train_time_s_)) {
      stop = true;
      if (epoch < epochs) say("== stopped after epoch " + std::to_string(epoch) + " (train.stop_at_target)");
    }
    if (track_best(val, epoch)) {
      say("== best validation " + task_->info.metric + " so far: " + task_->shown(val.acc) + " (epoch " +
          std::to_string(epoch) + ", step " + std::to_string(step_) + ")");
      write_best(epoch, EpochState{});
    }
    const bool periodic = cfg_.train.checkpoint_every > 0 && step_ % cfg_.train.checkpoint_every == 0;
    if (periodic) save(periodic_checkpoint_path(opts_.out_dir, step_), epoch, EpochState{});
    if (interrupted || (cfg_.train.save_checkpoint && (stop || epoch == epochs))) {
      save(opts_.out_dir / "checkpoint.ckpt", epoch, EpochState{});
    }
    if (interrupted) {
      persist_best_before_exit(epoch, EpochState{});
      throw Interrupted("stopped by a signal after epoch " + std::to_string(epoch));
    }
  }
}

}  // namespace accel::train::detail
