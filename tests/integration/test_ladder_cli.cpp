// The ladder's promises, checked through the real CLI on real Fashion-MNIST:
// the Fabric loop is the plain loop (bitwise in 32-true on CPU), a stopped and
// resumed run is the uninterrupted run, finetuning starts from a checkpoint.
// torch first: glog (through torch) defines CHECK, doctest must win.
#include <torch/torch.h>

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "accel/util/json.h"

#include "accel/train/checkpoint.h"
#include "integration/cli_helpers.h"

namespace fs = std::filesystem;
using namespace cli_test;

namespace {

// The smoke config cut to 2 epochs of 6 batches, every step logged, dropout on
// (so the RNG state matters for resume).
const std::string kShort =
    " -c " + source("configs/smoke/scratch-smoke.json") +
    " --set train.epochs=2 --set train.limit_train_batches=6 --set train.limit_eval_batches=2"
    " --set model.dropout=0.1 -q";

nlohmann::json result_of(const fs::path& dir) {
  std::ifstream in(dir / "result.json");
  return nlohmann::json::parse(in);
}

}  // namespace

TEST_CASE("cli: the fabric loop gives bitwise the plain loop's losses and weights in 32-true") {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  const auto plain = fresh_dir("plain"), fabric = fresh_dir("fabric");
  auto r = run_cli("run" + kShort + " --out " + plain.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  r = run_cli("run" + kShort + " --set train.loop=fabric --out " + fabric.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  r = run_cli("compare-losses " + plain.string() + " " + fabric.string() + " --tolerance 0");
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(r.output.find("12 steps compared; identical losses") != std::string::npos);
  check_checkpoints_match(plain / "checkpoint.ckpt", fabric / "checkpoint.ckpt");
  CHECK(result_of(plain)["test_acc"] == result_of(fabric)["test_acc"]);
  fs::remove_all(plain);
  fs::remove_all(fabric);
}

TEST_CASE("cli: a run stopped mid-epoch and resumed ends as the uninterrupted run") {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  const auto whole = fresh_dir("whole"), first = fresh_dir("first"), rest = fresh_dir("rest");
  auto r = run_cli("run" + kShort + " --out " + whole.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  r = run_cli("run" + kShort + " --set train.max_steps=4 --out " + first.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  CHECK(result_of(first)["steps"] == 4);
  r = run_cli("run" + kShort + " --resume " + (first / "checkpoint.ckpt").string() + " --out " +
              rest.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  const auto res = result_of(rest);
  CHECK(res["resumed_from"]["batch_in_epoch"] == 4);
  CHECK(res["epochs"].size() == 2);
  r = run_cli("compare-losses " + whole.string() + " " + rest.string() + " --tolerance 0");
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(r.output.find("12 steps compared") != std::string::npos);
  check_checkpoints_match(whole / "checkpoint.ckpt", rest / "checkpoint.ckpt");
  for (const auto& d : {whole, first, rest}) fs::remove_all(d);
}

TEST_CASE("cli: resuming from an epoch-boundary checkpoint runs the next epoch in full") {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  const auto whole = fresh_dir("whole2"), first = fresh_dir("first2"), rest = fresh_dir("rest2");
  const std::string fabric = " --set train.loop=fabric";
  auto r = run_cli("run" + kShort + fabric + " --out " + whole.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  r = run_cli("run" + kShort + fabric + " --set train.max_steps=6 --out " + first.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  CHECK(result_of(first)["epochs"].size() == 1);
  r = run_cli("run" + kShort + fabric + " --resume " + (first / "checkpoint.ckpt").string() +
              " --out " + rest.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  const auto res = result_of(rest);
  CHECK(res["resumed_from"]["batch_in_epoch"] == 0);
  REQUIRE(res["epochs"].size() == 2);
  CHECK(res["epochs"][1]["steps"] == 6);
  CHECK(run_cli("compare-losses " + whole.string() + " " + rest.string() + " --tolerance 0").code ==
        0);
  check_checkpoints_match(whole / "checkpoint.ckpt", rest / "checkpoint.ckpt");
  for (const auto& d : {whole, first, rest}) fs::remove_all(d);
}

TEST_CASE("cli: a corrupt or truncated checkpoint is an error and never a fresh start") {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  const auto run1 = fresh_dir("ck"), out = fresh_dir("ck-out");
  auto r = run_cli("run" + kShort + " --set train.max_steps=2 --out " + run1.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  const auto ckpt = run1 / "checkpoint.ckpt";
  fs::resize_file(ckpt, fs::file_size(ckpt) / 2);
  r = run_cli("run" + kShort + " --resume " + ckpt.string() + " --out " + out.string());
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find("truncated") != std::string::npos);
  CHECK_FALSE(fs::exists(out / "result.json"));
  // An existing checkpoint in --out is not replaced without --force.
  fs::remove(run1 / "result.json");
  const auto size = fs::file_size(ckpt);
  r = run_cli("run" + kShort + " --set train.max_steps=2 --out " + run1.string());
  CHECK(r.code == 2);
  CHECK(r.output.find("checkpoint.ckpt") != std::string::npos);
  CHECK(fs::file_size(ckpt) == size);
  fs::remove_all(run1);
  fs::remove_all(out);
}

TEST_CASE("cli: finetuning from another run's checkpoint replaces a head of another size") {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  const auto up = fresh_dir("up"), down = fresh_dir("down");
  auto r = run_cli("run" + kShort + " --set data.classes=[0,1,2,3,4] --set train.epochs=1 --out " +
                   up.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  const auto ckpt = (up / "checkpoint.ckpt").string();
  r = run_cli("run" + kShort + " --set data.classes=[7,8,9] --set train.epochs=1" +
              " --set model.init=checkpoint --set model.init_path=" + ckpt + " --out " +
              down.string());
  REQUIRE_MESSAGE(r.code == 0, r.output);
  const auto init = result_of(down)["init"];
  CHECK(init["head_replaced"] == true);
  CHECK(init["source_classes"] == 5);
  CHECK(init["missing"].empty());
  // A tensor of another shape (a deeper model) is an error naming it.
  r = run_cli("run" + kShort + " --set model.depth=5 --set model.init=checkpoint" +
              " --set model.init_path=" + ckpt + " --out " + fresh_dir("bad").string());
  CHECK(r.code == 2);
  CHECK(r.output.find("encoder_layer_4") != std::string::npos);
  fs::remove_all(up);
  fs::remove_all(down);
}

TEST_CASE("cli: every committed result set reports byte for byte as committed and compares with itself") {
  const fs::path results = source("results");
  const auto tmp = fresh_dir("committed");
  int sets = 0;
  for (const auto& e : fs::recursive_directory_iterator(results)) {
    if (e.path().filename() != "sweep.json" || !fs::exists(e.path().parent_path() / "report.md")) continue;
    const auto set = e.path().parent_path();
    CAPTURE(set.string());
    // A copy, so that nothing is written into the tree; reported from the
    // checkout's root, where its default calibration (results/peaks/) is.
    const auto copy = tmp / std::to_string(++sets) / set.filename();
    fs::create_directories(copy.parent_path());
    fs::copy(set, copy, fs::copy_options::recursive);
    fs::remove(copy / "report.md");
    auto r = run_command("cd '" + source("") + "' && " + ACCEL_BENCH_EXE + " report '" + copy.string() + "' --gnuplot /nonexistent");  // the tables, whatever gnuplot is here
    INFO(r.output);
    REQUIRE(r.code == 0);
    std::ifstream a(set / "report.md", std::ios::binary), b(copy / "report.md", std::ios::binary);
    const std::string committed((std::istreambuf_iterator<char>(a)), {});
    std::string now((std::istreambuf_iterator<char>(b)), {});
    // The report names the set's own files by the path it was given: the committed
    // ones were made from the checkout's root.
    const std::string given = copy.string(), rel = fs::relative(set, source("")).string();
    for (size_t at = now.find(given); at != std::string::npos; at = now.find(given, at + rel.size())) {
      now.replace(at, given.size(), rel);
    }
    CHECK(now == committed);
    // The set against itself: no change, resolved or not (one run a side is unresolved, exit 4).
    r = run_command("cd '" + source("") + "' && " + ACCEL_BENCH_EXE + " compare '" + copy.string() + "' '" + copy.string() +
                    "' --fail-slower 10");
    CHECK((r.code == 0 || r.code == 4));
    CHECK(r.output.find("slower") == std::string::npos);
    CHECK(r.output.find("error") == std::string::npos);
  }
  CHECK(sets >= 4);
  fs::remove_all(tmp);
}
