#!/usr/bin/env bash
# The test command: set up (if needed), build, and run the whole test suite
# with ctest on every LibTorch leg. Exits non-zero on any failure.
#   1. native: Debian 12's LibTorch 1.13 (CPU), build/
#   2. CUDA:   PyPI torch 2.11's LibTorch (CUDA 13 + NCCL), build-cuda/, tests on the CPU
#              (scripts/test-cuda-leg.sh; skipped, saying so, without a CUDA toolkit
#              outside CI)
#   3. second: Debian 13's LibTorch 2.6 (CPU, gcc 14) in a chroot, plus the
#              1.13-vs-2.6 loss comparison (scripts/test-libtorch2.sh)
#   ACCEL_CUDA_LEG=0        skip leg 2 (1: require it; the default when CI=true)
#   ACCEL_SKIP_LIBTORCH2=1  skip leg 3
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
bash scripts/setup.sh --tests  # every download happens here
bash scripts/build.sh
echo "test: setup and build took $(( $(date +%s) - start )) s"
echo "test: LibTorch 1.13 (native) leg"
ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 900
leg=$(date +%s)
echo "test: LibTorch 2.11 + CUDA (PyPI torch) leg"
bash scripts/test-cuda-leg.sh
echo "test: CUDA leg took $(( $(date +%s) - leg )) s"
if [ -x scripts/test-libtorch2.sh ] && [ "${ACCEL_SKIP_LIBTORCH2:-0}" != 1 ]; then
  leg=$(date +%s)
  echo "test: LibTorch 2.x (Debian 13 chroot) leg"
  bash scripts/test-libtorch2.sh
  echo "test: Debian 13 leg took $(( $(date +%s) - leg )) s"
fi
echo "test: all legs passed in $(( $(date +%s) - start )) s"
