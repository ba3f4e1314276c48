#include "accel/train/task_row.h"

#include <algorithm>

#include "accel/util/errors.h"

namespace accel::train {

namespace {

// Classification: cross-entropy over the classes' logits, accuracy of the
// argmax (the articles' task, exactly as the loops computed it before rows).
TaskRow classification() {
  TaskRow r;
  r.info.name = "classification";
  r.info.summary = "one label of the data's classes per sample: cross-entropy, accuracy of the argmax";
  r.info.metric = "accuracy";
  r.info.higher_is_better = true;
  r.info.head = "classes";
  r.loss = [](const torch::Tensor& out, const torch::Tensor& y) { return torch::cross_entropy_loss(out, y); };
  r.loss_sum = [](const torch::Tensor& out, const torch::Tensor& y) {
    return torch::cross_entropy_loss(out, y, {}, at::Reduction::Sum, -100).to(torch::kDouble);
  };
  r.metric_sum = [](const torch::Tensor& out, const torch::Tensor& y) { return out.argmax(1).eq(y).sum(); };
  return r;
}

std::deque<TaskRow>& rows() {
  static std::deque<TaskRow> r = {classification()};
  return r;
}

}  // namespace

const std::deque<TaskRow>& task_rows() { return rows(); }

std::vector<TaskInfo> task_catalog() {
  std::vector<TaskInfo> out;
  for (const auto& r : rows()) out.push_back(r.info);
  return out;
}

std::vector<std::string> task_choices() {
  std::vector<std::string> out;
  for (const auto& r : rows()) out.push_back(r.info.name);
  return out;
}

std::string task_metric(const std::string& name) {
  for (const auto& r : rows()) {
    if (r.info.name == name) return r.info.metric;
  }
  return "accuracy";
}

void add_task(TaskRow row) {
  const auto& name = row.info.name;
  const bool taken = std::any_of(rows().begin(), rows().end(), [&](const TaskRow& r) { return r.info.name == name; });
  if (name.empty() || taken || !row.loss || !row.loss_sum || !row.metric_sum) {
    throw ConfigError("task registry: \"" + name + "\" is empty, taken or lacks a loss or metric");
  }
  rows().push_back(std::move(row));
}

void remove_task(const std::string& name) {
  auto& r = rows();
  const auto it = std::find_if(r.begin(), r.end(), [&](const TaskRow& row) { return row.info.name == name; });
  if (it == r.end() || it == r.begin()) return;  // classification stays
  r.erase(it);
}

const TaskRow& task_row(const std::string& name) {
  for (const auto& r : rows()) {
    if (r.info.name == name) return r;
  }
  std::string known;
  for (const auto& n : task_choices()) known += (known.empty() ? "\"" : ", \"") + n + "\"";
  throw ConfigError("train.task: unknown task \"" + name + "\" (one of " + known + ")");
}

}  // namespace accel::train
