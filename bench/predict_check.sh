#!/usr/bin/env bash
# How close `accel-bench predict` comes (against measured runs), in two tables:
#
# 1. This CPU: the ladders' 2-rank rungs (vision 05-ddp and 06-fsdp, text
#    t05-ddp and t06-zero2) predicted from one-rank runs of the rung before
#    them (04-bf16-mixed, t03-mixed) with this machine's fitted Gloo
#    collectives (calibrate --comm), beside the same 2-rank rungs measured in
#    this script. Two bases: one rank of one thread (the 2-rank rungs' own
#    device: the comm model alone is tested), and one rank of two threads as
#    the ladder runs it, its compute scaled to one thread by the calibrated
#    matmul peaks (--threads-per-device 1: the whole chain is tested).
#    Alternating rounds, medians of the step times.
# 2. The articles: cvpr2023's one-GPU bf16 rung (04) predicted to its 4-GPU
#    DDP and FSDP rungs, and the blog's one-GPU mixed-precision rung (3) to its
#    4-GPU DDP rung, over NVLink 3 and over PCIe 4 (the articles do not say
#    which A100s they had), beside the articles' minutes.
#
#   bash bench/predict_check.sh        # BUILD_DIR (build), ROUNDS (2), OUT (runs/predict-check/<time>)
#
# Not part of any test command: it measures, and says how far off the model is.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
die() { echo "predict_check: error: $*" >&2; exit 1; }
say() { echo "predict_check: $*" >&2; }
. bench/lib.sh
case "${1:-}" in -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  "") ;; *) die "no arguments (settings are environment variables; see --help)" ;; esac

BUILD_DIR=${BUILD_DIR:-build}
ROUNDS=${ROUNDS:-2}
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a whole number >= 1: $ROUNDS"
BIN=$BUILD_DIR/accel-bench
[ -x "$BIN" ] || die "$BIN not found (bash scripts/build.sh)"
[ "$(nproc)" -ge 2 ] || die "needs 2 cores for the 2-rank rungs"
out=${OUT:-runs/predict-check/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
peaks=$out/peaks.json

say "calibrating matmul peaks and Gloo collectives into $peaks"
"$BIN" calibrate --max-threads 2 --out "$peaks" >/dev/null 2>"$out/calibrate.log"
"$BIN" calibrate --comm --out "$peaks" >/dev/null 2>>"$out/calibrate.log"

# One epoch of the vision rungs; 80 steps of the text rungs (no mid-run validation).
vision=(--set train.epochs=1)
text=(--set train.max_steps=80 --set train.val_every_steps=0 --set train.limit_eval_batches=2)
# name config extra-args...
run() {
  local name=$1 cfg=$2; shift 2
  "$BIN" run -c "$cfg" --out "$out/$name" --force -q --set train.save_checkpoint=false "$@" \
    >"$out/$name.log" 2>&1 || die "$name failed: $(tail -n 1 "$out/$name.log")"
}
step() { json "$out/$1/result.json" 'd["step_time_ms"]["mean"]'; }

declare -A steps
cases=(
  "vision 04 configs/ladder/cpu/04-bf16-mixed.json 05-ddp configs/ladder/cpu/05-ddp.json ddp"
  "vision 04 configs/ladder/cpu/04-bf16-mixed.json 06-fsdp configs/ladder/cpu/06-fsdp.json fsdp"
  "text t03 configs/ladder/text-cpu/t03-mixed.json t05-ddp configs/ladder/text-cpu/t05-ddp.json ddp"
  "text t03 configs/ladder/text-cpu/t03-mixed.json t06-zero2 configs/ladder/text-cpu/t06-zero2.json deepspeed_stage_2"
)
for ((r = 1; r <= ROUNDS; r++)); do
  for c in "${cases[@]}"; do
    read -r kind base base_cfg rung rung_cfg strategy <<<"$c"
    if [ "$kind" = vision ]; then extra=("${vision[@]}"); else extra=("${text[@]}"); fi
    # Alternate the order between rounds: whatever drifts hits both alike.
    order=(one two base); [ $((r % 2)) = 0 ] && order=(base two one)
    for what in "${order[@]}"; do
      case "$what" in
        one) n="$base-1x1-r$r"; [ -d "$out/$n" ] || run "$n" "$base_cfg" "${extra[@]}" --set runtime.threads=1 ;;
        base) n="$base-1x2-r$r"; [ -d "$out/$n" ] || run "$n" "$base_cfg" "${extra[@]}" --set runtime.threads=2 ;;
        two) n="$rung-r$r"; run "$n" "$rung_cfg" "${extra[@]}" ;;
      esac
      say "round $r: $n $(step "$n") ms a step"
    done
  done
done

rows=()
for c in "${cases[@]}"; do
  read -r kind base base_cfg rung rung_cfg strategy <<<"$c"
  m=() p1=() p2=()
  for ((r = 1; r <= ROUNDS; r++)); do
    m+=("$(step "$rung-r$r")")
    "$BIN" predict "$out/$base-1x1-r$r/result.json" --devices 1,2 --strategy "$strategy" \
      --calibration "$peaks" --json "$out/predict-$rung-1x1-r$r.json" >"$out/predict-$rung-1x1-r$r.txt" 2>/dev/null
    "$BIN" predict "$out/$base-1x2-r$r/result.json" --devices 1,2 --strategy "$strategy" \
      --calibration "$peaks" --threads-per-device 1 --json "$out/predict-$rung-1x2-r$r.json" \
      >"$out/predict-$rung-1x2-r$r.txt" 2>/dev/null
    p1+=("$(json "$out/predict-$rung-1x1-r$r.json" 'd["rows"][1]["step_ms"]')")
    p2+=("$(json "$out/predict-$rung-1x2-r$r.json" 'd["rows"][1]["step_ms"]')")
  done
  rows+=("$(awk -v k="$kind" -v b="$base" -v g="$rung" -v s="$strategy" -v m="$(median "${m[@]}")" \
    -v a="$(median "${p1[@]}")" -v c="$(median "${p2[@]}")" 'BEGIN {
      printf "| %s | %s -> %s | %s | %.1f | %.1f | %+.1f%% | %.1f | %+.1f%% |", k, b, g, s, m, a, (a / m - 1) * 100, c, (c / m - 1) * 100 }')")
done

arows=()
for c in "cvpr2023-vit 04 ddp" "cvpr2023-vit 04 fsdp" "faster-pytorch-blog 3 ddp"; do
  read -r ref rung strategy <<<"$c"
  for link in nvlink3-a100 pcie4-x16; do
    f=$out/article-$ref-$rung-$strategy-$link.json
    "$BIN" predict --article "results/reference/$ref.json" --rung "$rung" --devices 1,4 \
      --strategy "$strategy" --link "$link" --json "$f" >"${f%.json}.txt" 2>/dev/null
    arows+=("$(json "$f" '"| %s | %s -> %s (%s) | %s | %.2f | %.2f | %+.1f%% | %.0f%% |" % ("'"$ref"'", "'"$rung"'", d["article"][0]["rung"], "'"$strategy"'", "'"$link"'", d["article"][0]["time_min"], d["article"][0]["predicted_min"], (d["article"][0]["predicted_min"] / d["article"][0]["time_min"] - 1) * 100, d["rows"][1]["efficiency"] * 100)')")
  done
done

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -n 1)
{
  echo "CPU: $cpu, $(nproc) cores; $("$BIN" --version | head -n 1); $ROUNDS round(s), medians; $(date -u +%FT%TZ)"
  echo
  echo "| ladder | rungs | strategy | measured step ms | predicted from 1 rank x 1 thread | off | predicted from 1 rank x 2 threads, peak-scaled | off |"
  echo "|---|---|---|---:|---:|---:|---:|---:|"
  printf '%s\n' "${rows[@]}"
  echo
  echo "| article | rungs | link | article min | predicted min | off | predicted scaling efficiency |"
  echo "|---|---|---|---:|---:|---:|---:|"
  printf '%s\n' "${arows[@]}"
} | tee "$out/table.md"
say "runs, predictions and table.md in $out/"
