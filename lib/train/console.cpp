// The console reporter and the run's environment block.
#include "console.h"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "accel/metrics/metrics.h"
#include "accel/models/attention.h"
#include "accel/train/optimizer.h"
#include "accel/util/child_process.h"

namespace accel::train {

void Console::line(const std::string& text) const {
  if (out_) *out_ << text << std::endl;
}

void Console::step(int epoch, int epochs, int64_t batch, int64_t batches, double loss) const {
  if (progress_fd_ >= 0) {
    util::send_progress(progress_fd_, nlohmann::json{{"event", "step"},
                                                     {"epoch", epoch},
                                                     {"epochs", epochs},
                                                     {"batch", batch},
                                                     {"batches", batches},
                                                     {"loss", std::isfinite(loss) ? nlohmann::json(loss) : nlohmann::json()}}
                                          .dump());
  }
  if (!out_) return;
  char line[128];
  std::snprintf(line, sizeof(line), "Epoch: %04d/%04d | Batch %04lld/%04lld | Loss: %.4f", epoch,
                epochs, static_cast<long long>(batch), static_cast<long long>(batches), loss);
  *out_ << line << std::endl;
}

void Console::epoch(int epoch, int epochs, const Opt& train_acc, const Opt& val_acc,
                    double train_time_s, const TaskRow* task) const {
  if (progress_fd_ >= 0) {
    auto frac = [](const Opt& v) { return v ? nlohmann::json(*v) : nlohmann::json(); };
    nlohmann::json ev{{"event", "epoch"},
                                                     {"epoch", epoch},
                                                     {"epochs", epochs},
                                                     {"train_acc", frac(train_acc)},
                                                     {"val_acc", frac(val_acc)},
                                                     {"train_time_s", train_time_s}};
    // The metric's name and whether it is a share: a sweep prints it as the run's console does.
    if (task) {
      ev["metric"] = task->info.metric;
      ev["proportion"] = task->info.proportion;
    }
    util::send_progress(progress_fd_, ev.dump());
  }
  if (!out_) return;
  char line[200];
  if (task && !task->info.proportion) {
    const char* m = task->info.metric.c_str();
    std::snprintf(line, sizeof(line), "Epoch: %04d/%04d | Train %s: %s | Val %s: %s", epoch, epochs, m,
                  task->shown(train_acc).c_str(), m, task->shown(val_acc).c_str());
  } else {
    std::snprintf(line, sizeof(line), "Epoch: %04d/%04d | Train acc.: %s | Val acc.: %s", epoch,
                  epochs, percent_or_na(train_acc).c_str(), percent_or_na(val_acc).c_str());
  }
  *out_ << line << std::endl;
  std::snprintf(line, sizeof(line), "Time elapsed %.2f min", train_time_s / 60.0);
  *out_ << line << std::endl;
}

void Console::banner(const nlohmann::json& env, const nlohmann::json& resolved,
                     const Fabric& fabric) const {
  if (!out_) return;
  std::ostream& out = *out_;
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
      << str("attention_kernel") << " | adam " << str("adam_kernel")
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
  if (c.comm) out << "== rendezvous: " << c.comm->rendezvous() << "\n";
  out << "== resolved config:\n";
  for (const auto& [section, body] : resolved.items()) {
    out << "   " << section << ": " << body.dump() << "\n";
  }
  out.flush();
}

void Console::summary(const RunResult& r) const {
  if (!out_) return;
  std::ostream* out = out_;
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
  if (r.counters.is_object()) {
    const auto ratio = r.counters.value("flops_counted_over_analytic", nlohmann::json());
    std::snprintf(line, sizeof(line),
                  "Work of step %lld (counted, exact): %lld op calls | %.4g GFLOP in matmul-class ops "
                  "(%.3fx the analytic count)",
                  static_cast<long long>(r.counters.value("step", int64_t{0})),
                  static_cast<long long>(r.counters.value("op_calls", int64_t{0})),
                  r.counters.value("flops_counted", 0.0) / 1e9, ratio.is_number() ? ratio.get<double>() : 0.0);
    *out << line << "\n";
  }
  if (r.step_time_ms.count > 0 && r.samples_per_s) {
    // Images for the vision ladder (as before samples_per_s existed); text
    // runs add their tokens.
    const char* unit = r.tokens_per_s ? "samples" : "images";
    std::snprintf(line, sizeof(line),
                  "Step time: median %.2f ms (p10 %.2f, p90 %.2f) | %.1f %s/s (%.1f per device)",
                  r.step_time_ms.median, r.step_time_ms.p10, r.step_time_ms.p90, *r.samples_per_s,
                  unit, *r.samples_per_s_per_device);
    if (r.tokens_per_s) {
      char tok[64];
      std::snprintf(tok, sizeof tok, " | %.0f tokens/s", *r.tokens_per_s);
      std::strncat(line, tok, sizeof(line) - std::strlen(line) - 1);
    }
  } else {
    std::snprintf(line, sizeof(line), "Step time: n/a (no step after train.warmup_steps)");
  }
  *out << line << std::endl;
  if (const auto& s = r.step_split_ms; s.is_object()) {
    std::snprintf(line, sizeof(line),
                  "Step split (rank 0, mean): forward %.2f | backward %.2f | comm wait %.2f | "
                  "optimizer %.2f | other %.2f ms",
                  s.value("forward", 0.0), s.value("backward", 0.0), s.value("comm_wait", 0.0),
                  s.value("optimizer", 0.0), s.value("other", 0.0));
    *out << line;
    if (const auto& c = r.comm_per_step; c.is_object()) {
      double calls = 0;
      for (const auto& k : c["collectives"]) calls += k.value("per_step", 0.0);
      std::snprintf(line, sizeof(line), " | %.2f MB in %.1f collectives a step",
                    c.value("bytes", 0.0) / 1e6, calls);
      *out << line;
    }
    *out << std::endl;
  }
}

nlohmann::json run_environment(const Fabric& fabric, bool adamw) {
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
  // The attention a model without attention dropout runs on this device
  // (accel/models/attention.h), and the code path optim.implementation
  // "fused" takes for Adam's parameters there (train/optimizer.h).
  env["attention_kernel"] = models::attention_kernel_name(c.device.type());
  env["adam_kernel"] = fused_adam_kernel_name(c.device.type(), adamw);
  return env;
}

}  // namespace accel::train
