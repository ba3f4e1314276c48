#!/usr/bin/env bash
# accel-bench's training step vs the same step in PyTorch eager, on one LibTorch.
#
# Times one training step of the vit_tiny_fmnist preset (forward, cross-entropy,
# backward, Adam; random data) two ways on the same LibTorch 1.13 (Debian 12's
# libtorch-dev, which build/ links, and python3-torch, which is its Python
# binding):
#   accel-bench: build/accel_bench --benchmark_filter=TrainStep/... (Google
#                Benchmark; mean real time per iteration over >= 3 s)
#   eager:       bench/eager_step.py (median of EAGER_STEPS steps after 5 warm-up)
# for precision 32-true and bf16-mixed (bf16 only on CPUs with AVX512-BF16 or
# AMX, or with EMULATED_BF16=1), at 1 thread and at all cores. accel-bench runs
# twice: as shipped (on LibTorch 1.13 its fused CPU attention kernel), and with
# the explicit matmul-softmax-matmul attention eager also runs, to show what the
# kernel buys. Each case runs the three back to back, alternating, for ROUNDS
# rounds, and reports the median of the rounds. ratio = eager ms / accel-bench
# ms: > 1 means accel-bench is faster. Prints a Markdown table.
#
#   bash bench/eager_vs_cpp.sh                  # batch 16, 3 rounds
#   BATCH=64 ROUNDS=5 bash bench/eager_vs_cpp.sh
# Needs build/accel_bench (cmake --build build --target accel_bench) and
# python3-torch (scripts/setup.sh). Env: BATCH (16; bench_train_step.cpp has
# cases for 16 and 64), ROUNDS (3), PRECISIONS ("32-true bf16-mixed"), EAGER_STEPS (20), THREADS_ALL (nproc),
# PYTHON (/usr/bin/python3, Debian's, where python3-torch lives), ACCEL_BENCH_BIN.
set -euo pipefail
# Both sides use the OpenBLAS kernels accel-bench's CLI would choose (an
# OpenBLAS older than the CPU falls back to generic kernels; the CLI then sets
# OPENBLAS_CORETYPE, see lib/include/accel/metrics/hardware.h).
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$root/bench/lib.sh"
core=$(openblas_coretype_of "$root/build/accel-bench")
[ -z "$core" ] || export OPENBLAS_CORETYPE=$core
BATCH=${BATCH:-16}
ROUNDS=${ROUNDS:-3}
EAGER_STEPS=${EAGER_STEPS:-20}
THREADS_ALL=${THREADS_ALL:-$(nproc)}
PRECISIONS=${PRECISIONS:-32-true bf16-mixed}
BIN=${ACCEL_BENCH_BIN:-$root/build/accel_bench}
if [ -z "${PYTHON:-}" ]; then
  PYTHON=python3
  [ -x /usr/bin/python3 ] && PYTHON=/usr/bin/python3
fi
export OMP_WAIT_POLICY=PASSIVE  # the project's default (see accel-bench run)

die() { echo "eager_vs_cpp: $*" >&2; exit 1; }
[ -x "$BIN" ] || die "$BIN not found; build it: cmake --build build --target accel_bench"
"$PYTHON" -c 'import torch' 2>/dev/null ||
  die "$PYTHON cannot import torch; install Debian's python3-torch (bash scripts/setup.sh --bench)"
case "$BATCH" in 16|64) ;; *) die "BATCH=$BATCH: bench_train_step.cpp has TrainStep cases for 16 and 64" ;; esac

# Same LibTorch on both sides?
cpp_lib=$(ldd "$BIN" | awk '/libtorch_cpu/{print $3; exit}')
py_lib=$("$PYTHON" -c 'import torch, os; print(os.path.dirname(torch.__file__))')
py_lib=$(ldd "$py_lib"/_C.cpython*.so | awk '/libtorch_cpu/{print $3; exit}')
[ "$(readlink -f "$cpp_lib")" = "$(readlink -f "$py_lib")" ] ||
  echo "eager_vs_cpp: warning: accel_bench links $cpp_lib, torch loads $py_lib" >&2

cpu=$(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo)
bf16_isa=$(grep -o -w -E 'avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | paste -sd, - || true)

json_field() {  # json_field FIELD < JSON: FIELD of Google Benchmark's benchmarks[0] or of the object
  "$PYTHON" -c '
import json, sys
doc = json.load(sys.stdin)
if "benchmarks" in doc:
    if not doc["benchmarks"]:
        sys.exit("eager_vs_cpp: no benchmark matched")
    doc = doc["benchmarks"][0]
print(doc[sys.argv[1]])' "$1"
}

threads_list=(1)
[ "$THREADS_ALL" -gt 1 ] && threads_list+=("$THREADS_ALL")

echo "CPU: $cpu; bf16 ISA: ${bf16_isa:-none}; LibTorch: $(readlink -f "$cpp_lib")"
echo "batch $BATCH, $ROUNDS rounds (accel, eager alternating), OMP_WAIT_POLICY=$OMP_WAIT_POLICY, OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(OpenBLAS default)}, $(date -u +%FT%TZ)"
echo
echo "| case | accel-bench step ms | accel-bench, explicit attention | eager step ms | eager / accel-bench | eager / accel-bench explicit | rounds accel / explicit / eager (ms) |"
echo "|---|---:|---:|---:|---:|---:|---|"
for prec in $PRECISIONS; do
  if [ "$prec" = bf16-mixed ] && [ -z "$bf16_isa" ] && [ -z "${EMULATED_BF16:-}" ]; then
    echo "| bf16-mixed | skipped: this CPU has no AVX512-BF16 or AMX, bf16 is emulated (~12x slower than 32-true); EMULATED_BF16=1 runs it anyway | | | | | |"
    continue
  fi
  for t in "${threads_list[@]}"; do
    base="TrainStep/vit_tiny_fmnist_b${BATCH}_${prec//-/_}"
    a=() x=() e=()
    for ((r = 0; r < ROUNDS; r++)); do
      out=$(ACCEL_BENCH_THREADS=$t "$BIN" --benchmark_filter="$base/" --benchmark_format=json 2>/dev/null) ||
        die "accel_bench failed for $base (threads $t)"
      a+=("$(printf '%s' "$out" | json_field real_time)")
      out=$(ACCEL_BENCH_THREADS=$t "$BIN" --benchmark_filter="${base}_explicit_attention/" --benchmark_format=json 2>/dev/null) ||
        die "accel_bench failed for ${base}_explicit_attention (threads $t)"
      x+=("$(printf '%s' "$out" | json_field real_time)")
      out=$("$PYTHON" "$root/bench/eager_step.py" --precision "$prec" --batch "$BATCH" \
              --threads "$t" --steps "$EAGER_STEPS") || die "eager_step.py failed ($prec, threads $t)"
      e+=("$(printf '%s' "$out" | json_field step_ms_median)")
    done
    am=$(median "${a[@]}")
    xm=$(median "${x[@]}")
    em=$(median "${e[@]}")
    note=""
    [ "$prec" = bf16-mixed ] && [ -z "$bf16_isa" ] && note=" (emulated)"
    printf '| %s, %s thr, b%s%s | %.1f | %.1f | %.1f | %.2f | %.2f | %s / %s / %s |\n' "$prec" "$t" "$BATCH" "$note" \
      "$am" "$xm" "$em" "$(awk -v e="$em" -v a="$am" 'BEGIN{print e/a}')" \
      "$(awk -v e="$em" -v a="$xm" 'BEGIN{print e/a}')" \
      "$(printf '%.0f ' "${a[@]}" | sed 's/ $//')" "$(printf '%.0f ' "${x[@]}" | sed 's/ $//')" \
      "$(printf '%.0f ' "${e[@]}" | sed 's/ $//')"
  done
done
