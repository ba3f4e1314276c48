// Drives the real accel-bench binary end to end on real Fashion-MNIST data.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace fs = std::filesystem;

namespace {

struct Outcome {
  int code = -1;
  std::string output;  // stdout and stderr together
};

Outcome run_cli(const std::string& args) {
  const std::string cmd = std::string(ACCEL_BENCH_EXE) + " " + args + " 2>&1";
  Outcome o;
  FILE* pipe = popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) o.output.append(buf.data(), n);
  const int status = pclose(pipe);
  o.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return o;
}

fs::path fresh_dir(const std::string& tag) {
  auto dir = fs::temp_directory_path() /
             ("accel-cli-" + tag + "-" + std::to_string(::getpid()) + "-" +
              std::to_string(std::rand()));
  fs::remove_all(dir);
  return dir;
}

std::string source(const std::string& rel) { return std::string(ACCEL_SOURCE_DIR) + "/" + rel; }

bool have_fashion_mnist() {
  return fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
}

// A few hundred Fashion-MNIST images, one epoch, a learning rate at which the
// loss visibly falls within the epoch.
const std::string kSmoke =
    " --set train.epochs=1 --set data.train_subset=400 --set train.log_every=1"
    " --set train.limit_eval_batches=4 --set train.eval_batch_size=64 --set optim.lr=1e-3"
    " --set train.warmup_steps=2";

}  // namespace

TEST_CASE("cli: a one-epoch scratch run writes result config and metrics and its loss falls") {
  if (!have_fashion_mnist()) {
    MESSAGE("dataset-fashion-mnist not installed; skipped");
    return;
  }
  const auto out = fresh_dir("smoke");
  const auto r = run_cli("run -c " + source("configs/ladder/cpu/00-scratch.json") + kSmoke +
                         " --out " + out.string());
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("resolved config") != std::string::npos);
  CHECK(r.output.find("Epoch: 0001/0001 | Train acc.:") != std::string::npos);
  CHECK(r.output.find("Test accuracy") != std::string::npos);

  std::ifstream in(out / "result.json");
  const auto res = nlohmann::json::parse(in);
  CHECK(res["schema_version"] == 1);
  CHECK(res["status"] == "ok");
  for (const char* key : {"config", "env", "epochs", "test_acc", "train_time_s", "step_time_ms",
                          "images_per_s", "peak_memory_bytes", "params", "flops_per_sample"}) {
    INFO(key);
    CHECK(res.contains(key));
  }
  CHECK(res["epochs"].size() == 1);
  CHECK(res["config"]["data"]["classes"] == nlohmann::json({5, 6, 7, 8, 9}));
  CHECK(res["data"]["train"] == 360);  // 400 capped, last 10% to validation
  CHECK(res["data"]["val"] == 40);
  CHECK(res["step_time_ms"]["median"].get<double>() > 0);
  CHECK(res["images_per_s"].get<double>() > 0);
  CHECK(res["peak_memory_bytes"][0].get<int64_t>() > 0);
  CHECK(res["env"]["libtorch_version"].is_string());
  CHECK(fs::exists(out / "config.json"));

  // metrics.csv: one row per step (log_every=1); the loss of the last steps is
  // below that of the first ones.
  std::ifstream csv(out / "metrics.csv");
  std::string line;
  std::getline(csv, line);
  CHECK(line == "kind,step,epoch,loss,train_acc,val_acc,step_time_ms");
  std::vector<double> losses;
  while (std::getline(csv, line)) {
    if (line.rfind("step,", 0) != 0) continue;
    std::stringstream ss(line);
    std::string kind, step, epoch, loss;
    std::getline(ss, kind, ',');
    std::getline(ss, step, ',');
    std::getline(ss, epoch, ',');
    std::getline(ss, loss, ',');
    losses.push_back(std::stod(loss));
  }
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
  for (const auto& entry : fs::recursive_directory_iterator(source("configs"))) {
    if (entry.path().extension() != ".json") continue;
    INFO(entry.path().string());
    const auto r = run_cli("config --check " + entry.path().string());
    INFO(r.output);
    CHECK(r.code == 0);
  }
}

TEST_CASE("cli: usage errors exit 2") {
  CHECK(run_cli("run").code == 2);
  CHECK(run_cli("frobnicate").code == 2);
  CHECK(run_cli("--help").code == 0);
}
