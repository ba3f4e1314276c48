// Drives the real accel-bench binary end to end on real Fashion-MNIST data.
// torch first: glog (through torch) defines CHECK, doctest must win.
#include <torch/torch.h>

#include <doctest/doctest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "accel/util/json.h"

#include "accel/results/losses.h"
#include "integration/cli_helpers.h"

namespace fs = std::filesystem;
using namespace cli_test;

TEST_CASE("cli: a one-epoch scratch run writes result config and metrics and its loss falls") {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  const auto out = fresh_dir("smoke");
  // A few hundred Fashion-MNIST images, one epoch, a learning rate at which
  // the loss visibly falls within the epoch.
  const auto r =
      run_cli("run -c " + source("configs/smoke/scratch-smoke.json") + " --out " + out.string());
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("resolved config") != std::string::npos);
  CHECK(r.output.find("Epoch: 0001/0001 | Train acc.:") != std::string::npos);
  CHECK(r.output.find("Test accuracy") != std::string::npos);

  std::ifstream in(out / "result.json");
  const auto res = nlohmann::json::parse(in);
  CHECK(res["schema_version"] == 3);
  CHECK(res["status"] == "ok");
  for (const char* key : {"config", "env", "epochs", "test_acc", "train_time_s", "step_time_ms",
                          "samples_per_s", "images_per_s", "peak_memory_bytes", "params",
                          "flops_per_sample", "data_kind"}) {
    INFO(key);
    CHECK(res.contains(key));
  }
  CHECK(res["epochs"].size() == 1);
  CHECK(res["config"]["data"]["classes"] == nlohmann::json({5, 6, 7, 8, 9}));
  CHECK(res["data"]["train"] == 360);  // 400 capped, last 10% to validation
  CHECK(res["data"]["val"] == 40);
  CHECK(res["step_time_ms"]["median"].get<double>() > 0);
  CHECK(res["images_per_s"].get<double>() > 0);
  CHECK(res["samples_per_s"] == res["images_per_s"]);  // schema 2's name kept for image runs
  CHECK(res["tokens_per_s"].is_null());
  CHECK(res["data_kind"] == "image");
  CHECK(res["model"]["arch"] == "vit");
  CHECK(res["peak_memory_bytes"][0].get<int64_t>() > 0);
  // A CPU has no energy counter: said, never guessed.
  CHECK(res["energy_source"] == "not measured");
  CHECK(res["energy_note"] == "no energy counter for cpu devices");
  for (const char* key : {"energy_j", "energy_j_per_step", "energy_j_per_sample", "energy_to_target_j"}) {
    INFO(key);
    CHECK(res[key].is_null());
  }
  CHECK(res["env"]["libtorch_version"].is_string());
  // The attention the model ran, in the banner and the env block: on 1.13
  // the fused CPU kernel, on 2.x LibTorch's SDPA (the explicit form for CPU
  // bf16); and the fused Adam's code path.
  const auto attention = res["env"].value("attention_kernel", std::string());
  CHECK((attention == "sdpa (explicit for bf16 on a CPU)" || attention.rfind("fused-cpu (", 0) == 0));
  CHECK(r.output.find("| attention " + attention + " |") != std::string::npos);
  const auto adam = res["env"].value("adam_kernel", std::string());
  CHECK(adam.rfind("fused-cpu (", 0) == 0);
  CHECK(r.output.find("| adam " + adam + " |") != std::string::npos);
  CHECK(fs::exists(out / "config.json"));
  // summary: one Markdown row per result.
  const auto table = run_cli("summary " + (out / "result.json").string());
  CHECK(table.code == 0);
  CHECK(table.output.find("| scratch-smoke | ok | plain | 32-true | 1 |") != std::string::npos);
  CHECK(run_cli("summary " + (out / "metrics.csv").string()).code == 2);
  // compare-losses: a run against itself is within any tolerance.
  const auto same = run_cli("compare-losses " + out.string() + " " + out.string());
  CHECK(same.code == 0);
  CHECK(same.output.find("22 steps compared") != std::string::npos);

  // metrics.csv: one row per step (log_every=1); the loss of the last steps is
  // below that of the first ones.
  std::ifstream csv(out / "metrics.csv");
  std::string line;
  std::getline(csv, line);
  CHECK(line == "kind,step,epoch,loss,train_acc,val_acc,step_time_ms");
  const auto losses = accel::results::read_loss_trace(out).losses;
  REQUIRE(losses.size() == 22);  // 360 / 16, drop_last
  const double first = (losses[0] + losses[1] + losses[2]) / 3;
  const double last = (losses[19] + losses[20] + losses[21]) / 3;
  CHECK(last < first);
  fs::remove_all(out);
}

TEST_CASE("cli: a bad config exits 2 with a one-line message and writes nothing") {
  const auto out = fresh_dir("bad");
  auto r = run_cli("run -c " + source("configs/ladder/cpu/00-scratch.json") +
                   " --set train.epochz=3 --out " + out.string());
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find("train.epochz") != std::string::npos);
  CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  CHECK_FALSE(fs::exists(out));

  r = run_cli("run -c /nonexistent/config.json --out " + out.string());
  CHECK(r.code == 2);
  CHECK(r.output.find("/nonexistent/config.json") != std::string::npos);
  CHECK_FALSE(fs::exists(out));
}

TEST_CASE("cli: a missing data file exits 2 naming the file and writes nothing") {
  const auto out = fresh_dir("nodata");
  const auto r = run_cli("run -c " + source("configs/ladder/cpu/00-scratch.json") +
                         " --set data.root=/nonexistent/fmnist --out " + out.string());
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find("/nonexistent/fmnist") != std::string::npos);
  CHECK_FALSE(fs::exists(out));
}

TEST_CASE("cli: an existing result is never overwritten without --force") {
  const auto out = fresh_dir("keep");
  fs::create_directories(out);
  { std::ofstream(out / "result.json") << "{\"keep\": true}\n"; }
  const auto r = run_cli("run -c " + source("configs/ladder/cpu/00-scratch.json") + " --out " +
                         out.string());
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find("--force") != std::string::npos);
  std::ifstream in(out / "result.json");
  CHECK(nlohmann::json::parse(in)["keep"] == true);
  fs::remove_all(out);
}

TEST_CASE("cli: a diverging loss stops the run with status failed and exit 1") {
  const auto out = fresh_dir("nan");
  const auto r = run_cli("run -c " + source("configs/smoke/scratch-smoke.json") +
                         " --set optim.lr=1e30 --set optim.name=sgd --out " + out.string());
  INFO(r.output);
  CHECK(r.code == 1);
  CHECK(r.output.find("non-finite loss") != std::string::npos);
  std::ifstream in(out / "result.json");
  REQUIRE(in.good());
  const auto res = nlohmann::json::parse(in);
  CHECK(res["status"] == "failed");
  CHECK(res["error"].get<std::string>().find("non-finite loss") != std::string::npos);
  CHECK(fs::exists(out / "metrics.csv"));
  fs::remove_all(out);
}

TEST_CASE("cli: config --explain lists every section's fields") {
  const auto r = run_cli("config --explain");
  CHECK(r.code == 0);
  for (const char* field : {"model.preset", "data.classes", "optim.lr", "train.batch_size",
                            "train.limit_eval_batches", "runtime.precision",
                            "runtime.threads"}) {
    INFO(field);
    CHECK(r.output.find(field) != std::string::npos);
  }
}

TEST_CASE("cli: every shipped config passes config --check") {
  // One process for all of them (config --check takes several files).
  std::string files;
  int n = 0;
  for (const auto& entry : fs::recursive_directory_iterator(source("configs"))) {
    if (entry.path().extension() != ".json") continue;
    if (entry.path().filename() == "suite.json") continue;  // sweep suites, not run configs
    files += " " + entry.path().string();
    ++n;
  }
  REQUIRE(n > 20);
  const auto r = run_cli("config --check" + files);
  INFO(r.output);
  CHECK(r.code == 0);
  size_t valid = 0;
  for (size_t at = r.output.find(": valid"); at != std::string::npos;
       at = r.output.find(": valid", at + 1)) {
    ++valid;
  }
  CHECK(valid == size_t(n));
}

TEST_CASE("cli: config --check of several files names each invalid one and exits 2") {
  const auto dir = fresh_dir("check-many");
  fs::create_directories(dir);
  const auto bad = dir / "bad.json";
  std::ofstream(bad) << R"({"name": "x", "train": {"epochs": 0}})";
  const auto good = source("configs/smoke/scratch-smoke.json");
  const auto r = run_cli("config --check " + good + " " + bad.string() + " " + good);
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find(bad.string()) != std::string::npos);
  CHECK(r.output.find("train.epochs") != std::string::npos);
  CHECK(r.output.find("1 of 3 configs are invalid") != std::string::npos);
  CHECK(r.output.find("\"name\"") == std::string::npos);  // no resolved config dumped
}

TEST_CASE("cli: a run started without OMP_WAIT_POLICY re-executes itself with it set to PASSIVE" * doctest::test_suite("process")) {
  // The test executable sets it for every process it starts (tests/main.cpp);
  // here it is taken away again, as a user's shell would not have it.
  // OPENBLAS_CORETYPE goes too where tests/main.cpp chose it; one the user
  // set stays, as the re-exec keeps it.
  const bool ours = std::getenv("ACCEL_OPENBLAS_CORETYPE_AUTO") != nullptr;
  const auto r = run_cli("run --dry-run -c " + source("configs/smoke/scratch-smoke.json") +
                         " --set data.dataset=synthetic --out " + fresh_dir("reexec").string());
  const auto bare = run_cli_env(
      ours ? "-u OMP_WAIT_POLICY -u OPENBLAS_CORETYPE -u ACCEL_OPENBLAS_CORETYPE_AUTO"
           : "-u OMP_WAIT_POLICY",
      "run --dry-run -c " + source("configs/smoke/scratch-smoke.json") +
          " --set data.dataset=synthetic --out " + fresh_dir("reexec").string());
  INFO(bare.output);
  CHECK(r.code == 0);
  CHECK(bare.code == 0);
  CHECK(bare.output.find("OMP_WAIT_POLICY PASSIVE") != std::string::npos);
  // The same banner either way: the test environment is the one the re-exec makes.
  auto hardware = [](const std::string& out) {
    const auto at = out.find("== hardware:");
    return out.substr(at, out.find('\n', at) - at);
  };
  CHECK(hardware(r.output) == hardware(bare.output));
}

TEST_CASE("cli: usage errors exit 2" * doctest::test_suite("process")) {
  CHECK(run_cli("run").code == 2);
  CHECK(run_cli("frobnicate").code == 2);
  CHECK(run_cli("--help").code == 0);
}

TEST_CASE("cli: --profile writes a per-op table and a chrome trace and says where a step goes") {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  const auto out = fresh_dir("profile");
  const auto prof = out / "prof";
  const auto r = run_cli("run -c " + source("configs/smoke/scratch-smoke.json") +
                         " --set train.limit_train_batches=8 --set train.limit_eval_batches=1 --out " +
                         out.string() + " --profile " + prof.string() + " --profile-steps 3");
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("== profile: 3 steps from step 2") != std::string::npos);
  std::ifstream csv(prof / "ops.csv");
  std::string line, all;
  int64_t forward_calls = -1;
  bool aten = false;
  while (std::getline(csv, line)) {
    all += line + "\n";
    if (line.rfind("accel::forward,", 0) == 0) forward_calls = std::stoll(line.substr(15));
    aten = aten || line.rfind("aten::", 0) == 0;
  }
  INFO(all);
  CHECK(forward_calls == 3);  // exactly the profiled steps
  CHECK(aten);                // the operators under them
  std::ifstream trace_in(prof / "trace.json");
  const auto trace = nlohmann::json::parse(trace_in);
  REQUIRE(trace["traceEvents"].is_array());
  CHECK(trace["traceEvents"].size() > 50);
  CHECK(trace["traceEvents"][0]["ph"] == "X");
  std::ifstream summary_in(prof / "summary.txt");
  const std::string summary((std::istreambuf_iterator<char>(summary_in)), std::istreambuf_iterator<char>());
  CHECK(summary.find("backward") != std::string::npos);
  CHECK(run_cli("run -c " + source("configs/smoke/scratch-smoke.json") +
                " --profile /tmp/x --profile-steps 0 --dry-run").code == 2);
}

namespace {

nlohmann::json read_json(const fs::path& file) {
  std::ifstream in(file);
  return nlohmann::json::parse(in);
}

// The validations a run logged (mid-epoch "val" rows and epoch rows), in
// order: {step, val_acc}.
std::vector<std::pair<int64_t, double>> validations(const fs::path& dir) {
  std::ifstream in(dir / "metrics.csv");
  std::string line;
  std::getline(in, line);
  std::vector<std::pair<int64_t, double>> out;
  while (std::getline(in, line)) {
    if (line.rfind("val,", 0) != 0 && line.rfind("epoch,", 0) != 0) continue;
    std::vector<std::string> cells;
    std::stringstream ss(line);
    for (std::string c; std::getline(ss, c, ',');) cells.push_back(c);
    REQUIRE(cells.size() >= 6);
    out.emplace_back(std::stoll(cells[1]), std::stod(cells[5]));
  }
  return out;
}

}  // namespace

TEST_CASE("cli: test_weights best_val tests the first best validation's weights as a run stopped there does, and resumes with them") {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  const auto best = fresh_dir("best-val"), there = fresh_dir("best-there"),
             first = fresh_dir("best-first"), rest = fresh_dir("best-rest");
  // A learning rate at which validation accuracy rises and falls.
  const std::string args = " -c " + source("configs/smoke/scratch-smoke.json") +
                           " --set train.epochs=2 --set train.limit_train_batches=6"
                           " --set train.val_every_steps=2 --set optim.lr=3e-3 -q";
  auto r = run_cli("run" + args + " --set train.test_weights=best_val --out " + best.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  const auto res = read_json(best / "result.json");
  const auto vals = validations(best);
  REQUIRE(vals.size() == 6);  // steps 2, 4, 6 (epoch end), 8, 10, 12 (epoch end)
  auto top = vals.front();
  for (const auto& v : vals) {
    if (v.second > top.second) top = v;  // the first of equal maxima, as Lightning's "max"
  }
  CHECK(res["test_weights"] == "best_val");
  CHECK(res["best_val"]["step"] == top.first);
  CHECK(res["best_val"]["val_acc"].get<double>() == top.second);
  CHECK(res["test_acc_last"].is_number());
  CHECK(fs::exists(best / "best.ckpt"));
  if (top.first == 12) MESSAGE("the best validation was the last: no weights were swapped");
  // The same training stopped at that step tests what best_val tested.
  r = run_cli("run" + args + " --set train.max_steps=" + std::to_string(top.first) + " --out " +
              there.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  CHECK(read_json(there / "result.json")["test_acc"] == res["test_acc"]);
  // Stopped one step after the best and resumed into another folder: the
  // best weights come from the first folder's best.ckpt.
  const std::string stop_at = std::to_string(top.first + 1);
  r = run_cli("run" + args + " --set train.test_weights=best_val --set train.max_steps=" + stop_at +
              " --out " + first.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  r = run_cli("run" + args + " --set train.test_weights=best_val --resume " +
              (first / "checkpoint.ckpt").string() + " --out " + rest.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  const auto resumed = read_json(rest / "result.json");
  CHECK(resumed["best_val"] == res["best_val"]);
  CHECK(resumed["test_acc"] == res["test_acc"]);
  CHECK(resumed["test_acc_last"] == res["test_acc_last"]);
  CHECK(fs::exists(rest / "best.ckpt"));
  // Without its best.ckpt the checkpoint cannot resume a best_val run.
  fs::remove(first / "best.ckpt");
  r = run_cli("run" + args + " --set train.test_weights=best_val --resume " +
              (first / "checkpoint.ckpt").string() + " --out " + rest.string() + " --force");
  CHECK(r.code == 2);
  CHECK(r.output.find("best.ckpt is missing") != std::string::npos);
  // No validation split: refused before any work.
  r = run_cli("run" + args + " --set train.test_weights=best_val --set data.val_fraction=0 --out " +
              fresh_dir("best-noval").string());
  CHECK(r.code == 2);
  CHECK(r.output.find("train.test_weights") != std::string::npos);
  for (const auto& p : {best, there, first, rest}) fs::remove_all(p);
}

TEST_CASE("cli: train.target records the first validation that reaches it, or that none did, and stop_at_target tests the weights that reached it") {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  const auto plain = fresh_dir("target-plain"), stopped = fresh_dir("target-stop"),
             capped = fresh_dir("target-capped"), missed = fresh_dir("target-missed");
  const std::string args = " -c " + source("configs/smoke/scratch-smoke.json") +
                           " --set train.epochs=2 --set train.limit_train_batches=6"
                           " --set train.val_every_steps=2 --set optim.lr=3e-3 -q";
  auto r = run_cli("run" + args + " --out " + plain.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  const auto vals = validations(plain);
  REQUIRE(vals.size() == 6);
  // The target: the best validation; reached first where a validation first equals it.
  auto top = vals.front();
  for (const auto& v : vals) {
    if (v.second > top.second) top = v;
  }
  char target[32];
  std::snprintf(target, sizeof target, "%.17g", top.second);
  const auto recorded_dir = plain.string() + "-rec";
  r = run_cli("run" + args + " --set train.target=" + target + " --out " + recorded_dir);
  REQUIRE_MESSAGE(r.code == 0, r.output);
  const auto rec = read_json(fs::path(recorded_dir) / "result.json");
  CHECK(rec["target"]["reached"] == true);
  CHECK(rec["target"]["stopped"] == false);
  CHECK(rec["target"]["step"] == top.first);
  CHECK(rec["target"]["samples"] == top.first * rec["config"]["train"]["batch_size"].get<int64_t>());
  CHECK(rec["target"]["val_acc"].get<double>() == top.second);
  CHECK(rec["target"]["evaluations"] == 6);
  CHECK(rec["target"]["time_s"].get<double>() > 0);
  CHECK(rec["target"]["time_s"].get<double>() <= rec["train_time_s"].get<double>());
  CHECK(rec["steps"] == 12);  // recorded, not stopped
  // Stopped there: the test pass and the final checkpoint hold the weights
  // that reached the target, the same as a run capped at that step.
  r = run_cli("run" + args + " --set train.target=" + target + " --set train.stop_at_target=true --out " +
              stopped.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  const auto st = read_json(stopped / "result.json");
  CHECK(st["steps"] == top.first);
  CHECK(st["target"]["stopped"] == true);
  CHECK(st["target"]["step"] == top.first);
  r = run_cli("run" + args + " --set train.max_steps=" + std::to_string(top.first) + " --out " + capped.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  CHECK(read_json(capped / "result.json")["test_acc"] == st["test_acc"]);
  check_checkpoints_match(stopped / "checkpoint.ckpt", capped / "checkpoint.ckpt");
  // Resumed from a checkpoint written after the target was reached: the same
  // target keeps its record; another target is checked afresh, never credited
  // with the first one's.
  const auto part = fresh_dir("target-part"), same = fresh_dir("target-same"), other = fresh_dir("target-other");
  r = run_cli("run" + args + " --set train.target=" + target + " --set train.max_steps=" +
              std::to_string(top.first + 1) + " --out " + part.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  r = run_cli("run" + args + " --set train.target=" + target + " --resume " + (part / "checkpoint.ckpt").string() +
              " --out " + same.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  const auto resumed = read_json(same / "result.json");
  CHECK(resumed["target"]["step"] == top.first);
  CHECK(resumed["target"]["samples"] == rec["target"]["samples"]);
  CHECK(resumed["target"]["time_s"].get<double>() > 0);
  r = run_cli("run" + args + " --set train.target=0.999 --resume " + (part / "checkpoint.ckpt").string() +
              " --out " + other.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  CHECK(read_json(other / "result.json")["target"]["reached"] == false);
  for (const auto& p : {part, same, other}) fs::remove_all(p);
  // A target above every validation: not reached, no step, the run whole.
  r = run_cli("run" + args + " --set train.target=0.999 --set train.stop_at_target=true --out " + missed.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  const auto mi = read_json(missed / "result.json");
  CHECK(mi["target"]["reached"] == false);
  CHECK_FALSE(mi["target"].contains("step"));
  CHECK(mi["target"]["evaluations"] == 6);
  CHECK(mi["steps"] == 12);
  // Refused before any work: a stop without a target, a target without validation.
  r = run_cli("run" + args + " --set train.stop_at_target=true --out " + fresh_dir("target-none").string());
  CHECK(r.code == 2);
  CHECK(r.output.find("train.stop_at_target") != std::string::npos);
  r = run_cli("run" + args + " --set train.target=0.5 --set data.val_fraction=0 --out " +
              fresh_dir("target-noval").string());
  CHECK(r.code == 2);
  CHECK(r.output.find("train.target") != std::string::npos);
  for (const auto& p : {plain, stopped, capped, missed, fs::path(recorded_dir)}) fs::remove_all(p);
}
