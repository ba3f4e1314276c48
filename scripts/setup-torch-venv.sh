#!/usr/bin/env bash
# Installs PyPI's torch (a CUDA build: its LibTorch has CUDA and c10d's NCCL
# process group compiled in) into a venv outside the clone, for the CUDA leg
# (scripts/test-cuda-leg.sh). Idempotent: a stamp lists what is installed, so a
# second run, or a fresh clone on the same machine, reuses the venv at once.
#
#   scripts/setup-torch-venv.sh        # prints the CMake prefix on its last line
#
# Environment:
#   ACCEL_TORCH_VENV   venv path (default /opt/accel-bench/torch-venv when
#                      writable, else ~/.cache/accel-bench/torch-venv)
#   CUDA_HOME          the CUDA toolkit (default /usr/local/cuda)
#
# Only torch and the three NVIDIA libraries that libtorch_cuda.so needs and the
# CUDA 13 toolkit lacks are installed, without their dependencies: the toolkit
# serves cuBLAS, cuDNN, NCCL, cudart and the rest (about 0.8 GB downloaded
# instead of about 4 GB). The wheel's CUDA major must match the toolkit's.
set -euo pipefail

# --- the pins: change them together (the torch wheel's METADATA names the rest) ---
TORCH_PIN=torch==2.11.0        # PyPI's default build for 2.11: CUDA 13.0 (2.11.0+cu130)
TORCH_CUDA_MAJOR=13
# NEEDED by libtorch_cuda.so, absent from the CUDA 13 toolkit: libcusparseLt.so.0,
# libnvshmem_host.so.3, libcufile.so.0 (found through libtorch's RPATH into
# site-packages/nvidia/*/lib).
NVIDIA_PINS=(nvidia-cusparselt-cu13==0.8.0 nvidia-nvshmem-cu13==3.4.5 nvidia-cufile==1.15.1.6)
# What `import torch` needs (pure Python, small): for the version check below.
PY_PINS=(filelock==4.3.1 typing-extensions==4.16.0 sympy==1.14.0 mpmath==1.3.0
         networkx==3.6.1 jinja2==3.1.6 markupsafe==3.0.4 fsspec==2026.9.0)
STAMP_FORMAT=1

say() { echo "setup-torch-venv: $*" >&2; }
die() { echo "setup-torch-venv: error: $*" >&2; exit 1; }

default_venv() {
  if mkdir -p /opt/accel-bench 2>/dev/null && [ -w /opt/accel-bench ]; then
    echo /opt/accel-bench/torch-venv
  else
    echo "${XDG_CACHE_HOME:-$HOME/.cache}/accel-bench/torch-venv"
  fi
}
VENV=${ACCEL_TORCH_VENV:-$(default_venv)}
case "$VENV" in /*) ;; *) die "ACCEL_TORCH_VENV must be an absolute path: $VENV" ;; esac
VENV=${VENV%/}
[ -n "$VENV" ] && [ "$VENV" != / ] || die "refusing to use / as the venv"
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
case "$REPO/" in "$VENV"/*) die "the venv ($VENV) must be outside the checkout ($REPO)" ;; esac
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
PYTHON=$(command -v python3) || die "python3 not found"
STAMP=$VENV/accel-bench-torch.stamp

# The pins decide reuse; which python3 made the venv does not (PATH differs
# between a shell and CI), as long as the venv's own interpreter still runs.
stamp_text() {
  echo "format=$STAMP_FORMAT"
  printf 'pin=%s\n' "$TORCH_PIN" "${NVIDIA_PINS[@]}" "${PY_PINS[@]}"
}

mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
flock -n 9 || { say "waiting for another run holding $VENV.lock"; flock 9; }

want=$(stamp_text)
if [ -f "$STAMP" ] && [ "$(grep -Ev '^(cmake_prefix|python)=' "$STAMP")" = "$want" ] \
   && "$VENV/bin/python" -c '' 2>/dev/null; then
  say "reusing $VENV ($TORCH_PIN)"
else
  [ -e "$VENV" ] && say "removing $VENV (no stamp, or other pins)" && rm -rf "$VENV"
  avail_kb=$(df -Pk "$(dirname "$VENV")" | awk 'NR == 2 { print $4 }')
  [ "${avail_kb:-0}" -ge 4000000 ] || die "need about 4 GB free for $VENV (have $((avail_kb / 1024)) MB)"
  say "installing $TORCH_PIN into $VENV (about 0.8 GB to download)"
  t0=$(date +%s)
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --no-deps --disable-pip-version-check \
    "$TORCH_PIN" "${NVIDIA_PINS[@]}" "${PY_PINS[@]}" || die "pip install failed"
  say "installed in $(( $(date +%s) - t0 )) s; $(du -sh "$VENV" | cut -f1) on disk"
fi

# --- checks (also on reuse: the toolkit may have changed under the venv) ------------
# The toolkit's libraries: through ld.so's cache where the toolkit registered
# them, else through LD_LIBRARY_PATH (the CUDA leg sets the same).
if [ -d "$CUDA_HOME/lib64" ] && ! ldconfig -p 2>/dev/null | grep -q 'libcublas\.so\.'"$TORCH_CUDA_MAJOR"; then
  export LD_LIBRARY_PATH=$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
TORCH_LIB=$SITE/torch/lib
[ -f "$TORCH_LIB/libtorch_cuda.so" ] || die "$TORCH_LIB/libtorch_cuda.so missing: not a CUDA build of torch?"
# libcuda.so.1 is the driver: only libcaffe2_nvrtc.so names it, and torch opens
# that lazily, on first GPU use; without a GPU it is never needed.
missing=$(for f in "$TORCH_LIB"/libtorch*.so "$TORCH_LIB"/libc10*.so; do ldd "$f"; done \
  | awk '/not found/ && $1 != "libcuda.so.1" { print $1 }' | sort -u | tr '\n' ' ')
[ -z "$missing" ] || die "libraries not found for $TORCH_LIB (CUDA $TORCH_CUDA_MAJOR toolkit in $CUDA_HOME?): $missing"
if [ -x "$CUDA_HOME/bin/nvcc" ]; then
  tk=$("$CUDA_HOME/bin/nvcc" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
  [ "$tk" = "$TORCH_CUDA_MAJOR" ] || die "$TORCH_PIN is built for CUDA $TORCH_CUDA_MAJOR; $CUDA_HOME is CUDA $tk"
fi

if ! grep -q '^cmake_prefix=' "$STAMP" 2>/dev/null; then
  info=$("$VENV/bin/python" -W ignore -c 'import torch, torch.utils
print(torch.__version__, torch.version.cuda, torch.utils.cmake_prefix_path)') \
    || die "import torch failed in $VENV"
  read -r ver cuda prefix <<<"$info"
  case "$cuda" in "$TORCH_CUDA_MAJOR".*) ;; *) die "torch $ver reports CUDA $cuda, expected $TORCH_CUDA_MAJOR.x" ;; esac
  { echo "$want"; echo "python=$("$VENV/bin/python" -c 'import sys; print(sys.version.split()[0])')"
    echo "cmake_prefix=$prefix"; } >"$STAMP.tmp" && mv "$STAMP.tmp" "$STAMP"
  say "torch $ver (CUDA $cuda) ready"
fi
sed -n 's/^cmake_prefix=//p' "$STAMP"
