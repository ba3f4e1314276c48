// Private to lib/train: the console reporter, beside the result reporters of
// accel/train/result.h. Rank 0 prints; the other ranks (and --quiet) get a
// reporter without a stream, which prints nothing.
#pragma once

#include <ostream>
#include <string>

#include "accel/util/json.h"

#include "accel/train/fabric.h"
#include "accel/train/result.h"
#include "accel/train/task_row.h"

namespace accel::train {

class Console {
 public:
  // `progress_fd`: the sweep's progress channel (util/child_process.h), -1 for none;
  // step and epoch lines go there as JSON events too, even with no stream.
  explicit Console(std::ostream* out, int progress_fd = -1) : out_(out), progress_fd_(progress_fd) {}
  bool on() const { return out_ != nullptr; }
  void line(const std::string& text) const;
  // The resolved-config banner before a run: versions, hardware, ranks, config.
  void banner(const nlohmann::json& env, const nlohmann::json& resolved, const Fabric& fabric) const;
  // "Epoch: 0001/0003 | Batch 0000/0125 | Loss: 2.3026", as the article's scripts log;
  // on the channel {"event":"step","epoch","epochs","batch","batches","loss"}.
  void step(int epoch, int epochs, int64_t batch, int64_t batches, double loss) const;
  // "Epoch: 0001/0003 | Train acc.: 51.23% | Val acc.: 60.00%" and the time so far;
  // on the channel {"event":"epoch","epoch","epochs","train_acc","val_acc","train_time_s"}
  // (accuracies as fractions, null when not measured). A task whose metric is
  // not a share (`task`: causal_lm's loss) names it and writes it its way:
  // "Train loss: 8.4346 (perplexity 4601) | Val loss: ...".
  void epoch(int epoch, int epochs, const Opt& train_acc, const Opt& val_acc,
             double train_time_s, const TaskRow* task = nullptr) const;
  // Memory, step time and throughput lines.
  void summary(const RunResult& r) const;

 private:
  std::ostream* out_;
  int progress_fd_ = -1;
};

// metrics::environment plus the distributed layout, the device and the
// kernels this process runs (result.json's "env").
nlohmann::json run_environment(const Fabric& fabric, bool adamw = false);

}  // namespace accel::train
