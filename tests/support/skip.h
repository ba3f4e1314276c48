// A test that cannot run here (no GPU, no root for network namespaces, no
// gnuplot, no torchrun) says why on standard output and returns at once;
// ctest reads the line and counts the test as skipped, not passed
// (SKIP_REGULAR_EXPRESSION in tests/CMakeLists.txt). doctest's MESSAGE cannot
// carry it: doctest prints a message only for a failing test. Call it before
// the test checks anything, and return right after: a skipped test's
// failures would not be seen.
#pragma once

#include <cstdio>
#include <string>

namespace accel_test {

inline void skip(const std::string& why) {
  std::printf("accel-test skipped: %s\n", why.c_str());
  std::fflush(stdout);
}

}  // namespace accel_test
