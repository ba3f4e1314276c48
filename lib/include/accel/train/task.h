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
};

// Every task's facts, in registry order (the first is the default).
std::vector<TaskInfo> task_catalog();
// train.task's choices.
std::vector<std::string> task_choices();
// The metric of the task row NAME; "accuracy" (classification's) for a name
// no row has (a record older than the rows, or one a test added).
std::string task_metric(const std::string& name);

}  // namespace accel::train
