// Bad inputs through the real CLI: each is an input error (exit 2) with one
// line naming the file, and nothing is written.
// torch first: glog (through torch) defines CHECK, doctest must win.
#include <torch/torch.h>

#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "accel/util/json.h"

#include "integration/cli_helpers.h"
#include "support/skip.h"
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
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
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
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
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

TEST_CASE("cli inputs: accelerator auto records the device it ran on, the run plan and the matmul precision applied") {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  TempDir tmp;
  auto r = smoke("--set runtime.accelerator=auto --set runtime.matmul_precision=medium --out " +
                 (tmp / "o").string());
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto res = read_json(tmp / "o/result.json");
  CHECK(res["device"] == (torch::cuda::is_available() ? "cuda:0" : "cpu"));
  CHECK(res["config"]["runtime"]["accelerator"] == "auto");  // as asked, beside what ran
  CHECK(res["env"]["float32_matmul_precision"] == "medium");  // read back from LibTorch
  // The plan the run resolved once: the accelerator auto chose, its world and what ran.
  const auto& plan = res["plan"];
  CHECK(plan["accelerator"] == (torch::cuda::is_available() ? "cuda" : "cpu"));
  CHECK(plan["strategy"] == res["strategy"]);
  CHECK(plan["world"]["dp"] == res["world_size"]);
  CHECK(plan["threads"] == res["threads"]);
  CHECK(plan["precision"]["name"] == res["config"]["runtime"]["precision"]);
  CHECK(plan["precision"]["support"] == res["precision_support"]);
  CHECK(plan["family"] == res["config"]["model"]["arch"]);
  r = smoke("--set runtime.matmul_precision=low --out " + (tmp / "p").string());
  CHECK(r.code == 2);
  CHECK(has(r.output, "runtime.matmul_precision"));
}

TEST_CASE("cli inputs: --resume names the model field that differs and refuses fewer batches per epoch") {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
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
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
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


namespace {

// A result.json with the figures the report reads, `changes` aside.
std::string fake_result(double time, double acc) {
  return nlohmann::json{{"schema_version", 3}, {"status", "ok"}, {"train_time_s", time},
                        {"test_acc", acc}, {"peak_memory_bytes", {1e9}}, {"samples_per_s", 100.0},
                        {"config", {{"train", {{"epochs", 1}}}, {"runtime", {{"precision", "32-true"}}}}},
                        {"env", {{"cpu_model", "x"}, {"threads", 1}}}}
      .dump();
}

// Every double-quoted string of a gnuplot script is one of the script's own
// literals: data reaches gnuplot only single-quoted (where backquotes and
// '@' are plain text) or as the CSV it plots.
void check_no_data_in_double_quotes(const fs::path& script) {
  std::ifstream in(script);
  const std::string gp((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::vector<std::string> literals = {
      "sans,12", "white", "sans,11", "\\n", "%.2f", "%.1f", ",10", ",9", ",8", "n/a", "#555555", ""};
  bool single = false;
  for (size_t i = 0; i < gp.size(); ++i) {
    const char c = gp[i];
    if (single) {
      if (c == '\'' && i + 1 < gp.size() && gp[i + 1] == '\'') {
        ++i;  // '' is a quote inside the string
      } else if (c == '\'') {
        single = false;
      } else {
        CHECK_MESSAGE(c != '\n', script << ": a line break inside a single-quoted string");
      }
    } else if (c == '\'') {
      single = true;
    } else if (c == '"') {
      const size_t close = gp.find('"', i + 1);
      REQUIRE(close != std::string::npos);
      const std::string lit = gp.substr(i + 1, close - i - 1);
      INFO(script.string() << ": a double-quoted string that is not the script's own: \"" << lit << "\"");
      CHECK(std::find(literals.begin(), literals.end(), lit) != literals.end());
      i = close;
    } else {
      CHECK_MESSAGE(c != '`', script << ": a backquote outside a single-quoted string");
    }
  }
  CHECK_FALSE(single);
}

// A word for sh: single-quoted, a quote inside as '\''.
std::string shell_word(const std::string& s) {
  std::string out = "'";
  for (const char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

bool pwned(const TempDir& tmp) {
  for (const auto& e : fs::recursive_directory_iterator(tmp.path)) {
    if (e.path().filename().string().rfind("PWNED", 0) == 0) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("report: no string of a result set or a path reaches gnuplot or the tables as code" * doctest::test_suite("process")) {
  TempDir tmp;
  const auto mark = (tmp / "PWNED").string();
  // Commands as gnuplot would run them: in backquotes, after a line break (`!`).
  const std::string payload = "x`touch " + mark + "1`'\"\n!touch " + mark + "2\n@q";
  const bool charts = run_cli("env").code == 0 && std::system("command -v gnuplot >/dev/null") == 0;

  // 1. A plain folder of runs: the set's and the runs' folder names carry it.
  // (Relative names: a folder's name holds no '/'; gnuplot runs in the charts folder.)
  const std::string folder = "set `touch PWNED3` 'q\n!touch PWNED4";
  // A rung's folder is its id and held to the ids' rules; the set's own
  // folder name is only text.
  tmp.write(folder + "/00-a `touch PWNED5`/result.json", fake_result(60, 0.8));
  tmp.write(folder + "/01-b/result.json", fake_result(30, 0.7));
  auto r = run_cli("report " + shell_word((tmp / folder).string()));
  CHECK(r.code == 2);
  CHECK(r.output.find("00-a `touch PWNED5`: a rung's folder is named by its id") != std::string::npos);
  fs::rename(tmp / folder / "00-a `touch PWNED5`", tmp / folder / "00-a");
  r = run_cli("report " + shell_word((tmp / folder).string()));
  INFO(r.output);
  CHECK(r.code == 0);
  // 2. A sweep's set: the reference's hardware name and a rung's "changes"
  // carry it; the report also goes to an --out whose name carries it.
  nlohmann::json manifest = {
      {"schema_version", 1}, {"suite", "s"}, {"machine_id", "m-2c"},
      {"reference", {{"hardware_short", payload}, {"source", payload},
                     {"rungs", {{"00", {{"time_min", 1.0}, {"acc_pct", 80.0}}}}}}},
      {"upstream", nlohmann::json::array()},
      {"rungs", {{{"id", "00-a"}, {"article", "00"}, {"status", "ok"},
                  {"changes", "=HYPERLINK(\"http://x\")\n| <script>alert(1)</script>"},
                  {"runs", {{{"dir", "00-a"}}}}},
                 {{"id", "01-b"}, {"article", "01"}, {"status", "ok"}, {"changes", "@SUM(A1)"},
                  {"runs", {{{"dir", "01-b"}}}}}}}};
  tmp.write("sweep/sweep.json", manifest.dump());
  tmp.write("sweep/00-a/result.json", fake_result(60, 0.8));
  tmp.write("sweep/01-b/result.json", fake_result(30, 0.7));
  const auto out = tmp / "out `touch PWNED6` '\"q";
  r = run_cli("report " + (tmp / "sweep").string() + " --out " + shell_word(out.string()));
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK_FALSE(pwned(tmp));
  if (charts) {
    for (const auto& dir : {tmp / folder / "charts", out / "charts"}) {
      CAPTURE(dir);
      for (const char* name : {"runtime", "accuracy"}) {
        CHECK(fs::file_size(dir / (std::string(name) + ".svg")) > 0);
        CHECK(fs::file_size(dir / (std::string(name) + ".png")) > 0);
        check_no_data_in_double_quotes(dir / (std::string(name) + ".gp"));
      }
    }
  }
  // The tables: one row per rung, no live formula, no raw HTML.
  std::ifstream md_in(out / "report.md"), csv_in(out / "report.csv");
  const std::string md((std::istreambuf_iterator<char>(md_in)), {});
  const std::string csv((std::istreambuf_iterator<char>(csv_in)), {});
  CHECK(md.find("<script>") == std::string::npos);
  CHECK(md.find("&lt;script>") != std::string::npos);
  CHECK(md.find("| 00-a | 00 | =HYPERLINK(\"http://x\") \\| &lt;script>") != std::string::npos);
  // Control characters of a set's text are spaces from the moment it is read.
  CHECK(csv.find(",\"'=HYPERLINK(\"\"http://x\"\") | <script>alert(1)</script>\",") != std::string::npos);
  CHECK(csv.find(",'@SUM(A1),") != std::string::npos);
  // 3. Ids that become folder and chart names are held to the suite's rules.
  for (const char* field : {"suite", "machine_id"}) {
    auto bad = manifest;
    bad[field] = payload;
    tmp.write("bad/sweep.json", bad.dump());
    tmp.write("bad/00-a/result.json", fake_result(60, 0.8));
    r = run_cli("report " + (tmp / "bad").string());
    CHECK(r.code == 2);
    CHECK(r.output.find(std::string(field) + " \"x`touch") != std::string::npos);
  }
  auto bad = manifest;
  bad["rungs"][0]["id"] = payload;
  tmp.write("bad/sweep.json", bad.dump());
  r = run_cli("report " + (tmp / "bad").string());
  CHECK(r.code == 2);
  CHECK(r.output.find("rung id \"x`touch") != std::string::npos);
  bad = manifest;
  bad["rungs"][0]["runs"][0]["dir"] = "../../sweep/00-a";
  tmp.write("bad/sweep.json", bad.dump());
  r = run_cli("report " + (tmp / "bad").string());
  CHECK(r.code == 2);
  CHECK(r.output.find("run folder \"../../sweep/00-a\" of rung 00-a is not a folder inside the set") !=
        std::string::npos);
  CHECK_FALSE(fs::exists(tmp / "bad" / "report.md"));
  CHECK_FALSE(pwned(tmp));
}

TEST_CASE("report: a chart gnuplot leaves cut short replaces nothing, and the command names it and exits 1" * doctest::test_suite("process")) {
  if (std::system("command -v gnuplot >/dev/null") != 0) {
    accel_test::skip("gnuplot not installed");
    return;
  }
  TempDir tmp;
  tmp.write("set/00-a/result.json", fake_result(60, 0.8));
  auto r = run_cli("report " + (tmp / "set").string());
  REQUIRE(r.code == 0);
  const auto svg = tmp / "set" / "charts" / "runtime.svg";
  std::ifstream before_in(svg);
  const std::string before((std::istreambuf_iterator<char>(before_in)), {});
  // A gnuplot that stops as a full disk stops it: half an SVG, an empty PNG.
  const auto fake = tmp.write("gnuplot-full-disk",
                              "#!/bin/sh\n"
                              "f=$(basename \"$1\" .gp); printf '<svg><g>' > $f.svg.part; : > $f.png.part\n");
  ::chmod(fake.c_str(), 0755);
  r = run_cli("report " + (tmp / "set").string() + " --gnuplot " + fake.string());
  INFO(r.output);
  CHECK(r.code == 1);
  CHECK(r.output.find("runtime.svg and runtime.png not written (cut short") != std::string::npos);
  CHECK(r.output.find("error: report: runtime.svg and runtime.png, accuracy.svg and accuracy.png not written") !=
        std::string::npos);
  std::ifstream after_in(svg);
  const std::string after((std::istreambuf_iterator<char>(after_in)), {});
  CHECK(after == before);  // the previous chart stays
  CHECK_FALSE(fs::exists(tmp / "set" / "charts" / "runtime.svg.part"));
  CHECK(fs::exists(tmp / "set" / "report.md"));
}

TEST_CASE("predict: a calibration or result of the wrong shape or with impossible values exits 2 naming the file and field, and --link works from any folder") {
  TempDir tmp;
  const std::string base =
      source("results/ladder-text-cpu/amd-epyc-2c-avx512bf16-lt1.13.0/t03b-one-core/result.json");
  const std::string calib = source("results/ladder-text-cpu/amd-epyc-2c-avx512bf16-lt1.13.0/peaks.json");
  std::ifstream in(calib);
  const auto good = nlohmann::json::parse(in);
  auto r = run_cli("predict " + base + " --strategy ddp --devices 2 --calibration " + calib);
  REQUIRE_MESSAGE(r.code == 0, r.output);
  struct Case {
    std::string pointer, value, says;
  };
  for (const Case& c : {Case{"/comm/collectives/all_reduce/alpha_s", "-1", "comm.collectives.all_reduce.alpha_s: must be a number >= 0 (got -1"},
                        Case{"/comm/collectives/all_gather/points/0/1", "-0.5", "comm.collectives.all_gather.points[0][1]: must be a number > 0"},
                        Case{"/comm/ranks", "\"two\"", "comm.ranks: must be an integer >= 2 (got \"two\")"},
                        Case{"/comm/collectives", "[]", "comm.collectives: must be an object"},
                        Case{"/cpu/fp32/1", "-3", "cpu.fp32.1: must be a number > 0"},
                        Case{"/comm/collectives/all_reduce/alpha_s", "1e300", "comm.collectives.all_reduce.alpha_s: must be at most 10"},
                        Case{"/comm/collectives/all_reduce/beta_s_per_byte", "1e300", "comm.collectives.all_reduce.beta_s_per_byte: must be at most 0.001"}}) {
    CAPTURE(c.pointer);
    auto doc = good;
    doc[nlohmann::json::json_pointer(c.pointer)] = nlohmann::json::parse(c.value);
    const auto file = tmp.write("peaks.json", doc.dump());
    r = run_cli("predict " + base + " --strategy ddp --devices 2 --calibration " + file.string());
    INFO(r.output);
    CHECK(r.code == 2);
    CHECK(r.output.find(file.string() + ": " + c.says) != std::string::npos);
  }
  // A result.json whose fields have other types than a run writes.
  std::ifstream rin(base);
  auto result = nlohmann::json::parse(rin);
  result["env"] = "a string";
  result["step_split_ms"] = nlohmann::json::array({1, 2});
  const auto odd = tmp.write("odd/result.json", result.dump());
  r = run_cli("predict " + odd.string() + " --strategy ddp --devices 2 --calibration " + calib);
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find("accel-bench: error: " + odd.string() + ": ") != std::string::npos);
  // The links table of the source tree, found from another folder.
  const auto from_tmp = std::string("cd ") + tmp.path.string() + " && " + ACCEL_BENCH_EXE +
                        " predict --article " + source("results/reference/cvpr2023-vit.json") +
                        " --rung 04 --devices 1,4 --link nvlink3-a100 > " + (tmp / "o.txt").string() + " 2>&1";
  CHECK(std::system(from_tmp.c_str()) == 0);
}

namespace {

// A sweep's set of two rungs (00-a, 01-b), one run each, with the figures a
// run writes; `patch` is merged into a rung's result.json.
fs::path hostile_set(const TempDir& tmp, const std::string& name, const nlohmann::json& patch_a = nlohmann::json::object(),
                     const nlohmann::json& patch_b = nlohmann::json::object(), const std::string& machine = "m-2c") {
  const nlohmann::json manifest = {
      {"schema_version", 1}, {"suite", "s"}, {"machine_id", machine}, {"made_at", name}, {"upstream", nlohmann::json::array()},
      {"rungs",
       {{{"id", "00-a"}, {"article", "00"}, {"status", "ok"}, {"changes", "base"}, {"runs", {{{"dir", "00-a"}}}}},
        {{"id", "01-b"}, {"article", "01"}, {"status", "ok"}, {"changes", "faster"}, {"runs", {{{"dir", "01-b"}}}}}}}};
  tmp.write(name + "/sweep.json", manifest.dump());
  for (const auto& [rung, patch, time] : {std::tuple{"00-a", patch_a, 60.0}, std::tuple{"01-b", patch_b, 30.0}}) {
    auto doc = nlohmann::json::parse(fake_result(time, 0.8));
    doc["step_time_ms"] = {{"median", time}, {"count", 40}};
    doc.merge_patch(patch);
    tmp.write(name + "/" + rung + "/result.json", doc.dump());
  }
  return tmp / name;
}

std::string text_of(const fs::path& f) {
  std::ifstream in(f, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string nested(int levels) { return std::string(size_t(levels), '[') + std::string(size_t(levels), ']'); }

}  // namespace

TEST_CASE("report --html: a link leaving the set is refused naming it, and only the charts just drawn are embedded") {
  TempDir tmp;
  const auto set = hostile_set(tmp, "set");
  tmp.write("secret.txt", "TOKEN=hunter2");
  // A link out of the set (as a pull request can carry one), in charts/ or as a run's file.
  fs::create_directories(set / "charts");
  fs::create_symlink("/proc/self/environ", set / "charts" / "env.svg");
  auto r = run_cli("report " + set.string() + " --html --gnuplot /nonexistent");
  CHECK(r.code == 2);
  CHECK(has(r.output, "charts/env.svg is a symbolic link leaving the folder (to /proc/"));
  CHECK_FALSE(fs::exists(set / "report.html"));
  CHECK_FALSE(fs::exists(set / "report.md"));
  fs::remove(set / "charts" / "env.svg");
  fs::rename(set / "01-b" / "result.json", set / "01-b" / "kept.json");
  fs::create_symlink(tmp / "secret.txt", set / "01-b" / "result.json");
  for (const char* cmd : {"report ", "compare --fail-slower 7 "}) {
    r = run_cli(std::string(cmd) + set.string() + (std::string(cmd) == "report " ? "" : " " + set.string()));
    CAPTURE(r.output);
    CHECK(r.code == 2);
    CHECK(has(r.output, "01-b/result.json is a symbolic link leaving the folder"));
  }
  fs::remove(set / "01-b" / "result.json");
  fs::rename(set / "01-b" / "kept.json", set / "01-b" / "result.json");
  // A link inside the set is the set's own file, yet a chart this report did
  // not draw is never read, whatever its name: without gnuplot, none is embedded.
  tmp.write("set/charts/planted.svg", "<svg xmlns=\"http://www.w3.org/2000/svg\">PLANTED</svg>");
  fs::create_symlink("../00-a/result.json", set / "charts" / "inside.svg");
  r = run_cli("report " + set.string() + " --html --gnuplot /nonexistent");
  INFO(r.output);
  CHECK(r.code == 0);
  const std::string html = text_of(set / "report.html");
  CHECK(html.find("data:image/svg+xml") == std::string::npos);
  CHECK(html.find("No charts") != std::string::npos);
}

TEST_CASE("compare: zero, negative or non-finite times and memory and impossible accuracies are refused as read, and fail the gate") {
  TempDir tmp;
  const auto base = hostile_set(tmp, "base");
  struct Case {
    nlohmann::json patch;
    const char* why;
    const char* bound;
  };
  const std::vector<Case> cases = {
      {{{"train_time_s", 0}}, "train_time_s is 0: it must be > 0", "--fail-slower 7"},
      {{{"train_time_s", -5}}, "train_time_s is -5: it must be > 0", "--fail-slower 7"},
      {{{"step_time_ms", {{"median", -1}}}}, "step_time_ms.median is -1: it must be > 0", "--fail-slower 7"},
      {{{"peak_memory_bytes", {0}}}, "peak_memory_bytes is 0: it must be > 0", "--fail-memory-growth 10"},
      {{{"test_acc", 1.5}}, "test_acc is 1.5: accuracy is a share, from 0 to 1", "--fail-accuracy-drop 1"},
      // A language model's loss may exceed 1, not every bound.
      {{{"test_acc", 1e7},
        {"plan", {{"task", {{"name", "causal_lm"}, {"metric", "loss"}, {"higher_is_better", false}, {"proportion", false}}}}}},
       "test_acc is 1e+07: loss must be finite, at most 1e+06 in size",
       "--fail-accuracy-drop 1"},
      {{{"world_size", 1e300}}, "world_size is 1e+300: a count from 1 to", "--fail-slower 7"},
  };
  int k = 0;
  for (const auto& c : cases) {
    CAPTURE(c.why);
    const auto bad = hostile_set(tmp, "bad" + std::to_string(k++), nlohmann::json::object(), c.patch);
    // On the other side: a regression; on the base side: not compared, which fails a gate.
    for (const auto& [b, o] : {std::pair{base, bad}, std::pair{bad, base}}) {
      const auto r = run_cli("compare " + b.string() + " " + o.string() + " " + c.bound);
      CAPTURE(r.output);
      CHECK(r.code == 1);
      CHECK_FALSE(has(r.output, "PASS"));
      CHECK(has(r.output, c.why));
    }
    // summary names the file and exits 2.
    const auto r = run_cli("summary " + (bad / "01-b" / "result.json").string());
    CHECK(r.code == 2);
    CHECK(has(r.output, "01-b/result.json: " + std::string(c.why)));
  }
}

TEST_CASE("cli inputs: JSON nested 150000 levels deep in any file a reader takes exits cleanly naming the file, never crashes" * doctest::test_suite("process")) {
  TempDir tmp;
  const std::string deep = nested(150000);
  // In a result.json's config: the rung is unreadable, said with the file's name.
  const auto set = hostile_set(tmp, "set", nlohmann::json::object(), nlohmann::json::object());
  {
    auto doc = nlohmann::json::parse(text_of(set / "01-b" / "result.json"));
    std::string text = doc.dump();
    text.insert(text.rfind('}'), ",\"deep\":" + deep);
    tmp.write("set/01-b/result.json", text);
  }
  for (const std::string cmd : {"report " + set.string(), "report --html --gnuplot /nonexistent " + set.string(),
                                "compare --fail-slower 7 " + set.string() + " " + set.string(),
                                "summary " + (set / "01-b" / "result.json").string(),
                                "predict " + (set / "01-b" / "result.json").string() + " --devices 2"}) {
    CAPTURE(cmd);
    const auto r = run_cli(cmd);
    CAPTURE(r.output);
    CHECK(r.code >= 0);  // exited, no signal
    CHECK(has(r.output, "01-b/result.json: nested deeper than 256 levels"));
  }
  // In a history export's line and in sweep.json: exit 2 naming the file.
  tmp.write("deep.jsonl", "{\"run_key\":\"k\",\"set_id\":\"s\",\"machine_id\":\"m\",\"rung\":\"r\",\"x\":" + deep + "}\n");
  auto r = run_cli("history add " + (tmp / "deep.jsonl").string() + " --db " + (tmp / "h.sqlite").string());
  CHECK(r.code == 2);
  CHECK(has(r.output, "deep.jsonl:1: not a JSON object"));
  tmp.write("set2/sweep.json", "{\"suite\":\"s\",\"machine_id\":\"m\",\"rungs\":" + deep + "}");
  r = run_cli("report " + (tmp / "set2").string());
  CHECK(r.code == 2);
  CHECK(has(r.output, "set2/sweep.json: nested deeper than 256 levels"));
}

namespace {

// A history at FILE with one set added by the CLI, then `sql` run on it.
void doctored_history(const TempDir& tmp, const fs::path& file, const std::string& sql) {
  const auto set = hostile_set(tmp, "hset-" + file.stem().string());
  const auto r = run_cli("history add " + set.string() + " --db " + file.string());
  REQUIRE(r.code == 0);
  const auto s = std::system(("sqlite3 " + file.string() + " \"" + sql + "\" 2>/dev/null").c_str());
  if (s != 0) {
    // No sqlite3 program: the same through python's module.
    REQUIRE(std::system(("python3 -c \"import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.executescript(sys.argv[2]); "
                         "c.commit()\" " + file.string() + " \"" + sql + "\"").c_str()) == 0);
  }
}

}  // namespace

TEST_CASE("history: a schema_version that is not an integer from 1 to the latest exits 2 naming the file and leaves it unchanged") {
  TempDir tmp;
  for (const char* v : {"-7", "-1", "abc", "99999999999"}) {
    CAPTURE(v);
    const auto file = tmp / ("h" + std::string(v) + ".sqlite");
    doctored_history(tmp, file, std::string("UPDATE meta SET value='") + v + "' WHERE key='schema_version';");
    const std::string before = text_of(file);
    for (const std::string cmd : {std::string("history show"), std::string("history export"), "history add " + (tmp / ("hset-" + file.stem().string())).string()}) {
      const auto r = run_cli(cmd + " --db " + file.string());
      CAPTURE(r.output);
      CHECK(r.code == 2);
      CHECK(has(r.output, file.string() + ": "));
      CHECK((has(r.output, "is not a schema of an accel-bench history") || has(r.output, "newer than this accel-bench")));
    }
    CHECK(text_of(file) == before);
  }
}

TEST_CASE("compare --history: a regression against the history is in the verdict word, the first line, exit_status and every format") {
  TempDir tmp;
  const auto db = (tmp / "h.sqlite").string();
  // Five sets at the same times, then two at twice the time: the second is a regression.
  for (int i = 0; i < 5; ++i) {
    const auto s = hostile_set(tmp, "base" + std::to_string(i), {{"finished_at", "2026-01-0" + std::to_string(i + 1) + "T00:00:00Z"}},
                               {{"finished_at", "2026-01-0" + std::to_string(i + 1) + "T00:00:00Z"}, {"train_time_s", 30.0 + i}});
    REQUIRE(run_cli("history add " + s.string() + " --db " + db).code == 0);
  }
  const auto slow1 = hostile_set(tmp, "slow1", {{"finished_at", "2026-01-07T00:00:00Z"}},
                                 {{"finished_at", "2026-01-07T00:00:00Z"}, {"train_time_s", 60.0}});
  REQUIRE(run_cli("history add " + slow1.string() + " --db " + db).code == 0);
  // Every folder given must hold a set, not only the first.
  fs::create_directories(tmp / "empty");
  auto none = run_cli("history add " + slow1.string() + " " + (tmp / "empty").string() + " --db " + db);
  CHECK(none.code == 2);
  CHECK(has(none.output, "empty: not a result set"));
  const auto slow2 = hostile_set(tmp, "slow2", {{"finished_at", "2026-01-08T00:00:00Z"}},
                                 {{"finished_at", "2026-01-08T00:00:00Z"}, {"train_time_s", 60.0}});
  const std::string cmd = "compare " + slow2.string() + " " + slow2.string() + " --fail-slower 7 --history " + db;
  auto r = run_cli(cmd + " --format md");
  CAPTURE(r.output);
  CHECK(r.code == 1);
  CHECK(r.output.rfind("**FAIL**", 0) == 0);
  CHECK(has(r.output.substr(0, r.output.find('\n')), "HISTORY REGRESSION: 1 regressions"));
  r = run_cli(cmd + " --format json");
  CHECK(r.code == 1);
  const auto doc = nlohmann::json::parse(r.output);
  CHECK(doc["exit_status"] == 1);
  CHECK(doc["history"]["regressions"] == 1);
  CHECK(doc["history"]["verdicts"].size() >= 1);
  r = run_cli(cmd + " --format html");
  CHECK(r.code == 1);
  CHECK(has(r.output, "<strong>FAIL</strong>"));
  CHECK(has(r.output, "HISTORY REGRESSION"));
  r = run_cli(cmd);
  CHECK(r.code == 1);
  // The text's first line carries the history's outcome too, as the others' do.
  const std::string first = r.output.substr(0, r.output.find('\n'));
  CHECK(first.rfind("FAIL:", 0) == 0);
  CHECK(has(first, "HISTORY REGRESSION: 1 regressions"));
}

TEST_CASE("tune: a second tune into an OUT another holds is refused naming the holder's pid, with or without --resume" * doctest::test_suite("process")) {
  TempDir tmp;
  const auto out = tmp / "tune";
  fs::create_directories(out);
  // The first tune's lock, as it holds it for its life.
  const int fd = ::open((out / ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  REQUIRE(fd >= 0);
  REQUIRE(::flock(fd, LOCK_EX | LOCK_NB) == 0);
  const std::string pid = std::to_string(::getpid());
  REQUIRE(::write(fd, pid.data(), pid.size()) == ssize_t(pid.size()));
  tmp.write("tune/tune.json", "{}");
  for (const char* resume : {"", " --resume"}) {
    const auto r = run_cli("tune -c " + source("configs/ladder/cpu/00-scratch.json") + " --target 0.5 --out " +
                           out.string() + resume);
    CAPTURE(r.output);
    CHECK(r.code == 2);
    CHECK(has(r.output, "another tune (pid " + pid + ") is writing into this folder"));
  }
  CHECK(text_of(out / "tune.json") == "{}");
  ::close(fd);
}

TEST_CASE("history: two adds on a fresh file both land, another application's file is left as it is, doctored values are refused on add" * doctest::test_suite("process")) {
  TempDir tmp;
  // Two adds at once on a file neither has made yet, in rounds.
  const auto a = hostile_set(tmp, "a"), b = hostile_set(tmp, "b", {{"train_time_s", 61.0}}, {{"train_time_s", 31.0}});
  for (int round = 0; round < 3; ++round) {
    const auto db = (tmp / ("fresh" + std::to_string(round) + ".sqlite")).string();
    const std::string both = "(" + std::string(ACCEL_BENCH_EXE) + " history add " + a.string() + " --db " + db +
                             " >/dev/null 2>&1 || echo FAILED) & (" + std::string(ACCEL_BENCH_EXE) + " history add " +
                             b.string() + " --db " + db + " >/dev/null 2>&1 || echo FAILED) & wait";
    FILE* p = popen(both.c_str(), "r");
    REQUIRE(p != nullptr);
    std::string said;
    char buf[256];
    while (fgets(buf, sizeof buf, p) != nullptr) said += buf;
    pclose(p);
    CHECK(said.empty());
    const auto r = run_cli("history export --db " + db);
    CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 4);  // two runs of each set
  }
  // The race made certain: a reader holds the fresh file while the add
  // switches it to WAL (which SQLite does not wait for by itself).
  {
    const auto db = tmp / "held.sqlite";
    REQUIRE(std::system(("python3 -c \"import sqlite3; c=sqlite3.connect('" + db.string() +
                         "'); c.execute('CREATE TABLE t(x)'); c.execute('DROP TABLE t'); c.commit()\"").c_str()) == 0);
    FILE* holder = popen(("python3 -c \"import sqlite3,time; c=sqlite3.connect('" + db.string() +
                          "', isolation_level=None); c.execute('BEGIN'); c.execute('SELECT * FROM sqlite_master').fetchall(); "
                          "print('held', flush=True); time.sleep(1.5); c.execute('COMMIT')\"").c_str(), "r");
    REQUIRE(holder != nullptr);
    char line[64] = {};
    REQUIRE(fgets(line, sizeof line, holder) != nullptr);
    CHECK(std::string(line) == "held\n");
    const auto r = run_cli("history add " + a.string() + " --db " + db.string());
    CAPTURE(r.output);
    CHECK(r.code == 0);
    CHECK(has(r.output, "2 runs added"));
    pclose(holder);
  }
  // Another application's SQLite file with a meta table: refused and not switched to WAL.
  const auto other = tmp / "other.sqlite";
  REQUIRE(std::system(("python3 -c \"import sqlite3; c=sqlite3.connect('" + other.string() +
                       "'); c.execute('CREATE TABLE meta(key TEXT, value TEXT)'); c.execute(\\\"INSERT INTO meta VALUES('app','x')\\\"); c.commit()\"").c_str()) == 0);
  const std::string before = text_of(other);
  auto r = run_cli("history add " + a.string() + " --db " + other.string());
  CHECK(r.code == 2);
  CHECK(has(r.output, "not an accel-bench history; left as it is"));
  CHECK(text_of(other) == before);
  CHECK(before[18] == 1);  // the header's write version: 1 = rollback journal, 2 = WAL
  CHECK_FALSE(fs::exists(other.string() + "-wal"));
  // Doctored values in an export: refused with the line and field named.
  const auto db = (tmp / "h.sqlite").string();
  const std::string line = R"({"run_key":"k","set_id":"s","machine_id":"m","rung":"r",)";
  for (const auto& [field, want] : {std::pair{R"("train_time_s":"600")", "train_time_s: not a number"},
                                    std::pair{R"("repeat":1e300)", "repeat is 1e+300: outside [1, 1e+06] (an integer)"},
                                    std::pair{R"("step_ms":-3)", "step_ms is -3: outside [0, 1e+12]"},
                                    std::pair{R"("test_acc":1e308)", "test_acc is 1e+308: outside [0, 1]"}}) {
    tmp.write("doctored.jsonl", line + field + "}\n");
    r = run_cli("history add " + (tmp / "doctored.jsonl").string() + " --db " + db);
    CAPTURE(r.output);
    CHECK(r.code == 2);
    CHECK(has(r.output, "doctored.jsonl:1: " + std::string(want)));
  }
  // A FIFO is named as one, not as a missing folder.
  REQUIRE(::mkfifo((tmp / "fifo").c_str(), 0644) == 0);
  r = run_cli("history add " + (tmp / "fifo").string() + " --db " + db);
  CHECK(r.code == 2);
  CHECK(has(r.output, "not a regular file (a FIFO"));
}

TEST_CASE("history: a read-only history still shows, exports and compares, and an add says it is read-only" * doctest::test_suite("process")) {
  if (std::system("unshare -m true 2>/dev/null") != 0) {
    accel_test::skip("no mount namespace here (unshare -m needs root)");
    return;
  }
  TempDir tmp;
  const auto a = hostile_set(tmp, "a"), b = hostile_set(tmp, "b", {{"train_time_s", 61.0}}, {{"train_time_s", 31.0}});
  const auto db = (tmp / "h.sqlite").string();
  // A read-only history (a read-only mount): show, export and compare --history read it.
  REQUIRE(run_cli("history add " + a.string() + " --db " + db).code == 0);
  const std::string ro = "unshare -m sh -c 'mount --bind -o ro " + tmp.path.string() + " " + tmp.path.string() + " && ";
  for (const std::string cmd : {"history show --db " + db, "history export --db " + db,
                                "compare " + a.string() + " " + a.string() + " --history " + db}) {
    FILE* p = popen((ro + ACCEL_BENCH_EXE + " " + cmd + " 2>&1; echo rc=$?'").c_str(), "r");
    REQUIRE(p != nullptr);
    std::string said;
    char buf[4096];
    while (fgets(buf, sizeof buf, p) != nullptr) said += buf;
    pclose(p);
    CAPTURE(cmd);
    CAPTURE(said);
    CHECK(has(said, "rc=0"));
  }
  FILE* p = popen((ro + ACCEL_BENCH_EXE + " history add " + b.string() + " --db " + db + " 2>&1; echo rc=$?'").c_str(), "r");
  REQUIRE(p != nullptr);
  std::string said;
  char buf[4096];
  while (fgets(buf, sizeof buf, p) != nullptr) said += buf;
  pclose(p);
  CAPTURE(said);
  CHECK(has(said, "rc=2"));
  CHECK(has(said, "read-only"));
}

TEST_CASE("report and compare: a set's text never becomes a link, an escape sequence, malformed XHTML, a live formula or a giant page") {
  TempDir tmp;
  const std::string esc = "\x1b[2J\x1b[31mall gates PASS\x1b[0m \xc2\x9b" "31m";
  const std::string big(1 << 20, 'A');
  auto set = hostile_set(tmp, "set", {{"name", esc}, {"env", {{"cpu_model", esc}, {"git_sha", "\x1b]0;title\x07"}}}},
                         {{"error", big}, {"config", {{"description", big}}}});
  {
    auto m = nlohmann::json::parse(text_of(set / "sweep.json"));
    m["rungs"][0]["changes"] = "[x](javascript:alert(1)) ![t](http://example.com/p.png) " + esc;
    m["rungs"][1]["changes"] = "\xef\xbf\xbe\xef\xbf\xbf" + big;  // U+FFFE, U+FFFF
    tmp.write("set/sweep.json", m.dump());
  }
  auto r = run_cli("report " + set.string() + " --html --gnuplot /nonexistent");
  INFO(r.output.substr(0, 2000));
  REQUIRE(r.code == 0);
  const std::string md = text_of(set / "report.md"), html = text_of(set / "report.html");
  CHECK(md.find("[x](javascript") == std::string::npos);
  CHECK(md.find("\\[x\\](javascript:alert(1)) \\!\\[t\\](http://example.com/p.png)") != std::string::npos);
  CHECK(html.find("href=\"javascript") == std::string::npos);
  CHECK(html.find("src=\"http://example.com") == std::string::npos);
  CHECK(html.find("[x](javascript:alert(1)) ![t](http://example.com/p.png)") != std::string::npos);
  for (const auto* page : {&md, &html}) {
    CHECK(page->find('\x1b') == std::string::npos);
    CHECK(page->find("\xc2\x9b") == std::string::npos);
    CHECK(page->find("\xef\xbf\xbe") == std::string::npos);
    CHECK(page->find("\xef\xbf\xbf") == std::string::npos);
    CHECK(page->size() < 200000);  // free text cut at a few KB, not a megabyte per field
  }
  CHECK(html.find("\xef\xbf\xbd") != std::string::npos);  // U+FFFD in their place
  CHECK(html.find("AAAA\xe2\x80\xa6") != std::string::npos);  // the cut, with an ellipsis
  // compare and summary print no control character a terminal would obey.
  for (const std::string cmd : {"compare " + set.string() + " " + set.string(),
                                "compare --format md " + set.string() + " " + set.string(),
                                "summary " + (set / "00-a" / "result.json").string()}) {
    CAPTURE(cmd);
    r = run_cli(cmd);
    CHECK(r.code >= 0);
    CHECK(r.output.find('\x1b') == std::string::npos);
    CHECK(r.output.find('\x07') == std::string::npos);
    CHECK(r.output.find("\xc2\x9b") == std::string::npos);
    CHECK(r.output.size() < 200000);
  }
  // A set without sweep.json: an ill-formed UTF-8 folder name reads as text;
  // a rung folder that is not an id is refused; chart data holds no formula.
  const std::string odd = "odd\xff\xfe-set";
  tmp.write(odd + "/-cmd/result.json", fake_result(60, 0.8));
  tmp.write(odd + "/01-b/result.json", fake_result(30, 0.8));
  r = run_cli("report " + shell_word((tmp / odd).string()) + " --html --gnuplot /nonexistent");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const std::string odd_html = text_of(tmp / odd / "report.html");
  CHECK(odd_html.find("\xff") == std::string::npos);
  CHECK(odd_html.find("odd\xef\xbf\xbd\xef\xbf\xbd-set") != std::string::npos);
  CHECK(text_of(tmp / odd / "charts" / "runtime.csv").find("\n'-cmd,") != std::string::npos);
  // A plain set's machine id is its folder's name: in compare's md (which CI
  // puts in a job summary) it is escaped once, never twice (which would undo it).
  const std::string linky = "[x](javascript:alert(1))";
  tmp.write(linky + "/00-a/result.json", fake_result(60, 0.8));
  r = run_cli("compare --format md " + set.string() + " " + shell_word((tmp / linky).string()));
  CAPTURE(r.output);
  CHECK(has(r.output, "\\[x\\](javascript:alert(1))"));
  CHECK_FALSE(has(r.output, "\\\\["));
  CHECK_FALSE(has(r.output, " [x](javascript"));
}

TEST_CASE("cli inputs: numbers no run makes are refused naming the flag, file or field, and a foreign file in --out is kept" * doctest::test_suite("process")) {
  TempDir tmp;
  const std::string base =
      source("results/ladder-text-cpu/amd-epyc-2c-avx512bf16-lt1.13.0/t03b-one-core/result.json");
  // predict: --measured and --article of the wrong shape name the file, in our words.
  tmp.write("array.json", "[1, 2]");
  const std::string calib = source("results/ladder-text-cpu/amd-epyc-2c-avx512bf16-lt1.13.0/peaks.json");
  auto r = run_cli("predict " + base + " --strategy ddp --devices 2 --calibration " + calib + " --measured " +
                   (tmp / "array.json").string());
  CHECK(r.code == 2);
  CHECK(has(r.output, "--measured " + (tmp / "array.json").string() + ": not an accel-bench result.json"));
  r = run_cli("predict --article " + (tmp / "array.json").string() + " --rung 01 --strategy ddp");
  CHECK(r.code == 2);
  CHECK(has(r.output, "--article " + (tmp / "array.json").string() + ": not an article's reference"));
  CHECK_FALSE(has(r.output, "json.exception"));
  // A target reached in negative time or after 1e308 samples scores nothing.
  for (const auto& [target, says] :
       {std::pair{nlohmann::json{{"value", 0.7}, {"reached", true}, {"time_s", -5}}, "target.time_s is -5: it must be >= 0"},
        std::pair{nlohmann::json{{"value", 0.7}, {"reached", true}, {"samples", -1000}}, "target.samples is -1000"},
        std::pair{nlohmann::json{{"value", 0.7}, {"reached", true}, {"samples", 1e308}}, "target.samples is 1e+308: beyond any run"}}) {
    auto doc = nlohmann::json::parse(fake_result(60, 0.8));
    doc["target"] = target;
    const auto f = tmp.write("target/result.json", doc.dump());
    r = run_cli("summary " + f.string());
    CAPTURE(r.output);
    CHECK(r.code == 2);
    CHECK(has(r.output, says));
  }
  // calibrate --noise on repeats that time alike: floored, with a warning.
  {
    nlohmann::json m = {{"schema_version", 1}, {"suite", "s"}, {"machine_id", "m-2c"}, {"upstream", nlohmann::json::array()},
                        {"rungs", {{{"id", "00-a"}, {"article", "00"}, {"status", "ok"},
                                    {"runs", {{{"dir", "00-a/r1"}}, {{"dir", "00-a/r2"}}, {{"dir", "00-a/r3"}}}}}}}};
    tmp.write("same/sweep.json", m.dump());
    for (int i = 1; i <= 3; ++i) tmp.write("same/00-a/r" + std::to_string(i) + "/result.json", fake_result(60, 0.8));
    r = run_cli("calibrate --noise " + (tmp / "same").string() + " --out " + (tmp / "noise.json").string());
    CAPTURE(r.output);
    CHECK(r.code == 0);
    CHECK(has(r.output, "calibrate: warning: training time: the repeats spread 0"));
    const auto noise = nlohmann::json::parse(text_of(tmp / "noise.json"))["noise"];
    CHECK(noise["machine"]["training time"]["sd"].get<double>() == doctest::Approx(0.005));
    CHECK(noise["machine"]["training time"]["floored"] == true);
  }
  // sweep --plan of rungs whose configs do not resolve exits 2; --runs 0 is refused.
  tmp.write("suite/bad.json", R"({"model": {"preset": "no-such-preset"}})");
  tmp.write("suite/suite.json", R"({"suite": "bad", "rungs": [{"id": "00-a", "config": "bad.json", "changes": "x"}]})");
  r = run_cli("sweep --plan --suite " + (tmp / "suite" / "suite.json").string());
  CAPTURE(r.output);
  CHECK(r.code == 2);
  CHECK(has(r.output, "sweep --plan: 1 of 1 rungs have a config that does not resolve"));
  r = run_cli("sweep --plan --runs 0 --suite " + source("configs/ladder/cpu/suite.json"));
  CHECK(r.code == 2);
  // Budgets and bounds that cannot be kept.
  for (const char* budget : {"1e308h", "0x10m", "1e-300s", "' 5m'"}) {
    CAPTURE(budget);
    r = run_cli("tune -c " + source("configs/ladder/cpu/00-scratch.json") + " --target 0.5 --out " +
                (tmp / "tune").string() + " --budget " + budget);
    CHECK(r.code == 2);
    CHECK(has(r.output, "--budget: "));
  }
  const auto set = hostile_set(tmp, "set");
  r = run_cli("compare " + set.string() + " " + set.string() + " --fail-slower inf");
  CHECK(r.code == 2);
  CHECK(has(r.output, "--fail-slower: must be a finite number >= 0 (got inf)"));
  // run --out DIR holding someone's config.json and metrics.csv: kept unless --force.
  tmp.write("out/config.json", R"({"architectures": ["BertModel"]})");
  tmp.write("out/metrics.csv", "a,b\n1,2\n");
  r = run_cli("run -c " + source("configs/ladder/cpu/00-scratch.json") + " --out " + (tmp / "out").string() +
              " --set train.max_steps=1 -q");
  CAPTURE(r.output);
  CHECK(r.code == 2);
  CHECK(has(r.output, "holds config.json and metrics.csv that are not an accel-bench run's"));
  CHECK(text_of(tmp / "out" / "config.json") == R"({"architectures": ["BertModel"]})");
  // WORLD_SIZE=0 is named as such.
  r = run_cli_env("RANK=0 WORLD_SIZE=0", "run -c " + source("configs/ladder/cpu/00-scratch.json") + " --dry-run");
  CHECK(r.code == 2);
  CHECK(has(r.output, "WORLD_SIZE"));
  CHECK_FALSE(has(r.output, "LOCAL_WORLD_SIZE"));
  // Sets of other machines or suites are compared, and said to be.
  const auto other = hostile_set(tmp, "other", nlohmann::json::object(), nlohmann::json::object(), "m2-4c");
  r = run_cli("compare " + set.string() + " " + other.string());
  CHECK(has(r.output, "NOTE: the sets are of different machines (m-2c, m2-4c)"));
}

TEST_CASE("cli inputs: a calibration whose bf16 matmuls are slower than fp32 is said before a bf16 run and in the sweep's plan" * doctest::test_suite("process")) {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  TempDir tmp;
  const auto peaks = tmp.write("peaks.json", R"({"cpu": {"fp32": {"1": 153.0, "2": 310.7}, "bf16": {"1": 82.5, "2": 161.5}}})");
  auto r = run_cli("run -c " + source("configs/ladder/cpu/00-scratch.json") + " --set runtime.precision=bf16-mixed" +
                   " --set train.loop=fabric --set runtime.threads=2 --calibration " + peaks.string() + " --dry-run --out " + (tmp / "out").string());
  CAPTURE(r.output);
  CHECK(r.code == 0);
  CHECK(has(r.output, "warning: bf16 matmuls measured 161.5 GFLOP/s against fp32's 310.7 at 2 threads"));
  r = run_cli("run -c " + source("configs/ladder/cpu/00-scratch.json") + " --set runtime.threads=2 --calibration " +
              peaks.string() + " --dry-run --out " + (tmp / "out32").string());
  CHECK_FALSE(has(r.output, "bf16 matmuls measured"));
  r = run_cli("sweep --plan --suite " + source("configs/ladder/cpu/suite.json") + " --peaks " + peaks.string());
  CAPTURE(r.output);
  CHECK(has(r.output, "! 04-bf16-mixed: bf16 matmuls measured"));
  CHECK_FALSE(has(r.output, "! 01-finetune:"));
}

TEST_CASE("cli inputs: a calibration without cpu peaks, as calibrate --noise writes it, reads as no peaks in run, report, predict and sweep" * doctest::test_suite("process")) {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  TempDir tmp;
  const auto noise = tmp.write("noise.json", R"({"machine_id": "m-2c", "noise": {"machine": {}, "warnings": []}})");
  const std::string base =
      source("results/ladder-text-cpu/amd-epyc-2c-avx512bf16-lt1.13.0/t03b-one-core/result.json");
  auto r = run_cli("run -c " + source("configs/ladder/cpu/00-scratch.json") + " --set runtime.precision=bf16-mixed" +
                   " --set train.loop=fabric --set runtime.threads=2 --calibration " + noise.string() + " --dry-run --out " +
                   (tmp / "out").string());
  CAPTURE(r.output);
  CHECK(r.code == 0);
  CHECK_FALSE(has(r.output, "bf16 matmuls measured"));
  const auto set = hostile_set(tmp, "set");
  r = run_cli("report " + set.string() + " --calibration " + noise.string());
  CAPTURE(r.output);
  CHECK(r.code == 0);
  r = run_cli("sweep --plan --suite " + source("configs/ladder/cpu/suite.json") + " --peaks " + noise.string());
  CAPTURE(r.output);
  CHECK(r.code == 0);
  CHECK_FALSE(has(r.output, "bf16 matmuls measured"));
  // predict needs the peaks it asks for, and says so.
  const std::string predict = "predict " + base + " --strategy ddp --devices 2 --link pcie4-x16 --threads-per-device 1 --calibration " +
                              noise.string();
  r = run_cli(predict);
  CAPTURE(r.output);
  CHECK(r.code == 2);
  CHECK(has(r.output, "--calibration " + noise.string() + " has no bf16 peaks at 1"));
  // Under valgrind, where there is one: not a byte read past the document.
  if (std::system("command -v valgrind >/dev/null 2>&1") != 0) {
    accel_test::skip("valgrind not installed: the memory check of the calibration read");
    return;
  }
  // (The suppressions are the dynamic loader's own reports, on LibTorch's $ORIGIN rpaths.)
  r = run_command("valgrind --quiet --error-exitcode=99 --suppressions=" + source("tests/data/valgrind-ld.supp") + " " +
                  std::string(ACCEL_BENCH_EXE) + " " + predict);
  CAPTURE(r.output);
  CHECK(r.code == 2);
  CHECK_FALSE(has(r.output, "Invalid read"));
}

TEST_CASE("cli inputs: a time limit, price, scale or budget that is NaN, infinite or beyond its bound is refused naming the flag") {
  TempDir tmp;
  const auto set = hostile_set(tmp, "set");
  const std::string suite = source("configs/ladder/cpu/suite.json");
  for (const char* bad : {"nan", "inf", "-1", "0", "1e10", "9.3e9", "2592001"}) {
    CAPTURE(bad);
    const auto r = run_cli("sweep --plan --suite " + suite + " --run-timeout " + bad);
    CHECK(r.code == 2);
    CHECK(has(r.output, "--run-timeout"));
    CHECK(has(r.output, "at most 2592000 seconds (30 days)"));
  }
  CHECK(run_cli("sweep --plan --suite " + suite + " --run-timeout 2592000").code == 0);
  const std::string base =
      source("results/ladder-text-cpu/amd-epyc-2c-avx512bf16-lt1.13.0/t03b-one-core/result.json");
  for (const auto& [args, flag] :
       {std::pair{"sweep --plan --suite " + suite + " --budget nan", "--budget"},
        std::pair{"sweep --plan --suite " + suite + " --budget inf", "--budget"},
        std::pair{"report " + set.string() + " --price-per-hour nan", "--price-per-hour"},
        std::pair{"predict " + base + " --strategy ddp --devices 2 --compute-scale inf", "--compute-scale"},
        std::pair{"predict " + base + " --strategy ddp --devices 2 --bucket-mb nan", "--bucket-mb"},
        std::pair{"predict " + base + " --strategy ddp --devices 2 --price-per-hour -inf", "--price-per-hour"}}) {
    CAPTURE(args);
    const auto r = run_cli(args);
    CHECK(r.code == 2);
    CHECK(has(r.output, flag));
  }
  CHECK_FALSE(fs::exists(set / "report.md"));
}

TEST_CASE("cli inputs: a run lock planted as a link to another file is refused and the file left as it is" * doctest::test_suite("process")) {
  TempDir tmp;
  const auto victim = tmp.write("victim.txt", "keep me\n");
  fs::create_directories(tmp / "out");
  fs::create_symlink(victim, tmp / "out" / ".lock");
  const auto r = run_cli("run -c " + source("configs/smoke/scratch-smoke.json") + " --out " + (tmp / "out").string());
  CAPTURE(r.output);
  CHECK(r.code == 2);
  CHECK(has(r.output, (tmp / "out" / ".lock").string() + " is a symbolic link"));
  CHECK(text_of(victim) == "keep me\n");
  CHECK_FALSE(fs::exists(tmp / "out" / "config.json"));
}

TEST_CASE("cli inputs: a training time no run measures is refused as read, named in compare, summary and the report") {
  TempDir tmp;
  const auto base = hostile_set(tmp, "base");
  for (const auto& [value, why] : {std::pair{1e-300, "train_time_s is 1e-300: no run measures below 1e-06 s"},
                                   std::pair{1e308, "train_time_s is 1e+308: no run measures below 1e-06 s or above 1e+09 s"}}) {
    CAPTURE(why);
    const auto bad = hostile_set(tmp, "bad" + std::to_string(value > 1 ? 1 : 0), nlohmann::json::object(),
                                 {{"train_time_s", value}});
    auto r = run_cli("compare " + base.string() + " " + bad.string() + " --fail-slower 7");
    CAPTURE(r.output);
    CHECK(r.code == 1);
    CHECK(has(r.output, why));
    r = run_cli("summary " + (bad / "01-b" / "result.json").string());
    CHECK(r.code == 2);
    CHECK(has(r.output, why));
    r = run_cli("report " + bad.string());
    CHECK(r.code == 0);
    CHECK(has(text_of(bad / "report.md"), why));
  }
}

TEST_CASE("cli inputs: a --calibration that does not exist exits 2 naming it, and a thread count that would wrap is refused") {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  TempDir tmp;
  const auto none = (tmp / "no-such-peaks.json").string();
  auto r = run_cli("run -c " + source("configs/ladder/cpu/00-scratch.json") + " --calibration " + none +
                   " --dry-run --out " + (tmp / "out").string());
  CHECK(r.code == 2);
  CHECK(has(r.output, "--calibration " + none + ": no such file"));
  const auto set = hostile_set(tmp, "set");
  r = run_cli("report " + set.string() + " --calibration " + none);
  CHECK(r.code == 2);
  CHECK(has(r.output, "--calibration " + none + ": no such file"));
  CHECK_FALSE(fs::exists(set / "report.md"));
  r = run_cli("sweep --plan --suite " + source("configs/ladder/cpu/suite.json") + " --peaks " + none);
  CHECK(r.code == 2);
  CHECK(has(r.output, "--peaks " + none + ": no such file"));
  // 4294967297 threads read through atoi would be 1 on some libcs, anything on others.
  const auto wrap = tmp.write("wrap.json", R"({"cpu": {"fp32": {"4294967297": 150.0}, "bf16": {"1": 80.0}}})");
  r = run_cli("run -c " + source("configs/ladder/cpu/00-scratch.json") + " --set runtime.precision=bf16-mixed" +
              " --set train.loop=fabric --calibration " + wrap.string() + " --dry-run --out " + (tmp / "out2").string());
  CAPTURE(r.output);
  CHECK(r.code == 2);
  CHECK(has(r.output, "cpu.fp32.4294967297: must be a thread count from 1 to 65536"));
}

TEST_CASE("cli inputs: an escape sequence in a calibration's path never reaches the run's terminal") {
  REQUIRE_MESSAGE(have_fashion_mnist(), "dataset-fashion-mnist missing: run scripts/setup.sh");
  TempDir tmp;
  const auto peaks = tmp.write("peaks\x1b[2J\x1b[31m.json", R"({"cpu": {"fp32": {"1": 153.0, "2": 310.7}, "bf16": {"1": 82.5, "2": 161.5}}})");
  const auto r = run_cli("run -c " + source("configs/ladder/cpu/00-scratch.json") + " --set runtime.precision=bf16-mixed" +
                         " --set train.loop=fabric --set runtime.threads=2 --calibration '" + peaks.string() + "' --dry-run --out " +
                         (tmp / "out").string());
  CAPTURE(r.output);
  CHECK(r.code == 0);
  CHECK(has(r.output, "bf16 matmuls measured"));
  CHECK_FALSE(has(r.output, "\x1b"));
}

TEST_CASE("history: adding a set with a doctored result is refused naming the file and why, and adds nothing") {
  TempDir tmp;
  const auto db = (tmp / "h.sqlite").string();
  const auto bad = hostile_set(tmp, "bad", nlohmann::json::object(), {{"train_time_s", -5}});
  auto r = run_cli("history add " + bad.string() + " --db " + db);
  CAPTURE(r.output);
  CHECK(r.code == 2);
  CHECK(has(r.output, (bad / "01-b" / "result.json").string() + ": train_time_s is -5: it must be > 0"));
  CHECK_FALSE(has(r.output, "already there"));
  r = run_cli("history export --db " + db);
  CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 0);
}
