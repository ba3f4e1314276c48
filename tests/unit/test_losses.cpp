// compare-losses input: metrics.csv rows are read whole or not at all, and
// identical runs are said to be identical.
#include <doctest/doctest.h>

#include "support/config_error.h"
#include "support/temp_dir.h"

#include <cmath>
#include <string>

#include "accel/results/losses.h"

namespace {

using namespace accel::results;
using accel_test::config_error;
using accel_test::has;
using accel_test::TempDir;

const std::string kHeader = "kind,step,epoch,loss,train_acc,val_acc,step_time_ms\n";
const std::string kRows =
    "step,1,0,2.5,,,12.5\n"
    "step,2,0,2.25,,,11\n"
    "epoch,2,0,,0.5,0.25,\n"
    "step,3,1,2.125,,,10\n";

std::string read_error(const TempDir& dir, const std::string& body) {
  const auto file = dir.write("metrics.csv", body);
  return config_error([&] { read_loss_trace(file); });
}

}  // namespace

TEST_CASE("losses: step rows are read and other rows skipped") {
  TempDir dir;
  const auto t = read_loss_trace(dir.write("run/metrics.csv", kHeader + kRows).parent_path());
  CHECK(t.steps == std::vector<int64_t>{1, 2, 3});
  CHECK(t.losses == std::vector<double>{2.5, 2.25, 2.125});
  // A non-finite loss is logged as an empty cell: it reads as NaN.
  const auto nan = read_loss_trace(dir.write("nan.csv", kHeader + "step,1,0,,,,12\n"));
  CHECK(std::isnan(nan.losses.at(0)));
}

TEST_CASE("losses: a truncated row is an error naming the file and line, not a step") {
  TempDir dir;
  const std::string file = (dir / "metrics.csv").string();
  // A row with fewer cells than the header.
  std::string msg = read_error(dir, kHeader + kRows + "step,4,1\n");
  CHECK_MESSAGE(has(msg, file + ": line 6: step row has 3 cells, the header 7"), msg);
  // A partial last line: the write stopped inside a number.
  msg = read_error(dir, kHeader + kRows + "step,4,1,2.0");
  CHECK_MESSAGE(has(msg, file + ": line 6: incomplete row (no newline at the end of the file)"), msg);
  msg = read_error(dir, kHeader + "step,1,0,2.5,,,12");
  CHECK_MESSAGE(has(msg, file + ": line 2: incomplete row"), msg);
  // Cells that are only partly numbers.
  msg = read_error(dir, kHeader + "step,1x,0,2.5,,,12\n");
  CHECK_MESSAGE(has(msg, file + ": line 2: bad step number \"1x\""), msg);
  msg = read_error(dir, kHeader + "step,1,0,2.5e,,,12\n");
  CHECK_MESSAGE(has(msg, file + ": line 2: bad loss \"2.5e\""), msg);
  // Not a metrics.csv at all, and a missing file.
  CHECK(has(read_error(dir, "a,b\n1,2\n"), "not an accel-bench metrics.csv"));
  CHECK(has(config_error([&] { read_loss_trace(dir / "none.csv"); }), "none.csv: no such file"));
}

TEST_CASE("losses: identical runs are reported identical, not at step -1") {
  LossTrace a{{10, 20, 30}, {1.0, 0.5, 0.25}};
  const auto same = compare_losses(a, a);
  CHECK(same.max_abs == 0);
  CHECK(same.summary() == "3 steps compared; identical losses");
  LossTrace b = a;
  b.losses[1] = 0.75;
  const auto diff = compare_losses(a, b);
  CHECK(diff.worst_step == 20);
  CHECK(has(diff.summary(), "max |loss difference| 0.25 at step 20"));
  CHECK(compare_losses({}, {}).summary() == "no steps compared");
}
