#!/usr/bin/env bash
# DDP/FSDP scaling on this machine: images/s of the CPU ladder's preset in
# bf16-mixed (or PRECISION), 1 rank x 1 thread against 2 ranks x 1 thread,
# measured back to back (ABAB..., REPEATS rounds) on the same build and data.
# Scaling efficiency = img/s(2 ranks) / (2 x img/s(1 rank)), from the medians;
# beside it the median of the rounds' own ratios (each round's 2-rank run over
# the 1-rank run just before it), which a machine whose speed drifts between
# rounds disturbs less.
# The hardware's own ceiling is measured too: two independent 1-rank runs at
# the same time (no communication at all; they share memory bandwidth, caches
# and whatever the hypervisor shares), img/s summed. DDP / that ceiling is
# what the communication and synchronisation cost. The 2-rank run goes twice:
# as configured (runtime.comm_wait auto: ranks that own their cores spin while
# they wait for a collective) and with runtime.comm_wait=block (c10d's sleeping
# wait), so the table shows what the spinning wait buys on this machine.
#   bash bench/scaling.sh                 # ddp, bf16-mixed, 3 rounds
#   STRATEGY=fsdp PRECISION=32-true REPEATS=5 bash bench/scaling.sh
#   EXTRA="--set runtime.bucket_mb=0.5" bash bench/scaling.sh   # settings for the 2-rank runs
#   PEER=1 bash bench/scaling.sh          # also PyTorch's own DDP on the same LibTorch
#                                         # (bench/eager_step.py --ddp 2, random data,
#                                         # Debian's python3-torch), in the same rounds
# Needs an idle machine: other load on the cores shows up as lost scaling.
set -euo pipefail
cd "$(dirname "$0")/.."
EXE=${EXE:-build/accel-bench}
STRATEGY=${STRATEGY:-ddp}
PRECISION=${PRECISION:-bf16-mixed}
REPEATS=${REPEATS:-3}
BATCHES=${BATCHES:-40}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
common=(-c configs/ladder/cpu/00-scratch.json --set train.loop=fabric
        --set runtime.precision="$PRECISION" --set runtime.threads=1
        --set train.epochs=1 --set train.limit_train_batches="$BATCHES"
        --set train.limit_eval_batches=1 --set train.warmup_steps=5
        --set train.save_checkpoint=false -q)
# EXTRA="--set runtime.bucket_mb=0.5 ...": more settings for the 2-rank runs.
read -r -a extra <<< "${EXTRA:-}"
ips() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['images_per_s'])" "$1"; }
one=(); two=(); block=(); pair=(); peer1=(); peer2=()
PYTHON=${PYTHON:-/usr/bin/python3}
peer_ips() { "$PYTHON" bench/eager_step.py --precision "$PRECISION" --threads 1 --steps "$BATCHES" "$@" |
             python3 -c "import json,sys; print(json.load(sys.stdin)['images_per_s'])"; }
if [ "${PEER:-0}" = 1 ]; then
  [ "$STRATEGY" = ddp ] || { echo "scaling: PEER=1 compares DDP only" >&2; exit 2; }
  "$PYTHON" -c 'import torch' 2>/dev/null ||
    { echo "scaling: $PYTHON cannot import torch; bash scripts/setup.sh --bench" >&2; exit 1; }
fi
for r in $(seq 1 "$REPEATS"); do
  "$EXE" run "${common[@]}" --out "$out/one-$r" >/dev/null
  one+=("$(ips "$out/one-$r/result.json")")
  "$EXE" run "${common[@]}" --set runtime.devices=2 --set runtime.strategy="$STRATEGY" \
    ${extra[@]+"${extra[@]}"} --out "$out/two-$r" >/dev/null
  two+=("$(ips "$out/two-$r/result.json")")
  "$EXE" run "${common[@]}" --set runtime.devices=2 --set runtime.strategy="$STRATEGY" \
    ${extra[@]+"${extra[@]}"} --set runtime.comm_wait=block --out "$out/block-$r" >/dev/null
  block+=("$(ips "$out/block-$r/result.json")")
  "$EXE" run "${common[@]}" --out "$out/pa-$r" >/dev/null &
  "$EXE" run "${common[@]}" --set train.seed=7 --out "$out/pb-$r" >/dev/null
  wait
  pair+=("$(python3 -c "print($(ips "$out/pa-$r/result.json") + $(ips "$out/pb-$r/result.json"))")")
  echo "round $r: 1 rank ${one[-1]} img/s | 2 ranks ${two[-1]} img/s (comm_wait=block ${block[-1]})" \
       "| 2 independent 1-rank runs ${pair[-1]} img/s in all"
  if [ "${PEER:-0}" = 1 ]; then
    peer1+=("$(peer_ips)")
    peer2+=("$(peer_ips --ddp 2)")
    echo "round $r: PyTorch eager 1 process ${peer1[-1]} img/s | PyTorch DDP 2 processes ${peer2[-1]} img/s"
  fi
done
python3 - "$STRATEGY" "$PRECISION" "${one[*]}" "${two[*]}" "${block[*]}" "${pair[*]}" "${peer1[*]}" "${peer2[*]}" <<'PY'
import statistics, sys
strategy, precision = sys.argv[1], sys.argv[2]
rounds = [list(map(float, v.split())) for v in sys.argv[3:9]]
a, b, w, c = (statistics.median(v) for v in rounds[:4])
def per_round(two, one):  # median (min-max) of the rounds' own efficiencies
    e = [t / (2 * o) for t, o in zip(two, one)]
    return f"{statistics.median(e):.2f} ({min(e):.2f}-{max(e):.2f})"
print("| implementation | strategy | precision | 1 rank x 1 thread img/s | 2 ranks x 1 thread img/s | speedup "
      "| scaling efficiency | per-round efficiency, median (range) "
      "| 2 independent runs img/s (ceiling) | efficiency vs ceiling | step ms, 1 rank / 2 ranks |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
print(f"| accel-bench | {strategy} | {precision} | {a:.1f} | {b:.1f} | {b/a:.2f}x | {b/(2*a):.2f} "
      f"| {per_round(rounds[1], rounds[0])} | {c:.1f} ({c/(2*a):.2f}) | {b/c:.2f} "
      f"| {16e3/a:.1f} / {32e3/b:.1f} |")
print(f"| accel-bench, comm_wait=block | {strategy} | {precision} | {a:.1f} | {w:.1f} | {w/a:.2f}x "
      f"| {w/(2*a):.2f} | {per_round(rounds[2], rounds[0])} | | {w/c:.2f} "
      f"| {16e3/a:.1f} / {32e3/w:.1f} |")
if rounds[4]:
    pa, pb = (statistics.median(v) for v in rounds[4:6])
    print(f"| PyTorch eager DDP (random data) | ddp | {precision} | {pa:.1f} | {pb:.1f} | {pb/pa:.2f}x "
          f"| {pb/(2*pa):.2f} | {per_round(rounds[5], rounds[4])} | | | {16e3/pa:.1f} / {32e3/pb:.1f} |")
PY
