// The ladder report on result sets the tests write: repeats (median, min-max),
// failed / missing / needs-CUDA rungs, figures that are absent, speedups,
// time to target, MFU and its peak, the article's figures beside ours.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <limits>
#include <string>

#include "accel/metrics/hardware.h"
#include "accel/config/run_config.h"
#include "accel/results/charts.h"
#include "accel/ladder/estimate.h"
#include "accel/machine/machine.h"
#include "accel/machine/peaks.h"
#include "accel/ladder/progress.h"
#include "accel/ladder/suite.h"
#include "accel/util/child_process.h"
#include "accel/util/errors.h"
#include "accel/results/report.h"
#include "accel/train/work.h"
#include "support/temp_dir.h"
#include "unit/test_report_fixtures.h"

using accel::Json;
using accel::OptNum;
using namespace accel::results;
using namespace accel::machine;
using namespace accel::ladder;
using report_test::FakeRun;
using report_test::SetBuilder;

namespace {

std::string report_test_num(double v) { return csv_num(v); }

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

const RungRow& row(const Report& r, const std::string& id) {
  for (const auto& x : r.rungs) {
    if (x.id == id) return x;
  }
  for (const auto& x : r.upstream) {
    if (x.id == id) return x;
  }
  FAIL("no row " << id);
  throw;
}

Json reference() {
  return {{"source", "test source"},
          {"hardware", "A100"},
          {"rungs",
           {{"00", {{"time_min", 60.0}, {"test_acc_pct", 62.5}, {"memory_gb", 3.7}}},
            {"01", {{"time_min", 20.0}, {"test_acc_pct", 95.0}, {"memory_gb", 3.7}}}}}};
}

}  // namespace

TEST_CASE("report: stat_of gives the median and the min-max of repeats") {
  const auto odd = stat_of({3, 1, 2});
  CHECK(*odd.median == 2);
  CHECK(*odd.min == 1);
  CHECK(*odd.max == 3);
  CHECK(odd.n == 3);
  CHECK(*stat_of({4, 1, 2, 3}).median == doctest::Approx(2.5));
  CHECK_FALSE(stat_of({}).median.has_value());
}

TEST_CASE("report: repeats show the median train time and accuracy with their min-max") {
  accel_test::TempDir tmp;
  FakeRun a, b, c;
  a.time_s = 100, b.time_s = 300, c.time_s = 200;
  a.acc = 0.70, b.acc = 0.90, c.acc = 0.80;
  SetBuilder(tmp.path).rung("00-scratch", "00", {a, b, c}).write();
  const auto rep = build_report(load_result_set(tmp.path), PeakTable{});
  const auto& r = row(rep, "00-scratch");
  CHECK(r.runs == 3);
  CHECK(*r.time_s.median == 200);
  CHECK(*r.acc.median == doctest::Approx(0.80));
  const auto md = report_markdown(rep);
  CHECK(has(md, "| 3.33 min (1.67-5.00) |"));  // one unit: minutes
  CHECK(has(md, "| 80.00% (70.00-90.00) |"));
  CHECK(has(report_csv(rep), ",200,100,300,"));
}

TEST_CASE("report: failed, missing and needs-CUDA rungs keep their place with their status") {
  accel_test::TempDir tmp;
  FakeRun failed;
  failed.status = "failed";
  SetBuilder(tmp.path)
      .rung("00-scratch", "00", {FakeRun{}})
      .rung("01-finetune", "01", {failed})
      .needs("02-compile", "02", "CUDA")
      .rung("03-fabric", "03", {FakeRun{}}, /*missing=*/true)
      .rung("04-bf16", "04", {FakeRun{}})
      .write();
  const auto rep = build_report(load_result_set(tmp.path), PeakTable{});
  REQUIRE(rep.rungs.size() == 5);
  CHECK(row(rep, "00-scratch").status == "ok");
  CHECK(row(rep, "01-finetune").status == "failed");
  CHECK(row(rep, "02-compile").status == "needs CUDA");
  CHECK(row(rep, "03-fabric").status == "missing");
  CHECK(row(rep, "04-bf16").status == "ok");
  CHECK_FALSE(row(rep, "01-finetune").time_s.median.has_value());
  const auto md = report_markdown(rep);
  CHECK(has(md, "| needs CUDA |"));
  CHECK(has(md, "01-finetune failed"));  // the error in the notes
  // The rung after a failed one is compared with the last rung that has a time.
  CHECK(*row(rep, "04-bf16").speedup_prev == doctest::Approx(1.0));
}

TEST_CASE("report: one ok repeat of two is 'ok 1/2' and only it enters the figures") {
  accel_test::TempDir tmp;
  FakeRun ok, bad;
  ok.time_s = 50;
  bad.status = "failed";
  SetBuilder(tmp.path).rung("00-scratch", "00", {ok, bad}).write();
  const auto rep = build_report(load_result_set(tmp.path), PeakTable{});
  CHECK(row(rep, "00-scratch").status == "ok 1/2");
  CHECK(*row(rep, "00-scratch").time_s.median == 50);
}

TEST_CASE("report: a result without figures shows n/a, never 0") {
  accel_test::TempDir tmp;
  FakeRun bare;
  bare.drop_figures = true;
  SetBuilder(tmp.path).rung("00-scratch", "00", {bare}).write();
  const auto rep = build_report(load_result_set(tmp.path), PeakTable{});
  const auto& r = row(rep, "00-scratch");
  CHECK_FALSE(r.time_s.median.has_value());
  CHECK_FALSE(r.acc.median.has_value());
  CHECK(r.mem_per_rank.empty());
  const auto md = report_markdown(rep);
  CHECK(has(md, "| n/a | n/a | n/a | n/a |"));
  CHECK_FALSE(has(md, "0.00%"));
}

TEST_CASE("report: speedups vs scratch and vs the rung before, and the article's beside them") {
  accel_test::TempDir tmp;
  FakeRun scratch, finetune, bf16;
  scratch.time_s = 600, finetune.time_s = 200, bf16.time_s = 100;
  SetBuilder(tmp.path)
      .reference(reference())
      .rung("00-scratch", "00", {scratch})
      .rung("01-finetune", "01", {finetune})
      .rung("04-bf16", "04", {bf16})
      .write();
  const auto rep = build_report(load_result_set(tmp.path), PeakTable{});
  CHECK(*row(rep, "01-finetune").speedup_scratch == doctest::Approx(3.0));
  CHECK(*row(rep, "04-bf16").speedup_scratch == doctest::Approx(6.0));
  CHECK(*row(rep, "04-bf16").speedup_prev == doctest::Approx(2.0));
  CHECK(*row(rep, "01-finetune").ref_time_min == 20.0);
  CHECK(*row(rep, "01-finetune").ref_speedup_scratch == doctest::Approx(3.0));
  CHECK_FALSE(row(rep, "04-bf16").ref_time_min.has_value());  // not in the reference
  const auto md = report_markdown(rep);
  CHECK(has(md, "| article vs scratch | article vs prev | article vs its first pretrained |"));
  CHECK(has(md, "| 20.00 min | 3.00x | 3.00x | n/a | 95.00% | 3.70 GB |"));
  CHECK(has(md, "Article figures: test source"));
}

TEST_CASE("report: a rung's versus names the earlier rung its vs prev is taken against, and the table says which") {
  accel_test::TempDir tmp;
  FakeRun a, b, twin, pretrained;
  a.time_s = 600, b.time_s = 300, twin.time_s = 900, pretrained.time_s = 450;
  SetBuilder set(tmp.path);
  set.rung("a", "", {a}).rung("b", "", {b}).rung("twin", "", {twin}).rung("pretrained", "", {pretrained});
  set.manifest["rungs"][3]["versus"] = "twin";
  set.manifest["rungs"][2]["versus"] = "a";
  set.write();
  const auto rep = build_report(load_result_set(tmp.path), PeakTable{});
  CHECK(row(rep, "b").prev_id == "a");
  CHECK(row(rep, "twin").prev_id == "a");  // not b, the rung before it
  CHECK(*row(rep, "twin").speedup_prev == doctest::Approx(600.0 / 900.0));
  CHECK(row(rep, "pretrained").prev_id == "twin");
  CHECK(*row(rep, "pretrained").speedup_prev == doctest::Approx(2.0));
  const auto md = report_markdown(rep);
  CHECK(has(md, "| 2.00x [1.81, 2.21] faster (vs twin) |"));
  CHECK(has(md, "(vs a)"));
  // A suite's versus must name a rung before it.
  const auto cfg = tmp.path / "c.json";
  report_test::write_json(cfg, Json::object());
  auto suite = [&](const std::string& versus) {
    report_test::write_json(tmp.path / "suite.json",
               {{"suite", "s"},
                {"rungs", {{{"id", "a"}, {"config", "c.json"}}, {{"id", "b"}, {"config", "c.json"}, {"versus", versus}}}}});
    return accel::ladder::load_suite(tmp.path / "suite.json");
  };
  CHECK(suite("a").rungs[1].versus == "a");
  CHECK_THROWS_WITH_AS(suite("b"), doctest::Contains("rung b: versus \"b\" is not the id of a rung before it"),
                       accel::ConfigError);
  // A versus that is not a rung id is a malformed manifest.
  set.manifest["rungs"][3]["versus"] = "../x";
  set.write();
  CHECK_THROWS_AS(load_result_set(tmp.path), accel::ConfigError);
}

TEST_CASE("report: the energy NVML measured stands in its own table and a set without any has none") {
  accel_test::TempDir tmp;
  FakeRun a, b, cpu;
  a.extra = {{"energy_source", "nvml"}, {"energy_j", 120.0}, {"energy_j_per_step", 3.0}, {"energy_j_per_sample", 0.1875},
             {"energy_to_target_j", nullptr}};
  b.extra = {{"energy_source", "nvml"}, {"energy_j", 60.0}, {"energy_j_per_step", 1.5}, {"energy_j_per_sample", 0.09375},
             {"energy_to_target_j", 900.0}};
  cpu.extra = {{"energy_source", "not measured"}, {"energy_note", "no energy counter for cpu devices"},
               {"energy_j", nullptr}, {"energy_j_per_step", nullptr}, {"energy_j_per_sample", nullptr}};
  SetBuilder(tmp.path).rung("00", "", {a}).rung("01", "", {b}).rung("02", "", {cpu}).write();
  const auto rep = build_report(load_result_set(tmp.path), PeakTable{});
  CHECK(*row(rep, "01").energy_j_per_sample.median == doctest::Approx(0.09375));
  CHECK(row(rep, "01").energy_source == "nvml");
  CHECK(row(rep, "02").energy_j_per_step.n == 0);
  const auto md = report_markdown(rep);
  INFO(md);
  CHECK(has(md, "| rung | measured by | J per step | J per sample | J to the target |"));
  CHECK(has(md, "| 00 | nvml | 3 | 0.1875 | n/a |"));
  CHECK(has(md, "| 01 | nvml | 1.5 | 0.09375 | 900 |"));
  CHECK(has(md, "| 02 | not measured | n/a | n/a | n/a |"));
  // Doctored energy is refused like any impossible figure.
  accel_test::TempDir bad;
  FakeRun neg;
  neg.extra = {{"energy_source", "nvml"}, {"energy_j", -5.0}};
  SetBuilder(bad.path).rung("00", "", {neg}).write();
  CHECK(load_result_set(bad.path).rungs[0].repeats[0].status == "unreadable");
  accel_test::TempDir none;
  SetBuilder(none.path).rung("00", "", {cpu}).write();
  CHECK_FALSE(has(report_markdown(build_report(load_result_set(none.path), PeakTable{})), "J per step"));
}

TEST_CASE("suite: batch_sizes makes a rung a batch series of one rung per size each taken against the one before") {
  accel_test::TempDir tmp;
  report_test::write_json(tmp.path / "c.json", Json::object());
  auto suite = [&](const Json& rung) {
    report_test::write_json(tmp.path / "suite.json",
                            {{"suite", "s"}, {"rungs", {{{"id", "fp32"}, {"config", "c.json"}}, rung}}});
    return accel::ladder::load_suite(tmp.path / "suite.json");
  };
  const auto s = suite({{"id", "bf16"}, {"config", "c.json"}, {"article", "04"}, {"changes", "bf16-mixed"},
                        {"set", {"train.max_steps=40"}}, {"batch_sizes", {16, 64, 256}}});
  REQUIRE(s.rungs.size() == 4);
  CHECK(s.rungs[0].series.empty());
  const std::vector<std::string> ids = {s.rungs[1].id, s.rungs[2].id, s.rungs[3].id};
  CHECK(ids == std::vector<std::string>{"bf16-b16", "bf16-b64", "bf16-b256"});
  CHECK(s.rungs[1].changes == "bf16-mixed at batch 16");
  CHECK(s.rungs[3].changes == "bf16-mixed at batch 256");
  CHECK(s.rungs[1].article == "04");  // the article stays with the first
  CHECK(s.rungs[2].article.empty());
  CHECK(s.rungs[2].sets == std::vector<std::string>{"train.max_steps=40", "train.batch_size=64"});
  CHECK(s.rungs[3].series == "bf16");
  CHECK(s.rungs[3].batch == 256);
  CHECK(s.rungs[3].versus.empty());  // the rung before: the next smaller batch
  CHECK(suite({{"id", "x"}, {"config", "c.json"}, {"batch_sizes", {8}}}).rungs[1].changes == "batch 8");
  for (const Json& bad : {Json({16, 16}), Json({64, 16}), Json({0, 16}), Json({16.5}), Json::array(), Json("16"),
                          Json({int64_t(1) << 21})}) {
    INFO(bad.dump());
    CHECK_THROWS_WITH_AS(suite({{"id", "x"}, {"config", "c.json"}, {"batch_sizes", bad}}),
                         doctest::Contains("rungs[1].batch_sizes: expected a non-empty list of increasing whole batch sizes"),
                         accel::ConfigError);
  }
  // "versus" is the first batch's: a second series set against the first's at its first batch.
  const auto two = suite({{"id", "x"}, {"config", "c.json"}, {"versus", "fp32"}, {"batch_sizes", {8, 16}}});
  CHECK(two.rungs[1].versus == "fp32");
  CHECK(two.rungs[2].versus.empty());
  CHECK_THROWS_WITH_AS(suite({{"id", "x"}, {"needs", "CUDA"}, {"batch_sizes", {8, 16}}}),
                       doctest::Contains("rungs[1].batch_sizes: a batch series needs a config to run"),
                       accel::ConfigError);
  // An expanded id that another rung has is refused like any repeated id.
  report_test::write_json(tmp.path / "suite.json",
                          {{"suite", "s"},
                           {"rungs", {{{"id", "x-b8"}, {"config", "c.json"}},
                                      {{"id", "x"}, {"config", "c.json"}, {"batch_sizes", {8}}}}}});
  CHECK_THROWS_WITH_AS(accel::ladder::load_suite(tmp.path / "suite.json"), doctest::Contains("\"x-b8\" used twice"),
                       accel::ConfigError);
}

TEST_CASE("report: a reference of published figures per technique stands beside each rung's measured speedup and memory") {
  accel_test::TempDir tmp;
  // Figures as ratios over the step before, each with its own source: no
  // times, so nothing is derived from them; the memory columns appear
  // because the reference has a memory figure.
  const Json published = {
      {"source", "per-technique figures"},
      {"hardware", "their own"},
      {"label", "published"},
      {"rungs",
       {{"fused", {{"speedup_vs_prev", 3.0}, {"source", "Paper A"}, {"setup", "GPT-2 at 1K"}, {"hardware", "A100"}}},
        {"ckpt",
         {{"speedup_vs_prev", 0.769},
          {"memory_vs_prev", 6.857},
          {"memory_measure", "the whole run"},
          {"source", "Paper B"}}},
        {"ddp", {{"note", "near-linear"}, {"source", "Paper C"}}},
        // Times and a ratio: the times rule (speedups between our rungs' own articles).
        {"timed", {{"time_min", 10.0}, {"speedup_vs_prev", 9.0}, {"source", "Article D"}}}}}};
  FakeRun eager, fused, ckpt, ddp;
  eager.time_s = 90, fused.time_s = 60, ckpt.time_s = 75, ddp.time_s = 40;
  eager.mem = {2e9}, fused.mem = {1.6e9}, ckpt.mem = {0.4e9}, ddp.mem = {0.5e9, 0.5e9};
  SetBuilder(tmp.path)
      .reference(published)
      .rung("l00", "", {eager})
      .rung("l01", "fused", {fused})
      .rung("l05", "ckpt", {ckpt})
      .rung("l06", "ddp", {ddp})
      .rung("l08", "timed", {ddp})
      .write();
  const auto rep = build_report(load_result_set(tmp.path), PeakTable{});
  CHECK(*row(rep, "l01").speedup_prev == doctest::Approx(1.5));
  CHECK(*row(rep, "l01").ref_speedup_prev == 3.0);  // the paper's, not derived from the rung before
  CHECK(*row(rep, "l05").ref_speedup_prev == 0.769);
  CHECK(*row(rep, "l05").mem_ratio_prev == doctest::Approx(4.0));
  CHECK(*row(rep, "l05").ref_mem_ratio_prev == 6.857);
  CHECK_FALSE(row(rep, "l00").ref_speedup_prev.has_value());
  CHECK_FALSE(row(rep, "l06").ref_speedup_prev.has_value());
  CHECK_FALSE(row(rep, "l08").ref_speedup_prev.has_value());  // l06 has no time of the article's
  CHECK(*row(rep, "l08").ref_time_min == 10.0);
  const auto md = report_markdown(rep);
  INFO(md);
  CHECK(has(md, " | published vs prev | "));
  CHECK(has(md, " | peak mem/rank | less mem vs prev | published less mem vs prev | status |"));
  CHECK(has(md, "| 0.40 GB | 4.00x | 6.86x | ok |"));
  CHECK(has(md, "Published figures: per-technique figures; their own."));
  CHECK(has(md, "l01 beside fused: 3.00x speed over the step before; GPT-2 at 1K, on A100; Paper A."));
  CHECK(has(md, "l05 beside ckpt: 0.77x speed, 6.86x less memory (the whole run) over the step before; Paper B."));
  CHECK(has(md, "l06 beside ddp: near-linear; Paper C."));
  CHECK_FALSE(has(md, "l08 beside"));
}

TEST_CASE("report: a set whose rungs ran a fixed few steps ranks them by the steady step per sample and says so") {
  accel_test::TempDir tmp;
  // A GPU check's shape: 40 steps a rung, training times mostly warm-up
  // (3.06 s, 2.78 s, 1.42 s) where the steps are 46.8, 23.06 and 14.0 ms.
  FakeRun fp32, bf16, graphs;
  fp32.time_s = 3.06, bf16.time_s = 2.78, graphs.time_s = 1.42;
  fp32.steps = report_test::steady_steps(46.8, 40), bf16.steps = report_test::steady_steps(23.06, 40),
  graphs.steps = report_test::steady_steps(14.0, 40);
  for (auto* f : {&fp32, &bf16, &graphs}) f->steps_run = 40;
  SetBuilder(tmp.path / "few").rung("00-32-true", "", {fp32}).rung("01-bf16", "", {bf16}).rung("02-graphs", "", {graphs}).write();
  auto rep = build_report(load_result_set(tmp.path / "few"), PeakTable{});
  CHECK(rep.speed_measure == "steady step");
  const double fp32_step = *row(rep, "00-32-true").speed, bf16_step = *row(rep, "01-bf16").speed;
  CHECK(fp32_step == doctest::Approx(46.8 / 1000 / 16).epsilon(0.01));  // per sample of the batch of 16
  CHECK(*row(rep, "01-bf16").speedup_prev == doctest::Approx(fp32_step / bf16_step));
  CHECK(*row(rep, "01-bf16").speedup_prev == doctest::Approx(46.8 / 23.06).epsilon(0.02));  // not 3.06 / 2.78
  CHECK(*row(rep, "02-graphs").speedup_scratch == doctest::Approx(46.8 / 14.0).epsilon(0.02));
  REQUIRE(row(rep, "01-bf16").speedup_prev_iv);
  CHECK(row(rep, "01-bf16").speedup_prev_iv->verdict == "faster");
  const auto md = report_markdown(rep);
  CHECK(has(md, "Speedups: the ratio of the rungs' steady steps per sample"));
  CHECK(has(md, "Every rung ran at most 40 steps"));
  CHECK(has(md, "a 3% run-to-run floor a side (this machine's noise not measured); *same"));  // not cut at 63 characters
  CHECK(has(report_csv(rep), ",steady step\n"));
  CHECK(has(md, "| rung | what changed | step per sample (ms) | vs prev |"));
  CHECK(has(md, "| 00-32-true | change 00-32-true | 2.925 | "));  // 46.8 ms over 16 samples
  for (const auto& c : chart_data(rep)) {
    if (c.name == "speedup") CHECK(c.title == "Steady-step speedup per rung (step per sample)");
  }
  // The same rungs run 300 steps: their training times are divided.
  for (auto* f : {&fp32, &bf16, &graphs}) f->steps_run = 300;
  SetBuilder(tmp.path / "many").rung("00-32-true", "", {fp32}).rung("01-bf16", "", {bf16}).rung("02-graphs", "", {graphs}).write();
  rep = build_report(load_result_set(tmp.path / "many"), PeakTable{});
  CHECK(rep.speed_measure == "training time");
  CHECK(*row(rep, "01-bf16").speedup_prev == doctest::Approx(3.06 / 2.78));
  CHECK(has(report_markdown(rep), "Speedups: the ratio of training times"));
}

TEST_CASE("report: two presets of one family are two models: no speedup across them, each one's first rung its scratch") {
  accel_test::TempDir tmp;
  FakeRun tiny, tiny_fast, big, big_pretrained;
  tiny.time_s = 600, tiny_fast.time_s = 300, big.time_s = 900, big_pretrained.time_s = 900;
  for (auto* r : {&tiny, &tiny_fast}) r->config_patch = {{"model", {{"arch", "gpt"}, {"preset", "gpt_tiny"}}}};
  big.config_patch = {{"model", {{"arch", "gpt"}, {"preset", "smollm2_135m"}}}};
  big_pretrained.config_patch = {{"model", {{"arch", "gpt"}, {"preset", "smollm2_135m"}, {"init", "gguf"}}}};
  SetBuilder(tmp.path)
      .rung("l00", "", {tiny})
      .rung("l01", "", {tiny_fast})
      .rung("l08a", "", {big})
      .rung("l08", "", {big_pretrained})
      .write();
  const auto rep = build_report(load_result_set(tmp.path), PeakTable{});
  CHECK(*row(rep, "l01").speedup_prev == doctest::Approx(2.0));
  CHECK_FALSE(row(rep, "l08a").speedup_prev.has_value());  // not against l01: another model
  CHECK(row(rep, "l08a").scratch_id == "l08a");
  CHECK(*row(rep, "l08").speedup_prev == doctest::Approx(1.0));
  CHECK(row(rep, "l08").prev_id == "l08a");
  // The first pretrained rung is a base for its own model's rungs alone.
  CHECK(row(rep, "l08a").speedup_base.has_value());
  CHECK_FALSE(row(rep, "l01").speedup_base.has_value());
  CHECK(has(report_markdown(rep), "The gpt rungs build 2 models (model.preset gpt_tiny, smollm2_135m): a speedup is only "
                                  "taken between two rungs of one model"));
}

TEST_CASE("report: a speedup is never taken between two model families, each family's first rung its scratch") {
  accel_test::TempDir tmp;
  FakeRun a, b, text;
  a.time_s = 600, b.time_s = 300, text.time_s = 100;
  // Results of before model.arch was resolved read the family from the preset (vit_tiny_fmnist).
  text.config_patch = {{"model", {{"arch", "bert"}, {"preset", "bert_base"}}}};
  SetBuilder(tmp.path)
      .reference(reference())
      .rung("00-scratch", "00", {a})
      .rung("01-vit", "01", {b})
      .rung("05-bert", "", {text})
      .write();
  const auto rep = build_report(load_result_set(tmp.path), PeakTable{});
  CHECK(row(rep, "01-vit").family == "vit");
  CHECK(*row(rep, "01-vit").speedup_prev == doctest::Approx(2.0));
  const auto& bert = row(rep, "05-bert");
  CHECK(bert.family == "bert");
  CHECK(bert.scratch_id == "05-bert");  // not the ViT's scratch
  CHECK(*bert.speedup_scratch == doctest::Approx(1.0));
  CHECK(bert.prev_id.empty());
  CHECK_FALSE(bert.speedup_prev.has_value());  // not 3x "faster" than a ViT rung
  CHECK_FALSE(bert.ref_speedup_scratch.has_value());
  CHECK(has(report_markdown(rep), "The set holds rungs of 2 model families (bert, vit)"));
}

TEST_CASE("report: the article's speedups are between the same two rungs as ours") {
  accel_test::TempDir tmp;
  // A check whose first rung is the article's 03 (Fabric, 32-true) and whose second is its 04 (bf16).
  auto ref = reference();
  ref["rungs"]["03"] = {{"time_min", 18.49}};
  ref["rungs"]["04"] = {{"time_min", 6.36}};
  FakeRun fp32, bf16;
  fp32.time_s = 300, bf16.time_s = 150;
  SetBuilder(tmp.path).reference(ref).rung("00-32-true", "03", {fp32}).rung("01-bf16", "04", {bf16}).write();
  const auto rep = build_report(load_result_set(tmp.path), PeakTable{});
  const auto& r = row(rep, "01-bf16");
  CHECK(*r.speedup_prev == doctest::Approx(2.0));
  CHECK(*r.ref_speedup_prev == doctest::Approx(18.49 / 6.36));
  // Our scratch is 00-32-true, so the article's "vs scratch" is its 03 over its 04, not its 00 over its 04.
  CHECK(*r.ref_speedup_scratch == doctest::Approx(18.49 / 6.36));
  CHECK(has(report_markdown(rep), "| 6.36 min | 2.91x | 2.91x | n/a |"));
}

TEST_CASE("report: the speedup chart is relative to the reference's speedup_base rung, else the first pretrained one") {
  accel_test::TempDir tmp;
  FakeRun scratch, finetune, bf16;
  scratch.time_s = 600, finetune.time_s = 200, bf16.time_s = 50;
  finetune.config_patch = bf16.config_patch = {{"model", {{"init", {{"safetensors", "w.safetensors"}}}}}};
  auto ref = reference();
  ref["speedup_base"] = "01";
  ref["rungs"]["04"] = {{"time_min", 5.0}};
  SetBuilder(tmp.path / "a")
      .reference(ref)
      .rung("00-scratch", "00", {scratch})
      .rung("01-finetune", "01", {finetune})
      .rung("04-bf16", "04", {bf16})
      .write();
  auto rep = build_report(load_result_set(tmp.path / "a"), PeakTable{});
  CHECK(rep.speedup_base == "01-finetune");
  CHECK(*row(rep, "04-bf16").speedup_base == doctest::Approx(4.0));
  CHECK(*row(rep, "00-scratch").speedup_base == doctest::Approx(1.0 / 3));
  CHECK(*row(rep, "04-bf16").ref_speedup_base == doctest::Approx(4.0));  // 20 min / 5 min
  const auto charts = chart_data(rep);
  REQUIRE(charts.size() == 3);
  CHECK(charts[2].name == "speedup");
  // Its error bars: the speedup's interval (one run a rung: the 3% run-to-run floor a side).
  const auto iv = row(rep, "04-bf16").speedup_base_iv;
  REQUIRE(iv);
  CHECK(iv->iv.low < 4.0);
  CHECK(iv->iv.high > 4.0);
  CHECK(has(charts[2].csv, "04-bf16,4," + report_test_num(iv->iv.low) + "," + report_test_num(iv->iv.high) + ",4\n"));
  CHECK(has(report_markdown(rep), "| vs 01-finetune |"));
  // No reference: the first rung not from random init.
  SetBuilder(tmp.path / "b")
      .rung("t00", "", {scratch})
      .rung("t01", "", {finetune})
      .rung("t03", "", {bf16})
      .write();
  rep = build_report(load_result_set(tmp.path / "b"), PeakTable{});
  CHECK(rep.speedup_base == "t01");
  CHECK(*row(rep, "t03").speedup_base == doctest::Approx(4.0));
  CHECK_FALSE(row(rep, "t03").ref_speedup_base.has_value());
}

TEST_CASE("report: every speedup carries its 95% interval from between-run samples and a verdict, same within noise where it holds 1") {
  accel_test::TempDir tmp;
  // 01 and 03 do the same work: their times spread 8% between runs; 04 is twice as fast.
  std::vector<FakeRun> a(3), b(3), c(3);
  const double ta[] = {600, 650, 560}, tb[] = {540, 610, 590}, tc[] = {300, 310, 290};
  for (int i = 0; i < 3; ++i) a[i].time_s = ta[i], b[i].time_s = tb[i], c[i].time_s = tc[i];
  SetBuilder(tmp.path / "r")
      .rung("01-finetune", "01", a)
      .rung("03-fabric", "03", b)
      .rung("04-bf16", "04", c)
      .write();
  auto rep = build_report(load_result_set(tmp.path / "r"), PeakTable{});
  const auto& fabric = row(rep, "03-fabric");
  REQUIRE(fabric.speedup_prev_iv);
  CHECK(*fabric.speedup_prev == doctest::Approx(600.0 / 590));
  CHECK(fabric.speedup_prev_iv->verdict == "same within noise");
  CHECK(fabric.speedup_prev_iv->iv.low < 1);
  CHECK(fabric.speedup_prev_iv->iv.high > 1);
  CHECK(has(fabric.speedup_prev_iv->iv.method, "Welch t on logs, 3 and 3 runs"));
  const auto& bf16 = row(rep, "04-bf16");
  REQUIRE(bf16.speedup_prev_iv);
  CHECK(bf16.speedup_prev_iv->verdict == "faster");
  CHECK(bf16.speedup_prev_iv->iv.low > 1);
  const auto md = report_markdown(rep);
  CHECK(has(md, "1.02x [") );
  CHECK(has(md, "] same within noise |"));
  CHECK(has(md, "] faster |"));
  CHECK(has(md, "Speedups: the ratio of training times (the median of 3 ok run(s) a rung)"));
  // One run a rung and no measured noise: the documented floor, never the point alone.
  FakeRun one_a, one_b;
  one_a.time_s = 600, one_b.time_s = 580;  // 3% apart: within a run-to-run floor of 3% a side
  SetBuilder(tmp.path / "one").rung("01-finetune", "01", {one_a}).rung("03-fabric", "03", {one_b}).write();
  rep = build_report(load_result_set(tmp.path / "one"), PeakTable{});
  const auto& one = row(rep, "03-fabric");
  REQUIRE(one.speedup_prev_iv);
  CHECK(one.speedup_prev_iv->verdict == "same within noise");
  CHECK(has(one.speedup_prev_iv->iv.method, "a 3% run-to-run floor"));
  CHECK(has(report_markdown(rep), "with one run each a 3% run-to-run floor a side"));
}

TEST_CASE("report: time to target sums epoch times until val accuracy first reaches it") {
  FakeRun f;
  f.epoch_time = {10, 20, 30};
  f.epoch_val = {0.5, 0.76, 0.74};
  accel_test::TempDir tmp;
  report_test::write_json(tmp / "r/result.json", report_test::fake_result(f));
  const auto run = read_run(tmp / "r");
  CHECK(*time_to_target(run, 0.75) == 30);
  CHECK(*time_to_target(run, 0.5) == 10);
  CHECK_FALSE(time_to_target(run, 0.9).has_value());
}

TEST_CASE("report: time to target over repeats, and 'not reached'") {
  accel_test::TempDir tmp;
  FakeRun fast, slow, never;
  fast.epoch_val = {0.9, 0.9, 0.9};  // 200 s
  slow.epoch_val = {0.1, 0.9, 0.9};  // 400 s
  never.epoch_val = {0.1, 0.2, 0.3};
  SetBuilder(tmp.path).target(0.85).rung("a", "00", {fast, slow}).rung("b", "01", {never}).write();
  const auto rep = build_report(load_result_set(tmp.path), PeakTable{});
  CHECK(*row(rep, "a").ttt_s.median == 300);
  CHECK(row(rep, "b").ttt_reached == 0);
  const auto md = report_markdown(rep);
  CHECK(has(md, "time to 85.00% val"));
  CHECK(has(md, "| 5.00 min (3.33-6.67) |"));
  CHECK(has(md, "| not reached |"));
}

TEST_CASE("report: memory per rank and images/s per device for a multi-rank run") {
  accel_test::TempDir tmp;
  FakeRun ddp;
  ddp.mem = {2e9, 1.5e9};
  ddp.images_per_s = 300;
  ddp.config_patch = {{"runtime", {{"devices", 2}, {"strategy", "ddp"}}}};
  SetBuilder(tmp.path).rung("05-ddp", "05", {ddp}).write();
  const auto rep = build_report(load_result_set(tmp.path), PeakTable{});
  const auto& r = row(rep, "05-ddp");
  CHECK(*r.ips_device.median == 150);  // total / world size when the field is absent
  CHECK(r.mem_per_rank.size() == 2);
  CHECK(r.devices_threads == "2 cpu x 2 thr");
  CHECK(has(report_markdown(rep), "| 2.00 / 1.50 GB |"));
}

TEST_CASE("report: CPU MFU from a calibration file, at the run's thread count, source stated") {
  accel_test::TempDir tmp;
  FakeRun fp32, bf16;
  fp32.images_per_s = 100;  // 1e8 FLOPs/sample x 3 x 100 = 30 GFLOP/s
  bf16.config_patch = {{"runtime", {{"precision", "bf16-mixed"}}}};
  SetBuilder(tmp.path).rung("a", "00", {fp32}).rung("b", "04", {bf16}).write();
  report_test::write_json(tmp / "peaks.json",
                          {{"measured_at", "today"},
                           {"cpu", {{"fp32", {{"1", 40.0}, {"2", 60.0}, {"4", 999.0}}},
                                    {"bf16", {{"1", 150.0}, {"2", 300.0}}}}}});
  const auto peaks = PeakTable::load("", tmp / "peaks.json");
  const auto rep = build_report(load_result_set(tmp.path), peaks);
  CHECK(*row(rep, "a").mfu.median == doctest::Approx(0.5));  // 30 / 60 (2 threads)
  CHECK(*row(rep, "b").mfu.median == doctest::Approx(0.1));  // 30 / 300
  CHECK(has(row(rep, "a").peak_source, "fp32 dense matmul 60.0 GFLOP/s at 2 threads"));
  CHECK(has(report_markdown(rep), "| 50.0% |"));
}

TEST_CASE("peaks: published GPU figures match whole words of the device name") {
  accel_test::TempDir tmp;
  report_test::write_json(
      tmp / "p.json",
      {{"gpus",
        {{{"name", "H100 PCIe"}, {"match", {"H100", "PCIe"}}, {"dense_tflops", {{"bf16", 756}}}},
         {{"name", "H100 SXM"}, {"match", {"H100"}}, {"dense_tflops", {{"bf16", 989.5}}}},
         {{"name", "L40S"}, {"match", {"L40S"}}, {"dense_tflops", {{"bf16", 362}}}},
         {{"name", "L4"}, {"match", {"L4"}}, {"dense_tflops", {{"bf16", 121}}}}}}});
  const auto t = PeakTable::load(tmp / "p.json", "");
  CHECK(t.published("NVIDIA H100 PCIe", "bf16")->flops_per_s == doctest::Approx(756e12));
  CHECK(t.published("NVIDIA H100 80GB HBM3", "bf16")->flops_per_s == doctest::Approx(989.5e12));
  CHECK(t.published("NVIDIA L4", "bf16")->flops_per_s == doctest::Approx(121e12));
  CHECK(t.published("NVIDIA L40S", "bf16")->flops_per_s == doctest::Approx(362e12));
  CHECK_FALSE(t.published("NVIDIA L4", "fp64").has_value());
  CHECK_FALSE(t.published("Some Other GPU", "bf16").has_value());
  CHECK(matmul_dtype("bf16-mixed") == "bf16");
  CHECK(matmul_dtype("16-mixed") == "fp16");
  CHECK(matmul_dtype("32-true") == "fp32");
}

TEST_CASE("peaks: a calibration without cpu peaks has none, and thread counts are decimal numbers in range") {
  accel_test::TempDir tmp;
  // What calibrate --noise writes where there was no calibration, and a comm fit alone.
  for (const Json& doc : {Json{{"machine_id", "m"}, {"noise", {{"machine", Json::object()}}}},
                          Json{{"cpu", {{"bf16", {{"2", 10.0}}}}}}}) {
    report_test::write_json(tmp / "c.json", doc);
    const auto t = PeakTable::load("", tmp / "c.json");
    CHECK_FALSE(t.calibrated_cpu("fp32", 2).has_value());
    CHECK(t.precision_limit_note("bf16-mixed", 2).empty());
  }
  CHECK(accel::machine::thread_count_key("16") == 16);
  for (const char* bad : {"0", "", "4294967297", "65537", "2x", "-1", " 2", "+2", "1e3"}) {
    CAPTURE(bad);
    CHECK_FALSE(accel::machine::thread_count_key(bad).has_value());
    report_test::write_json(tmp / "t.json", {{"cpu", {{"fp32", {{bad, 10.0}}}}}});
    CHECK_THROWS_AS(PeakTable::load("", tmp / "t.json"), accel::ConfigError);
  }
  // Named by the user, a missing calibration is an input error naming the flag and the file.
  CHECK_NOTHROW(PeakTable::load("", tmp / "none.json"));
  const std::string said = "--calibration " + (tmp / "none.json").string() + ": no such file";
  CHECK_THROWS_WITH_AS(PeakTable::load_named("", tmp / "none.json", "--calibration"), doctest::Contains(said.c_str()),
                       accel::ConfigError);
}

TEST_CASE("json: a const read of a missing key throws instead of reading past the end of the object") {
  const Json doc = {{"a", 1}};
  CHECK_THROWS_AS((void)doc["b"], std::logic_error);
  CHECK(doc["a"] == 1);
}

TEST_CASE("peaks: the committed data file gives H100/H200 SXM bf16 989.5 and A100 312 TFLOP/s") {
  const auto t = PeakTable::load(std::string(ACCEL_SOURCE_DIR) +
                                     "/results/reference/dense-peaks.json", "");
  CHECK(t.published("NVIDIA H200", "bf16")->flops_per_s == doctest::Approx(989.5e12));
  CHECK(t.published("NVIDIA H100 80GB HBM3", "bf16")->flops_per_s == doctest::Approx(989.5e12));
  CHECK(t.published("NVIDIA A100-SXM4-80GB", "bf16")->flops_per_s == doctest::Approx(312e12));
  CHECK(t.published("NVIDIA A100-SXM4-80GB", "fp32")->flops_per_s == doctest::Approx(19.5e12));
  CHECK(has(t.published("NVIDIA L4", "bf16")->source, "datasheet"));
}

TEST_CASE("machine id: hardware, precision-relevant ISA and LibTorch version") {
  CHECK(slug("Intel(R) Xeon(R) Platinum 8480+ CPU @ 2.00GHz") == "intel-xeon-platinum-8480");
  CHECK(isa_tag("fpu avx2 avx512f avx512_bf16 amx_bf16") == "amx");
  CHECK(isa_tag("fpu avx2 avx512f avx512_bf16") == "avx512bf16");
  CHECK(isa_tag("fpu avx2") == "avx2");
  const Json cpu = {{"cpu_model", "Intel(R) Xeon(R) Processor"}, {"cores", 2},
                    {"gpu_count", 0}, {"libtorch_version", "1.13.0"}};
  CHECK(machine_id(cpu, "amx") == "intel-xeon-processor-2c-amx-lt1.13.0");
  const Json gpu = {{"cpu_model", "AMD EPYC"}, {"cores", 16}, {"gpu_count", 8},
                    {"gpu_name", "NVIDIA H200"}, {"libtorch_version", "2.6.0"},
                    {"cuda_version", "12.4"}};
  CHECK(machine_id(gpu, "avx2") == "nvidia-h200-x8-lt2.6.0-cu12.4");
}

TEST_CASE("machine id: a Zen 4 and a Zen 5 of one generic model name get two ids, and an env without the class keeps its old id") {
  using accel::metrics::cpu_class;
  using accel::metrics::parse_cpuinfo;
  // /proc/cpuinfo of two 2-vCPU cloud VMs that both say "AMD EPYC" and both have AVX512-BF16.
  const std::string zen4 =
      "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
      "model name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512f avx512_bf16\n\n"
      "processor\t: 1\nvendor_id\t: AuthenticAMD\ncpu family\t: 99\nmodel\t\t: 99\n";
  const std::string zen5 =
      "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\n"
      "model name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512f avx512_bf16\n";
  const auto a = parse_cpuinfo(zen4), b = parse_cpuinfo(zen5);
  CHECK(a.vendor == "AuthenticAMD");
  CHECK(a.family == 25);  // the first processor's, not the second's
  CHECK(a.model == 17);
  CHECK(a.model_name == "AMD EPYC");
  CHECK(cpu_class(a) == "zen4");
  CHECK(cpu_class(b) == "zen5");
  CHECK(cpu_class(parse_cpuinfo("vendor_id : AuthenticAMD\ncpu family : 25\nmodel : 1\n")) == "zen3");
  CHECK(cpu_class(parse_cpuinfo("vendor_id : GenuineIntel\ncpu family : 6\nmodel : 143\n")) == "sapphirerapids");
  CHECK(cpu_class(parse_cpuinfo("vendor_id : GenuineIntel\ncpu family : 6\nmodel : 207\n")) == "emeraldrapids");
  CHECK(cpu_class(parse_cpuinfo("vendor_id : GenuineIntel\ncpu family : 6\nmodel : 250\n")) == "f6m250");
  CHECK(cpu_class(parse_cpuinfo("processor : 0\nBogoMIPS : 50.00\n")).empty());  // no family (arm64)
  auto env_of = [](const accel::metrics::CpuIdentity& c) {
    return Json{{"cpu_model", c.model_name}, {"cores", 2}, {"gpu_count", 0}, {"libtorch_version", "1.13.0"},
                {"cpu_vendor", c.vendor}, {"cpu_family", c.family}, {"cpu_model_number", c.model},
                {"cpu_class", cpu_class(c)}};
  };
  const auto id4 = machine_id(env_of(a), "avx512bf16"), id5 = machine_id(env_of(b), "avx512bf16");
  CHECK(id4 == "amd-epyc-zen4-2c-avx512bf16-lt1.13.0");
  CHECK(id5 == "amd-epyc-zen5-2c-avx512bf16-lt1.13.0");
  // A result.json's env from before the class was recorded: the id it had,
  // which neither class's id equals (a sweep does not call it this machine's).
  const Json old = {{"cpu_model", "AMD EPYC"}, {"cores", 2}, {"gpu_count", 0}, {"libtorch_version", "1.13.0"}};
  CHECK(machine_id(old, "avx512bf16") == "amd-epyc-2c-avx512bf16-lt1.13.0");
  CHECK(machine_id(old, "avx512bf16") != id4);
  CHECK(machine_id(old, "avx512bf16") != id5);
}

TEST_CASE("cpu features: the precision-relevant flags of a cpuinfo line, in a fixed order") {
  using accel::metrics::parse_cpu_flags;
  const auto amx = parse_cpu_flags(" fpu avx2 fma avx512f avx512_bf16 amx_bf16 amx_tile sse4_2");
  CHECK(amx.names() == std::vector<std::string>{"avx2", "fma", "avx512f", "avx512_bf16",
                                                "amx_tile", "amx_bf16"});
  CHECK(amx.native_bf16());
  CHECK_FALSE(amx.native_fp16());
  const auto avx2 = parse_cpu_flags("fpu avx2 fma");
  CHECK_FALSE(avx2.native_bf16());
  // Whole names only: "avx512_bf16x" or "avx2_vnni" are other flags.
  CHECK_FALSE(parse_cpu_flags("avx512_bf16x avx2_vnni").native_bf16());
  CHECK(parse_cpu_flags("avx2_vnni").names().empty());
}

TEST_CASE("openblas: a generic fallback core gets the kernels this CPU can run, a known core is kept") {
  using accel::metrics::better_openblas_coretype;
  using accel::metrics::parse_cpu_flags;
  const auto spr = parse_cpu_flags("avx2 fma avx512f avx512bw avx512vl avx512dq avx512cd amx_bf16");
  const auto zen = parse_cpu_flags("avx2 fma");
  CHECK(better_openblas_coretype("Prescott", spr) == "SkylakeX");
  CHECK(better_openblas_coretype("PRESCOTT", spr) == "SkylakeX");
  CHECK(better_openblas_coretype("Prescott", zen) == "Haswell");
  CHECK(better_openblas_coretype("Prescott", parse_cpu_flags("sse3")).empty());
  CHECK(better_openblas_coretype("SkylakeX", spr).empty());   // OpenBLAS knew the CPU
  CHECK(better_openblas_coretype("Zen", zen).empty());
  CHECK(better_openblas_coretype("", spr).empty());           // no OpenBLAS loaded
  // An AVX-512 CPU without all of SkylakeX's subsets (Knights Landing) gets Haswell.
  CHECK(better_openblas_coretype("Prescott", parse_cpu_flags("avx2 fma avx512f avx512cd")) ==
        "Haswell");
}

TEST_CASE("precision support: bf16 and fp16 are emulated on CPUs without their instructions, with advice") {
  using accel::metrics::parse_cpu_flags;
  using accel::metrics::precision_support;
  const auto avx2 = parse_cpu_flags("avx2 fma");
  const auto amx = parse_cpu_flags("avx2 avx512f avx512_bf16 amx_bf16");
  for (const char* p : {"bf16-mixed", "bf16-true"}) {
    const auto s = precision_support(p, "cpu", avx2);
    CHECK(s.emulated());
    CHECK(has(s.warning, std::string(p) + " is emulated on this CPU"));
    CHECK(has(s.warning, "use runtime.precision=32-true"));
    CHECK_FALSE(precision_support(p, "cpu", amx).emulated());
    CHECK(precision_support(p, "cpu", amx).warning.empty());
  }
  CHECK(precision_support("16-mixed", "cpu", amx).emulated());  // no AVX512-FP16 / AMX-FP16
  CHECK_FALSE(precision_support("16-mixed", "cpu", parse_cpu_flags("avx512_fp16")).emulated());
  CHECK_FALSE(precision_support("32-true", "cpu", avx2).emulated());
  CHECK_FALSE(precision_support("bf16-mixed", "cuda", avx2).emulated());  // the GPU computes
}

TEST_CASE("progress: the bar shows epoch, step, ETA and images/s") {
  const auto b = Progress::bar("01-finetune", 2, 4, 50, 100, 125, 61.4, 8);
  CHECK(has(b, "[###.....]"));  // 1.5 of 4 epochs
  CHECK(has(b, "epoch 2/4 step 50/100 ETA 2m05s 61 img/s"));
  std::ostringstream plain;
  Progress p(plain, /*terminal=*/false);
  p.start("00-scratch", 16, 2);
  p.event(R"({"event":"step","epoch":1,"epochs":2,"batch":10,"batches":20,"loss":1.0})");
  p.event("Epoch: 0001/0002 | Train acc.: 99.00% | Val acc.: 99.00%");  // console text: not an event
  p.event(R"({"event":"epoch","epoch":1,"epochs":2,"train_acc":0.5,"val_acc":null,"train_time_s":3})");
  p.finish("ok");
  CHECK(has(plain.str(), "sweep: 00-scratch: epoch 1/2 | train acc. 50.00% | val acc. n/a"));
  CHECK_FALSE(has(plain.str(), "99.00"));
  CHECK_FALSE(has(plain.str(), "Batch"));  // no per-step lines in CI logs
  CHECK_FALSE(has(plain.str(), "\r"));
}

TEST_CASE("report: the spread section gives each rung one row and each measure a column with its median and interval and CV over repeats") {
  accel_test::TempDir tmp;
  FakeRun a, b, c, one;
  a.time_s = 590, b.time_s = 600, c.time_s = 610;
  one.steps = report_test::steady_steps(100);
  SetBuilder(tmp.path / "set").rung("a", "00", {a, b, c}).rung("b", "01", {one}).write();
  const auto md = report_markdown(build_report(load_result_set(tmp.path / "set"), PeakTable{}));
  INFO(md);
  CHECK(has(md, "## Spread"));
  CHECK(has(md, "| rung | runs | step time (ms) | samples/s (1/s) | training time (s) | test accuracy (%) | peak memory (GB) |"));
  // 590, 600, 610: CV 10/600, t(0.975, 2) * 10 / sqrt(3) = 24.84
  CHECK(has(md, "| a | 3 | - | "));
  CHECK(has(md, " | 600 [575.2, 624.8] (t), CV 1.7% | "));
  CHECK(has(md, "| b | 1 | 100 ["));
  CHECK(has(md, "] (within run) | "));
}

TEST_CASE("progress channel: a child's event lines reach on_event apart from its output") {
  accel_test::TempDir tmp;
  std::vector<std::string> lines, events;
  // The child writes to its channel by the number its environment names.
  const auto out = accel::util::run_child(
      {"/bin/sh", "-c",
       "echo console; printf '{\"event\":\"step\"}\\n{\"event\":' >&$ACCEL_PROGRESS_FD; "
       "echo more; printf '\"epoch\"}\\n' >&$ACCEL_PROGRESS_FD"},
      tmp.path / "log", [&](const std::string& l) { lines.push_back(l); }, {},
      [&](const std::string& e) { events.push_back(e); });
  CHECK(out.exit_code == 0);
  CHECK(lines == std::vector<std::string>{"console", "more"});
  CHECK(events == std::vector<std::string>{R"({"event":"step"})", R"({"event":"epoch"})"});
}

TEST_CASE("child timeout: a child past its timeout is stopped, its grandchildren too, and said to have timed out") {
  accel_test::TempDir tmp;
  std::vector<std::string> lines;
  // The shell ignores SIGTERM, so only the SIGKILL 10 s later ends it; its
  // background sleep is in the same process group and must end with it (the
  // pipe stays open while it lives, so returning at all proves it).
  const auto t0 = std::chrono::steady_clock::now();
  const auto out = accel::util::run_child(
      {"/bin/sh", "-c", "trap '' TERM; echo started; sleep 60 & sleep 60; echo never"},
      tmp.path / "log", [&](const std::string& l) { lines.push_back(l); }, {}, {}, 0.5);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(out.timed_out);
  CHECK(out.exit_code == 128 + SIGKILL);
  CHECK(out.last_line == "timed out after 0.5 s (killed)");
  CHECK(lines == std::vector<std::string>{"started"});
  CHECK(took < 50);  // not the sleeps' 60 s: a bound on behaviour, not a timing
  // A child that heeds SIGTERM exits at once, with its own status.
  const auto heeds = accel::util::run_child({"/bin/sh", "-c", "trap 'exit 3' TERM; sleep 60 & wait"},
                                            tmp.path / "log2", [](const std::string&) {}, {}, {}, 0.5);
  CHECK(heeds.timed_out);
  CHECK(heeds.exit_code == 3);
  CHECK(heeds.last_line == "timed out after 0.5 s (stopped, exit 3)");
  // Without a timeout, or within it, nothing changes.
  const auto quick = accel::util::run_child({"/bin/sh", "-c", "echo ok"}, tmp.path / "log3",
                                            [](const std::string&) {}, {}, {}, 30);
  CHECK_FALSE(quick.timed_out);
  CHECK(quick.exit_code == 0);
  CHECK(quick.last_line == "ok");
}

TEST_CASE("child timeout: the longest limit stops nothing early, and one beyond it or NaN is refused before starting") {
  accel_test::TempDir tmp;
  // 30 days: the deadline's milliseconds overflow no int and no clock.
  const auto longest = accel::util::run_child({"/bin/sh", "-c", "echo ok"}, tmp.path / "log",
                                              [](const std::string&) {}, {}, {}, accel::util::kMaxTimeoutS);
  CHECK_FALSE(longest.timed_out);
  CHECK(longest.exit_code == 0);
  CHECK(longest.last_line == "ok");
  for (const double bad : {1e10, 9.3e9, accel::util::kMaxTimeoutS * 1.01, -1.0,
                           std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(accel::util::run_child({"/bin/sh", "-c", "touch started"}, tmp.path / "log2",
                                           [](const std::string&) {}, tmp.path, {}, bad),
                    accel::RunError);
  }
  CHECK_FALSE(std::filesystem::exists(tmp.path / "started"));
}

TEST_CASE("progress channel: without on_event the child gets no channel, and a stray value is no channel") {
  accel_test::TempDir tmp;
  std::vector<std::string> lines;
  ::setenv(accel::util::kProgressFdEnv, "1", 1);  // ours, inherited: must not reach the child
  const auto out = accel::util::run_child({"/bin/sh", "-c", "echo \"[${ACCEL_PROGRESS_FD-unset}]\""},
                                          tmp.path / "log", [&](const std::string& l) { lines.push_back(l); });
  CHECK(out.exit_code == 0);
  CHECK(lines == std::vector<std::string>{"[unset]"});
  // fd 1 here is no pipe under ctest's capture in every case; a number that is
  // not an open pipe, or not a number, is never a channel.
  ::setenv(accel::util::kProgressFdEnv, "987", 1);
  CHECK(accel::util::progress_channel_from_env() == -1);
  ::setenv(accel::util::kProgressFdEnv, "3x", 1);
  CHECK(accel::util::progress_channel_from_env() == -1);
  ::unsetenv(accel::util::kProgressFdEnv);
  CHECK(accel::util::progress_channel_from_env() == -1);
}

TEST_CASE("report: a gpu's float32 peak is tf32 when the run allowed tf32 matmuls") {
  accel_test::TempDir tmp;
  const auto file = tmp.write("peaks.json", R"({"gpus": [{"name": "NVIDIA H200 SXM", "match": ["H200"],
      "dense_tflops": {"fp32": 67, "tf32": 494.5, "bf16": 989.5}, "source": "datasheet"}]})");
  const auto peaks = PeakTable::load(file, "");
  RunRecord run;
  run.env = {{"gpu_count", 1}, {"gpu_name", "NVIDIA H200"}};
  run.config = {{"runtime", {{"accelerator", "cuda"}, {"precision", "32-true"},
                             {"matmul_precision", "highest"}}}};
  run.device = "cuda:0";
  run.accelerator = "cuda";  // what reading its result.json resolves
  REQUIRE(peaks.for_run(run).has_value());
  CHECK(peaks.for_run(run)->flops_per_s == doctest::Approx(67e12));
  run.config["runtime"]["matmul_precision"] = "medium";
  CHECK(peaks.for_run(run)->flops_per_s == doctest::Approx(494.5e12));
  run.config["runtime"]["precision"] = "bf16-mixed";
  CHECK(peaks.for_run(run)->flops_per_s == doctest::Approx(989.5e12));
}

TEST_CASE("report: multi-rank rungs are predicted from the one-rank rung of a rank's threads, with a chart, and priced") {
  accel_test::TempDir tmp;
  FakeRun two_threads, one_core, ddp;
  two_threads.threads = 2;
  one_core.threads = 1;
  ddp.threads = 1;
  ddp.time_s = 400;
  ddp.images_per_s = 180;
  ddp.mem = {1e9, 1e9};
  ddp.config_patch = {{"runtime", {{"devices", 2}, {"strategy", "ddp"}}}};
  SetBuilder b(tmp.path);
  b.rung("04", "04", {two_threads}).rung("04b", "", {one_core}).rung("05", "05", {ddp}).write();
  // What predict reads beyond the report's fields: the split, the layout, the data.
  const Json layout = {{"param_numels", {1000000, 1000}}, {"element_bytes", 4},
                       {"units", {{{"name", "body"}, {"numel", 1000000}, {"compute_numel", 1000000}},
                                  {{"name", "head"}, {"numel", 1000}, {"compute_numel", 1000}}}}};
  for (const auto& [id, step] : {std::pair{"04", 60.0}, std::pair{"04b", 100.0}, std::pair{"05", 110.0}}) {
    auto r = report_test::read_json(tmp / id / "result.json");
    r["world_size"] = std::string(id) == "05" ? 2 : 1;
    r["threads"] = std::string(id) == "04" ? 2 : 1;
    r["steps"] = 100;
    r["step_time_ms"] = {{"mean", step}};
    r["step_split_ms"] = {{"forward", step / 3}, {"backward", 2 * step / 3}, {"optimizer", 0.0},
                          {"other", 0.0}, {"comm_wait", 0.0}};
    r["model_layout"] = layout;
    r["data"] = {{"train", 1600}, {"val", 160}};
    r["ranks"] = {{{"param_bytes", 4004000}, {"grad_bytes", 4004000}, {"optimizer_bytes", 8008000}}};
    report_test::write_json(tmp / id / "result.json", r);
  }
  const Json fit = {{"alpha_s", 1e-4}, {"beta_s_per_byte", 1e-9}};
  report_test::write_json(tmp / "peaks.json",
                          {{"cpu", {{"fp32", {{"1", 100.0}, {"2", 180.0}}}}},
                           {"comm", {{"backend", "gloo"}, {"ranks", 2}, {"threads_per_rank", 1},
                                     {"collectives", {{"all_reduce", fit}, {"all_gather", fit}, {"reduce_scatter", fit}}}}}});
  auto rep = build_report(load_result_set(tmp.path), PeakTable::load("", tmp / "peaks.json"));
  REQUIRE(rep.scaling.size() == 1);
  const auto& line = rep.scaling.front();
  CHECK(line.base == "04b");  // a rank's own device, not the two-thread rung nearer the top
  REQUIRE(line.rows.size() == 8);
  CHECK(line.rows[0].step_ms == doctest::Approx(100));
  // 2 ranks on Gloo (no overlap): 100 ms + one 4 MB all-reduce + the 16-byte metrics one.
  const double ar = [](double bytes) { return 2 * (1e-4 / 2 + bytes / 2 * 1e-9) * 1e3; }(4004000);
  CHECK(line.rows[1].step_ms > 100 + ar);
  CHECK(line.measured_step_ms.value_or(0) == doctest::Approx(110));
  const auto md = report_markdown(rep);
  CHECK(has(md, "## Predicted scaling"));
  CHECK(has(md, "| 05 | 04b | ddp | 2 |"));
  const auto charts = chart_data(rep);
  REQUIRE(charts.back().name == "scaling");
  CHECK(charts.back().kind == "lines");
  CHECK(std::count(charts.back().csv.begin(), charts.back().csv.end(), '\n') == 9);  // header + 1..8

  add_costs(rep, 2.0, "test");
  CHECK(*row(rep, "05").cost == doctest::Approx(2.0 * 1 * 400 / 3600));  // one CPU machine
  CHECK(*row(rep, "05").cost_per_point == doctest::Approx(*row(rep, "05").cost / 80.0));
  CHECK(has(report_markdown(rep), "## Cost"));

  // Without a comm fit: no prediction, and the notes say how to get one.
  report_test::write_json(tmp / "peaks.json", {{"cpu", {{"fp32", {{"1", 100.0}}}}}});
  const auto bare = build_report(load_result_set(tmp.path), PeakTable::load("", tmp / "peaks.json"));
  CHECK(bare.scaling.empty());
  CHECK(has(report_markdown(bare), "calibrate --comm"));
}

TEST_CASE("report: on a set scaled to its budget, the predicted steps at N devices keep the budget's share of N's batches, as the measured rung did") {
  accel_test::TempDir tmp;
  FakeRun one_core, ddp;
  one_core.threads = ddp.threads = 1;
  // 1600 samples in batches of 16: 100 batches a rank alone, 50 a rank of
  // two; the budget kept half of each (50 and 25), for 3 epochs.
  one_core.config_patch = {{"train", {{"limit_train_batches", 50}}}};
  ddp.config_patch = {{"train", {{"limit_train_batches", 25}}}, {"runtime", {{"devices", 2}, {"strategy", "ddp"}}}};
  ddp.mem = {1e9, 1e9};
  SetBuilder b(tmp.path);
  b.rung("04b", "", {one_core}).rung("05", "05", {ddp});
  b.manifest["budget"] = {{"minutes", 10}, {"fraction", 0.5}};
  b.manifest["rungs"][0]["budget_sets"] = {"train.limit_train_batches=50"};
  b.manifest["rungs"][1]["budget_sets"] = {"train.limit_train_batches=25"};
  b.write();
  const Json layout = {{"param_numels", {1000000, 1000}}, {"element_bytes", 4},
                       {"units", {{{"name", "body"}, {"numel", 1000000}, {"compute_numel", 1000000}},
                                  {{"name", "head"}, {"numel", 1000}, {"compute_numel", 1000}}}}};
  for (const auto& [id, steps] : {std::pair{"04b", 150}, std::pair{"05", 75}}) {
    auto r = report_test::read_json(tmp / id / "result.json");
    r["world_size"] = std::string(id) == "05" ? 2 : 1;
    r["threads"] = 1;
    r["steps"] = steps;
    r["train_time_s"] = steps * 0.1 + 5;
    r["step_time_ms"] = {{"mean", 100.0}};
    r["step_split_ms"] = {{"forward", 33.3}, {"backward", 66.7}, {"optimizer", 0.0}, {"other", 0.0}, {"comm_wait", 0.0}};
    r["model_layout"] = layout;
    r["data"] = {{"train", 1600}, {"val", 160}};
    r["ranks"] = {{{"param_bytes", 4004000}, {"grad_bytes", 4004000}, {"optimizer_bytes", 8008000}}};
    report_test::write_json(tmp / id / "result.json", r);
  }
  const Json fit = {{"alpha_s", 1e-4}, {"beta_s_per_byte", 1e-9}};
  report_test::write_json(tmp / "peaks.json",
                          {{"cpu", {{"fp32", {{"1", 100.0}}}}},
                           {"comm", {{"backend", "gloo"}, {"ranks", 2}, {"threads_per_rank", 1},
                                     {"collectives", {{"all_reduce", fit}, {"all_gather", fit}, {"reduce_scatter", fit}}}}}});
  const auto rep = build_report(load_result_set(tmp.path), PeakTable::load("", tmp / "peaks.json"));
  REQUIRE(rep.scaling.size() == 1);
  const auto& rows = rep.scaling.front().rows;
  REQUIRE(rows.size() == 8);
  CHECK(rows[0].steps == 150);  // the base's own
  CHECK(rows[1].steps == 75);   // as the 2-rank rung ran: half of its 50 a rank, 3 epochs
  CHECK(rows[3].steps == 36);   // 4 devices: floor(0.5 x 25) x 3
  // So the predicted training time follows the predicted step: steps x step + what lies outside the steps, shared.
  CHECK(rows[1].train_time_s == doctest::Approx(75 * rows[1].step_ms / 1e3 + 5.0 / 2));
  // The same set unscaled: the cap is a count, kept as the run was.
  SetBuilder b2(tmp.path / "full");
  b2.rung("04b", "", {one_core}).rung("05", "05", {ddp}).write();
  for (const char* id : {"04b", "05"}) {
    report_test::write_json(tmp.path / "full" / id / "result.json", report_test::read_json(tmp / id / "result.json"));
  }
  const auto full = build_report(load_result_set(tmp.path / "full"), PeakTable::load("", tmp / "peaks.json"));
  REQUIRE(full.scaling.size() == 1);
  CHECK(full.scaling.front().rows[1].steps == 150);  // min(50 a rank of two, the base's cap of 50) x 3
}

// --- planning a sweep: a run's work, the estimate, the ETA -------------------

namespace {

accel::config::RunConfig work_config() {
  accel::config::RunConfig c;
  c.train.epochs = 3;
  c.train.batch_size = 16;
  return c;
}

}  // namespace

TEST_CASE("work: the plan counts steps, validations and test passes as the loop runs them") {
  using accel::train::plan_work;
  auto c = work_config();
  const accel::train::SplitSizes n{100, 30, 50};
  auto w = plan_work(c, n, 1);
  CHECK(w.batches_per_epoch == 6);  // 100 / 16, the last short batch dropped
  CHECK(w.steps == 18);
  CHECK(w.train_samples == 18 * 16);
  CHECK(w.val_passes == 3);          // one per epoch
  CHECK(w.val_samples_per_pass == 30);
  CHECK(w.test_passes == 1);
  CHECK(w.test_samples_per_pass == 50);
  CHECK(w.forward_units() == doctest::Approx(3 * 288 + 90 + 50));
  // train.max_steps inside an epoch: that epoch ends without its validation.
  c.train.max_steps = 10;
  w = plan_work(c, n, 1);
  CHECK(w.steps == 10);
  CHECK(w.val_passes == 1);
  c.train.max_steps = 12;  // at an epoch's end: its validation runs
  CHECK(plan_work(c, n, 1).val_passes == 2);
  // Every 4th step too, but not where an epoch ends (step 12 validates once).
  c.train.max_steps = 0;
  c.train.val_every_steps = 4;
  CHECK(plan_work(c, n, 1).val_passes == 3 + 3);
  // best_val tests the last weights and, where they differ, the best ones.
  c.train.test_weights = "best_val";
  CHECK(plan_work(c, n, 1).test_passes == 2);
  CHECK(plan_work(c, {100, 0, 50}, 1).test_passes == 1);  // no validation samples
  // Bounded evaluations.
  c.train.limit_eval_batches = 1;
  c.train.eval_batch_size = 8;
  w = plan_work(c, n, 1);
  CHECK(w.val_samples_per_pass == 8);
  CHECK(w.test_samples_per_pass == 8);
  // Two ranks: half the batches each, twice the samples a step; evaluation
  // split over the ranks (each its limit).
  w = plan_work(c, n, 2);
  CHECK(w.batches_per_epoch == 3);
  CHECK(w.train_samples == w.steps * 16 * 2);
  CHECK(w.val_samples_per_pass == 16);
  c.train.limit_eval_batches = 0;
  CHECK(plan_work(c, n, 2).test_samples_per_pass == 50);
  CHECK(plan_work(c, {10, 30, 50}, 1).steps == 0);  // no full batch: the run refuses it
}

TEST_CASE("eta: the time left is the estimates of the runs left, scaled as the finished ones came out") {
  EtaTracker eta;
  eta.plan("a", 10.0, false);
  eta.plan("b", 20.0, false);
  eta.plan("c", 100.0, true);  // an emulated precision, priced apart
  eta.plan("d", std::nullopt, false);
  CHECK(eta.remaining_s() == doctest::Approx(130));
  CHECK(eta.unknown_remaining() == 1);
  eta.done("a", 20.0);  // twice the estimate
  CHECK(eta.remaining_s() == doctest::Approx(2 * 20 + 2 * 100));
  eta.done("c", 50.0);  // half: the emulated kind has its own factor now
  CHECK(eta.remaining_s() == doctest::Approx(2 * 20));
  CHECK(eta.line(75) == "2 of 4 runs done in 1m15s; about 40s left + 1 run not estimated");
  eta.done("b", std::nullopt);  // failed: says nothing of the speed
  CHECK(eta.remaining_s() == doctest::Approx(0));
  CHECK(eta.line(80) == "3 of 4 runs done in 1m20s; 1 run not estimated");
  CHECK(duration_text(3725) == "1h02m");
  CHECK(duration_text(59.4) == "59s");
}

TEST_CASE("estimate: a committed rung's time, scaled by the planned work and the two machines' matmul peaks") {
  accel_test::TempDir tmp;
  // A committed set of another machine: rung 01 took 110 s (10 s set-up) for
  // 3 epochs of 100 samples, in fp32 at 2 threads, where fp32 runs 200 GFLOP/s.
  report_test::FakeRun f;
  f.threads = 2;
  f.config_patch = {{"train", {{"epochs", 3}, {"batch_size", 10}}}};
  const auto ref = tmp / "results" / "other-2c";
  report_test::SetBuilder(ref, "other-2c").rung("01", "01", {f}).write();
  auto result = report_test::read_json(ref / "01" / "result.json");
  result["init_time_s"] = 10.0;
  result["threads"] = 2;
  result["data"] = {{"train", 100}, {"val", 20}, {"test", 50}};
  report_test::write_json(ref / "01" / "result.json", result);
  auto manifest = report_test::read_json(ref / "sweep.json");
  manifest["rungs"][0]["runs"][0]["wall_s"] = 110.0;
  manifest["finished_at"] = "2026-12-01T00:00:00Z";
  report_test::write_json(ref / "sweep.json", manifest);
  report_test::write_json(ref / "peaks.json", {{"cpu", {{"fp32", {{"2", 200.0}}}, {"bf16", {{"2", 400.0}}}}}});
  // This machine runs fp32 at 100 GFLOP/s and emulates bf16 at 5.
  const auto here = tmp / "peaks-here.json";
  report_test::write_json(here, {{"cpu", {{"fp32", {{"1", 60.0}, {"2", 100.0}}}, {"bf16", {{"2", 5.0}}}}}});
  const Estimator est(tmp / "results", here, "this-2c");
  REQUIRE_FALSE(est.basis().empty());
  auto cfg = accel::config::to_run_config(
      accel::config::resolve_config(result["config"], ref / "01"));
  RunShape run;
  run.rung = "01";
  run.precision = "32-true";
  run.threads = 2;
  run.work = accel::train::plan_work(cfg, {100, 20, 50}, 1);
  CHECK(*est.seconds(run) == doctest::Approx(10 + 100 * 2));  // half the speed: twice the time
  const double units = run.work.forward_units();
  CHECK(units == doctest::Approx(3 * 300 + 3 * 20 + 50));
  cfg.train.epochs = 1;  // a third of the training, the same test pass
  run.work = accel::train::plan_work(cfg, {100, 20, 50}, 1);
  CHECK(*est.seconds(run) == doctest::Approx(10 + 100 * 2 * run.work.forward_units() / units));
  run.precision = "bf16-mixed";  // priced by the emulation's own speed
  CHECK(*est.seconds(run) == doctest::Approx(10 + 100 * 40 * run.work.forward_units() / units));
  run.rung = "02";  // no committed run of it
  CHECK_FALSE(est.seconds(run).has_value());
  // Without this machine's peaks nothing of another machine scales.
  CHECK_FALSE(Estimator(tmp / "results", "", "this-2c").seconds(run).has_value());
  // This machine's own set needs no peaks.
  run.rung = "01";
  run.precision = "32-true";
  CHECK(*Estimator(tmp / "results", "", "other-2c").seconds(run) ==
        doctest::Approx(10 + 100 * run.work.forward_units() / units));
}

TEST_CASE("budget: every scalable run keeps the share of its training that makes the total fit") {
  // 150 s fixed, evaluated or capped (50 s of training under train.max_steps), 200 s scalable.
  const std::vector<RunCost> runs = {{10, 100, 20, true}, {10, 100, 10, true}, {10, 50, 40, false}};
  CHECK(budget_fraction(runs, 400, 0.3) == doctest::Approx(1.0));  // 350 s fits
  CHECK(budget_fraction(runs, 320, 0.3) == doctest::Approx(1.0));  // within 10%: as configured
  CHECK(budget_fraction(runs, 310, 0.3) == doctest::Approx(0.8));  // (310 - 150) / 200
  CHECK(budget_fraction(runs, 250, 0.3) == doctest::Approx(0.5));  // (250 - 150) / 200
  CHECK(budget_fraction(runs, 100, 0.3) == doctest::Approx(0.3));  // never below the floor
  CHECK(budget_fraction({{10, 0, 5, true}}, 1, 0.3) == doctest::Approx(1.0));  // nothing to scale
}

TEST_CASE("report: the strategy column is the one the run resolved, not the config's auto") {
  accel_test::TempDir tmp;
  report_test::FakeRun f;
  f.config_patch = {{"runtime", {{"strategy", "auto"}}}};
  report_test::SetBuilder(tmp.path).rung("00", "00", {f}).write();
  auto doc = report_test::read_json(tmp / "00" / "result.json");
  doc["strategy"] = "single";
  report_test::write_json(tmp / "00" / "result.json", doc);
  const auto rep = build_report(load_result_set(tmp.path), PeakTable{});
  CHECK(row(rep, "00").strategy == "single");
}

namespace {

// A run that trained with train.target 0.9 and reached it after `samples`
// (`seconds`), or missed it (samples 0).
FakeRun to_target(double samples, double seconds) {
  FakeRun f;
  f.target = {{"metric", "val_acc"}, {"value", 0.9}, {"reached", samples > 0}, {"evaluations", 10}};
  if (samples > 0) {
    f.target["samples"] = samples;
    f.target["time_s"] = seconds;
    f.target["step"] = samples / 16;
  }
  return f;
}

std::vector<FakeRun> runs_to_target(const std::vector<double>& samples) {
  std::vector<FakeRun> out;
  for (double s : samples) out.push_back(to_target(s, s / 100));
  return out;
}

}  // namespace

TEST_CASE("report: time to target is MLPerf-scored per rung and each rung's convergence checked against the suite's reference rung") {
  accel_test::TempDir tmp;
  // MLPerf's worked example in samples (epochs x 1000): the reference of ten
  // runs, S1 within what it allows, S2 faster than it allows; a rung that
  // converges slower; one with one miss (scored) and one with two (invalid).
  SetBuilder b(tmp.path);
  b.target(0.9).reference(reference());
  b.manifest["convergence_reference"] = "01-ref";
  b.rung("01-ref", "01", runs_to_target({16e3, 14e3, 16e3, 17e3, 16e3, 16e3, 15e3, 16e3, 15e3, 16e3}));
  b.rung("02-s1", "", runs_to_target({15e3, 15e3, 15e3, 16e3, 16e3}));
  b.rung("03-s2", "", runs_to_target({14e3, 14e3, 14e3, 15e3, 16e3}));
  b.rung("04-slow", "", runs_to_target({18e3, 18e3, 19e3, 18e3, 18e3}));
  b.rung("05-one-miss", "", runs_to_target({16e3, 0, 15e3, 16e3, 16e3}));
  b.rung("06-two-miss", "", runs_to_target({16e3, 0, 0, 16e3, 16e3}));
  b.write();
  const auto rep = build_report(load_result_set(tmp.path), PeakTable{});
  REQUIRE(rep.targets.size() == 6);
  const auto score = [&](const std::string& id) -> const TargetScore& {
    for (const auto& t : rep.targets) {
      if (t.id == id) return t;
    }
    FAIL("no score " << id);
    throw;
  };
  CHECK(score("01-ref").time_s.mean == doctest::Approx(157.5));  // 15.75e3 samples at 100/s
  CHECK(score("01-ref").convergence->verdict == "same");
  CHECK(score("02-s1").convergence->verdict == "same");
  CHECK(score("02-s1").convergence->min_mean == doctest::Approx(15212.6).epsilon(1e-4));
  CHECK(*score("02-s1").normalised_time_s == doctest::Approx(15.75e3 / 100));  // x 15.75 / 15.33
  CHECK(score("03-s2").convergence->verdict == "faster");
  CHECK(score("04-slow").convergence->verdict == "slower");
  CHECK(*score("04-slow").normalised_time_s == doctest::Approx(score("04-slow").time_s.mean));
  CHECK(score("05-one-miss").time_s.valid);
  CHECK(score("05-one-miss").reached == 4);
  CHECK(score("05-one-miss").time_s.mean == doctest::Approx(160));  // 15e3 dropped, the miss dropped
  CHECK_FALSE(score("06-two-miss").time_s.valid);
  CHECK_FALSE(score("06-two-miss").convergence.has_value());
  const auto md = report_markdown(rep);
  CHECK(has(md, "## Time to target, MLPerf-scored"));
  CHECK(has(md, "| 03-s2 | 5 | 5 | "));
  CHECK(has(md, "| faster |"));
  CHECK(has(md, "| slower |"));
  CHECK(has(md, "2 of 5 runs missed the target"));
  // The article's time and accuracy beside the reference rung.
  CHECK(has(md, "| 20.00 min | 95.00% |"));
  // compare and the report's main table read the run's own record, not epoch sums.
  CHECK(*time_to_target(load_result_set(tmp.path).rungs[0].repeats[0], 0.9) == doctest::Approx(160));
}

TEST_CASE("report: where calibrate measured bf16 matmuls no faster than fp32, a bf16 rung's note says so with the two figures") {
  accel_test::TempDir tmp;
  const auto peaks_file = tmp / "peaks.json";
  report_test::write_json(peaks_file, {{"cpu", {{"fp32", {{"1", 153.0}, {"2", 310.7}}}, {"bf16", {{"1", 82.5}, {"2", 161.5}}}}}});
  auto peaks = PeakTable::load("", peaks_file);
  const auto note = peaks.precision_limit_note("bf16-mixed", 2);
  CHECK(has(note, "bf16 matmuls measured 161.5 GFLOP/s against fp32's 310.7 at 2 threads on this CPU"));
  CHECK(has(note, "slower than fp32, so bf16-mixed is expected no faster than 32-true here"));
  CHECK(has(peaks.precision_limit_note("bf16-true", 1), "82.5 GFLOP/s against fp32's 153.0 at 1 thread "));
  CHECK(peaks.precision_limit_note("32-true", 2).empty());
  // Faster, but not by enough to pay for the casts; and faster by enough.
  report_test::write_json(peaks_file, {{"cpu", {{"fp32", {{"2", 300.0}}}, {"bf16", {{"2", 330.0}}}}}});
  CHECK(has(PeakTable::load("", peaks_file).precision_limit_note("bf16-mixed", 2), "not enough faster to pay for the casts"));
  report_test::write_json(peaks_file, {{"cpu", {{"fp32", {{"2", 300.0}}}, {"bf16", {{"2", 1200.0}}}}}});
  CHECK(PeakTable::load("", peaks_file).precision_limit_note("bf16-mixed", 2).empty());
  // In the report, beside the rung.
  report_test::write_json(peaks_file, {{"cpu", {{"fp32", {{"1", 153.0}, {"2", 310.7}}}, {"bf16", {{"1", 82.5}, {"2", 161.5}}}}}});
  FakeRun fp32, bf16;
  bf16.config_patch = {{"runtime", {{"precision", "bf16-mixed"}}}};
  SetBuilder(tmp.path / "s").rung("01-finetune", "01", {fp32}).rung("04-bf16-mixed", "04", {bf16}).write();
  const auto md = report_markdown(build_report(load_result_set(tmp.path / "s"), PeakTable::load("", peaks_file)));
  CHECK(has(md, "04-bf16-mixed: bf16 matmuls measured 161.5 GFLOP/s against fp32's 310.7 at 2 threads"));
  CHECK_FALSE(has(md, "01-finetune: bf16 matmuls"));
}

TEST_CASE("report: a result's accelerator is its plan's, an older result's its device's row") {
  nlohmann::json doc = {{"status", "ok"}, {"device", "cuda:1"},
                        {"config", {{"runtime", {{"accelerator", "auto"}}}}}};
  CHECK(accel::train::run_record_of(doc, ".").accelerator == "cuda");
  doc["device"] = "cpu";
  CHECK(accel::train::run_record_of(doc, ".").accelerator == "cpu");
  // No device recorded: the config's accelerator by the rows' one rule on its env's machine.
  doc.erase("device");
  doc["env"] = {{"gpu_count", 1}};
  CHECK(accel::train::run_record_of(doc, ".").accelerator == "cuda");
  doc["plan"] = {{"accelerator", "cpu"}};
  CHECK(accel::train::run_record_of(doc, ".").accelerator == "cpu");
  CHECK(accel::train::run_record_of(doc, ".").plan["accelerator"] == "cpu");
}

TEST_CASE("calibration file: each measure replaces its own blocks and keeps the others, and a file that is no object is refused") {
  accel_test::TempDir tmp;
  const auto file = tmp / "peaks" / "m.json";  // its folder is made
  update_calibration_file(file, "m1", Json{{"cpu", {{"fp32", 1}}}, {"measured_at", "t0"}});
  update_calibration_file(file, "m2", Json{{"comm", {{"backend", "gloo"}}}});
  update_calibration_file(file, "m3", Json{{"noise", {{"machine", Json::object()}}}});
  auto doc = accel::read_json_file(file);
  CHECK(doc["machine_id"] == "m1");  // set where it had none, then kept
  CHECK(doc["cpu"]["fp32"] == 1);
  CHECK(doc["comm"]["backend"] == "gloo");
  CHECK(doc["noise"].is_object());
  // A new matmul calibration replaces the peaks and keeps the comm fit and the noise.
  update_calibration_file(file, "m1", Json{{"cpu", {{"fp32", 2}}}, {"machine_id", "m1"}});
  doc = accel::read_json_file(file);
  CHECK(doc["cpu"]["fp32"] == 2);
  CHECK(doc["comm"]["backend"] == "gloo");
  CHECK(doc["noise"].is_object());
  const auto list = tmp.write("list.json", "[1, 2]");
  CHECK_THROWS_WITH_AS(update_calibration_file(list, "m", Json{{"comm", 1}}),
                       doctest::Contains("list.json: not a JSON object"), accel::ConfigError);
  CHECK(accel::read_json_file(list) == Json::array({1, 2}));  // left as it was
}
