#!/usr/bin/env bash
# The test command: set up (if needed), build, and run the whole test suite
# with ctest. Exits non-zero on any failure.
#   ACCEL_SKIP_LIBTORCH2=1  skip the second leg (LibTorch 2.x in a Debian 13 chroot)
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
bash scripts/setup.sh
bash scripts/build.sh
echo "test: setup and build took $(( $(date +%s) - start )) s"
echo "test: LibTorch 1.13 (native) leg"
ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 900
if [ -x scripts/test-libtorch2.sh ] && [ "${ACCEL_SKIP_LIBTORCH2:-0}" != 1 ]; then
  echo "test: LibTorch 2.x (Debian 13 chroot) leg"
  bash scripts/test-libtorch2.sh
fi
echo "test: all legs passed in $(( $(date +%s) - start )) s"
