// Where a step's time goes, from inside the process: every ATen operator,
// autograd backward function and user scope (ATen's RecordFunction callbacks,
// which LibTorch's own profiler is built on) timed on the host, as a per-op
// table of calls and self time and a Chrome trace (chrome://tracing,
// ui.perfetto.dev). Used by `accel-bench run --profile DIR`.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace accel::metrics {

struct OpStat {
  std::string name;
  int64_t calls = 0;
  double self_us = 0;   // time in the op itself, children excluded
  double total_us = 0;  // with children
};

class OpProfiler {
 public:
  OpProfiler();
  ~OpProfiler();  // stops if running
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;

  // One profiler records at a time (RunError otherwise). Callbacks are
  // global: ops on every thread (autograd's device threads, the loader's
  // prefetch thread) are recorded, each on its own trace row.
  void start();
  void stop();
  bool running() const;

  // Ops by self time, largest first (user scopes included, marked by their
  // names, e.g. "accel::forward").
  std::vector<OpStat> table() const;
  // Total time of the outermost calls of `name` (a user scope), in us.
  double total_us(const std::string& name) const;
  // {"traceEvents": [...]} with one complete ("X") event per call.
  std::string chrome_trace() const;
  int64_t events() const;
  int64_t dropped_events() const;  // beyond the trace's cap (the table keeps counting)

  struct State;  // opaque; shared with the RecordFunction callbacks

 private:
  std::shared_ptr<State> state_;
};

// The exact work of one training step, counted from the same callbacks: no
// clock, so two runs of one config on one LibTorch count the same, and a
// change in what a step computes shows as a changed count, no statistics
// needed. Counts every ATen operator call and accel's own recorded functions
// (RecordScope::FUNCTION; user scopes and autograd nodes are not ops), and
// the FLOPs of the matmul-class ones from their shapes: aten::mm, addmm, bmm,
// baddbmm (2 M N K per product), aten::convolution (2 x output elements x
// input channels per group x kernel area) and convolution_backward (that, for
// each of the input and weight gradients it computes), accel's fused
// attention and LibTorch 2.x's fused scaled-dot-product kernels (4 B S^2 D
// forward: Q K^T and P V; 8 B S^2 D backward). Composite ops that reach these
// (aten::linear, aten::matmul, scaled_dot_product_attention) are not counted
// again, nor is an op called from inside an op of its own name (autocast's
// kernel casts the inputs and dispatches the same op again: one call).
struct StepCounts {
  std::map<std::string, int64_t> calls;   // by op name
  std::map<std::string, double> flops;    // by matmul-class op name
  double matmul_flops() const;            // their sum
};

class StepCounter {
 public:
  StepCounter();
  ~StepCounter();  // stops if counting
  StepCounter(const StepCounter&) = delete;
  StepCounter& operator=(const StepCounter&) = delete;
  // One counter counts at a time (RunError otherwise): the ops of the
  // calling thread and of the autograd threads its backward runs on.
  void start();
  StepCounts stop();
  bool running() const;

  struct State;  // opaque; shared with the RecordFunction callbacks

 private:
  std::shared_ptr<State> state_;
};

// The tensor allocations of one step: how many, their bytes, and the most of
// those bytes live at once (above what was live when the step began). On a
// CPU, counted by wrapping c10's CPU allocator for the step
// (CpuAllocationCounter); on CUDA, read from the caching allocator's
// statistics (train/device.h).
struct AllocationCounts {
  int64_t allocations = 0;
  int64_t bytes = 0;
  int64_t peak_bytes = 0;
  std::string source;  // what counted them
};

// Counts the CPU tensor allocations the calling thread makes between start()
// and stop() (on a CPU, the whole forward, backward and optimizer step:
// autograd runs CPU backward on the calling thread). c10's CPU allocator is
// wrapped for that time (c10::SetCPUAllocator, its public hook) and every
// allocation still passes to it; other threads' (a loader's prefetch,
// gloo's workers) are not counted. One counter counts at a time (RunError
// otherwise). stop() returns nullopt where the wrapper could not be
// installed (another allocator of higher priority is set).
class CpuAllocationCounter {
 public:
  CpuAllocationCounter() = default;
  ~CpuAllocationCounter();  // stops if counting
  CpuAllocationCounter(const CpuAllocationCounter&) = delete;
  CpuAllocationCounter& operator=(const CpuAllocationCounter&) = delete;
  void start();
  std::optional<AllocationCounts> stop();

 private:
  bool running_ = false;
  bool installed_ = false;
};

// "name,calls,self_us,total_us,self_share" rows; and a fixed-width text table
// of the top `rows` ops with their share of all self time.
std::string op_table_csv(const std::vector<OpStat>& ops);
std::string op_table_text(const std::vector<OpStat>& ops, size_t rows);

// A stopped profiler's record of `steps` training steps from `first_step`,
// split by the loop's scopes (accel::step, accel::forward, accel::backward,
// accel::optimizer, accel::graph_replay, accel::data), written to DIR as
// ops.txt, ops.csv, trace.json and summary.txt. Returns what the console
// shows: the split and the top ops.
std::string write_step_profile(const OpProfiler& profiler, int64_t steps, int64_t first_step,
                               const std::filesystem::path& dir);

}  // namespace accel::metrics
