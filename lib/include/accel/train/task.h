// What a run learns, as plain facts (no LibTorch): a task's name
// (train.task), the metric the loop logs, validates, targets and selects the
// best weights by, which way that metric improves, and the head it asks of
// the model. The schema reads train.task's choices from here; the loss and
// the metric themselves are the row's functions (accel/train/task_row.h,
// lib/train/task.cpp). A task is one row, never a name compared elsewhere.
#pragma once

#include <string>
#include <vector>

namespace accel::train {

// How a task's metric reads wherever a record carries it (result.json's
// plan, the report, compare, the sweep's lines): its name, which way is
// better, and whether it is a share of the split (a percent, read with a
// binomial interval) or a quantity of its own (a loss, read as itself with a
// t interval over seeds).
struct MetricFacts {
  std::string name = "accuracy";
  bool higher_is_better = true;
  bool proportion = true;
  // VALUE is TARGET or beyond it in the better direction.
  bool reaches(double value, double target) const { return higher_is_better ? value >= target : value <= target; }
  // The scale a table shows it at (a share as percentage points) and its unit there.
  double scale() const { return proportion ? 100.0 : 1.0; }
  std::string unit() const { return proportion ? "%" : ""; }
  // "85.20%" or "7.0512".
  std::string shown(double value) const;
  // A column heading's word: "acc" for a share (as the articles' tables),
  // else its name ("loss").
  std::string short_name() const { return proportion ? std::string("acc") : name; }
  // A loss: not a share, lower better (a language model's cross-entropy).
  bool is_loss() const { return !proportion && !higher_is_better; }
  bool operator==(const MetricFacts& o) const {
    return name == o.name && higher_is_better == o.higher_is_better && proportion == o.proportion;
  }
  bool operator!=(const MetricFacts& o) const { return !(*this == o); }
};

struct TaskInfo {
  std::string name;     // train.task
  std::string summary;  // one line for --explain
  // The metric of a split (its mean over the split's real samples): its
  // name in the console and result.json's "task", and whether a higher
  // value is better (the best validation weights, the target).
  std::string metric = "accuracy";
  bool higher_is_better = true;
  // Whether the metric is a share of the split (printed as a percent, read
  // with a binomial interval); causal_lm's loss is not.
  bool proportion = true;
  // The head's width: the data's label count ("classes"), one output
  // ("one"), or the vocabulary ("vocab": a language model's data gives its
  // vocabulary size as its class count).
  std::string head = "classes";
  MetricFacts metric_facts() const { return {metric, higher_is_better, proportion}; }
};

// Every task's facts, in registry order (the first is the default).
std::vector<TaskInfo> task_catalog();
// train.task's choices.
std::vector<std::string> task_choices();
// The metric of the task row NAME; classification's (accuracy, a share,
// higher better) for a name no row has (a record older than the rows, or one
// a test added).
MetricFacts task_metric(const std::string& name);

}  // namespace accel::train
