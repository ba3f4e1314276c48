#!/usr/bin/env bash
# Configure and build accel-bench; the CLI ends up at build/accel-bench.
# Extra arguments go to cmake's configure step (e.g. -DTorch_DIR=...).
# BUILD_DIR overrides the build folder (default: build); BUILD_TARGETS names
# the targets to build (default: all; the main job builds accel-bench alone).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD_DIR" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
elif [ $# -gt 0 ]; then
  cmake -S . -B "$BUILD_DIR" "$@"
fi
targets=()
[ -n "${BUILD_TARGETS:-}" ] && targets=(--target ${BUILD_TARGETS})
cmake --build "$BUILD_DIR" -j "$(nproc)" "${targets[@]}"
