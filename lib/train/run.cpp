// One run end to end on every rank (run_state.h): the Fabric (process
// context, precision, strategy), data, the model from its family, resume,
// the closing figures and (rank 0) the outputs. The epoch loop is loop.cpp.
#include "accel/util/child_process.h"
#include "accel/train/run.h"


#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <fstream>

#include "accel/metrics/hardware.h"
#include "accel/metrics/metrics.h"
#include "accel/models/pretrained.h"
#include "accel/models/weights.h"
#include "accel/train/checkpoint.h"
#include "accel/train/checks.h"
#include "accel/train/device_runtime.h"
#include "accel/train/optimizer.h"
#include "accel/train/work.h"
#include "accel/util/errors.h"
#include "run_state.h"

namespace accel::train {
namespace detail {
namespace {

// Loader options of a split; evaluation batches are bounded by the split's
// size (a 2e9 eval_batch_size must not become one huge batch: eval_batch_size).
data::LoaderOptions loader_options(const config::RunConfig& cfg, const data::ExampleSet& set,
                                   bool training, const data::CollateOptions& collate) {
  data::LoaderOptions o;
  o.batch_size = training ? cfg.train.batch_size : eval_batch_size(cfg.train, set.size());
  o.shuffle = o.drop_last = training;
  o.seed = cfg.train.seed;
  o.prefetch = cfg.data.prefetch;
  o.collate = collate;
  o.limit_batches = training ? cfg.train.limit_train_batches : cfg.train.limit_eval_batches;
  return o;
}

std::string gb(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f GB", bytes / 1e9);
  return buf;
}

}  // namespace

void Run::init_weights(models::Model& model) {
  const auto& m = cfg_.model;
  if (m.init == "random") return;
  models::LoadReport report;
  if (m.init == "checkpoint") {
    const auto ckpt = read_checkpoint(m.init_path);
    report = models::apply_named_tensors(model, ckpt.model_tensors(), m.init_strict, m.init_path);
  } else if (m.init == "gguf") {
    report = models::load_gguf(model, m.init_path, built_.dims, m.init_strict);
  } else {
    // A config.json beside the weights that describes another network (a
    // head count no tensor's shape shows) would train that one silently.
    const auto differ = models::beside_config_disagreements(models::model_family(m.arch),
                                                            m.init_path, built_.dims);
    if (!differ.empty()) {
      std::string list;
      for (const auto& d : differ) list += (list.empty() ? "" : "; ") + d;
      throw ConfigError("model.init_path: the config.json beside " + m.init_path +
                        " describes another network than the model section builds: " + list +
                        "; set the model fields (model.preset, model.heads, ...) to match it");
    }
    report = models::load_pretrained(model, m.init_path, m.init_format, m.init_strict);
  }
  std::string line = report.summary();
  if (m.init_head == "replace" && !report.head_replaced && !report.head_new) {
    model.replace_head(model.num_classes());
    report.head_replaced = true;
    line += "; head replaced (model.init_head \"replace\")";
  }
  say("== init: " + line);
  result_.init = {{"kind", m.init},
                  {"path", m.init_path},
                  {"loaded", report.loaded},
                  {"head_replaced", report.head_replaced},
                  {"head_new", report.head_new},
                  {"source_classes", report.source_classes},
                  {"missing", report.missing},
                  {"unexpected", report.unexpected},
                  {"dropped", report.dropped}};
}

models::DataFacts Run::data_facts() const {
  const auto& train = splits_.train;
  models::DataFacts f;
  f.kind = train.kind();
  f.classes = task_->head_outputs(train.num_classes);  // the head the task asks for
  if (f.kind == "image") {
    const auto& px = data::image_pixels(train);
    f.channels = int(px.size(1));
    f.image_size = int(px.size(2));
  }
  f.max_length = splits_.info.value("max_length", int64_t{0});
  f.vocab_size = splits_.info.value("vocab_size", int64_t{0});
  f.max_token_id = splits_.info.value("max_token_id", int64_t{-1});
  f.pad_id = splits_.info.value("pad_id", int64_t{0});
  return f;
}

void Run::setup() {
  auto t0 = Clock::now();
  splits_ = data::load_splits(cfg_.data, cfg_.train.seed);
  if (best_val() && splits_.val.size() == 0) {
    throw ConfigError("train.test_weights: \"best_val\" picks weights by validation accuracy, "
                      "but this run has no validation samples (data.val_fraction)");
  }
  if (cfg_.train.target > 0 && splits_.val.size() == 0) {
    throw ConfigError("train.target: time to target is read from the validation metric, but this "
                      "run has no validation samples (data.val_fraction)");
  }
  const auto& family = models::model_family(cfg_.model.arch);
  const auto facts = data_facts();

  torch::manual_seed(cfg_.train.seed);
  built_ = family.build(cfg_.model, facts);
  const data::CollateOptions collate = family.collate(built_, cfg_.data);
  // Host memory, before any batch is made (a GPU's own allocator speaks for
  // itself): a training batch whose activations cannot fit is refused; an
  // evaluation batch is capped (below) so its activations take at most a
  // quarter of the memory.
  // The head's outputs and the layers' activations, each as this run keeps them.
  double head_act = built_.head_bytes_per_sample;
  double body_act = built_.activation_bytes_per_sample - built_.head_bytes_per_sample;
  const double eval_body_act = body_act;  // evaluation keeps no activations for a backward
  if (loss_in_model(cfg_)) {
    if (!task_->metric_is_loss || !built_.module->make_own_loss(cfg_.train.loss_chunk_tokens)) {
      throw ConfigError("train.loss_chunk_tokens: model.arch \"" + cfg_.model.arch + "\" with train.task \"" +
                        cfg_.train.task + "\" makes no loss of its own; set it to 0");
    }
    head_act = 0;  // one chunk's logits at a time
  }
  if (cfg_.train.activation_checkpointing == "full") {
    if (!built_.module->recompute_blocks(true)) {
      throw ConfigError("train.activation_checkpointing: model.arch \"" + cfg_.model.arch +
                        "\" cannot run its blocks again in the backward; set it to \"none\"");
    }
    if (cfg_.runtime.cuda_graphs) {
      throw ConfigError("train.activation_checkpointing: \"full\" runs a backward inside the backward, which a "
                        "captured CUDA Graph cannot hold; set it to \"none\" or runtime.cuda_graphs to false");
    }
    body_act = built_.recompute_bytes_per_sample;
  }
  const double act = body_act + head_act;
  const double memory = fabric_->plan().accelerator->host ? metrics::physical_memory_bytes() : 0.0;
  int64_t eval_cap = 0;
  if (memory > 0 && act > 0) {
    const int64_t local = std::max(1, fabric_->context().local_world_size);
    const double state = double(models::count_parameters(*built_.module)) * 16.0;
    const double need = double(local) * (state + double(cfg_.train.batch_size) * act);
    if (need > memory) {
      throw ConfigError("train.batch_size: " + std::to_string(cfg_.train.batch_size) +
                        " needs about " + gb(need) + " (activations kept for the backward, "
                        "Korthikanti et al.'s estimate, plus weights, gradients and Adam's state" +
                        (local > 1 ? ", times " + std::to_string(local) + " local ranks" : "") +
                        "), more than this machine's " + gb(memory) +
                        "; lower it and raise train.accumulate to keep the effective batch");
    }
    // In evaluation only one layer's activations live at a time.
    const double per_sample = (eval_body_act + head_act) / double(std::max<int64_t>(1, built_.layers));
    eval_cap = std::max<int64_t>(1, int64_t(memory / 4 / double(local) / per_sample));
  }
  auto& model = *built_.module;
  init_weights(model);
  fsetup_.emplace(fabric_->setup_module(
      built_.module, [raw = built_.module.get()](const data::Inputs& x) { return raw->forward(x); },
      [&](std::vector<torch::Tensor> params) {
        return make_optimizer(params, cfg_.optim, cfg_.runtime.cuda_graphs);
      }));
  clock_ = std::make_unique<StepClock>(fabric_->device());
  defer_ = clock_->on_device();
  step_fn_ = make_train_step({*fabric_, *fsetup_, model, cfg_, *task_, clock_.get()});

  auto make = [&](const data::ExampleSet& set, bool training) {
    data::LoaderOptions o = loader_options(cfg_, set, training, collate);
    if (!training && cfg_.train.eval_batch_size > o.batch_size && cfg_.train.eval_batch_size > 0) {
      say("== note: train.eval_batch_size " + std::to_string(cfg_.train.eval_batch_size) +
          " exceeds the " + std::to_string(set.size()) +
          (facts.kind == "image" ? " images" : " texts") + " of a split; using " +
          std::to_string(o.batch_size));
    }
    if (!training && eval_cap > 0 && o.batch_size > eval_cap) {
      say("== note: an evaluation batch of " + std::to_string(o.batch_size) + " would need about " +
          gb(double(o.batch_size) * act / double(std::max<int64_t>(1, built_.layers))) +
          " of activations, more than a quarter of this machine's " + gb(memory) + "; using " +
          std::to_string(eval_cap));
      o.batch_size = eval_cap;
    }
    auto loader = fabric_->setup_dataloader(std::make_shared<const data::ExampleSet>(set), o);
    return loader;
  };
  train_loader_ = make(splits_.train, true);
  val_loader_ = make(splits_.val, false);
  test_loader_ = make(splits_.test, false);
  if (train_loader_->num_batches() == 0) {
    const int64_t world = fabric_->world_size();
    const int64_t total = int64_t(splits_.train.size());
    throw ConfigError("train.batch_size: " + std::to_string(cfg_.train.batch_size) +
                      " is larger than the " + std::to_string((total + world - 1) / world) +
                      " training samples per rank (" + std::to_string(total) + " over " +
                      std::to_string(world) + (world == 1 ? " rank" : " ranks") +
                      "; drop_last leaves no batch)");
  }
  total_opt_steps_ = total_optimizer_steps(cfg_.train, train_loader_->num_batches());
  if (!opts_.resume.empty()) resume();

  result_.params = models::count_parameters(model);
  result_.flops_per_sample = built_.flops_per_sample;
  result_.model = built_.dims;
  result_.model_layout = models::layout_json(model);
  result_.data_kind = facts.kind;
  result_.data = {{"kind", facts.kind},
                  {"train", splits_.train.size()},
                  {"val", splits_.val.size()},
                  {"test", splits_.test.size()},
                  {"class_ids", splits_.class_ids},
                  {"train_batches_per_epoch", train_loader_->num_batches()}};
  if (!splits_.train.class_names.empty()) result_.data["class_names"] = splits_.train.class_names;
  for (const auto& [k, v] : splits_.info.items()) result_.data[k] = v;
  result_.init_time_s = seconds_since(t0);
  say(built_.summary);
  std::string what;
  if (facts.kind == "image") {
    what = " images at " + std::to_string(collate.resize) + "x" + std::to_string(collate.resize);
  } else {  // the dataset says what its rows are (text: tokens, padding, tokenizer)
    what = " " + splits_.info.value("summary", std::string("rows"));
  }
  say("== data: " + cfg_.data.dataset + " train " + std::to_string(splits_.train.size()) +
      " / val " + std::to_string(splits_.val.size()) + " / test " +
      std::to_string(splits_.test.size()) + what + " | loop " + cfg_.train.loop +
      " | precision " + cfg_.runtime.precision + " | strategy " + fabric_->strategy().name() +
      " x " + std::to_string(fabric_->world_size()) + " rank(s)");
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
  // Inside an epoch the loader's position is per rank (each rank's shard of
  // the epoch's order): it resumes exactly on the rank count that wrote it.
  // At an epoch's end any rank count continues.
  const int world = fabric_->world_size();
  int saved_world = world;
  if (x.contains("world_size") && x["world_size"].is_number_integer()) {
    saved_world = x["world_size"].get<int>();
  } else if (const auto& rt = ckpt.config.value("runtime", nlohmann::json());
             rt.is_object() && rt.value("devices", nlohmann::json()).is_number_integer()) {
    saved_world = rt["devices"].get<int>() * std::max(1, rt.value("num_nodes", 1));
  }
  if (p.batch_in_epoch > 0 && saved_world != world) {
    throw ConfigError("--resume " + opts_.resume.string() + ": the checkpoint stopped after " +
                      std::to_string(p.batch_in_epoch) + " batches of epoch " +
                      std::to_string(p.epoch + 1) + " on " + std::to_string(saved_world) +
                      (saved_world == 1 ? " rank" : " ranks") + ", and this run has " +
                      std::to_string(world) + ": inside an epoch each rank's place in it "
                      "belongs to that rank count; resume with runtime.devices=" +
                      std::to_string(saved_world) + " (x runtime.num_nodes), or from a "
                      "checkpoint at an epoch's end");
  }
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
    resumed_epoch_ = {e.at("correct").get<double>(), e.at("seen").get<int64_t>(),
                      p.batch_in_epoch, e.at("loss_sum").get<double>(),
                      e.at("elapsed_s").get<double>()};
  }
  if (const auto v = x.value("val_count", nlohmann::json()); v.is_array() && v.size() == 3) {
    val_count_ = {v[0].get<int64_t>(), v[1].get<int64_t>(), v[2].get<double>()};
  }
  resume_best(x);
  steps_before_ = p.step;
  samples_before_ = x.value("samples_trained", p.step * cfg_.train.batch_size * saved_world);
  // What the checkpoint recorded of a target counts only for the same target
  // (another one is checked afresh from here).
  if (const auto t = x.value("target", nlohmann::json()); t.is_object() && cfg_.train.target > 0 &&
                                                          t.value("value", -1.0) == cfg_.train.target) {
    target_evaluations_ = t.value("evaluations", int64_t(0));
    if (t.value("reached", false)) {
      target_reached_ = true;
      target_step_ = t.value("step", int64_t(0));
      target_samples_ = t.value("samples", target_step_ * cfg_.train.batch_size * saved_world);
      target_epoch_ = t.value("epoch", 0);
      target_time_s_ = t.value("time_s", 0.0);
      target_val_acc_ = t.value("val_acc", 0.0);
      stopped_at_target_ = t.value("stopped", false) && cfg_.train.stop_at_target;
    }
  }
  result_.resumed_from = {{"path", opts_.resume.string()}, {"step", p.step},
                          {"epoch", p.epoch}, {"batch_in_epoch", p.batch_in_epoch}};
  say("== resumed from " + opts_.resume.string() + " at step " + std::to_string(p.step) +
      " (epoch " + std::to_string(start_epoch_) + ", batch " +
      std::to_string(p.batch_in_epoch) + ")");
}

// The best validation so far travels in the checkpoint's progress, its
// weights in best.ckpt beside the checkpoint (train.test_weights best_val).
void Run::resume_best(const nlohmann::json& extra) {
  const auto b = extra.value("best_val", nlohmann::json());
  if (!best_val() || !b.is_object()) return;
  best_acc_ = b.at("val_acc").get<double>();
  best_epoch_ = b.at("epoch").get<int>();
  best_step_ = b.at("step").get<int64_t>();
  const auto file = opts_.resume.parent_path() / "best.ckpt";
  if (!std::filesystem::exists(file)) {
    throw ConfigError("--resume " + opts_.resume.string() + ": " + file.string() +
                      " is missing; it holds the best-validation weights (step " +
                      std::to_string(best_step_) + ") that train.test_weights \"best_val\" tests");
  }
  const auto best = read_checkpoint(file);
  const auto their = best.progress.extra.value("best_val", nlohmann::json());
  if (!their.is_object() || their.value("step", int64_t(-1)) != best_step_) {
    throw ConfigError(file.string() + ": not the best-validation weights of " +
                      opts_.resume.string() + " (that one's best is step " +
                      std::to_string(best_step_) + ")");
  }
  best_weights_.clear();
  for (const auto& [name, t] : best.model_tensors()) best_weights_[name] = t.to(fabric_->device());
  std::error_code ec;
  best_on_disk_ = std::filesystem::equivalent(file.parent_path(), opts_.out_dir, ec);
  if (!best_on_disk_) best_copy_from_ = file;
}

void Run::save(const std::filesystem::path& file, int epochs_done, const EpochState& es) {
  pause_energy();  // writing a checkpoint is not a timed step
  TrainProgress p;
  p.epoch = epochs_done;
  p.step = step_;
  p.batch_in_epoch = es.batches;
  p.extra = {{"train_time_s", train_time_s_},
             {"step_ms", step_ms_},
             {"optimizer_steps", opt_steps_},
             {"class_names", splits_.train.class_names},
             {"rows", rows_to_json(result_.rows)},
             {"epochs", epochs_to_json(result_.epochs)},
             {"best_val", best_json()},
             {"target", target_json()},
             {"samples_trained", samples_trained()},
             {"val_count", {val_count_.passes, val_count_.samples, val_count_.time_s}},
             {"world_size", fabric_->world_size()},
             {"epoch_state",
              {{"correct", es.metric_sum}, {"seen", es.seen}, {"loss_sum", es.loss_sum},
               {"elapsed_s", es.elapsed_s}}}};
  // check_out_dir refused a folder with another run's files before any work,
  // so every checkpoint here is this run's own (or the one it resumes).
  fabric_->save(file, fsetup_->model, fsetup_->optimizer, p, resolved_, /*overwrite=*/true);
}

void Run::start_energy() {
  const auto& device = fabric_->device();
  std::string why;
  auto counter = device_runtime(device).energy_counter(std::max<int>(0, device.index()), &why);
  energy_ = metrics::EnergyMeter(std::move(counter), why);
  synchronize(device);  // the counter's origin: nothing queued before training
  energy_.start_training();
}

void Run::pause_energy() {
  if (!energy_.is_open()) return;
  synchronize(fabric_->device());
  energy_.close();
}

// Every rank's timed joules summed; "not measured" unless every rank's
// counter answered throughout (one rank's GPU alone is not the run's energy).
void Run::record_energy() {
  pause_energy();
  const auto timed = energy_.timed_joules();
  // A counter is its whole device's: where ranks share one (more local ranks
  // than devices: "auto" puts rank r on device r mod n), only the lowest rank
  // on it adds its joules. Each rank's device, as a hash of its host and the
  // counter's device id, goes to every rank.
  const int world_n = fabric_->world_size();
  double share = 1.0;
  if (world_n > 1) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    const std::string id = std::string(host) + "/" + energy_.device_id();
    const double mine = double(std::hash<std::string>{}(id) & ((uint64_t(1) << 52) - 1));
    auto ids = torch::zeros({world_n}, torch::kDouble);
    ids[fabric_->global_rank()] = mine;
    fabric_->all_reduce(ids, dist::ReduceOp::Sum);
    for (int k = 0; k < fabric_->global_rank(); ++k) {
      if (ids[k].item<double>() == mine) share = 0.0;
    }
  }
  auto t = torch::tensor({share * timed.value_or(0.0), timed ? 1.0 : 0.0, share * energy_to_target_.value_or(0.0),
                          energy_to_target_ ? 1.0 : 0.0},
                         torch::kDouble);
  fabric_->all_reduce(t, dist::ReduceOp::Sum);
  const int world = fabric_->world_size();
  const bool all = t[1].item<double>() == double(world);
  std::string note = energy_.why_not();
  if (!all && note.empty()) note = "another rank's device has no energy counter";
  if (all && energy_steps_ == 0) note = "no timed step: the run ended within its warm-up";
  const bool measured = all && energy_steps_ > 0;
  const bool to_target = t[3].item<double>() == double(world);
  result_.energy = metrics::energy_figures(
      measured ? energy_.source() : metrics::kEnergyNotMeasured, note,
      measured ? std::optional<double>(t[0].item<double>()) : std::nullopt, energy_steps_,
      wall_samples_ * world, to_target ? std::optional<double>(t[2].item<double>()) : std::nullopt);
  char line[160];
  if (result_.energy.joules) {
    std::snprintf(line, sizeof line, "Energy (%s): %.1f J over %lld timed steps, %.3g J a step, %.3g J a sample",
                  result_.energy.source.c_str(), *result_.energy.joules, static_cast<long long>(energy_steps_),
                  result_.energy.joules_per_step.value_or(0.0), result_.energy.joules_per_sample.value_or(0.0));
    say(line);
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
  pause_energy();  // the timed steps are over: what follows is not theirs
  write_profile();  // a run shorter than the profile window: what was recorded
  auto test = evaluate(*test_loader_, test_count_);
  result_.test_weights = cfg_.train.test_weights;
  if (best_val()) {
    result_.test_acc_last = test.acc;
    result_.best_val = best_json();
    if (!best_weights_.empty() && best_step_ != step_) {
      say("Test " + task_->info.metric + " of the last weights (step " + std::to_string(step_) + ") " +
          task_->shown(test.acc));
      load_weights(best_weights_);
      test = evaluate(*test_loader_, test_count_);
    }
    if (best_acc_) {
      say("Test " + task_->info.metric + " of the best-validation weights (epoch " + std::to_string(best_epoch_) +
          ", step " + std::to_string(best_step_) + ", val " + task_->shown(best_acc_) + ") " +
          task_->shown(test.acc));
    } else {
      say("Test " + task_->info.metric + " " + task_->shown(test.acc) + " (no validation ran: the last weights)");
    }
  } else if (stopped_at_target_) {
    say("Test " + task_->info.metric + " " + task_->shown(test.acc) + " (the weights that reached the target, step " +
        std::to_string(target_step_) + ")");
  } else {
    say("Test " + task_->info.metric + " " + task_->shown(test.acc));
  }
  // The slowest rank's time for each step (one element-wise max over ranks).
  std::vector<double> slowest = step_ms_;
  if (fabric_->world_size() > 1 && !slowest.empty()) {
    auto t = torch::tensor(slowest, torch::kDouble);
    fabric_->all_reduce(t, dist::ReduceOp::Max);
    slowest.assign(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
  }
  const auto steps = metrics::spread(slowest);
  record_energy();
  result_.status = "ok";
  result_.test_acc = test.acc;
  result_.test_loss = test.loss;
  result_.train_time_s = train_time_s_;
  result_.steps = step_;
  result_.work = work_json();
  result_.target = target_json();
  result_.step_time_ms = steps;
  result_.step_ms_after_warmup.reserve(slowest.size());
  for (double ms : slowest) result_.step_ms_after_warmup.push_back(std::round(ms * 1e3) / 1e3);
  record_step_split();
  if (samples_sum_ > 0) result_.flops_per_sample = flops_sum_ / samples_sum_;
  // A language model's model FLOPs are those of the positions that predict a
  // real next token (MFU as PaLM defines it, over the tokens trained): a
  // padded position's work is waste, so padded documents never score as
  // well-used hardware beside packed windows that do the same work usefully.
  if (result_.data_kind == "tokens" && positions_sum_ > 0 && samples_sum_ > 0) {
    result_.flops_per_sample = flops_sum_ / samples_sum_ * (tokens_sum_ / positions_sum_);
  }
  if (steps.count > 0 && steps.mean > 0) {
    const double per_device = double(cfg_.train.batch_size) / (steps.mean / 1e3);
    result_.samples_per_s_per_device = per_device;
    result_.samples_per_s = per_device * fabric_->world_size();
    result_.model_flops_per_s = *result_.samples_per_s * 3.0 * result_.flops_per_sample;
    if (result_.data_kind != "image" && samples_sum_ > 0) {  // text, and token streams
      result_.tokens_per_s = *result_.samples_per_s * (tokens_sum_ / samples_sum_);
    }
  }
  if (wall_s_ > 0) {
    // The last measured step ended in a flush, which waits for the device.
    result_.wall_samples_per_s = wall_samples_ * fabric_->world_size() / wall_s_;
  }
  gather_rank_results();
  if (fabric_->scaler().enabled()) result_.grad_scaler = fabric_->scaler().state_dict();
  console_.summary(result_);
}

// result.json's "work": what this run trained and evaluated (PlannedWork's
// counts, as done).
nlohmann::json Run::work_json() const {
  auto split = [](const EvalCount& c) {
    return nlohmann::json{{"passes", c.passes}, {"samples", c.samples}, {"time_s", c.time_s}};
  };
  return {{"train", {{"steps", step_},
                     {"samples", step_ * cfg_.train.batch_size * fabric_->world_size()}}},
          {"val", split(val_count_)},
          {"test", split(test_count_)}};
}

// result.json's step_split_ms and comm_per_step from this rank's measured steps.
void Run::record_step_split() {
  if (split_steps_ > 0 && split_steps_ == int64_t(step_ms_.size())) {
    const double n = double(split_steps_);
    const char* names[kStepPhases] = {"forward", "backward", "comm_wait", "optimizer"};
    nlohmann::json j = {{"steps", split_steps_}};
    for (int k = 0; k < kStepPhases; ++k) j[names[k]] = phase_sum_ms_[k] / n;
    j["other"] = other_sum_ms_ / n;
    j["total"] = split_total_ms_ / n;
    result_.step_split_ms = j;
  }
  if (fabric_->world_size() > 1 && comm_steps_ > 0) {
    const double n = double(comm_steps_);
    nlohmann::json list = nlohmann::json::array();
    double bytes = 0;
    for (const auto& [k, calls] : comm_calls_) {
      const auto& [op, primitive, size] = k;
      list.push_back({{"op", op}, {"primitive", primitive}, {"bytes", size},
                      {"per_step", double(calls) / n}});
      bytes += double(size) * double(calls) / n;
    }
    result_.comm_per_step = {{"steps", comm_steps_}, {"bytes", bytes}, {"collectives", list}};
  }
}

void Run::write_outputs() {
  if (!zero_) return;
  result_.finished_at = metrics::utc_now();
  if (fsetup_) result_.optimizer_implementation = optimizer_implementation(fsetup_->optimizer.inner());
  metrics::write_file_atomic(opts_.out_dir / "metrics.csv", metrics_csv(result_.rows));
  metrics::write_json_atomic(opts_.out_dir / "result.json", to_json(result_));
}

RunResult Run::execute() {
  auto plan = plan_here(cfg_);
  result_.plan = plan::plan_json(plan);
  result_.precision_support = plan.precision.support();
  fabric_ = std::make_unique<Fabric>(std::move(plan), cfg_.runtime, opts_.log);
  fabric_->launch(config::config_hash(resolved_));
  zero_ = fabric_->is_global_zero();
  console_ = Console(zero_ ? opts_.log : nullptr, zero_ ? util::progress_channel_from_env() : -1);
  result_.name = cfg_.name;
  result_.started_at = metrics::utc_now();
  result_.config = resolved_;
  result_.loop = cfg_.train.loop;
  result_.strategy = fabric_->strategy().name();
  result_.device = fabric_->device().str();
  result_.world_size = fabric_->world_size();
  result_.threads = fabric_->threads();
  result_.env = run_environment(*fabric_, cfg_.optim.name == "adamw");
  console_.banner(result_.env, resolved_, *fabric_);
  // The plan's warnings (an emulated precision, fault injection), then the rendezvous' and the caller's.
  for (const auto& w : fabric_->plan().warnings) {
    result_.warnings.push_back(w);
    say("warning: " + w);
  }
  if (const auto& comm = fabric_->context().comm; comm && !comm->rendezvous_warning().empty()) {
    result_.warnings.push_back(comm->rendezvous_warning());
    say("warning: " + comm->rendezvous_warning());
  }
  for (const auto& w : opts_.warnings) {
    result_.warnings.push_back(w);
    say("warning: " + w);
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
    if (!best_copy_from_.empty()) {  // resumed into another out dir: its best weights come along
      std::ifstream in(best_copy_from_, std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (!in && !in.eof()) throw RunError(best_copy_from_.string() + ": read error");
      metrics::write_file_atomic(opts_.out_dir / "best.ckpt", bytes);
      best_on_disk_ = true;
    }
  }
  try {
    train_epochs();
    finish();
  } catch (const Interrupted& e) {
    result_.status = "interrupted";
    result_.error = e.what();
    result_.train_time_s = train_time_s_;
    result_.steps = step_;
    result_.work = work_json();
    write_outputs();
    say("== " + std::string(e.what()) + "; checkpoint and result.json written");
    throw;
  } catch (const std::exception& e) {
    result_.status = "failed";
    // Torch's message without its C++ frames (LibTorch 1.13 appends them):
    // the error, in one line, is what result.json and the console keep.
    const auto* c10e = dynamic_cast<const c10::Error*>(&e);
    result_.error = c10e ? c10e->what_without_backtrace() : e.what();
    if (is_out_of_memory(e)) result_.failure = "out_of_memory";
    result_.train_time_s = train_time_s_;
    result_.steps = step_;
    result_.work = work_json();
    RankResult rr;
    rr.rank = fabric_->global_rank();
    rr.peak_memory_bytes = rr.host_peak_rss_bytes = metrics::peak_rss_bytes();
    result_.ranks = {rr};
    write_outputs();
    throw RunError("run failed: " + result_.error);
  }
  write_outputs();
  say("== wrote " + (opts_.out_dir / "result.json").string());
  return result_;
}

}  // namespace detail

RunResult run(const config::RunConfig& given, const nlohmann::json& resolved,
              const RunOptions& opts) {
  config::RunConfig cfg = given;
  cfg.runtime.devices = resolve_devices(cfg.runtime);
  check_runnable(cfg);
  if (!opts.dry_run) check_out_dir(opts);
  return detail::Run(cfg, resolved, opts).execute();
}

}  // namespace accel::train