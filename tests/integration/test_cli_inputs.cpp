// Bad inputs through the real CLI: each is an input error (exit 2) with one
// line naming the file, and nothing is written.
// torch first: glog (through torch) defines CHECK, doctest must win.
#include <torch/torch.h>

#include <doctest/doctest.h>

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "integration/cli_helpers.h"
#include "support/temp_dir.h"

namespace {

namespace fs = std::filesystem;
using namespace cli_test;
using accel_test::TempDir;

void put_be32(std::string& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<char>(v >> s));
}

std::string idx_images(uint32_t n) {
  std::string b;
  for (uint32_t v : {0x803U, n, 28U, 28U}) put_be32(b, v);
  for (uint32_t i = 0; i < n * 28 * 28; ++i) b.push_back(static_cast<char>(i * 7 % 251));
  return b;
}

std::string idx_labels(uint32_t n) {
  std::string b;
  for (uint32_t v : {0x801U, n}) put_be32(b, v);
  for (uint32_t i = 0; i < n; ++i) b.push_back(static_cast<char>(i % 10));
  return b;
}

void write_gz(const fs::path& p, const std::string& bytes) {
  gzFile f = gzopen(p.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) == int(bytes.size()));
  gzclose(f);
}

// A Fashion-MNIST-shaped data.root of small valid files.
void write_dataset(const fs::path& root) {
  fs::create_directories(root);
  write_gz(root / "train-images-idx3-ubyte.gz", idx_images(100));
  write_gz(root / "train-labels-idx1-ubyte.gz", idx_labels(100));
  write_gz(root / "t10k-images-idx3-ubyte.gz", idx_images(20));
  write_gz(root / "t10k-labels-idx1-ubyte.gz", idx_labels(20));
}

void cut_tail(const fs::path& p, size_t n) {
  fs::resize_file(p, fs::file_size(p) - n);
}

size_t lines(const std::string& s) { return size_t(std::count(s.begin(), s.end(), '\n')); }

Outcome run_on(const fs::path& root, const fs::path& out) {
  return run_cli("run -q -c " + source("configs/smoke/scratch-smoke.json") +
                 " --set data.root=" + root.string() + " --out " +
                 out.string());
}

}  // namespace

TEST_CASE("cli inputs: a corrupt dataset file exits 2 naming it and writes no result") {
  TempDir tmp;
  const auto root = tmp / "fmnist";
  write_dataset(root);
  const auto images = root / "train-images-idx3-ubyte.gz";
  SUBCASE("gzip trailer cut (head -c -8)") { cut_tail(images, 8); }
  SUBCASE("bad magic") {
    write_gz(images, idx_labels(100));  // labels where images belong
  }
  const auto out = tmp / "out";
  const auto r = run_on(root, out);
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find("accel-bench: error: " + images.string() + ": ") != std::string::npos);
  CHECK(lines(r.output) == 1);
  CHECK_FALSE(fs::exists(out / "result.json"));
  CHECK_FALSE(fs::exists(out));
}

TEST_CASE("cli inputs: a config nested 200000 levels deep exits 2 with one line") {
  TempDir tmp;
  const int d = 200000;
  const auto deep = tmp.write("deep.json", "{\"name\":" + std::string(d, '[') + std::string(d, ']') + "}");
  const auto r = run_cli("config --check " + deep.string());
  INFO(r.output.substr(0, 500));
  CHECK(r.code == 2);
  CHECK(lines(r.output) == 1);
  CHECK(r.output.find(deep.string() + ": nested deeper than 64 levels") != std::string::npos);
}

TEST_CASE("cli inputs: a repeated section exits 2 naming the file and key") {
  TempDir tmp;
  const auto dup = tmp.write("dup.json", R"({"train":{"epochs":7},"train":{"batch_size":8}})");
  const auto r = run_cli("config --check " + dup.string());
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(lines(r.output) == 1);
  CHECK(r.output.find(dup.string() + ": duplicate key \"train\"") != std::string::npos);
}

TEST_CASE("cli inputs: compare-losses says identical, refuses a negative tolerance and a cut row") {
  TempDir tmp;
  const std::string csv =
      "kind,step,epoch,loss,train_acc,val_acc,step_time_ms\n"
      "step,1,0,2.5,,,12\n"
      "step,2,0,2.25,,,11\n";
  const auto a = tmp.write("a/metrics.csv", csv);
  const auto b = tmp.write("b/metrics.csv", csv);
  auto r = run_cli("compare-losses " + a.parent_path().string() + " " + b.string() + " --tolerance 0");
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(r.output.find("identical") != std::string::npos);
  CHECK(r.output.find("step -1") == std::string::npos);

  r = run_cli("compare-losses " + a.string() + " " + b.string() + " --tolerance -1");
  CHECK(r.code == 2);
  CHECK(r.output.find("--tolerance: must be a number >= 0") != std::string::npos);

  const auto cut = tmp.write("c/metrics.csv", csv + "step,3,0,2.1");
  r = run_cli("compare-losses " + a.string() + " " + cut.string());
  CHECK(r.code == 2);
  CHECK(r.output.find(cut.string() + ": line 4: incomplete row") != std::string::npos);
  CHECK(lines(r.output) == 1);
}

namespace {

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

nlohmann::json read_json(const fs::path& f) {
  std::ifstream in(f);
  return nlohmann::json::parse(in);
}

// The scratch smoke config cut to a few steps on the real data.
Outcome smoke(const std::string& extra) {
  return run_cli("run -c " + source("configs/smoke/scratch-smoke.json") +
                 " --set train.limit_train_batches=4 --set train.limit_eval_batches=1 " + extra);
}

}  // namespace

TEST_CASE("cli inputs: an out dir holding only a killed run's step checkpoints needs --force or --resume" * doctest::test_suite("process")) {
  if (!have_fashion_mnist()) return;
  TempDir tmp;
  const auto out = tmp / "out";
  REQUIRE(smoke("--set train.checkpoint_every=2 --out " + out.string()).code == 0);
  // What a kill leaves: the step checkpoints, no result.json, no final checkpoint.
  fs::remove(out / "result.json");
  fs::remove(out / "checkpoint.ckpt");
  REQUIRE_FALSE(fs::is_empty(out / "checkpoints"));
  const auto before = fs::last_write_time(out / "config.json");
  const auto r = smoke("--out " + out.string());
  CHECK(r.code == 2);
  CHECK(lines(r.output) == 1);
  CHECK(has(r.output, "checkpoints/step-"));
  CHECK(has(r.output, "--resume auto"));
  CHECK(has(r.output, "--force"));
  CHECK(fs::last_write_time(out / "config.json") == before);  // nothing was touched
}

TEST_CASE("cli inputs: an unusable --out exits 2 with one line before any data is read") {
  TempDir tmp;
  tmp.write("file", "x");
  for (const std::string out : {(tmp / "file" / "out").string(), std::string("/proc/accel-x")}) {
    const auto r = run_cli("run -c " + source("configs/smoke/scratch-smoke.json") + " --out " + out);
    INFO(r.output);
    CHECK(r.code == 2);
    CHECK(lines(r.output) == 1);
    CHECK(has(r.output, "--out"));
    CHECK_FALSE(has(r.output, "== data"));  // nothing was loaded
  }
}

TEST_CASE("cli inputs: an eval batch beyond the split's size is bounded by it and said so") {
  TempDir tmp;
  // Synthetic data: a few images per split (those of classes 5-9), so the batch is bounded.
  const auto r = run_cli("run -c " + source("configs/smoke/scratch-smoke.json") +
                         " --set data.dataset=synthetic --set data.synthetic_train=64"
                         " --set data.synthetic_test=24 --set train.eval_batch_size=2000000000"
                         " --out " + (tmp / "o").string());
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(has(r.output, "== note: train.eval_batch_size 2000000000 exceeds the"));
  CHECK(has(r.output, "images of a split; using "));
  CHECK(read_json(tmp / "o/result.json")["status"] == "ok");
}

TEST_CASE("cli inputs: what was not measured is null and n/a never zero") {
  if (!have_fashion_mnist()) return;
  TempDir tmp;
  // No validation split, and warm-up longer than the run: no val accuracy, no step time.
  const auto r = smoke("--set data.val_fraction=0 --set train.warmup_steps=100 --out " +
                       (tmp / "o").string());
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(has(r.output, "Val acc.: n/a"));
  CHECK(has(r.output, "Step time: n/a"));
  const auto res = read_json(tmp / "o/result.json");
  CHECK(res["epochs"][0]["val_acc"].is_null());
  CHECK(res["images_per_s"].is_null());
  CHECK(res["test_acc"].is_number());  // what was measured is there
}

TEST_CASE("cli inputs: accelerator auto records the device it ran on and the matmul precision applied") {
  if (!have_fashion_mnist()) return;
  TempDir tmp;
  auto r = smoke("--set runtime.accelerator=auto --set runtime.matmul_precision=medium --out " +
                 (tmp / "o").string());
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto res = read_json(tmp / "o/result.json");
  CHECK(res["device"] == (torch::cuda::is_available() ? "cuda:0" : "cpu"));
  CHECK(res["config"]["runtime"]["accelerator"] == "auto");  // as asked, beside what ran
  CHECK(res["env"]["float32_matmul_precision"] == "medium");  // read back from LibTorch
  r = smoke("--set runtime.matmul_precision=low --out " + (tmp / "p").string());
  CHECK(r.code == 2);
  CHECK(has(r.output, "runtime.matmul_precision"));
}

TEST_CASE("cli inputs: --resume names the model field that differs and refuses fewer batches per epoch") {
  if (!have_fashion_mnist()) return;
  TempDir tmp;
  const auto out = tmp / "o";
  // Stopped after 4 batches of epoch 1 (max_steps), so the checkpoint is mid-epoch.
  REQUIRE(smoke("--set train.epochs=2 --set train.max_steps=3 --out " + out.string()).code == 0);
  auto r = smoke("--set train.epochs=2 --set model.depth=2 --resume auto --out " + out.string());
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(has(r.output, "model.depth"));
  r = smoke("--set train.epochs=2 --set train.limit_train_batches=2 --resume auto --out " +
            out.string());
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(has(r.output, "train.limit_train_batches is lower"));
}

TEST_CASE("cli inputs: runtime.cuda_graphs where there is no cuda exits 2 naming the field before any data is read") {
  TempDir tmp;
  const auto r = run_cli("run -c " + source("configs/smoke/scratch-smoke.json") +
                         " --set data.root=/nonexistent --set runtime.cuda_graphs=true --out " +
                         (tmp / "o").string());
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(has(r.output, "runtime.accelerator"));
  CHECK(has(r.output, "cuda_graphs"));
  CHECK_FALSE(fs::exists(tmp / "o"));
}

TEST_CASE("cli inputs: runtime.devices auto runs one rank on a cpu and keeps auto in the config") {
  if (!have_fashion_mnist()) return;
  TempDir tmp;
  const auto r = smoke("--set runtime.devices=auto --out " + (tmp / "o").string());
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto res = read_json(tmp / "o/result.json");
  CHECK(res["world_size"] == 1);
  CHECK(res["config"]["runtime"]["devices"] == "auto");
}

TEST_CASE("cli inputs: a batch larger than a rank's share names the samples each rank has") {
  TempDir tmp;
  for (const int devices : {1, 2}) {
    CAPTURE(devices);
    const auto r = run_cli("run -q -c " + source("configs/smoke/scratch-smoke.json") +
                           " --set data.dataset=synthetic --set data.synthetic_train=400"
                           " --set data.val_fraction=0.1 --set train.batch_size=1000"
                           " --set train.loop=fabric"
                           " --set runtime.threads=1 --set runtime.devices=" +
                           std::to_string(devices) + " --out " +
                           (tmp / ("o" + std::to_string(devices))).string());
    INFO(r.output);
    CHECK(r.code == 2);
    // 400 synthetic images, 200 of the config's classes 5-9, 20 held out for
    // validation: 180 to train on.
    CHECK(has(r.output, devices == 1 ? "larger than the 180 training samples per rank (180 over 1 rank"
                                     : "larger than the 90 training samples per rank (180 over 2 ranks"));
  }
}

TEST_CASE("cli inputs: a FIFO as an extends target or as a result.json is refused, never waited on" * doctest::test_suite("process")) {
  TempDir tmp;
  const auto fifo = tmp / "base.json";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  tmp.write("child.json", R"({"extends": "base.json", "name": "child"})");
  auto r = run_cli("config --check " + (tmp / "child.json").string());
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(has(r.output, "not a regular file"));
  // A result set whose rung's result.json is a FIFO, beside one that is cut short.
  fs::create_directories(tmp / "set" / "00-a");
  fs::create_directories(tmp / "set" / "01-b");
  REQUIRE(::mkfifo((tmp / "set" / "00-a" / "result.json").c_str(), 0600) == 0);
  tmp.write("set/01-b/result.json", R"({"schema_version": 3, "status": "ok", "train_ti)");
  r = run_cli("report " + (tmp / "set").string());
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(has(r.output, "report: warning: " + (tmp / "set" / "01-b" / "result.json").string() + ": not JSON"));
  CHECK(has(r.output, "00-a/result.json: not a regular file"));
  CHECK(has(r.output, "| unreadable |"));
}

TEST_CASE("cli inputs: threads, model size and batches beyond the machine are refused or capped before any batch") {
  TempDir tmp;
  const std::string base = "run -q --dry-run -c " + source("configs/smoke/scratch-smoke.json") +
                           " --set data.dataset=synthetic --set data.synthetic_train=64"
                           " --set data.synthetic_test=200 --out " + (tmp / "o").string();
  struct Case {
    const char* set;
    const char* says;
  };
  for (const Case c : {Case{"runtime.threads=100000", "runtime.threads"},
                       Case{"runtime.threads=1000", "threads per core"},
                       Case{"model.depth=100000", "depth 100000"},
                       Case{"model.image_size=100000", "model.image_size"},
                       Case{"train.batch_size=10000000", "train.batch_size: 10000000 needs about"}}) {
    CAPTURE(c.set);
    const auto r = run_cli(base + " --set " + c.set);
    INFO(r.output);
    CHECK(r.code == 2);
    CHECK(lines(r.output) == 1);
    CHECK(has(r.output, c.says));
  }
  // 3137 tokens a sample (224 px in patches of 4): a 2e9 evaluation batch is
  // capped at the split, then by memory, and said so.
  std::string loud = base;
  loud.replace(loud.find(" -q"), 3, "");  // the note is progress output
  const auto r = run_cli(loud + " --set model.image_size=224 --set train.batch_size=1"
                                " --set train.eval_batch_size=2000000000");
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(has(r.output, " of activations, more than a quarter of this machine's "));
}

