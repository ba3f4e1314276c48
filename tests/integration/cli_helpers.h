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
#include <string>

namespace cli_test {

struct Outcome {
  int code = -1;
  std::string output;  // stdout and stderr together
};

// ENV: "NAME=value ..." put before the command (as env(1) takes them), or "".
inline Outcome run_cli_env(const std::string& env, const std::string& args) {
  const std::string cmd =
      (env.empty() ? "" : "env " + env + " ") + std::string(ACCEL_BENCH_EXE) + " " + args + " 2>&1";
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

inline bool have_fashion_mnist() {
  return std::filesystem::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
}

}  // namespace cli_test
