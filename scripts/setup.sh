#!/usr/bin/env bash
# Installs everything accel-bench needs from Debian's archive. Idempotent; run as root.
set -euo pipefail

PKGS=(
  build-essential cmake ninja-build pkg-config
  libtorch-dev libgloo-dev libcli11-dev nlohmann-json3-dev doctest-dev
  libbenchmark-dev zlib1g-dev
  iproute2
  dataset-fashion-mnist libopenblas0-openmp gnuplot-nox
)
# `setup.sh --bench`: also what the benchmarks against PyTorch need
# (bench/eager_vs_cpp.sh: PyTorch eager on the same LibTorch 1.13); not for
# the main job or the tests, so CI does not install it.
if [ "${1:-}" = "--bench" ]; then
  PKGS+=(python3-torch)
fi

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup.sh: run as root (or install sudo)" >&2; exit 1; }
  SUDO=sudo
fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi

# Debian's default libblas is the reference implementation (~20x slower fp32 matmuls);
# OpenBLAS's pthread build oversubscribes cores under LibTorch's OpenMP threads, so
# select the OpenMP build for both BLAS and LAPACK.
arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
for lib in blas lapack; do
  target="/usr/lib/${arch}/openblas-openmp/lib${lib}.so.3"
  if [ -e "$target" ]; then
    current=$(update-alternatives --query "lib${lib}.so.3-${arch}" 2>/dev/null | awk '/^Value:/{print $2}')
    if [ "$current" != "$target" ]; then
      $SUDO update-alternatives --set "lib${lib}.so.3-${arch}" "$target" >/dev/null
      echo "setup: lib${lib}.so.3 -> $target"
    fi
  else
    echo "setup: warning: $target not found; BLAS stays at Debian's default" >&2
  fi
done
