// The task seam from outside the library: a task row added in this file
// alone (a toy regression of the Fashion-MNIST label's number, with MSE)
// trains through the real run and loop, in this process.
#include <torch/torch.h>

#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "accel/config/run_config.h"
#include "accel/train/checks.h"
#include "accel/train/run.h"
#include "accel/train/task_row.h"
#include "accel/util/errors.h"
#include "integration/cli_helpers.h"
#include "support/temp_dir.h"

namespace {

// Regression of the label's number (0..9) from one output: mean squared
// error, and the share of samples predicted within half a unit.
accel::train::TaskRow toy_regression() {
  accel::train::TaskRow r;
  r.info.name = "toy-regression";
  r.info.summary = "the label's number from one output: MSE; within half a unit";
  r.info.metric = "within half a unit";
  r.info.higher_is_better = true;
  r.info.head = "one";
  r.loss = [](const torch::Tensor& out, const torch::Tensor& y) {
    return torch::mse_loss(out.squeeze(1), y.to(out.scalar_type()));
  };
  r.loss_sum = [](const torch::Tensor& out, const torch::Tensor& y) {
    return torch::mse_loss(out.squeeze(1), y.to(out.scalar_type()), at::Reduction::Sum).to(torch::kDouble);
  };
  r.metric_sum = [](const torch::Tensor& out, const torch::Tensor& y) {
    return (out.squeeze(1) - y.to(out.scalar_type())).abs().lt(0.5).sum();
  };
  return r;
}

}  // namespace

TEST_CASE("task: a toy regression row added in a test file trains through the real loop with its own loss, head and metric") {
  REQUIRE_MESSAGE(cli_test::have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  accel::train::add_task(toy_regression());
  struct Remove {
    ~Remove() { accel::train::remove_task("toy-regression"); }
  } remove;
  accel_test::TempDir tmp;
  auto resolved = accel::config::load_config(std::string(ACCEL_SOURCE_DIR) + "/configs/smoke/scratch-smoke.json");
  // The schema took its choices before this row was added: the row is named in code.
  resolved["train"]["task"] = "toy-regression";
  resolved["train"]["test_weights"] = "best_val";
  resolved["train"]["val_every_steps"] = 10;
  const auto cfg = accel::config::to_run_config(resolved);
  accel::train::RunOptions opts;
  opts.out_dir = tmp.path / "toy";
  const auto result = accel::train::run(cfg, resolved, opts);
  CHECK(result.status == "ok");
  // The plan names the task and its metric; the head has the task's one output.
  CHECK(result.plan["task"]["name"] == "toy-regression");
  CHECK(result.plan["task"]["metric"] == "within half a unit");
  const auto& numels = result.model_layout["param_numels"];
  REQUIRE(numels.is_array());
  CHECK(numels.back() == 1);  // the head's bias: one output
  // Trained on the task's loss: MSE from the scratch weights' first steps
  // falls (cross-entropy over one output would be 0 from the first step).
  const auto losses = cli_test::step_losses(opts.out_dir / "metrics.csv");
  REQUIRE(losses.size() >= 10);
  CHECK(losses.front() > 1.0);
  CHECK(losses.back() < losses.front());
  // The metric is the task's, a share of the split, and best_val picked by it.
  REQUIRE(result.test_acc.has_value());
  CHECK(*result.test_acc >= 0.0);
  CHECK(*result.test_acc <= 1.0);
  CHECK(result.best_val.is_object());
}

TEST_CASE("task: the classification row is the default and an unknown task is refused naming train.task") {
  const auto& rows = accel::train::task_rows();
  REQUIRE_FALSE(rows.empty());
  CHECK(rows.front().info.name == "classification");
  CHECK(accel::config::to_run_config(nlohmann::json::object()).train.task == "classification");
  CHECK_THROWS_WITH_AS(accel::train::task_row("toy-missing"), doctest::Contains("train.task: unknown task \"toy-missing\""),
                       accel::ConfigError);
  // A metric that improves downwards picks and targets the lower value.
  accel::train::TaskRow lower = toy_regression();
  lower.info.higher_is_better = false;
  CHECK(lower.better(0.1, 0.2));
  CHECK_FALSE(lower.better(0.2, 0.1));
  CHECK(lower.reaches(0.1, 0.1));
  CHECK_FALSE(lower.reaches(0.3, 0.1));
  CHECK(rows.front().better(0.9, 0.8));
  // A row without its functions, or under a taken name, is refused.
  accel::train::TaskRow empty;
  empty.info.name = "toy-empty";
  CHECK_THROWS_AS(accel::train::add_task(empty), accel::ConfigError);
  CHECK_THROWS_AS(accel::train::add_task(rows.front()), accel::ConfigError);
}

TEST_CASE("task: causal_lm's loss is a mean over the real next tokens and a classification family with it is refused naming train.task") {
  const auto& lm = accel::train::task_row("causal_lm");
  CHECK(lm.info.metric == "loss");
  CHECK_FALSE(lm.info.higher_is_better);
  CHECK(lm.info.head == "vocab");
  // Two rows of three positions over a vocabulary of 4; the last position of
  // row 1 has no next token (-100). Uniform logits: ln 4 a token.
  auto logits = torch::zeros({2, 3, 4});
  auto y = torch::tensor({{1L, 2L, 3L}, {0L, 1L, -100L}});
  CHECK(lm.units(y).item<double>() == 5.0);
  CHECK(lm.loss(logits, y).item<double>() == doctest::Approx(std::log(4.0)));
  CHECK(lm.loss_sum(logits, y).item<double>() == doctest::Approx(5.0 * std::log(4.0)));
  CHECK(std::exp(lm.metric_sum(logits, y).item<double>() / lm.units(y).item<double>()) == doctest::Approx(4.0));
  // One token predicted with probability 1/2 (logit ln 3 against three 0s:
  // 3 / (3 + 3)): its loss ln 2, the other four ln 4; the ignored
  // position's logits count for nothing.
  logits[0][0][1] = std::log(3.0);
  logits[1][2][0] = 50.0;
  const double expected = (std::log(2.0) + 4.0 * std::log(4.0)) / 5.0;
  CHECK(lm.loss(logits, y).item<double>() == doctest::Approx(expected));
  CHECK(lm.loss_sum(logits, y).item<double>() == doctest::Approx(5.0 * expected));
  CHECK_THROWS_WITH_AS(lm.loss(torch::zeros({2, 4}), torch::zeros({2}, torch::kLong)),
                       doctest::Contains("logits [batch, seq, vocab]"), std::invalid_argument);
  // Classification's units are the rows.
  CHECK(accel::train::task_row("classification").units(torch::zeros({7}, torch::kLong)).item<double>() == 7.0);
  // A family with a classification head cannot train a language model.
  auto resolved = accel::config::load_config(std::string(ACCEL_SOURCE_DIR) + "/configs/smoke/scratch-smoke.json");
  resolved["train"]["task"] = "causal_lm";
  CHECK_THROWS_WITH_AS(accel::train::check_runnable(accel::config::to_run_config(resolved), false),
                       doctest::Contains("train.task: \"causal_lm\" predicts tokens, but model.arch \"vit\" has a classes head"),
                       accel::ConfigError);
}
