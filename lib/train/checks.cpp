// The runnability checks (accel/train/checks.h): config against the loops,
// strategies, precisions and captured steps; the output folder; resume.
#include "accel/train/checks.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <regex>

#include "accel/data/catalog.h"
#include "accel/data/dataset.h"
#include "accel/dist/catalog.h"
#include "accel/metrics/metrics.h"
#include "accel/models/family.h"
#include "accel/precision/catalog.h"
#include "accel/precision/precision.h"
#include "accel/text/tokenizer.h"
#include "accel/train/checkpoint.h"
#include "accel/train/fabric.h"
#include "accel/train/task_row.h"
#include "accel/util/errors.h"
#include "accel/util/input_file.h"
#include "accel/util/json_doc.h"
#include "accel/plan/accelerator.h"

namespace accel::train {

namespace fs = std::filesystem;

namespace {

// What a captured train step cannot hold: host decisions inside the step
// (GradScaler's skip, clipping's norm), several ranks' collectives, and
// optimizers without a device-side step.
void check_graphable(const config::RunConfig& cfg) {
  const auto& rt = cfg.runtime;
  auto refuse = [](const std::string& field, const std::string& why) {
    throw ConfigError(field + ": " + why + " (runtime.cuda_graphs captures the whole step)");
  };
  // A named accelerator whose row captures no graphs ("auto" is resolved where the run lands).
  if (const auto* row = plan::find_accelerator(rt.accelerator); row != nullptr && !row->graphs) {
    refuse("runtime.accelerator", "\"" + row->kind + "\" has no CUDA Graphs; use \"cuda\"");
  }
  if (rt.world_size() > 1 || dist::is_multi_rank_strategy(rt.strategy)) {
    refuse("runtime.strategy", "CUDA Graphs run on one device here (strategy single, devices 1)");
  }
  if (cfg.optim.name != "adam" && cfg.optim.name != "adamw") {
    refuse("optim.name", "\"" + cfg.optim.name + "\" has no capturable step; use adam or adamw");
  }
  if (cfg.train.grad_clip > 0) refuse("train.grad_clip", "clipping reads the norm on the host");
  if (cfg.train.accumulate > 1) refuse("train.accumulate", "accumulation windows are not captured");
  if (const auto* row = precision::find_precision(rt.precision); row != nullptr && row->scaler) {
    refuse("runtime.precision", "16-mixed's GradScaler decides on the host whether to step");
  }
  const auto* dataset = data::find_dataset(cfg.data.dataset);
  if (dataset && dataset->kind == "text" && cfg.data.padding != "max_length") {
    refuse("data.padding", "\"" + cfg.data.padding + "\" gives every batch its own length, and a "
           "graph replays one shape; use \"max_length\"");
  }
  // Padded documents carry a mask only on batches with a padded row: a
  // graph captured with one replays it on every batch, or never.
  if (dataset && dataset->kind == "tokens" && cfg.data.packing == "documents") {
    refuse("data.packing", "\"documents\" gives a batch a mask only where a row is padded, and a graph "
           "replays one step's inputs; use \"packed\"");
  }
}

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

std::vector<fs::path> periodic_checkpoints(const fs::path& out) {
  std::vector<fs::path> found;
  std::error_code ec;
  const auto dir = out / "checkpoints";
  if (!fs::is_directory(dir, ec)) return found;
  static const std::regex name(R"(step-\d{8,}\.ckpt)");
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (std::regex_match(e.path().filename().string(), name)) found.push_back(e.path());
  }
  std::sort(found.begin(), found.end());  // zero-padded: lexical = numeric
  return found;
}

}  // namespace

constexpr int64_t kThreadsPerCore = 4;

void check_runnable(const config::RunConfig& cfg, bool check_environment) {
  const auto& family = models::model_family(cfg.model.arch);
  const auto& presets = family.info.presets;
  if (cfg.model.preset != "custom" &&
      std::find(presets.begin(), presets.end(), cfg.model.preset) == presets.end()) {
    throw ConfigError("model.preset: \"" + cfg.model.preset + "\" is not a " + cfg.model.arch +
                      " preset");
  }
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
  if (cfg.train.loop == "plain" && (world > 1 || dist::is_multi_rank_strategy(rt.strategy))) {
    throw ConfigError("runtime.strategy: \"" + rt.strategy + "\" on " + std::to_string(world) +
                      " rank(s) needs train.loop \"fabric\" (the plain loop is the article's "
                      "one-device script)");
  }
  const auto* strategy = dist::find_strategy(rt.strategy);
  if (strategy && strategy->one_rank && world > 1) {
    throw ConfigError("runtime.strategy: \"" + rt.strategy + "\" runs one process, but runtime.devices x "
                      "runtime.num_nodes is " + std::to_string(world) + "; use " + dist::multi_rank_strategy_list());
  }
  const int k = cfg.train.accumulate;
  {
    // A task whose head is the vocabulary (language modelling) needs a family
    // whose head is too, and such a family needs such a task.
    const auto& task = task_row(cfg.train.task);  // ConfigError naming train.task
    const auto* family = models::find_family(cfg.model.arch);
    const bool task_vocab = task.info.head == "vocab";
    if (family && task_vocab != (family->head == "vocab")) {
      throw ConfigError("train.task: \"" + cfg.train.task + "\" " +
                        (task_vocab ? "predicts tokens, but model.arch \"" + cfg.model.arch + "\" has a " + family->head + " head"
                                    : "needs a classification head, but model.arch \"" + cfg.model.arch +
                                          "\" predicts tokens (train.task \"causal_lm\")"));
    }
  }
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
  // More intra-op threads than cores only slow a step (they take turns on the
  // cores); thousands of them also delay a stop request. A few times the
  // cores is allowed, to measure exactly that.
  const int64_t cores = metrics::available_cores();
  const int64_t local_ranks = rt.devices > 0 ? rt.devices : 1;
  if (rt.threads > 0 && int64_t(rt.threads) * local_ranks > kThreadsPerCore * cores) {
    throw ConfigError("runtime.threads: " + std::to_string(rt.threads) + " x " +
                      std::to_string(local_ranks) + " local rank(s) is more than " +
                      std::to_string(kThreadsPerCore) + " threads per core of the " +
                      std::to_string(cores) + " cores this process may use; threads beyond "
                      "the cores take turns on them and only slow a step (0 = cores per rank)");
  }
  const auto device = resolve_device(rt.accelerator);
  const auto plan = plan_here(cfg);
  if (rt.cuda_graphs && !plan.accelerator->graphs) {
    throw ConfigError("runtime.cuda_graphs: needs a CUDA device, but runtime.accelerator \"" +
                      rt.accelerator + "\" resolves to " + device.str() + " here");
  }
  precision::check_supported(precision::make_policy(rt.precision), device.type());
  if (plan.world() > 1) resolve_backend(plan, rt.backend);
  if (cfg.model.init != "random" && !std::filesystem::is_regular_file(cfg.model.init_path)) {
    throw ConfigError("model.init_path: no such file: " + cfg.model.init_path);
  }
  data::check_data_files(cfg.data);
  // A GGUF decoder's embedding rows are the ids of its own tokenizer: text
  // must be tokenized by that file's BPE, not by another vocabulary (of the
  // same size or not). Synthetic token ids have no tokenizer to check.
  const auto vocab = data::tokenizer_file(cfg.data);
  if (cfg.model.init == "gguf" && !vocab.empty()) {
    const std::string init = cfg.model.init_path;
    if (cfg.data.tokenizer != "gguf-bpe") {
      throw ConfigError("data.tokenizer: \"" + cfg.data.tokenizer + "\" gives other ids than the GGUF model.init_path " +
                        init + " reads; set data.tokenizer \"gguf-bpe\" and data.vocab to the same file");
    }
    std::error_code ec;
    if (!fs::equivalent(vocab, init, ec) && text::file_sha256(vocab) != text::file_sha256(init)) {
      throw ConfigError("data.vocab: " + vocab.string() + " is another file than the GGUF model.init_path " + init +
                        ", whose weights read the ids of its own tokenizer; set data.vocab to the same file");
    }
  }
}

// ---- the output folder ------------------------------------------------------------------

void check_out_dir(const RunOptions& opts) {
  const fs::path& out = opts.out_dir;
  const std::string where = "--out " + out.string() + ": ";
  std::error_code ec;
  if (fs::exists(out, ec)) {
    if (!fs::is_directory(out, ec)) throw ConfigError(where + "exists and is not a folder");
    if (::access(out.c_str(), W_OK | X_OK) != 0) throw ConfigError(where + "folder is not writable");
  } else {
    // Walk up to the first part that exists: it must be a writable folder.
    fs::path up = out.has_parent_path() ? out.parent_path() : fs::path(".");
    while (!up.empty() && !fs::exists(up, ec)) up = up.parent_path();
    if (up.empty()) up = ".";
    if (!fs::is_directory(up, ec)) {
      throw ConfigError(where + up.string() + " is not a folder, so the folder cannot be made");
    }
    if (::access(up.c_str(), W_OK | X_OK) != 0) {
      throw ConfigError(where + "cannot create it: " + up.string() + " is not writable");
    }
    // access() says yes for root everywhere, and some file systems (/proc, /sys)
    // refuse new folders anyway: make and remove a probe folder in `up`.
    const auto probe = up / (".accel-out-probe." + std::to_string(::getpid()));
    if (::mkdir(probe.c_str(), 0700) != 0) {
      throw ConfigError(where + "cannot create folders in " + up.string() + " (" +
                        std::strerror(errno) + ")");
    }
    ::rmdir(probe.c_str());
    return;
  }
  if (opts.overwrite || !opts.resume.empty()) return;
  std::vector<std::string> kept;
  for (const char* name : {"result.json", "checkpoint.ckpt"}) {
    if (fs::exists(out / name, ec)) kept.push_back(name);
  }
  const auto steps = periodic_checkpoints(out);
  if (!steps.empty()) kept.push_back("checkpoints/" + steps.back().filename().string());
  // A run writes config.json and metrics.csv too: files of those names that
  // are not a run's (a model's config.json, someone's table) are never
  // replaced unasked. Those of an earlier run of ours that left no result are.
  std::vector<std::string> foreign;
  if (fs::exists(out / "config.json", ec)) {
    nlohmann::json doc;
    try {
      doc = parse_json_or_discarded(read_input_file(out / "config.json", "", int64_t{16} << 20));
    } catch (const std::exception&) {
    }
    if (!(doc.is_object() && doc.contains("runtime") && doc.contains("train"))) foreign.push_back("config.json");
  }
  if (fs::exists(out / "metrics.csv", ec)) {
    std::string head;
    if (fs::is_regular_file(out / "metrics.csv", ec)) {
      std::ifstream in(out / "metrics.csv");
      std::getline(in, head);
    }
    if (head.rfind("kind,step,epoch,", 0) != 0) foreign.push_back("metrics.csv");
  }
  if (!foreign.empty()) {
    throw ConfigError(where + "holds " + join(foreign, " and ") +
                      " that are not an accel-bench run's, which a run would replace; choose another --out, "
                      "or pass --force to replace them");
  }
  if (!kept.empty()) {
    throw ConfigError(where + "already holds " + join(kept, ", ") +
                      " of an earlier run; continue it with --resume auto, choose another "
                      "--out, or pass --force to replace it");
  }
}

std::vector<std::string> clear_replaced_run(const fs::path& out) {
  std::vector<std::string> removed;
  std::error_code ec;
  auto remove = [&](const fs::path& f, const std::string& name) {
    if (!fs::exists(fs::symlink_status(f, ec))) return;
    if (!fs::remove(f, ec) || ec) {
      throw ConfigError("--force: cannot remove " + f.string() + " of the replaced run: " +
                        ec.message());
    }
    removed.push_back(name);
  };
  for (const char* name : {"result.json", "metrics.csv", "config.json", "checkpoint.ckpt"}) {
    remove(out / name, name);
  }
  for (const auto& f : periodic_checkpoints(out)) {
    remove(f, "checkpoints/" + f.filename().string());
  }
  if (fs::is_directory(out / "checkpoints", ec) && fs::is_empty(out / "checkpoints", ec)) {
    fs::remove(out / "checkpoints", ec);
  }
  return removed;
}

fs::path find_resume_checkpoint(const fs::path& out) {
  auto candidates = periodic_checkpoints(out);
  std::vector<std::pair<int64_t, fs::path>> ranked;
  std::error_code ec;
  if (fs::exists(out / "checkpoint.ckpt", ec)) candidates.push_back(out / "checkpoint.ckpt");
  for (const auto& c : candidates) {
    try {
      const auto ckpt = read_checkpoint(c);  // verifies size and CRC
      ranked.emplace_back(ckpt.progress.step, c);
    } catch (const ConfigError&) {
      // damaged or cut: a killed run's last write; skip it
    }
  }
  if (ranked.empty()) return {};
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  return ranked.front().second;
}

fs::path periodic_checkpoint_path(const fs::path& out, int64_t step) {
  char name[48];
  std::snprintf(name, sizeof(name), "step-%08lld.ckpt", static_cast<long long>(step));
  return out / "checkpoints" / name;
}

// ---- resume ---------------------------------------------------------------------------

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
  // A checkpoint written before a field was added is read through today's
  // schema first (the field takes its default, as compare and the sweep read
  // older configs); one today's schema refuses is compared as saved.
  nlohmann::json saved_today = saved;
  try {
    saved_today = config::resolve_config(saved, ".");
  } catch (const ConfigError&) {
  }
  std::vector<std::string> differ;
  for (const char* ptr : kMustMatch) {
    const nlohmann::json::json_pointer p(ptr);
    const auto none = nlohmann::json();
    std::string path = std::string(ptr).substr(1);
    std::replace(path.begin(), path.end(), '/', '.');
    diff_paths(saved_today.contains(p) ? saved_today.at(p) : none, current.contains(p) ? current.at(p) : none,
               path, differ);
  }
  return differ;
}

}  // namespace accel::train
