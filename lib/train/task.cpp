#include "accel/train/task_row.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "accel/data/batch.h"
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
    return torch::cross_entropy_loss(out, y, {}, at::Reduction::Sum, data::kNoTarget).to(torch::kDouble);
  };
  r.metric_sum = [](const torch::Tensor& out, const torch::Tensor& y) { return out.argmax(1).eq(y).sum(); };
  return r;
}

// Causal language modelling: the model's next-token logits [B, S, vocab]
// against the next tokens [B, S] (data::kNoTarget where there is none: padding, a
// document's end), cross-entropy as a mean over the real next tokens. The
// metric is that loss itself (its exponential is the perplexity), lower
// better: the best weights and a target are a validation loss, as language
// model training reports them.

torch::Tensor token_loss(const torch::Tensor& out, const torch::Tensor& y, at::Reduction::Reduction r) {
  if (out.dim() != 3 || y.dim() != 2 || out.size(0) != y.size(0) || out.size(1) != y.size(1)) {
    throw std::invalid_argument("causal_lm: expected logits [batch, seq, vocab] and next tokens [batch, seq]");
  }
  return torch::cross_entropy_loss(out.flatten(0, 1), y.flatten(), {}, r, data::kNoTarget);
}

TaskRow causal_lm() {
  TaskRow r;
  r.info.name = "causal_lm";
  r.info.summary = "the next token at every position: cross-entropy over the real next tokens (a mean over "
                   "tokens), the validation loss the metric (perplexity its exponential)";
  r.info.metric = "loss";
  r.info.higher_is_better = false;
  r.info.proportion = false;
  r.info.head = "vocab";
  r.format = [](double loss) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.4f (perplexity %.4g)", loss, std::exp(loss));
    return std::string(buf);
  };
  r.loss = [](const torch::Tensor& out, const torch::Tensor& y) { return token_loss(out, y, at::Reduction::Mean); };
  r.loss_sum = [](const torch::Tensor& out, const torch::Tensor& y) {
    return token_loss(out, y, at::Reduction::Sum).to(torch::kDouble);
  };
  r.metric_sum = r.loss_sum;
  r.metric_is_loss = true;
  r.count_sum = [](const torch::Tensor& y) { return y.ne(data::kNoTarget).sum(); };
  return r;
}

std::deque<TaskRow>& rows() {
  static std::deque<TaskRow> r = {classification(), causal_lm()};
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

MetricFacts task_metric(const std::string& name) {
  for (const auto& r : rows()) {
    if (r.info.name == name) return r.info.metric_facts();
  }
  return classification().info.metric_facts();
}

std::string MetricFacts::shown(double value) const {
  char buf[64];
  if (proportion) {
    std::snprintf(buf, sizeof buf, "%.2f%%", value * 100);
  } else {
    std::snprintf(buf, sizeof buf, "%.4f", value);
  }
  return buf;
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
