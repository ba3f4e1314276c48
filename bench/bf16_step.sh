#!/usr/bin/env bash
# What bf16-mixed buys a training step on this CPU: the text ladder's step
# (t02-trainer in 32-true against t03-mixed in bf16-mixed: the MiniLM encoder,
# batch 12, the ladder's per-batch padding, both cores) and the vision
# ladder's (03-fabric against 04-bf16-mixed), on each LibTorch build given,
# in alternating rounds; the medians of the step-time medians and their ratio;
# and, where the build has accel_bench, the text step's matmuls: their share
# of the 32-true step, bf16's speedup on them alone, and the step speedup
# those two account for.
# What it checks: the text step at least 1.3x faster in bf16-mixed where the
# CPU has native bf16 (AMX or AVX512-BF16), on LibTorch 1.13 and on 2.11.
#
#   bash bench/bf16_step.sh     # BUILDS ("build build-cuda": those present), ROUNDS (3),
#                               # STEPS (60 timed), WARMUP (10 steps before them),
#                               # MODELS ("text vision"), OUT (runs/bf16-step/<time>)
# Where bf16 is emulated (AVX2 only: a text bf16 step takes seconds), fewer
# steps measure the same ratio: MODELS=text STEPS=4 WARMUP=2 ROUNDS=2.
#
# Not part of any test command: it measures, and says whether the step is 1.3x faster.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
die() { echo "bf16_step: error: $*" >&2; exit 1; }
say() { echo "bf16_step: $*" >&2; }
. bench/lib.sh
case "${1:-}" in -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  "") ;; *) die "no arguments (settings are environment variables; see --help)" ;; esac

ROUNDS=${ROUNDS:-3} STEPS=${STEPS:-60} WARMUP=${WARMUP:-10} MODELS=${MODELS:-text vision}
[[ $ROUNDS =~ ^[1-9][0-9]*$ && $STEPS =~ ^[1-9][0-9]*$ ]] || die "ROUNDS and STEPS must be whole numbers >= 1"
[[ $WARMUP =~ ^[1-9][0-9]*$ ]] || die "WARMUP must be a whole number >= 1 (the first step pays for the allocations)"
for m in $MODELS; do [[ $m = text || $m = vision ]] || die "MODELS: \"$m\" is neither text nor vision"; done
[ -n "${MODELS// /}" ] || die "MODELS: empty (text, vision or both)"
builds=()
for b in ${BUILDS:-build build-cuda}; do [ -x "$b/accel-bench" ] && builds+=("$b"); done
[ ${#builds[@]} -gt 0 ] || die "no accel-bench in ${BUILDS:-build build-cuda} (scripts/build.sh; scripts/test-cuda-leg.sh builds build-cuda)"
[ "$(bf16_hardware)" = native ] || say "warning: this CPU has neither AMX nor AVX512-BF16: bf16 is emulated (about 12x slower)"
out=${OUT:-runs/bf16-step/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
common=(--set train.warmup_steps=$WARMUP --set train.max_steps=$((STEPS + WARMUP)) --set train.val_every_steps=0
        --set train.limit_eval_batches=1 --set train.save_checkpoint=false --set runtime.threads=2 -q --force)
# model label, 32-true config, bf16-mixed config, extra settings
models=()
[[ " $MODELS " = *" text "* ]] && models+=("text configs/ladder/text-cpu/t02-trainer.json configs/ladder/text-cpu/t03-mixed.json")
[[ " $MODELS " = *" vision "* ]] && models+=("vision configs/ladder/cpu/03-fabric.json configs/ladder/cpu/04-bf16-mixed.json")
rows=() bounds=()
for b in "${builds[@]}"; do
  text_r=""
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
    fm=$(median "${f[@]}") hm=$(median "${h[@]}")
    rows+=("$(awk -v b="$b" -v lt="$lt" -v m="$label" -v f="$fm" -v h="$hm" \
      -v fr="${f[*]}" -v hr="${h[*]}" 'BEGIN {
        r = f / h
        printf "| %s | %s (%s) | %.1f | %.1f | %.3fx | %s | %s / %s |", m, lt, b, f, h, r,
               (m == "text" ? (r >= 1.3 ? "yes" : "no") : "-"), fr, hr }')")
    [ "$label" = text ] && text_f=$fm && text_r=$(awk -v f="$fm" -v h="$hm" 'BEGIN { print f / h }')
  done
  # What the matmuls allow, as two ratios each measured in one run: the share
  # m of the 32-true text step its matmuls take (aten::mm, addmm and bmm self
  # time in a --profile of t02, 25 steps), and how much faster bf16 runs them
  # alone, autocast's casts included (k: accel_bench's BM_TextGemms, the step's
  # projections and attention matmuls, interleaved repetitions, on the kernels
  # the runs used). The matmuls alone account for a step speedup of
  # 1 / (1 - m (1 - 1/k)); the rest of the measured speedup (or shortfall) is
  # everything else in the step costing less (or more) in bf16-mixed.
  if [ -n "$text_r" ] && [ -x "$b/accel_bench" ]; then
    prof=$out/$(basename "$b")-text-fp32-profile
    "$b/accel-bench" run -c configs/ladder/text-cpu/t02-trainer.json --out "$prof" "${common[@]}" \
      --set train.warmup_steps=5 --set train.max_steps=25 --profile "$prof/profile" >"$prof.log" 2>&1 \
      || die "$b text fp32 --profile failed: $(tail -n 1 "$prof.log")"
    m=$(awk -F, '$1 == "aten::mm" || $1 == "aten::addmm" || $1 == "aten::bmm" { s += $5 } END { printf "%.3f", s }' \
      "$prof/profile/ops.csv")
    j=$out/$(basename "$b")-text-gemms.json
    core=$(openblas_coretype_of "$b/accel-bench")
    env OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}" ${core:+OPENBLAS_CORETYPE=$core} ACCEL_BENCH_THREADS=2 \
      "$b/accel_bench" --benchmark_filter=BM_TextGemms --benchmark_repetitions="$ROUNDS" \
      --benchmark_enable_random_interleaving=true --benchmark_out="$j" --benchmark_out_format=json \
      >"$j.log" 2>&1 || die "$b/accel_bench --benchmark_filter=BM_TextGemms failed: $(tail -n 1 "$j.log")"
    # Per variant: the median of the repetitions, then their least and most.
    g=$(json "$j" '" ".join("%.1f %.1f %.1f" % (__import__("statistics").median(t), min(t), max(t)) for t in
        ([x["real_time"] for x in d["benchmarks"] if x.get("run_type") == "iteration"
          and x["run_name"].startswith("BM_TextGemms/minilm_" + k + "/")] for k in ("fp32", "bf16", "bf16_casts")))')
    read -r g32 g32lo g32hi g16 g16lo g16hi g16c g16clo g16chi <<<"$g"
    bounds+=("$(awk -v lt="$lt" -v b="$b" -v m="$m" -v f="$text_f" -v r="$text_r" \
      -v g32="$g32" -v g32lo="$g32lo" -v g32hi="$g32hi" -v g16="$g16" -v g16lo="$g16lo" -v g16hi="$g16hi" \
      -v g16c="$g16c" -v g16clo="$g16clo" -v g16chi="$g16chi" 'BEGIN {
      k = g32 / g16c
      printf "| %s (%s) | %.0f%% | %.0f%% | %.1f (%.1f-%.1f) | %.1f (%.1f-%.1f) | %.1f (%.1f-%.1f) | %.2fx | %.2fx | %.3fx |",
             lt, b, 100 * m, 100 * g32 / f, g32, g32lo, g32hi, g16, g16lo, g16hi, g16c, g16clo, g16chi, k,
             1 / (1 - m * (1 - 1 / k)), r }')")
    say "$b (LibTorch $lt) text: matmuls $m of the 32-true step; alone 32-true $g32 ms, bf16 $g16 ms, with autocast's casts $g16c ms"
  elif [ -n "$text_r" ]; then
    say "no $b/accel_bench (cmake --build $b --target accel_bench): the matmul account is left out for $b"
  fi
done
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -n 1)
{
  echo "CPU: $cpu, $(nproc) cores, bf16 $(bf16_hardware); $ROUNDS alternating round(s) of $WARMUP warm-up + $STEPS timed steps, 2 threads; $(date -u +%FT%TZ)${OPENBLAS_CORETYPE:+; OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE from the environment: 32-true runs on those kernels}"
  echo
  echo "| model | LibTorch (build) | 32-true step ms | bf16-mixed step ms | bf16 speedup | text >= 1.3x | rounds 32-true / bf16 |"
  echo "|---|---|---:|---:|---:|---|---|"
  printf '%s\n' "${rows[@]}"
  if [ ${#bounds[@]} -gt 0 ]; then
    echo
    echo "What the matmuls account for in the text step: their share m of a profiled 32-true step (aten::mm, addmm, bmm self time; the profiler's cost falls mostly on small ops, so m reads low), beside it their time alone over the unprofiled 32-true step's median (another minute); their times alone (accel_bench BM_TextGemms: the step's projections and attention matmuls, medians of $ROUNDS interleaved repetitions with the least and most, ms); bf16's speedup on them with autocast's casts (k); and the step speedup they account for, 1 / (1 - m (1 - 1/k)), the rest of the step costing alike in both precisions"
    echo
    echo "| LibTorch (build) | matmuls' share m (profile) | alone / step | alone 32-true | bf16 | bf16 + casts | k | step speedup from the matmuls | step speedup measured |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    printf '%s\n' "${bounds[@]}"
  fi
} | tee "$out/table.md"
say "runs and table.md in $out/"
