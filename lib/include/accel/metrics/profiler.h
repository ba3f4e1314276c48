// Where a step's time goes, from inside the process: every ATen operator,
// autograd backward function and user scope (ATen's RecordFunction callbacks,
// which LibTorch's own profiler is built on) timed on the host, as a per-op
// table of calls and self time and a Chrome trace (chrome://tracing,
// ui.perfetto.dev). Used by `accel-bench run --profile DIR`.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
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
