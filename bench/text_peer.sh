#!/usr/bin/env bash
# accel-bench's text training step against its peer, Hugging Face transformers'
# BertForSequenceClassification driven by Lightning Fabric, on the CPU, on the
# same LibTorch, measured back to back in one run.
#
# Both sides: the all-MiniLM-L6-v2 encoder's weights (BERT 6 x 384, a new 2-class
# head), batch 12, Adam 5e-5, dropout on, real Rotten Tomatoes critic snippets
# padded to MAX_LENGTH (fixed padding, so every step has the same shape on both
# sides). accel-bench: `accel-bench run` of configs/ladder/text-cpu/t01-plain.json
# with the Fabric-style loop, cut to WARMUP + STEPS steps; the peer:
# bench/text_peer.py on the pip torch whose LibTorch the CUDA leg builds on
# (build-cuda/ links it). For each precision (32-true, bf16-mixed) and thread count
# (1, 2), ROUNDS rounds alternate the two sides; the medians are reported.
# samples/s = batch / mean step time after the warm-up on both sides (accel-bench's
# result.json samples_per_s). ratio = accel / peer: above 1 means accel-bench is
# faster; it checks for 1.15 (TARGET_RATIO). accel-bench's step time includes its data
# loader (tokenized batches collated on the host); the peer's batches are tensors
# made before timing, so the comparison does not favour accel-bench.
#
#   bash bench/text_peer.sh                          # 3 rounds, 10 warm-up + 40 steps
#   ROUNDS=5 THREADS="2" PRECISIONS=bf16-mixed bash bench/text_peer.sh
#
# Needs build-cuda/accel-bench (bash scripts/test-cuda-leg.sh builds it, or
# BUILD_DIR=build-cuda bash scripts/build.sh with its CMAKE_PREFIX_PATH) and the
# peer (bash scripts/setup.sh --bench). Environment: BUILD_DIR (build-cuda),
# ROUNDS (3),
# PRECISIONS ("32-true bf16-mixed"), THREADS ("1 2"), WARMUP (10), STEPS (40),
# MAX_LENGTH (64), TARGET_RATIO (1.15), OUT (runs/text-peer/<UTC time>).
# bf16 timings mean something only where the CPU has AVX512-BF16 or AMX (lscpu).
# Not part of any test command: it measures, and only says whether the ratio reaches TARGET_RATIO.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
die() { echo "text_peer: error: $*" >&2; exit 1; }
say() { echo "text_peer: $*" >&2; }
case "${1:-}" in -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  "") ;; *) die "no arguments (settings are environment variables; see --help)" ;; esac

BUILD_DIR=${BUILD_DIR:-build-cuda}
ROUNDS=${ROUNDS:-3} WARMUP=${WARMUP:-10} STEPS=${STEPS:-40} MAX_LENGTH=${MAX_LENGTH:-64}
PRECISIONS=${PRECISIONS:-32-true bf16-mixed} THREADS=${THREADS:-1 2} TARGET_RATIO=${TARGET_RATIO:-1.15}
for v in ROUNDS WARMUP STEPS MAX_LENGTH; do [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a whole number: ${!v}"; done
[ "$ROUNDS" -ge 1 ] && [ "$STEPS" -ge 1 ] || die "ROUNDS and STEPS must be at least 1"
for t in $THREADS; do [[ $t =~ ^[1-9][0-9]*$ ]] || die "THREADS: $t is not a thread count"; done
for p in $PRECISIONS; do case "$p" in 32-true|bf16-mixed) ;; *) die "PRECISIONS: $p is not 32-true or bf16-mixed" ;; esac; done

BIN=$BUILD_DIR/accel-bench
[ -x "$BIN" ] || die "$BIN not found (bash scripts/test-cuda-leg.sh builds build-cuda/; or set BUILD_DIR)"
read -r PYTHON PEER_SITE < <(bash scripts/setup-peer.sh --where | tail -n 1) \
  || die "the peer is not installed (bash scripts/setup.sh --bench installs it)"
export PYTHONPATH=$PEER_SITE${PYTHONPATH:+:$PYTHONPATH}
err=$("$PYTHON" -W ignore -c 'import torch, transformers, tokenizers, lightning_fabric' 2>&1 >/dev/null) \
  || die "$PYTHON cannot import the peer ($(tail -n 1 <<<"$err")); bash scripts/setup.sh --bench installs it into $PEER_SITE"
# Same LibTorch on both sides? A different one makes the ratio a version comparison.
. bench/lib.sh
warn_unless_same_libtorch "$BIN"
bf16_hw=$(bf16_hardware)
case " $PRECISIONS " in *" bf16-mixed "*) [ "$bf16_hw" = native ] ||
  say "warning: this CPU has neither AMX nor AVX512-BF16: bf16 is emulated on both sides (about 12x slower)" ;; esac

# accel-bench runs with passive OpenMP waits (it re-executes itself so); the peer too.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
out=${OUT:-runs/text-peer/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
: >"$out/peer.jsonl"

# accel-bench: t01's model, data and optimizer; the Fabric-style loop; fixed padding;
# enough snippets for every step in one epoch; one evaluation batch; no checkpoint.
n_train=$(( 12 * (WARMUP + STEPS + 1) ))
sets=(--set train.loop=fabric --set data.padding=max_length --set data.max_length="$MAX_LENGTH"
      --set train.warmup_steps="$WARMUP" --set train.max_steps=$((WARMUP + STEPS))
      --set data.train_subset="$n_train" --set train.limit_eval_batches=1 --set train.save_checkpoint=false
      --set train.log_every=1000)

rows=()
for prec in $PRECISIONS; do
  for th in $THREADS; do
    a_sps=() p_sps=() a_ms=() p_ms=()
    for ((r = 1; r <= ROUNDS; r++)); do
      dir=$out/accel-$prec-t$th-r$r
      say "$prec, $th thread(s), round $r: accel-bench"
      "$BIN" run -c configs/ladder/text-cpu/t01-plain.json --out "$dir" --force -q "${sets[@]}" \
        --set runtime.precision="$prec" --set runtime.threads="$th" >"$dir.log" 2>&1 \
        || die "accel-bench failed ($prec, $th threads): $(tail -n 1 "$dir.log") [log: $dir.log]"
      a_sps+=("$(json "$dir/result.json" 'd["samples_per_s"]')")
      a_ms+=("$(json "$dir/result.json" 'd["step_time_ms"]["median"]')")
      say "$prec, $th thread(s), round $r: transformers + Fabric"
      line=$("$PYTHON" -W ignore bench/text_peer.py --precision "$prec" --threads "$th" --warmup "$WARMUP" \
               --steps "$STEPS" --max-length "$MAX_LENGTH" 2>"$out/peer-$prec-t$th-r$r.log" | tail -n 1) \
        || die "text_peer.py failed ($prec, $th threads): $(tail -n 1 "$out/peer-$prec-t$th-r$r.log")"
      echo "$line" >>"$out/peer.jsonl"
      printf '%s' "$line" >"$out/peer-$prec-t$th-r$r.json"
      p_sps+=("$(json "$out/peer-$prec-t$th-r$r.json" 'd["samples_per_s"]')")
      p_ms+=("$(json "$out/peer-$prec-t$th-r$r.json" 'd["step_ms_median"]')")
      pa=$(json "$dir/result.json" 'd["params"]')
      pp=$(json "$out/peer-$prec-t$th-r$r.json" 'd["params"]')
      [ "$pa" = "$pp" ] || say "warning: accel-bench's model has $pa parameters, the peer's $pp: not the same model"
    done
    rows+=("$(awk -v p="$prec" -v t="$th" -v ai="$(median "${a_sps[@]}")" -v pi="$(median "${p_sps[@]}")" \
      -v am="$(median "${a_ms[@]}")" -v pm="$(median "${p_ms[@]}")" -v g="$TARGET_RATIO" \
      -v ar="${a_sps[*]}" -v pr="${p_sps[*]}" 'BEGIN {
        r = ai / pi
        n = split(ar, xs, " "); ar = ""; for (i = 1; i <= n; i++) ar = ar (i > 1 ? " " : "") sprintf("%.1f", xs[i])
        n = split(pr, xs, " "); pr = ""; for (i = 1; i <= n; i++) pr = pr (i > 1 ? " " : "") sprintf("%.1f", xs[i])
        printf "| %s | %d | %.1f | %.1f | %.2fx | %s | %.0f | %.0f | %s / %s |", p, t, ai, pi, r,
               (r >= g ? "yes" : "no"), am, pm, ar, pr }')")
  done
done

first=$(ls "$out"/peer-*-r1.json | head -n 1)
versions=$(json "$first" '"torch %s, transformers %s, lightning_fabric %s, attention %s" % (d["torch"], d["transformers"], d["lightning_fabric"], d["attn_implementation"])')
lt=$(json "$(ls -d "$out"/accel-*-r1 | head -n 1)/result.json" 'd["env"]["libtorch_version"]')
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -n 1)
{
  echo "CPU: $cpu, $(nproc) cores, bf16 $bf16_hw; $("$BIN" --version 2>/dev/null | head -n 1) from $BUILD_DIR (LibTorch $lt); peer: $versions"
  echo "MiniLM-L6 (BERT 6 x 384), batch 12, length $MAX_LENGTH (fixed padding), $WARMUP warm-up + $STEPS timed steps, $ROUNDS round(s) alternating (medians), $(date -u +%FT%TZ)"
  echo
  echo "| precision | threads | accel-bench samples/s | peer samples/s | accel / peer | >= ${TARGET_RATIO}x | accel step ms (median) | peer step ms (median) | rounds samples/s accel / peer |"
  echo "|---|---:|---:|---:|---:|---|---:|---:|---|"
  printf '%s\n' "${rows[@]}"
} | tee "$out/table.md"
say "runs, peer JSON lines and table.md in $out/"
