#!/usr/bin/env bash
# Thread and process placement on this machine: images/s of the CPU ladder's
# preset for each way of using the cores, measured back to back (ABCD.., REPEATS
# rounds, medians) on the same build and data, so the defaults can be the
# fastest measured:
#   1 rank x 1 thread, 1 rank x all cores (OMP_WAIT_POLICY PASSIVE and ACTIVE),
#   and N ranks x 1 thread (DDP) where N = cores, their waits for a collective
#   spinning (runtime.comm_wait auto's choice there) and sleeping (block).
#   bash bench/placement.sh                  # 32-true and bf16-mixed, 3 rounds
#   PRECISIONS=32-true REPEATS=5 bash bench/placement.sh
#   BUSY=1 bash bench/placement.sh           # with one busy-looping process beside
#                                            # (a shared machine: CI, ctest -j, a build)
# Needs an idle machine: other load on the cores shows up as lost speed.
set -euo pipefail
cd "$(dirname "$0")/.."
EXE=${EXE:-build/accel-bench}
REPEATS=${REPEATS:-3}
BATCHES=${BATCHES:-30}
PRECISIONS=${PRECISIONS:-"32-true bf16-mixed"}
cores=$(nproc)
out=$(mktemp -d)
hog=""
trap 'rm -rf "$out"; [ -n "$hog" ] && kill "$hog" 2>/dev/null; true' EXIT
if [ "${BUSY:-0}" = 1 ]; then
  yes >/dev/null &
  hog=$!
fi
ips() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['images_per_s'])" "$1"; }
echo "CPU: $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1), $cores cores${hog:+, one busy-looping process beside}; $("$EXE" env | sed -n 's/^ *"openblas_core": "\([^"]*\)".*/OpenBLAS kernels \1/p'); $(date -u +%FT%TZ)"
echo
echo "| precision | placement | OMP_WAIT_POLICY | images/s (median of $REPEATS) | vs 1 x 1 |"
echo "|---|---|---|---|---|"
for precision in $PRECISIONS; do
  common=(-c configs/ladder/cpu/00-scratch.json --set train.loop=fabric
          --set runtime.precision="$precision" --set train.epochs=1
          --set train.limit_train_batches="$BATCHES" --set train.limit_eval_batches=1
          --set train.warmup_steps=5 --set train.save_checkpoint=false -q)
  cases=("1x1|PASSIVE|--set runtime.threads=1"
         "1x${cores}|PASSIVE|--set runtime.threads=$cores"
         "1x${cores}|ACTIVE|--set runtime.threads=$cores"
         "${cores}x1 (ddp, waits spin)|PASSIVE|--set runtime.threads=1 --set runtime.devices=$cores --set runtime.strategy=ddp --set runtime.comm_wait=spin"
         "${cores}x1 (ddp, waits block)|PASSIVE|--set runtime.threads=1 --set runtime.devices=$cores --set runtime.strategy=ddp --set runtime.comm_wait=block")
  declare -A got=()
  for r in $(seq 1 "$REPEATS"); do
    for i in "${!cases[@]}"; do
      IFS='|' read -r _ policy args <<<"${cases[$i]}"
      # shellcheck disable=SC2086
      OMP_WAIT_POLICY=$policy "$EXE" run "${common[@]}" $args --out "$out/$precision-$i-$r" >/dev/null
      got[$i]+="$(ips "$out/$precision-$i-$r/result.json") "
    done
  done
  base=$(python3 -c "import statistics,sys; print(statistics.median(map(float, sys.argv[1].split())))" "${got[0]}")
  for i in "${!cases[@]}"; do
    IFS='|' read -r name policy _ <<<"${cases[$i]}"
    python3 - "$precision" "$name" "$policy" "${got[$i]}" "$base" <<'PY'
import statistics, sys
p, name, policy, vals, base = sys.argv[1:6]
m = statistics.median(map(float, vals.split()))
print(f"| {p} | {name} | {policy} | {m:.1f} | {m/float(base):.2f}x |")
PY
  done
  unset got
done
