// compare: like with like, and a regression beyond each bound is counted
// (the CLI turns a count above zero into exit 1; tests/integration checks that).
#include <doctest/doctest.h>

#include <string>

#include "accel/results/compare.h"
#include "accel/machine/peaks.h"
#include "accel/results/report.h"
#include "support/temp_dir.h"
#include "unit/test_report_fixtures.h"

using accel::Json;
using accel::OptNum;
using namespace accel::results;
using namespace accel::machine;
using report_test::FakeRun;
using report_test::SetBuilder;

namespace {

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Base and other sets with one rung each, other's figures from `o`.
CompareOutcome compare_one(const FakeRun& b, const FakeRun& o, const CompareBounds& bounds) {
  accel_test::TempDir tmp;
  SetBuilder(tmp / "base").rung("01-finetune", "01", {b}).write();
  SetBuilder(tmp / "other", "other-machine").rung("01-finetune", "01", {o}).write();
  return compare_sets(load_result_set(tmp / "base"), load_result_set(tmp / "other"), bounds);
}

CompareBounds all_bounds() {
  CompareBounds b;
  b.slower_pct = 10;
  b.acc_drop_points = 1;
  b.memory_growth_pct = 20;
  return b;
}

}  // namespace

TEST_CASE("compare: within every bound is ok, with the ratios and the delta shown") {
  FakeRun b, o;
  o.time_s = 630;  // 5% slower
  o.acc = 0.795;   // 0.5 points down
  o.mem = {1.1e9};
  const auto out = compare_one(b, o, all_bounds());
  INFO(out.markdown);
  CHECK(out.regressions == 0);
  CHECK(out.compared == 1);
  CHECK(has(out.markdown, "| 1.050x |"));
  CHECK(has(out.markdown, "| -0.50 |"));
  CHECK(has(out.markdown, "| 1.100x | ok |"));
  CHECK(has(out.markdown, "other-machine"));
}

TEST_CASE("compare: slower beyond --fail-slower is a regression") {
  FakeRun b, o;
  o.time_s = 700;
  const auto out = compare_one(b, o, all_bounds());
  CHECK(out.regressions == 1);
  CHECK(has(out.markdown, "REGRESSION: slower by 16.7% (> 10%)"));
  CHECK(compare_one(b, o, CompareBounds{}).regressions == 0);  // no bound, no failure
}

TEST_CASE("compare: a text set is gated as a vision set is and its report counts samples and tokens") {
  FakeRun b, o;
  b.text = o.text = true;
  b.config_patch = o.config_patch = {{"model", {{"arch", "bert"}, {"preset", "minilm_l6_h384"}}},
                                     {"data", {{"dataset", "rotten-tomatoes"}}}};
  o.time_s = 700;
  o.acc = 0.75;
  const auto out = compare_one(b, o, all_bounds());
  INFO(out.markdown);
  CHECK(out.compared == 1);
  CHECK(out.regressions == 1);
  CHECK(has(out.markdown, "REGRESSION: slower by 16.7% (> 10%)"));
  CHECK(has(out.markdown, "accuracy down 5.00 points"));
  accel_test::TempDir tmp;
  SetBuilder(tmp / "set").rung("t01-plain", "1", {b}).write();
  const auto md = report_markdown(build_report(load_result_set(tmp / "set"), PeakTable{}));
  CHECK(has(md, "| samples/s/device | samples/s total | tokens/s |"));
  CHECK(has(md, "| 100.0 | 100.0 | 2700 |"));
}

TEST_CASE("compare: an accuracy drop beyond --fail-accuracy-drop is a regression but a gain is not") {
  FakeRun b, worse, better;
  worse.acc = 0.78;
  better.acc = 0.90;
  const auto out = compare_one(b, worse, all_bounds());
  CHECK(out.regressions == 1);
  CHECK(has(out.markdown, "accuracy down 2.00 points (> 1)"));
  CHECK(compare_one(b, better, all_bounds()).regressions == 0);
}

TEST_CASE("compare: --accuracy-band fails either way beyond the band") {
  FakeRun b, better;
  better.acc = 0.90;
  CompareBounds band;
  band.acc_band_points = 5;
  CHECK(compare_one(b, better, band).regressions == 1);
  better.acc = 0.83;
  CHECK(compare_one(b, better, band).regressions == 0);
}

TEST_CASE("compare: memory growth beyond --fail-memory-growth is a regression (largest rank)") {
  FakeRun b, o;
  o.mem = {0.5e9, 1.3e9};
  const auto out = compare_one(b, o, all_bounds());
  CHECK(out.regressions == 1);
  CHECK(has(out.markdown, "memory up 30.0% (> 20%)"));
}

TEST_CASE("compare: configs that differ are not comparable, not compared") {
  FakeRun b, o;
  o.time_s = 10000;  // would be a regression if compared
  o.config_patch = {{"train", {{"epochs", 10}}}};
  auto out = compare_one(b, o, CompareBounds{});  // no gate: a side by side table
  CHECK(out.regressions == 0);
  CHECK(out.not_comparable == 1);
  CHECK(out.uncompared == 1);
  CHECK(has(out.markdown, "| not comparable (config differs: train.epochs: 3 vs 10) |"));
  auto strict = all_bounds();
  strict.require_same_config = true;
  CHECK(compare_one(b, o, strict).regressions == 1);
}

TEST_CASE("compare: a gate that compared nothing fails and says so first") {
  // --fail-slower and friends over two sets none of whose rungs compare:
  // always green before; now each rung of base not judged is a failure.
  FakeRun b, o;
  o.config_patch = {{"train", {{"epochs", 10}}}};
  auto out = compare_one(b, o, all_bounds());
  INFO(out.markdown);
  CHECK(out.compared == 0);
  CHECK(out.regressions == 1);
  CHECK(has(out.markdown, "FAIL: not comparable (config differs: train.epochs: 3 vs 10)"));
  CHECK(out.markdown.rfind("FAIL: 1 rungs of base were not compared", 0) == 0);  // first line
  CHECK(has(out.summary, "0 rungs compared, 1 not comparable, 1 regressions."));
  // The user may let them through; the summary still says it.
  auto lenient = all_bounds();
  lenient.allow_uncompared = true;
  out = compare_one(b, o, lenient);
  CHECK(out.regressions == 0);
  CHECK(out.markdown.rfind("WARNING: 1 rungs of base were not compared", 0) == 0);
}

TEST_CASE("compare: a bound whose measure a side lacks is a failure, not a pass") {
  FakeRun b, o;
  o.drop_figures = true;  // no time, accuracy or memory
  const auto out = compare_one(b, o, all_bounds());
  INFO(out.markdown);
  CHECK(out.compared == 0);
  CHECK(out.regressions == 1);
  CHECK(has(out.markdown, "FAIL: not compared: no training time (--fail-slower)"));
  CHECK(has(out.markdown, "test accuracy"));
  CHECK(has(out.markdown, "peak memory (--fail-memory-growth)"));
  CompareBounds time_only;
  time_only.slower_pct = 10;
  FakeRun no_mem = b;
  no_mem.mem = {};
  CHECK(compare_one(b, no_mem, time_only).regressions == 0);  // only the bounds given count
}

TEST_CASE("compare: a failed base rung is not compared and fails a gate, a rung left out by design does not") {
  accel_test::TempDir tmp;
  FakeRun failed;
  failed.status = "failed";
  SetBuilder(tmp / "base")
      .rung("a", "00", {failed})
      .rung("b", "01", {FakeRun{}})
      .needs("c", "02", "CUDA")
      .write();
  SetBuilder(tmp / "other")
      .rung("a", "00", {FakeRun{}})
      .rung("b", "01", {FakeRun{}})
      .needs("c", "02", "CUDA")
      .write();
  const auto base = load_result_set(tmp / "base"), other = load_result_set(tmp / "other");
  auto out = compare_sets(base, other, all_bounds());
  INFO(out.markdown);
  CHECK(out.compared == 1);
  CHECK(out.regressions == 1);  // the failed base rung; the CUDA rung ran on neither machine
  CHECK(has(out.markdown, "FAIL: base has no ok run (failed)"));
  CHECK(has(out.markdown, "| run on neither machine |"));
  CHECK(compare_sets(base, other, CompareBounds{}).regressions == 0);
}

TEST_CASE("compare: threads, accelerator, paths and names are machine facts, not the experiment") {
  FakeRun b, o;
  o.config_patch = {{"name", "other"},
                    {"runtime", {{"threads", 16}, {"accelerator", "cuda"}}},
                    {"model", {{"init_path", "/elsewhere/pretrain/checkpoint.ckpt"}}},
                    {"data", {{"root", "/data"}}}};
  const auto out = compare_one(b, o, all_bounds());
  CHECK(out.not_comparable == 0);
  CHECK(out.compared == 1);
  FakeRun ddp = o;
  ddp.config_patch["runtime"]["devices"] = 4;  // devices change the experiment
  CHECK(compare_one(b, ddp, all_bounds()).not_comparable == 1);
}

TEST_CASE("compare: a field the schema gained since a set was made compares as its default") {
  // The base set predates model.arch and runtime.comm_wait; the other spells
  // out their defaults, as today's resolved configs do.
  FakeRun b, o;
  o.config_patch = {{"model", {{"arch", "vit"}}}, {"runtime", {{"comm_wait", "auto"}}}};
  auto out = compare_one(b, o, all_bounds());
  CHECK(out.not_comparable == 0);
  CHECK(out.compared == 1);
  // A value other than the default is a real difference, named.
  o.config_patch["runtime"]["comm_wait"] = "spin";
  out = compare_one(b, o, all_bounds());
  CHECK(out.not_comparable == 1);
  CHECK(has(out.markdown, "runtime.comm_wait"));
}

TEST_CASE("compare: a rung ok in base that failed or is missing in other is a regression") {
  accel_test::TempDir tmp;
  FakeRun failed;
  failed.status = "failed";
  SetBuilder(tmp / "base").rung("a", "00", {FakeRun{}}).rung("b", "01", {FakeRun{}}).write();
  SetBuilder(tmp / "other").rung("a", "00", {failed}).write();
  const auto out =
      compare_sets(load_result_set(tmp / "base"), load_result_set(tmp / "other"), CompareBounds{});
  INFO(out.markdown);
  CHECK(out.regressions == 2);
  CHECK(has(out.markdown, "REGRESSION: failed (ok in base)"));
  CHECK(has(out.markdown, "REGRESSION: missing (ok in base)"));
}

TEST_CASE("compare: medians of repeats are compared") {
  accel_test::TempDir tmp;
  FakeRun f1, f2, f3;
  f1.time_s = 100, f2.time_s = 200, f3.time_s = 900;  // median 200
  FakeRun o;
  o.time_s = 210;
  SetBuilder(tmp / "base").rung("a", "00", {f1, f2, f3}).write();
  SetBuilder(tmp / "other").rung("a", "00", {o}).write();
  CompareBounds b;
  b.slower_pct = 10;
  const auto out = compare_sets(load_result_set(tmp / "base"), load_result_set(tmp / "other"), b);
  CHECK(out.regressions == 0);
  CHECK(has(out.markdown, "| 1.050x |"));
}

TEST_CASE("compare: config_difference names the differing paths") {
  const Json a = {{"train", {{"epochs", 3}, {"seed", 1}}}};
  const Json b = {{"train", {{"epochs", 3}, {"seed", 2}}}, {"extra", true}};
  const auto d = config_difference(a, b);
  CHECK(has(d, "train.seed: 1 vs 2"));
  CHECK(has(d, "extra: (none) vs true"));
}
