#!/usr/bin/env bash
# What bf16-mixed buys a training step on this CPU: the text ladder's step
# (t02-trainer in 32-true against t03-mixed in bf16-mixed: the MiniLM encoder,
# batch 12, the ladder's per-batch padding, both cores) and the vision
# ladder's (03-fabric against 04-bf16-mixed), on each LibTorch build given,
# in alternating rounds; the medians of the step-time medians and their ratio.
# Issue 18's goal: the text step at least 1.3x faster in bf16-mixed where the
# CPU has native bf16 (AMX or AVX512-BF16), on LibTorch 1.13 and on 2.11.
#
#   bash bench/bf16_step.sh     # BUILDS ("build build-cuda": those present), ROUNDS (3),
#                               # STEPS (60 timed, after 10 warm-up), OUT (runs/bf16-step/<time>)
#
# Not part of any test command: it measures, and says whether the goal is met.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
die() { echo "bf16_step: error: $*" >&2; exit 1; }
say() { echo "bf16_step: $*" >&2; }
. bench/lib.sh
case "${1:-}" in -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  "") ;; *) die "no arguments (settings are environment variables; see --help)" ;; esac

ROUNDS=${ROUNDS:-3} STEPS=${STEPS:-60}
[[ $ROUNDS =~ ^[1-9][0-9]*$ && $STEPS =~ ^[1-9][0-9]*$ ]] || die "ROUNDS and STEPS must be whole numbers >= 1"
builds=()
for b in ${BUILDS:-build build-cuda}; do [ -x "$b/accel-bench" ] && builds+=("$b"); done
[ ${#builds[@]} -gt 0 ] || die "no accel-bench in ${BUILDS:-build build-cuda} (scripts/build.sh; scripts/test-cuda-leg.sh builds build-cuda)"
[ "$(bf16_hardware)" = native ] || say "warning: this CPU has neither AMX nor AVX512-BF16: bf16 is emulated (about 12x slower)"
out=${OUT:-runs/bf16-step/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
common=(--set train.warmup_steps=10 --set train.max_steps=$((STEPS + 10)) --set train.val_every_steps=0
        --set train.limit_eval_batches=1 --set train.save_checkpoint=false --set runtime.threads=2 -q --force)
# model label, 32-true config, bf16-mixed config, extra settings
models=("text configs/ladder/text-cpu/t02-trainer.json configs/ladder/text-cpu/t03-mixed.json"
        "vision configs/ladder/cpu/03-fabric.json configs/ladder/cpu/04-bf16-mixed.json")
rows=()
for b in "${builds[@]}"; do
  lt=$("$b/accel-bench" --version | sed -n 's/.*LibTorch \([^)]*\)).*/\1/p')
  for m in "${models[@]}"; do
    read -r label fp32 bf16 <<<"$m"
    extra=()
    [ "$label" = vision ] && extra=(--set train.epochs=1)
    f=() h=()
    for ((r = 1; r <= ROUNDS; r++)); do
      order=(fp32 bf16); [ $((r % 2)) = 0 ] && order=(bf16 fp32)
      for p in "${order[@]}"; do
        cfg=$fp32; [ "$p" = bf16 ] && cfg=$bf16
        dir=$out/$(basename "$b")-$label-$p-r$r
        "$b/accel-bench" run -c "$cfg" --out "$dir" "${common[@]}" "${extra[@]}" >"$dir.log" 2>&1 \
          || die "$b $label $p round $r failed: $(tail -n 1 "$dir.log")"
        ms=$(json "$dir/result.json" 'd["step_time_ms"]["median"]')
        say "$b (LibTorch $lt) $label $p round $r: $ms ms"
        if [ "$p" = fp32 ]; then f+=("$ms"); else h+=("$ms"); fi
      done
    done
    rows+=("$(awk -v b="$b" -v lt="$lt" -v m="$label" -v f="$(median "${f[@]}")" -v h="$(median "${h[@]}")" \
      -v fr="${f[*]}" -v hr="${h[*]}" 'BEGIN {
        r = f / h
        printf "| %s | %s (%s) | %.1f | %.1f | %.2fx | %s | %s / %s |", m, lt, b, f, h, r,
               (m == "text" ? (r >= 1.3 ? "yes" : "no") : "-"), fr, hr }')")
  done
done
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -n 1)
{
  echo "CPU: $cpu, $(nproc) cores, bf16 $(bf16_hardware); $ROUNDS alternating round(s) of 10 warm-up + $STEPS timed steps, 2 threads; $(date -u +%FT%TZ)"
  echo
  echo "| model | LibTorch (build) | 32-true step ms | bf16-mixed step ms | bf16 speedup | text >= 1.3x | rounds 32-true / bf16 |"
  echo "|---|---|---:|---:|---:|---|---|"
  printf '%s\n' "${rows[@]}"
} | tee "$out/table.md"
say "runs and table.md in $out/"
