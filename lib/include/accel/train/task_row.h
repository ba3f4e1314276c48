// A task's row (accel/train/task.h has its facts): the loss a step trains
// on, the loss and the metric an evaluation sums, and the head width the
// model is built with. The steps, the loop's evaluation and its running
// metric, the best-weights rule and the target read the run's row; a second
// task is a second row (lib/train/task.cpp, or add_task from a test).
#pragma once

#include <cstdio>
#include <deque>
#include <functional>
#include <optional>
#include <string>

#include <torch/torch.h>

#include "accel/train/task.h"

namespace accel::train {

struct TaskRow {
  TaskInfo info;
  // The batch's mean loss: the head's outputs [B, head] against the labels [B].
  std::function<torch::Tensor(const torch::Tensor& out, const torch::Tensor& y)> loss;
  // The loss summed over the rows (evaluation), a float64 scalar.
  std::function<torch::Tensor(const torch::Tensor& out, const torch::Tensor& y)> loss_sum;
  // The metric summed over the rows (its mean is the split's metric): a
  // scalar tensor on the outputs' device, read back as float64.
  std::function<torch::Tensor(const torch::Tensor& out, const torch::Tensor& y)> metric_sum;
  // Optional: the units the sums above are over in these labels, a scalar
  // tensor (a language model's real next tokens: its loss and metric are
  // means over tokens, not rows). Unset: the rows.
  std::function<torch::Tensor(const torch::Tensor& y)> count_sum;
  // The units of labels `y`, as a float64 scalar tensor on y's device.
  torch::Tensor units(const torch::Tensor& y) const {
    if (count_sum) return count_sum(y).to(torch::kDouble);
    return torch::full({}, double(y.size(0)), y.options().dtype(torch::kDouble));
  }
  // The metric is the loss itself (metric_sum == loss_sum): a training
  // step's running metric is then its mean loss times its units, without a
  // second pass over the outputs (a language model's [tokens, vocab] logits).
  bool metric_is_loss = false;
  // How the console writes a value of the metric (unset: a percent).
  std::function<std::string(double value)> format;
  std::string shown(const std::optional<double>& v) const {
    if (!v) return "n/a";
    if (format) return format(*v);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f%%", *v * 100.0);
    return buf;
  }
  // The head's width for data of `classes` labels.
  int64_t head_outputs(int64_t classes) const { return info.head == "one" ? 1 : classes; }
  // Whether metric value `a` is better than `b` (strictly).
  bool better(double a, double b) const { return info.higher_is_better ? a > b : a < b; }
  // Whether `value` reaches `target` (at or beyond it, in the better direction).
  bool reaches(double value, double target) const {
    return info.higher_is_better ? value >= target : value <= target;
  }
};

// Every row, in registry order: classification first. A row's address holds
// while rows are added.
const std::deque<TaskRow>& task_rows();
// Adds a row; ConfigError when its name is taken or empty, or a function is
// missing. The schema takes its choices once: add rows before configs are read.
void add_task(TaskRow row);
// Takes a row added back (a test's); classification stays.
void remove_task(const std::string& name);
// The row of train.task; ConfigError "train.task: ..." naming the choices.
const TaskRow& task_row(const std::string& name);

}  // namespace accel::train
