// Helpers for tests that drive the real accel-bench binary.
#pragma once

// torch first: glog (through torch) defines CHECK, doctest must win.
#include <torch/torch.h>

#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "accel/train/checkpoint.h"

namespace cli_test {

struct Outcome {
  int code = -1;
  std::string output;  // stdout and stderr together
};

// A shell command line (sh -c), its output (stdout and stderr) and exit code.
inline Outcome run_command(const std::string& command) {
  Outcome o;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) o.output.append(buf.data(), n);
  const int status = pclose(pipe);
  o.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return o;
}

// ENV: "NAME=value ..." put before the command (as env(1) takes them), or "".
inline Outcome run_cli_env(const std::string& env, const std::string& args) {
  return run_command((env.empty() ? "" : "env " + env + " ") + std::string(ACCEL_BENCH_EXE) + " " + args);
}

inline Outcome run_cli(const std::string& args) { return run_cli_env("", args); }

// A fresh, not yet existing folder under the temp dir.
inline std::filesystem::path fresh_dir(const std::string& tag) {
  static int counter = 0;
  auto dir = std::filesystem::temp_directory_path() /
             ("accel-cli-" + tag + "-" + std::to_string(::getpid()) + "-" +
              std::to_string(++counter));
  std::filesystem::remove_all(dir);
  return dir;
}

inline std::string source(const std::string& rel) {
  return std::string(ACCEL_SOURCE_DIR) + "/" + rel;
}

// Every model tensor of two checkpoints: bitwise equal (rtol = atol = 0) or
// allclose (PyTorch's DDP test tolerance is rtol 1.3e-6, atol 5e-5).
inline void check_checkpoints_match(const std::filesystem::path& a, const std::filesystem::path& b,
                                    double rtol = 0, double atol = 0) {
  const auto ta = accel::train::read_checkpoint(a).model_tensors();
  const auto tb = accel::train::read_checkpoint(b).model_tensors();
  REQUIRE(ta.size() == tb.size());
  for (const auto& [name, tensor] : ta) {
    INFO(name);
    REQUIRE(tb.count(name) == 1);
    if (rtol == 0 && atol == 0) {
      CHECK(torch::equal(tensor, tb.at(name)));
    } else {
      CHECK(torch::allclose(tensor, tb.at(name), rtol, atol));
    }
  }
}

// The losses metrics.csv logged at training steps, in order.
inline std::vector<double> step_losses(const std::filesystem::path& csv) {
  std::ifstream in(csv);
  std::vector<double> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("step,", 0) != 0) continue;
    // kind,step,epoch,loss,...
    size_t at = 0;
    for (int comma = 0; comma < 3; ++comma) at = line.find(',', at) + 1;
    out.push_back(std::stod(line.substr(at, line.find(',', at) - at)));
  }
  return out;
}

inline bool have_fashion_mnist() {
  return std::filesystem::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
}

}  // namespace cli_test
