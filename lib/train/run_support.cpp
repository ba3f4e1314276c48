// What a run needs besides its loop: output-folder rules, --resume auto, the
// LR schedule, stop signals, loader options, banner and summary lines.
#include "run_support.h"

#include <unistd.h>
#include <cstring>
#include <cerrno>
#include <sys/stat.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <regex>

#include "accel/metrics/metrics.h"
#include "accel/models/attention.h"
#include "accel/train/checkpoint.h"
#include "accel/train/trainer.h"
#include "accel/util/errors.h"

namespace accel::train {

namespace fs = std::filesystem;

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

// ---- output folder and --resume auto ---------------------------------------------

namespace {

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
  if (!kept.empty()) {
    throw ConfigError(where + "already holds " + join(kept, ", ") +
                      " of an earlier run; continue it with --resume auto, choose another "
                      "--out, or pass --force to replace it");
  }
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

// ---- learning-rate schedule ---------------------------------------------------------

double scheduled_lr(const config::OptimConfig& o, int64_t step, int64_t total) {
  if (o.scheduler != "cosine") return o.lr;
  const int64_t warm = o.warmup_steps;
  if (warm > 0 && step < warm) return o.lr * double(step + 1) / double(warm);
  const int64_t span = std::max<int64_t>(1, total - warm);
  const double t = std::min(1.0, double(step - warm) / double(span));
  const double pi = std::acos(-1.0);
  return o.min_lr + 0.5 * (o.lr - o.min_lr) * (1.0 + std::cos(pi * t));
}

void set_learning_rate(torch::optim::Optimizer& optimizer, const config::OptimConfig& o,
                       int64_t step, int64_t total) {
  if (o.scheduler == "none") return;
  const double lr = scheduled_lr(o, step, total);
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

int64_t total_optimizer_steps(const config::TrainConfig& t, int64_t batches_per_epoch) {
  const int64_t per_epoch = (batches_per_epoch + t.accumulate - 1) / t.accumulate;
  int64_t total = per_epoch * t.epochs;
  if (t.max_steps > 0) total = std::min(total, t.max_steps / t.accumulate);
  return std::max<int64_t>(1, total);
}

// ---- stop signals ----------------------------------------------------------------------

namespace {
std::atomic<int> g_stop_signals{0};

extern "C" void on_stop_signal(int sig) {
  const int n = g_stop_signals.fetch_add(1) + 1;
  if (n >= 2 && sig != SIGUSR1) {
    // The second request: stop now, as the default action would.
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}
}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGTERM, SIGINT, SIGUSR1}) sigaction(sig, &sa, nullptr);
}

bool stop_signal_received() { return g_stop_signals.load() > 0; }
void request_stop() { g_stop_signals.fetch_add(1); }

// ---- loaders, names, banner ---------------------------------------------------------------

data::LoaderOptions loader_options(const config::RunConfig& cfg, const data::ImageSet& set,
                                   bool training, int side) {
  data::LoaderOptions o;
  int64_t bs = cfg.train.batch_size;
  if (!training && cfg.train.eval_batch_size > 0) {
    bs = std::min<int64_t>(cfg.train.eval_batch_size, std::max<int64_t>(1, set.size()));
  }
  o.batch_size = bs;
  o.shuffle = o.drop_last = training;
  o.seed = cfg.train.seed;
  o.prefetch = cfg.data.prefetch;
  o.resize = side;
  o.normalize = cfg.data.normalize;
  o.limit_batches = training ? cfg.train.limit_train_batches : cfg.train.limit_eval_batches;
  return o;
}

fs::path periodic_checkpoint_path(const fs::path& out, int64_t step) {
  char name[48];
  std::snprintf(name, sizeof(name), "step-%08lld.ckpt", static_cast<long long>(step));
  return out / "checkpoints" / name;
}

nlohmann::json model_json(const models::ViTSpec& s) {
  return {{"image_size", s.image_size}, {"in_channels", s.in_channels},
          {"patch_size", s.patch_size}, {"dim", s.dim},
          {"depth", s.depth},           {"heads", s.heads},
          {"mlp_dim", s.mlp_dim},       {"num_classes", s.num_classes},
          {"seq_length", s.seq_length()}};
}

std::string model_line(const models::ViTSpec& s, int64_t params, double flops) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%.3f GFLOP/sample fwd", flops / 1e9);
  return "== model: ViT " + std::to_string(s.image_size) + "px patch " +
         std::to_string(s.patch_size) + ", dim " + std::to_string(s.dim) + ", depth " +
         std::to_string(s.depth) + ", heads " + std::to_string(s.heads) + ", mlp " +
         std::to_string(s.mlp_dim) + ", " + std::to_string(s.num_classes) + " classes | " +
         std::to_string(params) + " parameters | " + buf;
}

std::string config_hash(const nlohmann::json& resolved) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : resolved.dump()) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  char buf[20];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

nlohmann::json run_environment(const Fabric& fabric) {
  auto env = metrics::environment(fabric.threads());
  const auto& c = fabric.context();
  env["device"] = c.device.str();
  env["world_size"] = c.world_size;
  env["local_world_size"] = c.local_world_size;
  env["num_nodes"] = c.num_nodes;
  env["backend"] = c.comm ? c.comm->backend() : std::string("none");
  env["comm_wait"] = c.comm ? c.comm->wait_mode() : std::string("none");
  // What LibTorch applies, read back (runtime.matmul_precision sets it).
  switch (at::globalContext().float32MatmulPrecision()) {
    case at::Float32MatmulPrecision::HIGHEST: env["float32_matmul_precision"] = "highest"; break;
    case at::Float32MatmulPrecision::HIGH: env["float32_matmul_precision"] = "high"; break;
    case at::Float32MatmulPrecision::MEDIUM: env["float32_matmul_precision"] = "medium"; break;
  }
  // The attention a model without attention dropout runs here
  // (accel/models/attention.h).
  env["attention_kernel"] = models::attention_kernel_name();
  return env;
}

void print_banner(std::ostream& out, const nlohmann::json& env, const nlohmann::json& resolved,
                  const Fabric& fabric) {
  auto str = [&](const char* k) { return env.value(k, std::string("?")); };
  out << "== accel-bench " << str("accel_bench_version") << " (" << str("git_sha")
      << ") | LibTorch " << str("libtorch_version") << " | " << str("compiler") << "\n";
  out << "== hardware: " << str("cpu_model") << " | cores " << env.value("cores", 0)
      << " | threads " << fabric.threads() << " per rank | BLAS " << str("blas")
      << (env.contains("openblas_core") ? " (" + str("openblas_core") + " kernels" +
                                              (env.value("openblas_coretype_auto", false)
                                                   ? ", OPENBLAS_CORETYPE set by accel-bench: "
                                                     "OpenBLAS does not know this CPU"
                                                   : std::string()) +
                                              ")"
                                        : std::string())
      << " | OMP_WAIT_POLICY " << str("omp_wait_policy") << " | attention "
      << str("attention_kernel")
      << (env.value("cuda_available", false)
              ? " | GPUs " + std::to_string(env.value("gpu_count", 0))
              : std::string(" | no GPU"))
      << "\n";
  const auto& c = fabric.context();
  out << "== ranks: " << c.world_size << " (" << c.num_nodes << " node(s) x "
      << c.local_world_size << ") | device " << c.device.str() << " | backend "
      << str("backend") << (c.comm ? " (waits " + str("comm_wait") + ")" : std::string())
      << " | strategy " << resolved["runtime"].value("strategy", "auto")
      << "\n";
  out << "== resolved config:\n";
  for (const auto& [section, body] : resolved.items()) {
    out << "   " << section << ": " << body.dump() << "\n";
  }
  out.flush();
}

void print_summary(const RunResult& r, std::ostream* out) {
  if (!out) return;
  char line[256];
  int64_t peak = 0, reserved = 0;
  for (const auto& k : r.ranks) {
    peak = std::max(peak, k.peak_memory_bytes);
    reserved = std::max(reserved, k.cuda_max_reserved_bytes);
  }
  const char* largest = r.ranks.size() > 1 ? ", the largest rank's" : "";
  if (r.peak_memory_kind == "cuda_max_allocated") {
    std::snprintf(line, sizeof(line),
                  "Memory used: %.2f GB (CUDA max allocated%s; max reserved %.2f GB)",
                  double(peak) / 1e9, largest, double(reserved) / 1e9);
  } else {
    std::snprintf(line, sizeof(line), "Memory used: %.2f GB (peak RSS%s)", double(peak) / 1e9,
                  largest);
  }
  *out << line << "\n";
  if (r.step_time_ms.count > 0 && r.images_per_s) {
    std::snprintf(line, sizeof(line),
                  "Step time: median %.2f ms (p10 %.2f, p90 %.2f) | %.1f images/s (%.1f per device)",
                  r.step_time_ms.median, r.step_time_ms.p10, r.step_time_ms.p90, *r.images_per_s,
                  *r.images_per_s_per_device);
  } else {
    std::snprintf(line, sizeof(line), "Step time: n/a (no step after train.warmup_steps)");
  }
  *out << line << std::endl;
}

}  // namespace accel::train
