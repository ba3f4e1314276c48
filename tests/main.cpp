// The test executable's main: doctest's, after giving the environment every
// accel-bench process the tests start would otherwise re-exec itself into
// (apps/accel-bench/main.cpp, prepare_environment): OMP_WAIT_POLICY=PASSIVE
// and, where OpenBLAS does not know this CPU, OPENBLAS_CORETYPE with
// ACCEL_OPENBLAS_CORETYPE_AUTO=1. The values are the same, so the runs are;
// each CLI process then loads LibTorch once instead of twice (0.55 s of CPU
// each, a few hundred processes a leg). The re-exec itself has its own test.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "accel/metrics/hardware.h"

int main(int argc, char** argv) {
  ::setenv("OMP_WAIT_POLICY", "PASSIVE", /*overwrite=*/0);
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr) {
    const std::string type = accel::metrics::better_openblas_coretype(
        accel::metrics::openblas_core(), accel::metrics::cpu_features());
    if (!type.empty()) {
      ::setenv("OPENBLAS_CORETYPE", type.c_str(), 1);
      ::setenv("ACCEL_OPENBLAS_CORETYPE_AUTO", "1", 1);
    }
  }
  doctest::Context context(argc, argv);
  return context.run();
}
