// Bad inputs through the real CLI: each is an input error (exit 2) with one
// line naming the file, and nothing is written.
// torch first: glog (through torch) defines CHECK, doctest must win.
#include <torch/torch.h>

#include <doctest/doctest.h>

#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

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
