// The sweep, report, compare and calibrate commands through the real CLI:
// a tiny synthetic suite (an upstream run, two rungs that run, one that
// fails, one this machine cannot run), --resume, repeats, exit codes, and the
// smoke suite checked against the committed smoke baseline.
// torch first: glog (through torch) defines CHECK, doctest must win.
#include <torch/torch.h>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <functional>
#include <algorithm>
#include <sstream>
#include <string>
#include <thread>

#include "accel/util/json.h"

#include "accel/metrics/metrics.h"
#include "accel/config/run_config.h"
#include "unit/test_report_fixtures.h"
#include "accel/results/charts.h"
#include "integration/cli_helpers.h"
#include "support/read_text.h"
#include "support/temp_dir.h"

namespace fs = std::filesystem;
using namespace cli_test;
using Json = nlohmann::json;

namespace {

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

Json read(const fs::path& f) {
  std::ifstream in(f);
  return Json::parse(in);
}

// Each label is in the sweep's output, in the order given.
void check_started_in_order(const std::string& output, const std::vector<const char*>& labels) {
  std::vector<size_t> at;
  for (const char* label : labels) {
    at.push_back(output.find(label));
    CHECK_MESSAGE(at.back() != std::string::npos, label);
  }
  CHECK(std::is_sorted(at.begin(), at.end()));
}

// A ViT of one block on 64 synthetic images, two batches per epoch.
const char* kTiny = R"({
  "name": "tiny",
  "model": { "preset": "vit_tiny_fmnist", "depth": 1 },
  "data": { "dataset": "synthetic", "synthetic_train": 64, "synthetic_test": 32 },
  "optim": { "lr": 1e-3 },
  "train": { "epochs": 2, "batch_size": 8, "limit_train_batches": 2, "limit_eval_batches": 1,
             "log_every": 1, "warmup_steps": 0 },
  "runtime": { "threads": 1 }
})";

// The suite: upstream "up", rung 00 from scratch, 01 failing (its init
// checkpoint does not exist), 02 needing CUDA, 03 finetuning from "up".
fs::path write_tiny_suite(const accel_test::TempDir& tmp) {
  tmp.write("suite/tiny.json", kTiny);
  tmp.write("suite/broken.json",
            R"({"extends": "tiny.json", "model": {"init": {"checkpoint": "no-such.ckpt"}}})");
  tmp.write("suite/from-up.json",
            R"({"extends": "tiny.json", "model": {"init": {"checkpoint": "runs/up/checkpoint.ckpt"},
                "init_head": "replace"}, "train": {"epochs": 1}})");
  return tmp.write("suite/suite.json", R"({
    "suite": "tiny",
    "target_accuracy": 0.01,
    "upstream": [ { "id": "up", "config": "tiny.json", "changes": "upstream" } ],
    "rungs": [
      { "id": "00-scratch", "article": "00", "config": "tiny.json", "changes": "scratch" },
      { "id": "01-broken", "article": "01", "config": "broken.json", "changes": "fails" },
      { "id": "02-gpu", "article": "02", "needs": "CUDA", "changes": "needs a GPU" },
      { "id": "03-finetune", "article": "03", "config": "from-up.json", "init_from": "up",
        "changes": "from the upstream run" }
    ]
  })");
}

// Every run of a set did the work its sweep.json plan says: the training
// steps and samples, the validation passes and samples exactly, the test
// passes at most the plan's (best_val tests twice only where the best
// weights are not the last) over the planned samples each.
void check_work_as_planned(const fs::path& set) {
  const Json manifest = read(set / "sweep.json");
  int checked = 0;
  for (const char* key : {"upstream", "rungs"}) {
    for (const auto& rung : manifest[key]) {
      if (rung["status"] != "ok" || rung["runs"].empty()) continue;
      INFO(rung["id"].get<std::string>());
      const auto& plan = rung["planned"]["work"];
      for (const auto& run : rung["runs"]) {
        const auto work = read(set / run["dir"].get<std::string>() / "result.json")["work"];
        CHECK(work["train"]["steps"] == plan["steps"]);
        CHECK(work["train"]["samples"] == plan["train_samples"]);
        CHECK(work["val"]["passes"] == plan["val_passes"]);
        CHECK(work["val"]["samples"] == plan["val_samples"]);
        const auto passes = work["test"]["passes"].get<int>();
        CHECK(passes >= 1);
        CHECK(passes <= plan["test_passes_max"].get<int>());
        CHECK(work["test"]["samples"] == passes * plan["test_samples_per_pass"].get<int>());
        ++checked;
      }
    }
  }
  CHECK(checked > 0);
}

fs::path first_dir(const fs::path& dir) {
  for (const auto& s : fs::directory_iterator(dir)) return s.path();
  FAIL("nothing under " << dir);
  throw;
}

// Where a sweep of the tiny suite into OUT writes its set on this machine.
fs::path tiny_set_dir(const fs::path& out) {
  std::string id = run_cli("sweep --machine-id").output;
  id.erase(id.find_last_not_of("\n") + 1);
  return out / "tiny" / id;
}

fs::path the_set(const fs::path& out) {
  for (const auto& s : fs::directory_iterator(out / "tiny")) return s.path();
  FAIL("no result set under " << out);
  throw;
}

}  // namespace

TEST_CASE("sweep: a failing rung is recorded and the sweep goes on with exit 1 then report and resume" * doctest::test_suite("process")) {
  accel_test::TempDir tmp;
  const auto suite = write_tiny_suite(tmp);
  const auto out = tmp / "out";
  auto r = run_cli("sweep --suite " + suite.string() + " --out " + out.string());
  INFO(r.output);
  CHECK(r.code == 1);  // one rung failed
  const auto set = the_set(out);
  const auto manifest = read(set / "sweep.json");
  CHECK(manifest["upstream"][0]["status"] == "ok");
  CHECK(manifest["rungs"][0]["status"] == "ok");
  CHECK(manifest["rungs"][1]["status"] == "failed");
  CHECK(manifest["rungs"][2]["status"] == "skipped");
  CHECK(manifest["rungs"][3]["status"] == "ok");  // ran after the failure
  CHECK(has(manifest["rungs"][1]["runs"][0]["error"].get<std::string>(), "no-such.ckpt"));
  // The finetune rung started from the upstream run's checkpoint in this set.
  const auto ft = read(set / "03-finetune/result.json");
  CHECK(ft["config"]["model"]["init_path"] == (set / "up/checkpoint.ckpt").string());
  CHECK(fs::exists(set / "00-scratch/run.log"));
  CHECK(has(r.output, "sweep: 00-scratch: epoch 2/2 | train acc. "));  // plain lines: not a terminal
  // The config hash the sweep records is the one its ranks compare.
  CHECK(manifest["rungs"][0]["runs"][0]["config_hash"] ==
        accel::config::config_hash(read(set / "00-scratch/result.json")["config"]));

  r = run_cli("report " + out.string());
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(has(r.output, "| 01-broken | 01 | fails |"));
  CHECK(has(r.output, "| needs CUDA |"));
  CHECK(has(r.output, "time to 1.00% val"));
  CHECK(fs::exists(set / "report.md"));
  CHECK(fs::exists(set / "report.csv"));
  CHECK(fs::exists(set / "charts/runtime.csv"));
  CHECK(fs::exists(set / "charts/accuracy.csv"));

  // --resume reuses every finished run whose resolved config is unchanged.
  const auto before = fs::last_write_time(set / "00-scratch/result.json");
  r = run_cli("sweep --suite " + suite.string() + " --out " + out.string() + " --resume");
  CHECK(r.code == 1);  // the broken rung still fails
  CHECK(has(r.output, "00-scratch: reused"));
  CHECK(has(r.output, "up: reused"));
  CHECK(fs::last_write_time(set / "00-scratch/result.json") == before);
  // A changed config is run again.
  r = run_cli("sweep --suite " + suite.string() + " --out " + out.string() +
              " --resume --set train.seed=7");
  CHECK_FALSE(has(r.output, "00-scratch: reused"));
  CHECK(read(set / "00-scratch/result.json")["config"]["train"]["seed"] == 7);
}

TEST_CASE("sweep: SIGTERM is passed on to the running rung which checkpoints and the sweep stops with exit 3 then --resume continues the rung" * doctest::test_suite("process")) {
  accel_test::TempDir tmp;
  tmp.write("suite/tiny.json", kTiny);
  // Long enough to be stopped in: 8 batches x 30 epochs of the one-block ViT.
  tmp.write("suite/long.json", R"({"extends": "tiny.json", "train": {"epochs": 30,
      "limit_train_batches": 8, "checkpoint_every": 0}})");
  const auto suite = tmp.write("suite/suite.json", R"({
    "suite": "tiny",
    "rungs": [
      { "id": "00-long", "article": "00", "config": "long.json", "changes": "long" },
      { "id": "01-next", "article": "01", "config": "tiny.json", "changes": "next" }
    ]
  })");
  const auto out = tmp / "out";
  const auto log = tmp / "sweep.log";
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const std::string cmd = std::string("exec ") + ACCEL_BENCH_EXE + " sweep --suite " +
                            suite.string() + " --out " + out.string() + " > " + log.string() + " 2>&1";
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), nullptr);
    ::_exit(127);
  }
  // Once the first rung has written its config (it is training), stop the sweep.
  fs::path rung;
  for (int i = 0; i < 1500 && rung.empty(); ++i) {
    if (fs::exists(out / "tiny")) {
      for (const auto& s : fs::directory_iterator(out / "tiny")) {
        if (fs::exists(s.path() / "00-long" / "config.json")) rung = s.path() / "00-long";
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  REQUIRE_MESSAGE(!rung.empty(), "the first rung never started");
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ::kill(pid, SIGTERM);
  int st = 0;
  REQUIRE(::waitpid(pid, &st, 0) == pid);
  std::ifstream in(log);
  const std::string said((std::istreambuf_iterator<char>(in)), {});
  INFO(said);
  REQUIRE(WIFEXITED(st));
  REQUIRE_MESSAGE(read(rung / "result.json")["status"] != "ok",
                  "the rung finished before the signal: make it longer");
  CHECK(WEXITSTATUS(st) == 3);
  const auto set = rung.parent_path();
  auto manifest = read(set / "sweep.json");
  CHECK(manifest["rungs"][0]["status"] == "interrupted");
  CHECK(manifest["rungs"][1]["status"] == "pending");  // never started
  CHECK(manifest["stopped_by_signal"] == SIGTERM);
  CHECK(read(rung / "result.json")["status"] == "interrupted");
  REQUIRE(fs::exists(rung / "checkpoint.ckpt"));
  CHECK(has(said, "sweep --resume continues it"));
  // --resume continues that rung from its checkpoint, then runs the next.
  const auto r = run_cli("sweep --suite " + suite.string() + " --out " + out.string() + " --resume");
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(has(r.output, "00-long: continuing the interrupted run from its checkpoint"));
  manifest = read(set / "sweep.json");
  CHECK(manifest["rungs"][0]["status"] == "ok");
  CHECK(manifest["rungs"][1]["status"] == "ok");
  const auto done = read(rung / "result.json");
  CHECK(done["status"] == "ok");
  CHECK(done["epochs"].size() == 30);  // the whole run, not a fresh start's
  CHECK(done["steps"] == 30 * 7);      // 7 batches of 8 an epoch
}

TEST_CASE("sweep: repeats with seeds land in r1, r2, run round-robin across the rungs, and the report shows their median") {
  accel_test::TempDir tmp;
  tmp.write("s/tiny.json", kTiny);
  const auto suite = tmp.write("s/suite.json", R"({"suite": "tiny", "rungs": [
      {"id": "00-scratch", "article": "00", "config": "tiny.json"},
      {"id": "01-again", "article": "01", "config": "tiny.json"}]})");
  const auto out = tmp / "out";
  auto r = run_cli("sweep --suite " + suite.string() + " --out " + out.string() +
                   " --seeds 1,2,3 --set train.epochs=1");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto set = the_set(out);
  CHECK(read(set / "00-scratch/r1/result.json")["config"]["train"]["seed"] == 1);
  CHECK(read(set / "00-scratch/r2/result.json")["config"]["train"]["seed"] == 2);
  // Every rung's run 1, then every rung's run 2: drift falls on both alike.
  check_started_in_order(r.output, {"sweep: 00-scratch r1: started", "sweep: 01-again r1: started",
                                     "sweep: 00-scratch r2: started", "sweep: 01-again r2: started"});
  // The record keeps each rung's runs in repeat order.
  const auto manifest = read(set / "sweep.json");
  CHECK(manifest["rungs"][1]["runs"][0]["dir"] == "01-again/r1");
  CHECK(manifest["rungs"][1]["runs"][1]["dir"] == "01-again/r2");
  CHECK(manifest["rungs"][1]["status"] == "ok");
  r = run_cli("sweep --plan --suite " + suite.string() + " --seeds 1,2");
  CHECK(has(r.output, "go round-robin"));
  CHECK(read(set / "00-scratch/r3/result.json")["config"]["train"]["seed"] == 3);
  // The report's time is the median of the three, with their range: times
  // set to 10, 20 and 90 s give 20 (a mean would give 40).
  int i = 0;
  for (const double t : {90.0, 10.0, 20.0}) {
    const auto f = set / "00-scratch" / ("r" + std::to_string(++i)) / "result.json";
    auto doc = read(f);
    doc["train_time_s"] = t;
    std::ofstream(f) << doc.dump(2);
  }
  r = run_cli("report " + set.string());
  CHECK(r.code == 0);
  CHECK(has(r.output, "| ok |"));
  std::ifstream csv(set / "report.csv");
  std::string header, line, row;
  std::getline(csv, header);
  while (std::getline(csv, line)) {
    if (line.rfind("rung,00-scratch,", 0) == 0) row = line;
  }
  REQUIRE_FALSE(row.empty());
  auto cells = [](const std::string& text) {
    std::vector<std::string> out;
    std::stringstream in(text);
    for (std::string c; std::getline(in, c, ',');) out.push_back(c);
    return out;
  };
  const auto names = cells(header), values = cells(row);
  auto value = [&](const std::string& name) {
    const auto at = std::find(names.begin(), names.end(), name);
    REQUIRE(at != names.end());
    REQUIRE(size_t(at - names.begin()) < values.size());
    return values[size_t(at - names.begin())];
  };
  CHECK(value("runs") == "3");
  CHECK(value("ok_runs") == "3");
  CHECK(std::stod(value("train_time_s")) == 20.0);
  CHECK(std::stod(value("train_time_s_min")) == 10.0);
  CHECK(std::stod(value("train_time_s_max")) == 90.0);
}

TEST_CASE("sweep: timing runs follow every rung's full run round-robin and give the report between-run samples") {
  accel_test::TempDir tmp;
  tmp.write("s/tiny.json", kTiny);
  const auto suite = tmp.write("s/suite.json", R"({"suite": "tiny", "rungs": [
      {"id": "00-scratch", "article": "00", "config": "tiny.json"},
      {"id": "01-again", "article": "01", "config": "tiny.json"}]})");
  const auto out = tmp / "out";
  // 16 steps a run (8 batches, 2 epochs, no warm-up): a timing run takes 12.
  const std::string args = " --suite " + suite.string() + " --set train.limit_train_batches=8 --timing-runs 2";
  auto r = run_cli("sweep --plan" + args);
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(has(r.output, "then 2 timing runs of each of 2 rungs, round-robin (the rung's config, at most 12 steps"));
  r = run_cli("sweep --out " + out.string() + args);
  REQUIRE(r.code == 0);
  // Every full run first, then every rung's t1, then every rung's t2.
  check_started_in_order(r.output, {"sweep: 00-scratch: started", "sweep: 01-again: started",
                                     "sweep: 00-scratch t1: started", "sweep: 01-again t1: started",
                                     "sweep: 00-scratch t2: started", "sweep: 01-again t2: started"});
  const auto set = the_set(out);
  const auto t1 = read(set / "00-scratch/timing/t1/result.json");
  CHECK(t1["status"] == "ok");
  CHECK(t1["config"]["train"]["max_steps"] == 12);
  CHECK(t1["config"]["train"]["limit_eval_batches"] == 1);
  CHECK(t1["steps"] == 12);
  const auto manifest = read(set / "sweep.json");
  REQUIRE(manifest["rungs"][1]["timing_runs"].size() == 2);
  CHECK(manifest["rungs"][1]["timing_runs"][1]["dir"] == "01-again/timing/t2");
  CHECK(manifest["rungs"][1]["runs"].size() == 1);  // timing runs are not repeats
  r = run_cli("report " + set.string());
  CHECK(r.code == 0);
  CHECK(has(r.output, "| ok + 2 timing runs |"));
  const auto md = accel_test::read_text(set / "report.md");
  CHECK(has(md, "3 between-run samples a rung"));
  // Repeats are between-run samples already: the two together are refused.
  r = run_cli("sweep --plan" + args + " --repeats 3");
  CHECK(r.code == 2);
  CHECK(has(r.output, "--timing-runs: with several runs a rung"));
}

TEST_CASE("sweep: adaptive repeats run unresolved rungs again until they resolve or reach the cap and say what they spent") {
  accel_test::TempDir tmp;
  tmp.write("s/tiny.json", kTiny);
  const auto suite = tmp.write("s/suite.json", R"({"suite": "tiny", "rungs": [
      {"id": "00-scratch", "article": "00", "config": "tiny.json"}]})");
  const std::string sweep = "sweep --suite " + suite.string() + " --set train.epochs=1";
  auto r = run_cli(sweep + " --out " + (tmp / "base").string() + " --repeats 3");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto base = the_set(tmp / "base");
  // BASE's times set by hand: the verdicts no longer hang on this machine's noise.
  auto set_base = [&](const std::vector<double>& scale) {
    for (size_t i = 0; i < scale.size(); ++i) {
      const auto f = base / "00-scratch" / ("r" + std::to_string(i + 1)) / "result.json";
      auto doc = read(f);
      doc["train_time_s"] = 100 * scale[i];
      doc["step_time_ms"]["median"] = 1000 * scale[i];
      std::ofstream(f) << doc.dump(2);
    }
  };
  // BASE far slower: the first three runs resolve it (faster), nothing more runs.
  set_base({1, 1.01, 0.99});
  const std::string against = " --repeats auto --against " + base.string() + " --fail-slower 7 --max-repeats 4";
  r = run_cli(sweep + " --plan" + against);
  CHECK(r.code == 0);
  CHECK(has(r.output, "the 3 runs of each rung go round-robin"));
  CHECK(has(r.output, "then, round by round, one more run of each rung whose time against " + base.string() +
                          " is unresolved at 7%, to 4 runs a rung (not in the estimate); each look at 97.5% (95% split "
                          "over 2 looks)"));
  r = run_cli(sweep + " --out " + (tmp / "fast").string() + against);
  REQUIRE(r.code == 0);
  CHECK(has(r.output, "adaptive repeats against " + base.string() + " at 7% (97.5% intervals): 0 extra runs"));
  CHECK(has(r.output, "stopped by every rung resolved"));
  auto manifest = read(the_set(tmp / "fast") / "sweep.json");
  CHECK(manifest["rungs"][0]["runs"].size() == 3);
  CHECK(manifest["adaptive"]["extra_runs"] == 0);
  CHECK(manifest["adaptive"]["looks"] == 2);
  CHECK(manifest["adaptive"]["confidence"].get<double>() == doctest::Approx(0.975));
  CHECK(manifest["adaptive"]["unresolved"].empty());
  // BASE's runs scattered a hundredfold: no run count resolves it; the rung
  // runs to the cap (one more) and is reported open.
  set_base({0.01, 1, 100});
  r = run_cli(sweep + " --out " + (tmp / "open").string() + against);
  REQUIRE(r.code == 0);
  CHECK(has(r.output, "adaptive repeats: unresolved against " + base.string() +
                          " at 7% (97.5% intervals): 00-scratch (3 runs"));
  CHECK(has(r.output, "1 extra runs"));
  CHECK(has(r.output, "stopped by the cap of 4 runs a rung; still unresolved: 00-scratch (4 runs"));
  const auto open = the_set(tmp / "open");
  manifest = read(open / "sweep.json");
  CHECK(manifest["rungs"][0]["runs"].size() == 4);
  CHECK(manifest["rungs"][0]["runs"][3]["dir"] == "00-scratch/r4");
  CHECK(manifest["rungs"][0]["status"] == "ok");
  CHECK(manifest["adaptive"]["extra_runs"] == 1);
  CHECK(manifest["adaptive"]["rounds"].size() == 1);
  CHECK(manifest["adaptive"]["unresolved"][0]["rung"] == "00-scratch");
  CHECK(read(open / "00-scratch/r4/result.json")["status"] == "ok");
  // compare judges the set at the level its looks were judged at, and says so.
  r = run_cli("compare " + base.string() + " " + open.string() + " --fail-slower 7");
  CHECK(r.code == 4);
  CHECK(has(r.output, "every interval here is 97.5%"));
  CHECK(has(r.output, "| change [97.5% interval] |"));
  r = run_cli("compare " + base.string() + " " + open.string() + " --confidence 1");
  CHECK(r.code == 2);
  CHECK(has(r.output, "--confidence: a level from 0.5 to below 1, as 0.99 (got 1)"));
  // What it needs, said at once.
  r = run_cli(sweep + " --out " + (tmp / "x").string() + " --repeats auto");
  CHECK(r.code == 2);
  CHECK(has(r.output, "--repeats auto: give --against BASE_SET"));
  r = run_cli(sweep + " --out " + (tmp / "x").string() + " --against " + base.string());
  CHECK(r.code == 2);
  CHECK(has(r.output, "--against: only with --repeats auto"));
  r = run_cli(sweep + " --out " + (tmp / "x").string() + " --repeats often");
  CHECK(r.code == 2);
  CHECK(has(r.output, "--repeats: a whole number from 1 to 1000, or auto (got \"often\")"));
}

TEST_CASE("sweep: a committed upstream run with the same config is used and its rungs start from its safetensors") {
  accel_test::TempDir tmp;
  tmp.write("s/tiny.json", kTiny);
  tmp.write("s/from-up.json",
            R"({"extends": "tiny.json", "model": {"init": {"checkpoint": "runs/up/checkpoint.ckpt"},
                "init_head": "replace"}, "train": {"epochs": 1}})");
  // The upstream run made once and committed: its folder and its exported weights.
  const auto committed = tmp / "committed";
  auto r = run_cli("run -q -c " + (tmp / "s/tiny.json").string() + " --out " + committed.string());
  REQUIRE(r.code == 0);
  r = run_cli("export " + (committed / "checkpoint.ckpt").string() + " -o " +
              (committed / "model.safetensors").string());
  INFO(r.output);
  REQUIRE(r.code == 0);
  fs::remove(committed / "checkpoint.ckpt");  // what is committed: weights, not optimizer state
  const auto suite = tmp.write("s/suite.json", R"({"suite": "tiny",
    "upstream": [ { "id": "up", "config": "tiny.json", "committed": "../committed" } ],
    "rungs": [ {"id": "01-finetune", "article": "01", "config": "from-up.json", "init_from": "up"} ]})");
  const auto out = tmp / "out";
  r = run_cli("sweep --suite " + suite.string() + " --out " + out.string());
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(has(r.output, "up: committed run"));
  const auto set = the_set(out);
  const auto manifest = read(set / "sweep.json");
  CHECK(manifest["upstream"][0]["status"] == "committed");
  CHECK(fs::exists(set / "up/result.json"));  // the record is copied into the set for the report
  CHECK_FALSE(fs::exists(set / "up/checkpoint.ckpt"));  // and nothing was trained
  const auto ft = read(set / "01-finetune/result.json");
  CHECK(ft["config"]["model"]["init"] == "safetensors");
  CHECK(fs::equivalent(ft["config"]["model"]["init_path"].get<std::string>(),
                       committed / "model.safetensors"));
  CHECK(ft["init"]["loaded"].get<int>() > 0);
  r = run_cli("report " + set.string());
  CHECK(has(r.output, "up: the committed run in"));

  // A run committed before a schema field existed still matches: the field takes
  // its default when the committed config is resolved again.
  {
    auto res = read(committed / "result.json");
    REQUIRE(res["config"]["runtime"].erase("matmul_precision") == 1);
    std::ofstream(committed / "result.json") << res.dump(1);
  }
  r = run_cli("sweep --suite " + suite.string() + " --out " + out.string());
  CHECK(r.code == 0);
  CHECK(has(r.output, "up: committed run"));

  // Another upstream config (here a --set) is not what was committed: it runs.
  r = run_cli("sweep --suite " + suite.string() + " --out " + out.string() +
              " --set train.seed=5");
  CHECK(r.code == 0);
  CHECK(has(r.output, "was made by another config; running it"));
  CHECK(read(set / "sweep.json")["upstream"][0]["status"] == "ok");
  CHECK(read(set / "01-finetune/result.json")["config"]["model"]["init"] == "checkpoint");
  // --rerun-upstream runs it even when the config matches.
  r = run_cli("sweep --suite " + suite.string() + " --out " + out.string() + " --rerun-upstream");
  CHECK(r.code == 0);
  CHECK(read(set / "sweep.json")["upstream"][0]["status"] == "ok");
}

TEST_CASE("sweep: on a CPU that emulates bf16 a rung's where_emulated settings apply and the report says why" * doctest::test_suite("process")) {
  accel_test::TempDir tmp;
  tmp.write("s/tiny.json", kTiny);
  tmp.write("s/bf16.json",
            R"({"extends": "tiny.json", "train": {"loop": "fabric"}, "runtime": {"precision": "bf16-mixed"}})");
  const auto suite = tmp.write("s/suite.json", R"({"suite": "tiny", "rungs": [
      {"id": "04-bf16", "article": "04", "config": "bf16.json",
       "where_emulated": {"set": ["train.max_steps=1"], "note": "emulated: one step", "comparable": false}},
      {"id": "05-ddp", "article": "05", "config": "bf16.json",
       "where_emulated": {"set": ["runtime.precision=32-true"], "note": "not about bf16: fp32 here"}}]})");
  const auto out = tmp / "out";
  // An AVX2-only CPU (no AVX512-BF16, no AMX), as ACCEL_CPU_FLAGS makes this one look.
  auto r = run_cli_env("ACCEL_CPU_FLAGS='fpu avx2 fma'",
                       "sweep --suite " + suite.string() + " --out " + out.string());
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(has(r.output, "05-ddp: bf16-mixed is emulated on this CPU; running with runtime.precision=32-true"));
  const auto set = the_set(out);
  CHECK(has(set.filename().string(), "-avx2-"));  // the machine id says what the CPU can do
  const auto bf16 = read(set / "04-bf16/result.json");
  CHECK(bf16["config"]["runtime"]["precision"] == "bf16-mixed");  // the bf16 rung keeps bf16
  CHECK(bf16["steps"] == 1);                                         // cut short, as the suite says
  CHECK(bf16["precision_support"] == "emulated");
  REQUIRE(bf16["warnings"].size() == 1);
  CHECK(has(bf16["warnings"][0].get<std::string>(), "use runtime.precision=32-true"));
  CHECK(bf16["env"]["cpu_features"] == Json::array({"avx2", "fma"}));
  const auto ddp = read(set / "05-ddp/result.json");
  CHECK(ddp["config"]["runtime"]["precision"] == "32-true");
  CHECK(ddp["precision_support"] == "native");
  r = run_cli("report " + set.string());
  CHECK(has(r.output, "05-ddp: not about bf16: fp32 here (ran with runtime.precision=32-true)."));
  CHECK(has(r.output, "04-bf16: bf16-mixed is emulated on this CPU"));
  CHECK(has(r.output, "04-bf16: emulated: one step (ran with train.max_steps=1); cut short, so no speedup is given."));
  std::ifstream chart(set / "charts/runtime.csv");
  const std::string csv((std::istreambuf_iterator<char>(chart)), std::istreambuf_iterator<char>());
  CHECK(has(csv, "04-bf16 (cut short)"));

  // With native bf16 (AMX) nothing changes.
  const auto out2 = tmp / "out2";
  r = run_cli_env("ACCEL_CPU_FLAGS='fpu avx2 fma avx512f avx512_bf16 amx_tile amx_bf16'",
                  "sweep --suite " + suite.string() + " --out " + out2.string());
  REQUIRE(r.code == 0);
  const auto set2 = the_set(out2);
  CHECK(read(set2 / "05-ddp/result.json")["config"]["runtime"]["precision"] == "bf16-mixed");
  CHECK(read(set2 / "04-bf16/result.json")["warnings"].empty());
  CHECK(read(set2 / "04-bf16/result.json")["steps"] == 4);
}

TEST_CASE("sweep --budget: when the estimate exceeds it, every run trains the same share of its batches, said up front and in the report" * doctest::test_suite("process")) {
  accel_test::TempDir tmp;
  const auto suite = write_tiny_suite(tmp);
  // A committed set of this machine to estimate from: the tiny suite run once.
  auto r = run_cli("sweep --suite " + suite.string() + " --out " + (tmp / "committed").string());
  REQUIRE(r.code == 1);  // its rung 01 fails by design
  auto doc = read(suite);
  doc["results"] = "../committed/tiny";
  tmp.write("suite/budgeted.json", doc.dump(2));
  const auto budgeted = (tmp / "suite/budgeted.json").string();
  // As configured: 00 trains 2 epochs of 2 batches; a budget it fits changes nothing.
  r = run_cli("sweep --plan --suite " + budgeted + " --budget 60");
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(has(r.output, "budget 1h00m: the runs fit as configured"));
  r = run_cli("sweep --plan --json --suite " + budgeted + " --budget 0.001");
  REQUIRE(r.code == 0);
  const Json plan = Json::parse(r.output);
  CHECK(plan["fraction"] == doctest::Approx(0.3));  // the floor: no run trains less
  CHECK(plan["unscaled_estimate_s"].get<double>() > plan["estimate_s"].get<double>());
  const auto& rung = plan["suites"][0]["rungs"][1];
  REQUIRE(rung["id"] == "00-scratch");
  CHECK(rung["scaled"]["set"] == Json::array({"train.limit_train_batches=1"}));
  CHECK(rung["work"]["steps"] == 2);  // 1 batch in each of 2 epochs
  r = run_cli("sweep --plan --suite " + budgeted + " --budget 0.001");
  CHECK(has(r.output, "budget 0s: as configured the runs would take about"));
  CHECK(has(r.output, "trains 30% of its batches per epoch"));
  // The sweep runs what it planned, and the report says why.
  const auto out = tmp / "out";
  r = run_cli("sweep --suite " + budgeted + " --budget 0.001 --out " + out.string());
  INFO(r.output);
  CHECK(r.code == 1);
  CHECK(has(r.output, "trains 30% of its batches per epoch"));
  const auto set = the_set(out);
  check_work_as_planned(set);
  const Json manifest = read(set / "sweep.json");
  CHECK(manifest["budget"]["fraction"] == doctest::Approx(0.3));
  CHECK(read(set / "00-scratch/result.json")["steps"] == 2);
  r = run_cli("report " + set.string());
  CHECK(has(r.output, "Scaled to the sweep's 0-minute budget"));
}

TEST_CASE("sweep: a second sweep into a set that another is writing is refused at once naming its pid" * doctest::test_suite("process")) {
  accel_test::TempDir tmp;
  const auto suite = write_tiny_suite(tmp);
  const auto set = tiny_set_dir(tmp / "out");
  const accel::metrics::DirLock held(set, "sweep");  // as a running sweep holds it
  const auto r = run_cli("sweep --suite " + suite.string() + " --out " + (tmp / "out").string());
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(has(r.output, "another sweep (pid " + std::to_string(::getpid()) + ") is writing into this folder"));
  CHECK_FALSE(fs::exists(set / "sweep.json"));
  CHECK_FALSE(fs::exists(set / "00-scratch"));
}

TEST_CASE("sweep: a set's lock planted as a link to another file is refused, with or without --resume, and the file left as it is" * doctest::test_suite("process")) {
  accel_test::TempDir tmp;
  const auto suite = write_tiny_suite(tmp);
  const auto set = tiny_set_dir(tmp / "out");
  const auto victim = tmp.write("victim.txt", "keep me\n");
  fs::create_directories(set);
  fs::create_symlink(victim, set / ".lock");
  for (const char* resume : {"", " --resume"}) {
    CAPTURE(resume);
    const auto r = run_cli("sweep --suite " + suite.string() + " --out " + (tmp / "out").string() + resume);
    INFO(r.output);
    CHECK(r.code == 2);
    CHECK(has(r.output, (set / ".lock").string() + " is a symbolic link"));
    CHECK_FALSE(fs::exists(set / "sweep.json"));
    CHECK_FALSE(fs::exists(set / "00-scratch"));
    std::ifstream in(victim);
    CHECK(std::string(std::istreambuf_iterator<char>(in), {}) == "keep me\n");
  }
}

TEST_CASE("sweep and compare: bad arguments exit 2 and write nothing" * doctest::test_suite("process")) {
  accel_test::TempDir tmp;
  CHECK(run_cli("sweep --suite " + (tmp / "none.json").string()).code == 2);
  tmp.write("bad.json", R"({"suite": "x", "rungs": [], "oops": 1})");
  auto r = run_cli("sweep --suite " + (tmp / "bad.json").string() + " --out " +
                   (tmp / "o").string());
  CHECK(r.code == 2);
  CHECK(has(r.output, "unknown key \"oops\""));
  CHECK_FALSE(fs::exists(tmp / "o"));
  CHECK(run_cli("sweep --suite x.json --seeds 1,a").code == 2);
  const auto tiny = write_tiny_suite(tmp).string();
  r = run_cli("sweep --suite " + tiny + " --only 09-nope --out " + (tmp / "o2").string());
  CHECK(r.code == 2);
  CHECK(has(r.output, "--only: \"09-nope\" is not a rung of the suite (its rungs: 00-scratch, 01-broken"));
  CHECK(run_cli("sweep --suite " + tiny + " --budget -1 --out " + (tmp / "o").string()).code == 2);
  CHECK(run_cli("sweep --suite " + tiny + " --plan --peaks " + (tmp / "none.json").string()).code == 2);
  tmp.write("rung-set.json", R"({"suite": "x", "rungs": [{"id": "a", "config": "suite/tiny.json", "set": ["oops"]}]})");
  r = run_cli("sweep --suite " + (tmp / "rung-set.json").string() + " --out " + (tmp / "o").string());
  CHECK(r.code == 2);
  CHECK(has(r.output, "rungs[0].set: expected a list of \"section.key=value\" strings"));
  // A rung shown beside a reference figure the reference does not have.
  tmp.write("ref.json", R"({"source": "s", "rungs": {"packing": {"speedup_vs_prev": 2.0}}})");
  tmp.write("a.json", "{}");
  tmp.write("rung-article.json",
            R"({"suite": "x", "reference": "ref.json", "rungs": [{"id": "a", "config": "a.json", "article": "packnig"}]})");
  r = run_cli("sweep --suite " + (tmp / "rung-article.json").string() + " --out " + (tmp / "o").string());
  CHECK(r.code == 2);
  CHECK(has(r.output, "rung a: article \"packnig\" is not a rung of the reference"));
  CHECK_FALSE(fs::exists(tmp / "o"));
  CHECK(run_cli("compare " + tmp.path.string()).code == 2);  // one set only
  CHECK(run_cli("compare a b --fail-slower -5").code == 2);
  CHECK(run_cli("report " + (tmp / "nothing").string()).code == 2);
}

TEST_CASE("compare: exit 0 within bounds, 1 on a regression, 4 unresolved, through the CLI") {
  accel_test::TempDir tmp;
  auto result = [](double time, double acc) {
    return Json{{"schema_version", 1}, {"status", "ok"}, {"train_time_s", time},
                {"test_acc", acc}, {"peak_memory_bytes", {1e9}},
                {"config", {{"train", {{"epochs", 1}}}}}, {"env", {{"cpu_model", "x"}}}}
        .dump();
  };
  // Each run's own 40 steps after warm-up give its step time an interval.
  auto steps = [](double ms) {
    std::string csv = "kind,step,epoch,loss,train_acc,val_acc,step_time_ms\n";
    for (int i = 0; i < 45; ++i) {
      csv += "step," + std::to_string(i) + ",1,0.5,,," + std::to_string(ms * (1 + 0.01 * std::sin(1.7 * i))) + "\n";
    }
    return csv;
  };
  for (const auto& [set, ms] : {std::pair{"base", 100.0}, std::pair{"same", 104.0}, std::pair{"slow", 150.0}}) {
    Json r = Json::parse(result(ms * 6, 0.8));
    r["step_time_ms"] = {{"median", ms}};
    tmp.write(std::string(set) + "/00-scratch/result.json", r.dump());
    tmp.write(std::string(set) + "/00-scratch/metrics.csv", steps(ms));
  }
  tmp.write("bare/00-scratch/result.json", result(600, 0.8));  // no steps: no spread
  // One run a side: judged only under this machine's measured noise (as
  // calibrate --noise writes it; 1% sd of the log over 8 repeats).
  tmp.write("noise.json", R"({"noise": {"machine": {"step time": {"sd": 0.01, "runs": 8}}}})");
  const std::string gate = " --fail-slower 10 --noise " + (tmp / "noise.json").string();
  const auto base = (tmp / "base").string();
  auto r = run_cli("compare " + base + " " + (tmp / "same").string() + gate);
  INFO(r.output);
  CHECK(r.code == 0);
  r = run_cli("compare " + base + " " + (tmp / "slow").string() + gate);
  CHECK(r.code == 1);
  CHECK(has(r.output, "REGRESSION: slower: step time 1.500x ["));
  // Without the noise, the runs' own steps alone decide nothing.
  r = run_cli("compare " + base + " " + (tmp / "slow").string() + " --fail-slower 10");
  CHECK(r.code == 4);
  CHECK(has(r.output, "within-run interval only, no run-to-run noise"));
  r = run_cli("compare " + base + " " + (tmp / "bare").string() + gate + " --format md");
  CHECK(r.code == 4);
  CHECK(r.output.rfind("**UNRESOLVED**", 0) == 0);
  r = run_cli("compare " + base + " " + (tmp / "slow").string() + " " + (tmp / "same").string() + gate +
              " --format json");
  CHECK(r.code == 1);
  const Json doc = Json::parse(r.output);
  CHECK(doc["exit_status"] == 1);
  CHECK(doc["comparisons"].size() == 2);
  CHECK(doc["comparisons"][0]["rows"][0]["verdict"] == "slower");
  CHECK(doc["comparisons"][1]["rows"][0]["verdict"] == "same");
  r = run_cli("compare " + base + " " + base + " --format xml");
  CHECK(r.code == 2);
}

// Every result.json and config.json under `dir`, edited in place.
void edit_set(const fs::path& dir, const std::function<void(Json&, bool result)>& edit) {
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const auto name = e.path().filename();
    if (name != "result.json" && name != "config.json") continue;
    Json doc = read(e.path());
    edit(doc, name == "result.json");
    std::ofstream(e.path()) << doc.dump(2);
  }
}

TEST_CASE("compare: README's CI gate on one-run sets is unresolved, not green, and fails an uncomparable set" * doctest::test_suite("process")) {
  // The committed smoke baseline, as README's CI example compares sets.
  fs::path committed;
  for (const auto& s : fs::directory_iterator(source("results/baselines/smoke"))) committed = s.path();
  REQUIRE(!committed.empty());
  accel_test::TempDir tmp;
  for (const char* copy : {"base", "slow", "old", "changed"}) {
    fs::copy(committed, tmp / copy, fs::copy_options::recursive);
  }
  const std::string gate = " --fail-slower 7 --fail-accuracy-drop 1 --fail-memory-growth 10";
  const auto base = (tmp / "base").string();
  auto r = run_cli("compare " + base + " " + base + gate);
  INFO(r.output);
  // One run a rung and (in the smoke suite) too few steps for an interval of
  // their own: the gate cannot tell, and says so with its own exit status.
  CHECK(r.code == 4);
  CHECK(r.output.rfind("UNRESOLVED: ", 0) == 0);
  CHECK(has(r.output, " 0 not comparable, 0 regressions, "));
  // 20% slower everywhere: still one run a side and no spread, so unresolved
  // rather than a verdict the noise could have made.
  edit_set(tmp / "slow", [](Json& doc, bool result) {
    if (result && doc.contains("train_time_s")) doc["train_time_s"] = doc["train_time_s"].get<double>() * 1.2;
  });
  r = run_cli("compare " + base + " " + (tmp / "slow").string() + gate);
  CHECK(r.code == 4);
  CHECK(has(r.output, "| 1.200x |"));
  CHECK(has(r.output, "one run a side and no spread: run with --repeats 3"));
  // An older schema: fields added since (model.arch, runtime.comm_wait) are
  // absent from its configs; they compare as today's defaults.
  edit_set(tmp / "old", [](Json& doc, bool result) {
    Json& cfg = result ? doc["config"] : doc;
    if (!cfg.is_object()) return;
    if (cfg.contains("model")) cfg["model"].erase("arch");
    if (cfg.contains("runtime")) cfg["runtime"].erase("comm_wait");
  });
  r = run_cli("compare " + base + " " + (tmp / "old").string() + gate);
  CHECK(r.code == 4);
  CHECK(has(r.output, " 0 not comparable, 0 regressions, "));
  // A set whose rungs ran another experiment compares nothing: the gate fails.
  edit_set(tmp / "changed", [](Json& doc, bool result) {
    Json& cfg = result ? doc["config"] : doc;
    if (cfg.is_object() && cfg.contains("train")) cfg["train"]["seed"] = 7;
  });
  r = run_cli("compare " + base + " " + (tmp / "changed").string() + gate);
  CHECK(r.code == 1);
  CHECK(r.output.find("FAIL: ") < r.output.find("## "));  // said before the table
  CHECK(has(r.output, "rungs of base were not compared, which fails a gate"));
  CHECK(has(r.output, " 0 rungs compared,"));
  r = run_cli("compare " + base + " " + (tmp / "changed").string() + gate + " --allow-uncompared");
  CHECK(r.code == 0);  // nothing compared, nothing left unresolved
  CHECK(has(r.output, "WARNING: "));
}

TEST_CASE("report --html: the committed smoke baseline's page and a compare's parse as strict XML, each rung drilled into") {
  fs::path committed;
  for (const auto& s : fs::directory_iterator(source("results/baselines/smoke"))) committed = s.path();
  REQUIRE(!committed.empty());
  accel_test::TempDir tmp;
  const auto set = tmp / "set";
  fs::copy(committed, set, fs::copy_options::recursive);
  auto r = run_cli("report --html " + set.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  REQUIRE(fs::exists(set / "report.html"));
  r = run_cli("compare " + set.string() + " " + set.string() + " --format html");
  REQUIRE_MESSAGE(r.code == 0, r.output);
  std::ofstream(tmp / "compare.html") << r.output;
  // Python's expat: a strict XML parser; the page names no external resource.
  for (const auto* page : {"set/report.html", "compare.html"}) {
    INFO(page);
    const std::string parse =
        "python3 -c 'import sys, xml.etree.ElementTree as E; t = E.parse(sys.argv[1]); "
        "ns = \"{http://www.w3.org/1999/xhtml}\"; "
        "assert not t.getroot().findall(\".//\" + ns + \"script\"); "
        "assert not [e for e in t.getroot().iter() if e.get(\"href\", \"#\")[:1] != \"#\" "
        "or e.get(\"src\", \"data:\")[:5] != \"data:\"]' " +
        (tmp / page).string();
    CHECK(std::system(parse.c_str()) == 0);
  }
  const std::string html = accel_test::read_text(set / "report.html");
  const auto manifest = read(set / "sweep.json");
  for (const auto* key : {"upstream", "rungs"}) {
    for (const auto& rung : manifest[key]) {
      const std::string id = rung["id"].get<std::string>();
      INFO(id);
      CHECK(html.find("<details id=\"rung-" + id + "\">") != std::string::npos);
    }
  }
  CHECK(html.find("<section id=\"charts\">") != std::string::npos);
  CHECK(html.find("<h2>Machine and versions</h2>") != std::string::npos);
  const std::string cmp = accel_test::read_text(tmp / "compare.html");
  CHECK(cmp.find("<strong>") != std::string::npos);  // the verdict first, in bold
}

TEST_CASE("calibrate: measures fp32 and bf16 matmul per thread count into a peaks file") {
  accel_test::TempDir tmp;
  const auto out = tmp / "peaks.json";
  const auto r = run_cli("calibrate --size 64 --max-threads 1 --min-seconds 0.01 --out " +
                         out.string());
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto doc = read(out);
  CHECK(doc["cpu"]["fp32"]["1"].get<double>() > 0);
  CHECK(doc["cpu"]["bf16"]["1"].get<double>() > 0);
  CHECK(doc["machine_id"].is_string());
}

TEST_CASE("smoke suite: every rung runs and matches the committed baseline (config, status, accuracy band)") {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  accel_test::TempDir tmp;
  auto r = run_cli("sweep --suite " + source("configs/smoke/suite.json") + " --out " +
                   tmp.path.string());
  INFO(r.output);
  REQUIRE(r.code == 0);
  fs::path set;
  for (const auto& s : fs::directory_iterator(tmp / "smoke")) set = s.path();
  // Correctness only, never wall-clock time: the same resolved configs, every
  // rung ok, test accuracy within 5 points of the baseline's. (128 test
  // samples cannot resolve a 5-point band statistically, so the band is read
  // from the points here, not gated: a gate on it would say unresolved.)
  r = run_cli("compare " + source("results/baselines/smoke") + " " + set.string() +
              " --require-same-config --format json");
  INFO(r.output);
  CHECK(r.code == 0);
  const Json doc = Json::parse(r.output);
  CHECK(doc["comparisons"][0]["not_comparable"] == 0);
  CHECK(doc["comparisons"][0]["regressions"] == 0);
  int accuracies = 0, losses = 0;
  for (const auto& row : doc["comparisons"][0]["rows"]) {
    if (!row.contains("change") || row["change"].is_null()) continue;
    INFO(row.dump());
    if (row["measure"] == "test accuracy") {
      ++accuracies;
      CHECK(std::fabs(row["change"]["point"].get<double>()) <= 5.0);
    } else if (row["measure"] == "test loss") {
      // The language model's rung: its test loss within 0.05 nats a token
      // (one thread: the same on every run of one build; another LibTorch's
      // attention or matmul order moves it by far less).
      ++losses;
      CHECK(std::fabs(row["change"]["point"].get<double>()) <= 0.05);
    }
  }
  CHECK(accuracies > 0);
  CHECK(losses == 1);
  // Its report shows each rung by its own metric: the loss rung's as a loss,
  // never as a percent of the accuracy rungs' column.
  r = run_cli("report " + set.string());
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("| test metric |") != std::string::npos);
  CHECK(r.output.find(" | loss ") != std::string::npos);
  CHECK(r.output.find("Rungs of more than one task metric (test accuracy, test loss)") != std::string::npos);
  // Each run trained and evaluated what the sweep planned for it.
  check_work_as_planned(set);
}

TEST_CASE("sweep --plan: the smoke suite's runs stay small whatever the CPU, and the ladders' cut rungs evaluate little where bf16 is emulated") {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  accel_test::TempDir tmp;
  const auto peaks = (tmp / "peaks.json").string();
  REQUIRE(run_cli("calibrate --size 128 --max-threads 2 --min-seconds 0.02 --out " + peaks).code == 0);
  // This CPU as it is, one with native bf16, and one without (AVX2 only).
  for (const char* flags : {"", "ACCEL_CPU_FLAGS='fpu avx2 fma avx512f avx512bw avx512vl avx512dq avx512_bf16 amx_tile amx_bf16'",
                            "ACCEL_CPU_FLAGS='fpu avx2 fma'"}) {
    INFO("flags: " << std::string(flags));
    auto r = run_cli_env(flags, "sweep --plan --json --peaks " + peaks + " --suite " +
                                    source("configs/smoke/suite.json"));
    REQUIRE(r.code == 0);
    const Json plan = Json::parse(r.output);
    int runs = 0;
    for (const auto& rung : plan["suites"][0]["rungs"]) {
      INFO(rung.dump());
      REQUIRE(rung["status"] == "run");
      ++runs;
      const auto& w = rung["work"];
      const int ranks = rung["ranks"].get<int>();  // each evaluates its own batches
      CHECK(w["steps"].get<int>() <= 3);
      CHECK(w["val_samples"].get<int>() <= 128 * ranks);
      CHECK(w["test_samples_per_pass"].get<int>() <= 128 * ranks);
      CHECK(w["test_passes_max"].get<int>() <= 2);
      // The text bf16 rung, which a CPU may emulate: one step, one evaluation
      // batch of 32; the text ZeRO-2 rung in 32-true (its path, not bf16's).
      if (rung["id"] == "t03-mixed") {
        CHECK(w["steps"] == 1);
        CHECK(w["val_samples"].get<int>() <= 32);
        CHECK(w["test_samples_per_pass"].get<int>() <= 32);
      }
      if (rung["id"] == "t06-zero2") CHECK(rung["precision"] == "32-true");
    }
    CHECK(runs == 13);
    CHECK(plan["not_estimated"] == 0);  // the committed baseline prices every run
  }
  // The main job's ladders on a CPU without native bf16: the bf16 rungs run
  // a few steps and one test batch, without a validation pass.
  auto r = run_cli_env("ACCEL_CPU_FLAGS='fpu avx2 fma'",
                       "sweep --plan --json --suite " + source("configs/ladder/cpu/suite.json") +
                           " --suite " + source("configs/ladder/text-cpu/suite.json"));
  REQUIRE(r.code == 0);
  int cut = 0;
  const Json plans = Json::parse(r.output);
  for (const auto& suite : plans["suites"]) {
    for (const auto& rung : suite["rungs"]) {
      if (rung["status"] != "run" || !rung["where_emulated"].get<bool>()) continue;
      INFO(rung.dump());
      // The rungs not about bf16 run 32-true; the bf16 ones stay emulated, cut short.
      CHECK(rung["emulated"] == (rung["precision"] == "bf16-mixed"));
      if (rung["precision"] != "bf16-mixed") continue;
      ++cut;
      const auto& w = rung["work"];
      CHECK(w["steps"].get<int>() <= 20);
      CHECK(w["val_samples"] == 0);
      CHECK(w["test_samples_per_pass"].get<int>() <= 128);
    }
  }
  CHECK(cut == 2);  // 04-bf16-mixed and t03-mixed
}

TEST_CASE("sweep --only: where bf16 is emulated, the ladders' bf16 rungs train and evaluate what the plan says, and the report gives them no MFU") {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  accel_test::TempDir tmp;
  for (const auto& [suite, rung] : {std::pair{"configs/ladder/cpu/suite.json", "04-bf16-mixed"},
                                     std::pair{"configs/ladder/text-cpu/suite.json", "t03-mixed"}}) {
    INFO(rung);
    auto r = run_cli_env("ACCEL_CPU_FLAGS='fpu avx2 fma'", "sweep --suite " + source(suite) +
                                                               " --only " + rung + " --out " +
                                                               tmp.path.string());
    INFO(r.output);
    REQUIRE(r.code == 0);
    CHECK(has(r.output, ": 1 run"));
  }
  for (const auto& set : {first_dir(tmp / "ladder-cpu"), first_dir(tmp / "ladder-text-cpu")}) {
    check_work_as_planned(set);
    const Json manifest = read(set / "sweep.json");
    for (const auto& rung : manifest["rungs"]) {
      if (rung["status"] == "excluded") continue;
      const auto result = read(set / rung["id"].get<std::string>() / "result.json");
      CHECK(result["precision_support"] == "emulated");
      CHECK(result["work"]["val"]["passes"] == 0);
      CHECK(result["work"]["test"]["samples"].get<int>() <= 128);
    }
    auto r = run_cli("calibrate --size 64 --max-threads 2 --min-seconds 0.01 --out " +
                     (set / "peaks.json").string());
    REQUIRE(r.code == 0);
    r = run_cli("report " + set.string());
    INFO(r.output);
    CHECK(r.code == 0);
    CHECK(has(r.output, "no MFU: its precision is emulated on this CPU"));
  }
}

TEST_CASE("history: two adds at once both land, show prints and charts the trend, compare --history judges a set" * doctest::test_suite("process")) {
  accel_test::TempDir tmp;
  auto make = [&](const std::string& name, double time, const std::string& when) {
    report_test::FakeRun f;
    f.time_s = time;
    f.finished_at = when;
    report_test::SetBuilder b(tmp / name);
    b.manifest["made_at"] = when;
    return b.rung("a", "00", {f}).write().string();
  };
  const auto db = (tmp / "db" / "history.sqlite").string();
  std::vector<std::string> sets;
  for (int i = 0; i < 6; ++i) sets.push_back(make("s" + std::to_string(i), 600, "2026-02-0" + std::to_string(i + 1) + "T00:00:00Z"));
  REQUIRE(run_cli("history add --db " + db + " " + sets[0]).code == 0);  // the file made once
  // Two CI jobs adding at once: both land (WAL and a busy timeout).
  std::vector<std::thread> jobs;
  std::vector<int> codes(4, -1);
  for (int j = 0; j < 4; ++j) {
    jobs.emplace_back([&, j] { codes[size_t(j)] = run_cli("history add --db " + db + " " + sets[size_t(j) + 1]).code; });
  }
  for (auto& t : jobs) t.join();
  CHECK(codes == std::vector<int>{0, 0, 0, 0});
  auto r = run_cli("history add --db " + db + " " + sets[1]);
  CHECK(r.code == 0);
  CHECK(has(r.output, "0 runs added (already there)"));
  r = run_cli("history show --db " + db + " --rung a --charts " + (tmp / "charts").string());
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(has(r.output, "| 2026-02-05T00:00:00Z | test-cpu-2c-lt1.13.0 | a |"));
  CHECK(fs::exists(tmp / "charts" / "history.csv"));
  if (!accel::results::find_program("gnuplot").empty()) CHECK(fs::exists(tmp / "charts" / "history.svg"));
  // A set 20% slower than the window: suspicious, and the gate still passes on it.
  const auto slow = make("slow", 720, "2026-02-09T00:00:00Z");
  r = run_cli("compare " + sets[5] + " " + slow + " --history " + db + " --window 5 --fail-slower 7 --format md");
  CHECK(has(r.output, "| a | training time (s) | 720 | 600 | 5 | suspicious |"));
  CHECK(r.code != 1);
  // Export and read back into a fresh file.
  const auto exported = (tmp / "runs.jsonl").string();
  REQUIRE(run_cli("history export --db " + db + " -o " + exported).code == 0);
  r = run_cli("history add --db " + (tmp / "copy.sqlite").string() + " " + exported);
  CHECK(r.code == 0);
  CHECK(has(r.output, "5 runs added"));
  // A file that is not a history: exit 2, one line, file unchanged.
  const auto junk = tmp.write("junk.sqlite", "not a database at all, but long enough to be read as one");
  r = run_cli("history show --db " + junk.string());
  CHECK(r.code == 2);
  CHECK(has(r.output, "junk.sqlite: not an accel-bench history"));
}

TEST_CASE("ci example: the gpu-gate workflow parses and its accel-bench steps run as written on a CPU suite" * doctest::test_suite("process")) {
  accel_test::TempDir tmp;
  const auto workflow = source(".github/workflows/gpu-gate.yml");
  // The steps' scripts, from the YAML as a parser reads it.
  const auto steps_file = tmp / "steps.json";
  const std::string parse = "python3 -c 'import json, sys, yaml; w = yaml.safe_load(open(sys.argv[1])); "
                            "json.dump({\"env\": w[\"jobs\"][\"gate\"][\"env\"], \"runs\": [s.get(\"run\", \"\") "
                            "for s in w[\"jobs\"][\"gate\"][\"steps\"]]}, open(sys.argv[2], \"w\"))' " +
                            workflow + " " + steps_file.string();
  REQUIRE_MESSAGE(std::system(parse.c_str()) == 0, "the workflow does not parse (python3-yaml: scripts/setup.sh --tests)");
  const Json steps = read(steps_file);
  // A repository as the runner checks it out: the suite the workflow names
  // (here two tiny CPU rungs), its committed baseline made by one sweep, and
  // build-gpu/accel-bench as this build.
  const auto repo = tmp / "repo";
  const std::string suite_rel = steps["env"]["SUITE"];
  fs::create_directories((repo / suite_rel).parent_path());
  std::ofstream(repo / fs::path(suite_rel).parent_path() / "tiny.json") << kTiny;
  std::ofstream(repo / suite_rel) << R"({"suite": "smoke", "rungs": [
      { "id": "00-scratch", "article": "00", "config": "tiny.json", "changes": "scratch" },
      { "id": "01-next", "article": "01", "config": "tiny.json", "changes": "again" } ]})";
  fs::create_directories(repo / "build-gpu");
  fs::create_symlink(ACCEL_BENCH_EXE, repo / "build-gpu" / "accel-bench");
  const std::string env = "cd " + repo.string() + " && export SUITE=" + suite_rel + " HISTORY=" +
                          (tmp / "history.sqlite").string() + " GITHUB_STEP_SUMMARY=" + (tmp / "summary.md").string() +
                          " && ";
  auto r = run_cli_env("", "sweep --suite " + (repo / suite_rel).string() + " --out " + (tmp / "base").string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  for (const auto& s : fs::directory_iterator(tmp / "base" / "smoke")) {
    fs::create_directories(repo / "results" / "baselines" / "smoke");
    fs::rename(s.path(), repo / "results" / "baselines" / "smoke" / s.path().filename());
  }
  int ran = 0;
  for (const auto& run : steps["runs"]) {
    const std::string script = run.get<std::string>();
    if (script.find("accel-bench") == std::string::npos || script.find("cmake") != std::string::npos) continue;
    const auto log = tmp / ("step" + std::to_string(ran++) + ".log");
    const std::string cmd = "bash -e -c '" + env + script + "' > " + log.string() + " 2>&1";
    const int status = std::system(cmd.c_str());
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::ifstream in(log);
    const std::string out((std::istreambuf_iterator<char>(in)), {});
    INFO(script);
    INFO(out);
    if (script.find("compare") != std::string::npos) {
      // The gate's verdict is the machine's to give (0, 1 or 4); that it ran
      // as written is what this checks: the summary starts with the verdict.
      CHECK((code == 0 || code == 1 || code == 4));
      std::ifstream sum(tmp / "summary.md");
      const std::string summary((std::istreambuf_iterator<char>(sum)), {});
      CHECK((summary.rfind("**PASS**", 0) == 0 || summary.rfind("**FAIL**", 0) == 0 ||
             summary.rfind("**UNRESOLVED**", 0) == 0));
      CHECK(has(summary, "| base -> other | rung | measure |"));
      CHECK(has(summary, "history: 0 regressions"));
      CHECK_FALSE(has(out, "error"));
    } else {
      CHECK(code == 0);
    }
  }
  CHECK(ran == 4);  // sweep, history add, compare, report
}

TEST_CASE("cli: tune measures, prunes what cannot fit memory, confirms to the target, writes a winner run takes, and --resume reuses its runs") {
  accel_test::TempDir tmp;
  const auto config = tmp.write("tiny.json", kTiny);
  // One rank; the optimizer's two implementations; a global batch no memory holds.
  const auto space = tmp.write("space.json", R"({"global_batch": [8, 2000000], "ranks": [1], "knobs": false,
      "fields": {"runtime.precision": ["32-true"], "optim.implementation": ["fused", "torch"]}})");
  const auto out = tmp / "tune";
  const std::string args = "tune -c " + config.string() + " --target 0.01 --space " + space.string() +
                           " --short-steps 3 --confirm 1 --runs 4 --eval-every 8 -o " + out.string();
  auto r = cli_test::run_cli(args);
  REQUIRE_MESSAGE(r.code == 0, r.output);
  const auto state = report_test::read_json(out / "tune.json");
  CHECK(state["status"] == "done");
  // The batch no memory holds was refused by the run's own check before any work.
  bool memory = false;
  for (const auto& p : state["pruned"]) {
    if (p["label"].get<std::string>().find("global batch 2000000") != std::string::npos) {
      memory = p["why"].get<std::string>().find("more than this machine's") != std::string::npos;
    }
  }
  CHECK_MESSAGE(memory, state["pruned"].dump());
  // The base and one candidate confirmed in 4 runs each, MLPerf-scored.
  int confirmed = 0;
  for (const auto& row : state["rows"]) {
    if (row["confirmed"] == true) {
      ++confirmed;
      CHECK(row["time_to_target"]["runs"] == 4);
    }
  }
  CHECK(confirmed == 2);
  const auto md = accel_test::read_text(out / "tune.md");
  CHECK(md.find("| rank | setting | predicted samples/s | measured samples/s | time to target") != std::string::npos);
  CHECK(md.find("## Pruned before any run") != std::string::npos);
  if (fs::exists(out / "winner.json")) {
    // A config `run` takes.
    auto dry = cli_test::run_cli("run -c " + (out / "winner.json").string() + " --dry-run -q");
    CHECK_MESSAGE(dry.code == 0, dry.output);
  } else {
    CHECK(md.find("No winner") != std::string::npos);
  }
  // The same folder again: refused without --resume; with it, every run reused.
  r = cli_test::run_cli(args);
  CHECK(r.code == 2);
  CHECK(r.output.find("--resume") != std::string::npos);
  r = cli_test::run_cli(args + " --resume");
  REQUIRE_MESSAGE(r.code == 0, r.output);
  size_t reused = 0;
  for (size_t at = r.output.find("reused"); at != std::string::npos; at = r.output.find("reused", at + 1)) ++reused;
  CHECK(reused == 3 + 2 * 4);  // three throughput runs, two settings x 4 runs to the target
  CHECK(report_test::read_json(out / "tune.json")["rows"] == state["rows"]);
}

TEST_CASE("sweep: --to-target trains every rung to the suite's target and the report scores them as MLPerf does against the reference rung") {
  accel_test::TempDir tmp;
  tmp.write("suite/tiny.json", kTiny);
  const auto suite = tmp.write("suite/suite.json", R"({
    "suite": "tiny",
    "target_accuracy": 0.01,
    "convergence_reference": "00-a",
    "rungs": [
      { "id": "00-a", "config": "tiny.json", "changes": "a" },
      { "id": "01-b", "config": "tiny.json", "changes": "b, the Fabric loop", "set": ["runtime.precision=32-true", "train.loop=fabric"] }
    ]
  })");
  const auto out = tmp / "out";
  auto r = run_cli("sweep --suite " + suite.string() + " --out " + out.string() +
                   " --runs 4 --to-target --set train.val_every_steps=1");
  REQUIRE_MESSAGE(r.code == 0, r.output);
  const auto set = the_set(out);
  const auto manifest = read(set / "sweep.json");
  CHECK(manifest["to_target"] == true);
  CHECK(manifest["convergence_reference"] == "00-a");
  for (const char* rung : {"00-a", "01-b"}) {
    for (int i = 1; i <= 4; ++i) {
      const auto res = read(set / rung / ("r" + std::to_string(i)) / "result.json");
      CHECK(res["config"]["train"]["target"] == 0.01);
      CHECK(res["config"]["train"]["stop_at_target"] == true);
      CHECK(res["target"]["value"] == 0.01);
    }
  }
  r = run_cli("report " + set.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  std::ifstream in(set / "report.md");
  const std::string md((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(has(md, "## Time to target, MLPerf-scored"));
  CHECK(has(md, "convergence vs 00-a"));
  CHECK(has(md, "| reference |"));
  // Without a target in the suite, --to-target is refused before anything runs.
  const auto bare = tmp.write("suite/bare.json", R"({"suite": "bare", "rungs": [{"id": "a", "config": "tiny.json"}]})");
  r = run_cli("sweep --suite " + bare.string() + " --out " + (tmp / "out2").string() + " --to-target");
  CHECK(r.code == 2);
  CHECK(has(r.output, "target_accuracy"));
}

TEST_CASE("sweep --budget: where even the floor cannot fit, the emulated rungs are shortened, then the timing runs and the evaluations cut, said in the plan and beside each rung in the report" * doctest::test_suite("process")) {
  accel_test::TempDir tmp;
  tmp.write("s/tiny.json", kTiny);
  tmp.write("s/full-eval.json", R"({"extends": "tiny.json", "train": {"limit_eval_batches": 0}})");
  tmp.write("s/bf16.json", R"({"extends": "tiny.json", "train": {"loop": "fabric", "limit_train_batches": 8},
                               "runtime": {"precision": "bf16-mixed"}})");
  const char* rungs = R"("rungs": [
      {"id": "00-scratch", "article": "00", "config": "full-eval.json", "changes": "scratch, every evaluation batch"},
      {"id": "04-bf16", "article": "04", "config": "bf16.json", "changes": "bf16",
       "where_emulated": {"set": ["train.max_steps=10"], "note": "emulated: ten steps", "comparable": false}}]})";
  const auto suite = tmp.write("s/suite.json", std::string(R"({"suite": "tiny", )") + rungs);
  // A committed set of this (AVX2-only, as ACCEL_CPU_FLAGS makes it) machine to estimate from.
  const std::string avx2 = "ACCEL_CPU_FLAGS='fpu avx2 fma'";
  auto r = run_cli_env(avx2, "sweep --suite " + suite.string() + " --out " + (tmp / "committed").string());
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto budgeted = tmp.write("s/budgeted.json", std::string(R"({"suite": "tiny", "results": "../committed/tiny", )") + rungs);
  r = run_cli_env(avx2, "sweep --plan --json --suite " + budgeted.string() + " --budget 0.001 --timing-runs 1");
  REQUIRE(r.code == 0);
  const Json plan = Json::parse(r.output);
  CHECK(plan["fraction"] == doctest::Approx(0.3));
  // The timing runs would cut nothing (these rungs are too short for any), so they are not said.
  REQUIRE(plan["cuts"].size() == 2);
  CHECK(has(plan["cuts"][0].get<std::string>(), "emulated run 6 steps"));
  CHECK(has(plan["cuts"][1].get<std::string>(), "evaluations cut to 30%"));
  CHECK(plan["estimate_s"].get<double>() < plan["floor_estimate_s"].get<double>());
  const auto& scratch = plan["suites"][0]["rungs"][0];
  const auto& bf16 = plan["suites"][0]["rungs"][1];
  CHECK_FALSE(scratch.contains("timing"));
  CHECK(scratch["budget_cuts"] == Json::array({"its evaluations cut to 2 of their 4 batches"}));
  CHECK(bf16["work"]["steps"] == 6);
  CHECK(bf16["budget_cuts"] == Json::array({"bf16-mixed is emulated on this CPU: shortened from 10 to 6 steps"}));
  // A budget the floor holds cuts nothing beyond it.
  r = run_cli_env(avx2, "sweep --plan --json --suite " + budgeted.string() + " --budget 600 --timing-runs 1");
  REQUIRE(r.code == 0);
  CHECK(Json::parse(r.output)["cuts"].empty());
  // The sweep runs what it planned, and the report says it beside each rung.
  const auto out = tmp / "out";
  r = run_cli_env(avx2, "sweep --suite " + budgeted.string() + " --budget 0.001 --timing-runs 1 --out " + out.string());
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(has(r.output, "beyond that floor, what buys least per minute is cut first"));
  CHECK(has(r.output, "04-bf16: to fit the budget, bf16-mixed is emulated on this CPU: shortened from 10 to 6 steps"));
  const auto set = the_set(out);
  check_work_as_planned(set);
  CHECK(read(set / "04-bf16/result.json")["steps"] == 6);
  CHECK(read(set / "sweep.json")["budget"]["cuts"].size() == 2);
  r = run_cli("report " + set.string());
  CHECK(has(r.output, "04-bf16: to fit the sweep's budget, bf16-mixed is emulated on this CPU: shortened from 10 to 6 steps."));
  CHECK(has(r.output, "00-scratch: to fit the sweep's budget, its evaluations cut to 2 of their 4 batches."));
}

TEST_CASE("sweep --plan: a peaks file where bf16 runs 12x slower than fp32 prices the bf16 rung 12x and the budget shortens it first" * doctest::test_suite("process")) {
  accel_test::TempDir tmp;
  tmp.write("s/tiny.json", kTiny);
  tmp.write("s/fp32.json", R"({"extends": "tiny.json", "train": {"loop": "fabric"}})");
  tmp.write("s/bf16.json", R"({"extends": "tiny.json", "train": {"loop": "fabric", "limit_train_batches": 8},
                               "runtime": {"precision": "bf16-mixed"}})");
  const char* rungs = R"("rungs": [
      {"id": "03-fabric", "article": "03", "config": "fp32.json", "changes": "fabric"},
      {"id": "04-bf16", "article": "04", "config": "bf16.json", "changes": "bf16",
       "where_emulated": {"set": ["train.max_steps=10"], "note": "emulated: ten steps", "comparable": false}}]})";
  const auto suite = tmp.write("s/suite.json", std::string(R"({"suite": "tiny", )") + rungs);
  // The committed set: a machine with native bf16 (AMX), whose calibration
  // prices bf16-mixed as fp32 (a CPU step is not bound by its matmuls' peak).
  auto r = run_cli_env("ACCEL_CPU_FLAGS='fpu avx2 fma avx512f avx512_bf16 amx_tile amx_bf16'",
                       "sweep --suite " + suite.string() + " --out " + (tmp / "committed").string());
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto committed = the_set(tmp / "committed");
  std::ofstream(committed / "peaks.json")
      << R"({"cpu": {"fp32": {"1": 100.0, "2": 190.0}, "bf16": {"1": 250.0, "2": 480.0}}})";
  const double init = read(committed / "04-bf16/result.json")["init_time_s"].get<double>();
  // This machine: AVX2 only, its bf16 matmuls 12x slower than fp32's, or (to
  // compare) as fast.
  const auto slow = tmp.write("peaks-slow.json", R"({"cpu": {"fp32": {"1": 60.0}, "bf16": {"1": 5.0}}})");
  const auto even = tmp.write("peaks-even.json", R"({"cpu": {"fp32": {"1": 60.0}, "bf16": {"1": 60.0}}})");
  const auto budgeted =
      tmp.write("s/budgeted.json", std::string(R"({"suite": "tiny", "results": "../committed/tiny", )") + rungs);
  const std::string avx2 = "ACCEL_CPU_FLAGS='fpu avx2 fma'";
  auto plan = [&](const fs::path& peaks, const std::string& budget) {
    auto p = run_cli_env(avx2, "sweep --plan --json --suite " + budgeted.string() + " --peaks " + peaks.string() +
                                   (budget.empty() ? "" : " --budget " + budget));
    INFO(p.output);
    REQUIRE(p.code == 0);
    return Json::parse(p.output);
  };
  const Json at_slow = plan(slow, ""), at_even = plan(even, "");
  auto rung_estimate = [](const Json& p, int i) { return p["suites"][0]["rungs"][i]["estimate_s"].get<double>(); };
  // The fp32 rung costs the same under both files; the bf16 rung's work past
  // its start 12 times as much where bf16 is 12x slower.
  CHECK(rung_estimate(at_slow, 0) == doctest::Approx(rung_estimate(at_even, 0)));
  CHECK((rung_estimate(at_slow, 1) - init) == doctest::Approx(12.0 * (rung_estimate(at_even, 1) - init)).epsilon(0.01));
  CHECK(at_slow["suites"][0]["rungs"][1]["work"]["steps"] == 10);  // where_emulated applies either way
  // A budget the even machine's floor holds but the slow one's does not: the
  // slow machine's plan shortens the emulated rung first, and says so.
  const double floor_slow = plan(slow, "0.0001")["floor_estimate_s"].get<double>();
  const double floor_even = plan(even, "0.0001")["floor_estimate_s"].get<double>();
  REQUIRE(floor_slow > 2 * floor_even);
  const std::string between = std::to_string((floor_even + floor_slow) / 2 / 60);
  const Json even_plan = plan(even, between);
  CHECK(even_plan["cuts"].empty());
  CHECK(even_plan["suites"][0]["rungs"][1]["work"]["steps"] == 10);
  const Json slow_plan = plan(slow, between);
  REQUIRE_FALSE(slow_plan["cuts"].empty());
  CHECK(has(slow_plan["cuts"][0].get<std::string>(), "emulated run 6 steps"));
  CHECK(slow_plan["suites"][0]["rungs"][1]["work"]["steps"] == 6);
  CHECK(slow_plan["suites"][0]["rungs"][1]["budget_cuts"] ==
        Json::array({"bf16-mixed is emulated on this CPU: shortened from 10 to 6 steps"}));
  CHECK_FALSE(slow_plan["suites"][0]["rungs"][0].contains("budget_cuts"));
}

TEST_CASE("sweep: a batch series stops at the first batch that runs out of memory and skips the larger ones and the report says so" * doctest::test_suite("process")) {
  accel_test::TempDir tmp;
  // One block whose MLP is 65,536 wide: at batch 4 its hidden activations
  // take 52 MB; at batch 1024, 13.4 GB in one tensor, which the address-space
  // limit below (12 GB: the process's own mappings fit well inside) refuses
  // at once, as a GPU's memory would a batch too large for it.
  tmp.write("s/wide.json", R"({
    "name": "wide",
    "model": { "preset": "custom", "image_size": 28, "patch_size": 4, "dim": 32, "depth": 1,
               "heads": 2, "mlp_dim": 65536 },
    "data": { "dataset": "synthetic", "synthetic_train": 4096, "synthetic_test": 8 },
    "train": { "epochs": 1, "max_steps": 1, "batch_size": 4, "eval_batch_size": 4,
               "limit_train_batches": 1, "limit_eval_batches": 1, "warmup_steps": 0 },
    "runtime": { "threads": 1 }
  })");
  tmp.write("s/suite.json", R"({
    "suite": "batches",
    "rungs": [ { "id": "wide", "config": "wide.json", "changes": "a wide MLP",
                 "batch_sizes": [4, 1024, 2048] } ]
  })");
  const auto out = tmp / "out";
  const auto r = run_command("ulimit -v 12000000 && exec " + std::string(ACCEL_BENCH_EXE) + " sweep --suite " +
                             (tmp / "s/suite.json").string() + " --out " + out.string());
  INFO(r.output);
  CHECK(r.code == 0);  // where memory ends the series is what it asked, not a failure
  CHECK(has(r.output, "1 ran ok, 0 reused, 0 failed, 1 skipped, 1 out of memory (where a batch series ends)"));
  CHECK(has(r.output, "wide-b1024: out of memory at batch 1024: no larger batch of wide runs"));
  CHECK(has(r.output, "wide-b2048: skipped: batch 1024 ran out of memory (wide-b1024)"));
  REQUIRE(fs::is_directory(out / "batches"));
  const auto set = fs::directory_iterator(out / "batches")->path();
  const auto manifest = read(set / "sweep.json");
  REQUIRE(manifest["rungs"].size() == 3);
  CHECK(manifest["rungs"][0]["id"] == "wide-b4");
  CHECK(manifest["rungs"][0]["status"] == "ok");
  CHECK(manifest["rungs"][0]["changes"] == "a wide MLP at batch 4");
  CHECK(manifest["rungs"][0]["batch_series"] == Json({{"series", "wide"}, {"batch", 4}}));
  CHECK(manifest["rungs"][1]["status"] == "out_of_memory");
  CHECK(manifest["rungs"][1]["out_of_memory"] == true);
  CHECK(manifest["rungs"][1]["runs"][0]["failure"] == "out_of_memory");
  CHECK(manifest["rungs"][2]["status"] == "skipped");
  CHECK(manifest["rungs"][2]["skipped"] == "batch 1024 ran out of memory (wide-b1024)");
  CHECK(manifest["rungs"][2]["runs"].empty());
  CHECK_FALSE(fs::exists(set / "wide-b2048"));
  const auto failed = read(set / "wide-b1024/result.json");
  CHECK(failed["status"] == "failed");
  CHECK(failed["failure"] == "out_of_memory");
  CHECK(failed["config"]["train"]["batch_size"] == 1024);
  CHECK(read(set / "wide-b4/result.json")["config"]["train"]["batch_size"] == 4);
  CHECK_FALSE(read(set / "wide-b4/result.json").contains("failure"));

  const auto rep = run_cli("report " + set.string());
  INFO(rep.output);
  CHECK(rep.code == 0);
  CHECK(has(rep.output, "| out of memory |"));
  CHECK(has(rep.output, "| skipped: batch 1024 ran out of memory (wide-b1024) |"));

  // With repeats, the series ends at the first round's out-of-memory run: the
  // batch that ran out is not run again, the larger one is skipped once.
  const auto again = run_command("ulimit -v 12000000 && exec " + std::string(ACCEL_BENCH_EXE) + " sweep --suite " +
                                 (tmp / "s/suite.json").string() + " --repeats 2 --out " + (tmp / "out2").string());
  INFO(again.output);
  CHECK(again.code == 0);
  CHECK(has(again.output, "2 ran ok, 0 reused, 0 failed, 1 skipped, 1 out of memory (where a batch series ends)"));
  CHECK(has(again.output, "wide-b1024 r2: not run: wide-b1024 ran out of memory at batch 1024"));
  const auto m2 = read(fs::directory_iterator(tmp / "out2" / "batches")->path() / "sweep.json");
  CHECK(m2["rungs"][0]["runs"].size() == 2);
  CHECK(m2["rungs"][1]["runs"].size() == 1);
  CHECK(m2["rungs"][1]["status"] == "out_of_memory");
  CHECK(m2["rungs"][2]["status"] == "skipped");
}

TEST_CASE("gpu-check suites: the smoke ladder and batch sweep and text rungs resolve every config and plan every run") {
  const std::string suites = source("configs/gpu-check/suite.json") + " " + source("configs/gpu-check/batch/suite.json") +
                             " " + source("configs/gpu-check/text/suite.json");
  // On this machine's CPU every rung needs CUDA; with the accelerator set to
  // the CPU each resolves and plans its runs (the GPU check's CPU test mode).
  auto r = run_cli("sweep --plan --suite " + suites);
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(has(r.output, "bf16-graphs-b256 skipped: needs CUDA"));
  CHECK(has(r.output, "t04-cuda-graphs  skipped: needs CUDA"));
  r = run_cli("sweep --plan --json --suite " + suites + " --set runtime.accelerator=cpu");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto plan = Json::parse(r.output);
  std::vector<std::string> ids;
  for (const auto& s : plan["suites"]) {
    for (const auto& rung : s["rungs"]) {
      ids.push_back(rung["id"].get<std::string>());
      INFO(rung.dump());
      CHECK(rung["status"] == "run");
    }
  }
  CHECK(ids == std::vector<std::string>{"00-32-true", "01-bf16-mixed", "02-bf16-cuda-graphs", "03-ddp", "04-fsdp",
                                        "05-bert-bf16-mixed", "bf16-b16", "bf16-b64", "bf16-b128", "bf16-b256",
                                        "bf16-graphs-b16", "bf16-graphs-b64", "bf16-graphs-b128", "bf16-graphs-b256",
                                        "t01-plain", "t02-trainer", "t03-mixed", "t03b-bf16-mixed", "t04-cuda-graphs"});
}
