#!/usr/bin/env bash
# Runs a command as a CPU with AVX2 and FMA but no AVX-512 would run it, on a
# machine that has AVX-512: the question "what does the main job take on a
# 2-core AVX2 machine?" answered on an AVX-512 one.
#   bash bench/avx2_proxy.sh COMMAND [ARGS...]
#   bash bench/avx2_proxy.sh bash scripts/ladder.sh
#   bash bench/avx2_proxy.sh build/accel-bench run -c configs/ladder/text-cpu/t03-mixed.json
# What it sets, and why each is needed:
#   ATEN_CPU_CAPABILITY=avx2   LibTorch's own kernels (elementwise, softmax, ...) in AVX2;
#   OPENBLAS_CORETYPE=Haswell  OpenBLAS's AVX2 kernels for the fp32 matmuls;
#   ACCEL_ONEDNN=0             no oneDNN: LibTorch 1.13 sends a bf16 matmul to oneDNN where
#                              cpuinfo sees AVX-512 and to its own loops on an AVX2 CPU
#                              (accel/metrics/metrics.h); this is what makes bf16 10-40x slower;
#   ACCEL_KERNEL_ISA=avx2+fma  accel-bench's attention, Adam and dropout kernels in AVX2;
#   ACCEL_CPU_FLAGS="avx2 fma" accel-bench's own decisions (emulated bf16, where_emulated, the
#                              machine id's "-avx2-") as on such a CPU.
# The clock, caches and cores are still this machine's: an AVX2-only CPU of
# another make or generation runs faster or slower (README's "What your CPU
# can do" gives the figures measured both ways). Anything you set is kept.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: bash bench/avx2_proxy.sh COMMAND [ARGS...]" >&2; exit 2; }
if ! grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
  echo "avx2_proxy: this CPU has no AVX-512: running the command as it is" >&2
  exec "$@"
fi
export ATEN_CPU_CAPABILITY=${ATEN_CPU_CAPABILITY:-avx2}
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}
export ACCEL_ONEDNN=${ACCEL_ONEDNN:-0}
export ACCEL_KERNEL_ISA=${ACCEL_KERNEL_ISA:-avx2+fma}
export ACCEL_CPU_FLAGS=${ACCEL_CPU_FLAGS:-fpu avx2 fma}
exec "$@"
