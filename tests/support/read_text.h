// A file's bytes, for tests that read what a command wrote (empty when the
// file cannot be read: the test's checks on it then fail and say so).
#pragma once

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace accel_test {

inline std::string read_text(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace accel_test
