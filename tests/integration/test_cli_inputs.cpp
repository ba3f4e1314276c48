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
  tmp.write(folder + "/00-a `touch PWNED5`/result.json", fake_result(60, 0.8));
  tmp.write(folder + "/01-b/result.json", fake_result(30, 0.7));
  auto r = run_cli("report " + shell_word((tmp / folder).string()));
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
  CHECK(csv.find(",\"'=HYPERLINK(\"\"http://x\"\")\n| <script>alert(1)</script>\",") != std::string::npos);
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
    MESSAGE("skipped: gnuplot not installed");
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
                        Case{"/cpu/fp32/1", "-3", "cpu.fp32.1: must be a number > 0"}}) {
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
