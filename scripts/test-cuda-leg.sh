#!/usr/bin/env bash
# The CUDA leg: builds accel-bench against PyPI torch's LibTorch (CUDA 13, with
# c10d's NCCL process group), checks that every CUDA part is compiled in and
# that the binaries load, and runs the whole test suite on the CPU. GPU tests
# call accel_test::skip("no GPU") where there is none and ctest counts them as skipped.
#
#   scripts/test-cuda-leg.sh               # setup (cached), build, ctest
#   scripts/test-cuda-leg.sh -R '^model'   # extra arguments go to ctest
#
# Environment:
#   ACCEL_CUDA_LEG        auto (default: skip, saying so, when there is no CUDA
#                         toolkit), 1 (required; the default when CI=true), 0 (skip)
#   ACCEL_CUDA_BUILD_DIR  build folder (default build-cuda)
#   CUDA_HOME             the CUDA toolkit (default /usr/local/cuda)
#   ACCEL_TORCH_VENV      where scripts/setup-torch-venv.sh keeps torch
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "test-cuda-leg: $*"; }
die() { echo "test-cuda-leg: error: $*" >&2; exit 1; }

mode=${ACCEL_CUDA_LEG:-auto}
[ "$mode" = auto ] && [ "${CI:-}" = true ] && mode=1
case "$mode" in
  0) say "skipped (ACCEL_CUDA_LEG=0)"; exit 0 ;;
  1|auto) ;;
  *) die "ACCEL_CUDA_LEG must be auto, 1 or 0: $mode" ;;
esac

T0=$(date +%s)
elapsed() { echo "$(( $(date +%s) - T0 )) s"; }

# --- the CUDA toolkit: find_package(Torch) of a CUDA LibTorch needs nvcc -----------
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if ! command -v nvcc >/dev/null && [ -x "$CUDA_HOME/bin/nvcc" ]; then
  export PATH=$CUDA_HOME/bin:$PATH
fi
if ! command -v nvcc >/dev/null; then
  [ "$mode" = auto ] || die "no CUDA toolkit: nvcc is neither on PATH nor in $CUDA_HOME/bin"
  say "skipped: no CUDA toolkit (nvcc) on this machine; set CUDA_HOME if it is elsewhere"
  exit 0
fi
# Where ld.so's cache lacks the toolkit's libraries, find them this way.
if [ -d "$CUDA_HOME/lib64" ] && ! ldconfig -p 2>/dev/null | grep -q 'libcublas\.so\.'; then
  export LD_LIBRARY_PATH=$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi

# --- torch from PyPI, in a venv outside the clone (cached) -------------------------
prefix=$(bash scripts/setup-torch-venv.sh | tail -n 1)
[ -d "$prefix/Torch" ] || die "setup-torch-venv.sh gave no CMake prefix with Torch/ in it: '$prefix'"

# --- build -------------------------------------------------------------------------
BUILD_DIR=${ACCEL_CUDA_BUILD_DIR:-build-cuda}
cfg=()
# Configure only when the folder is new or points at another LibTorch: the
# CUDA checks in TorchConfig.cmake cost ~15 s each time.
grep -qxF "Torch_DIR:PATH=$prefix/Torch" "$BUILD_DIR/CMakeCache.txt" 2>/dev/null \
  || cfg=(-DCMAKE_PREFIX_PATH="$prefix" -DTorch_DIR="$prefix/Torch")
say "building in $BUILD_DIR against $prefix ($(elapsed))"
BUILD_DIR=$BUILD_DIR bash scripts/build.sh "${cfg[@]}"
say "build done ($(elapsed))"

features=$BUILD_DIR/accel-features.txt
[ -f "$features" ] || die "$features missing (written by cmake/torch_features.cmake)"
say "$(tr '\n' ' ' <"$features")"
grep -qx ACCEL_WITH_CUDA=1 "$features" || die "this LibTorch did not turn CUDA on"
grep -qx ACCEL_WITH_NCCL=1 "$features" || die "this LibTorch did not turn the NCCL process group on"

# Every library the binaries need must resolve; libcuda.so.1 (the driver) is
# opened lazily by torch and is absent on machines without a GPU.
for bin in "$BUILD_DIR/accel-bench" "$BUILD_DIR/tests/accel_tests"; do
  [ -x "$bin" ] || continue
  nf=$(ldd "$bin" | awk '/not found/ && $1 != "libcuda.so.1" { print $1 }' | tr '\n' ' ')
  [ -z "$nf" ] || die "$bin: libraries not found: $nf"
done
"$BUILD_DIR/accel-bench" --version >/dev/null || die "$BUILD_DIR/accel-bench does not start"

# --- tests on the CPU --------------------------------------------------------------
# The test of a job that torchrun itself launches needs a torchrun whose torch is
# this build's LibTorch (TCPStore's protocol is not stable across versions): the venv's.
torchrun_bin=${prefix%%/lib/python*}/bin/torchrun
[ -x "$torchrun_bin" ] || die "no torchrun in the venv of $prefix"
export ACCEL_TORCHRUN=$torchrun_bin
say "running ctest $* ($(elapsed))"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" --timeout 900 "$@" \
  || die "ctest failed against the CUDA LibTorch"
say "OK ($(elapsed))"
