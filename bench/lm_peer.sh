#!/usr/bin/env bash
# accel-bench's decoder training step against its peer, an eager nanoGPT-style
# GPT in plain PyTorch (bench/lm_peer.py), on the CPU, on the same LibTorch,
# measured back to back in one run.
#
# Both sides: gpt_tiny (4 x 128, 4 heads, MLP 512, tied embeddings, 4,732,928
# parameters), BERT's uncased WordPiece vocabulary, real Rotten Tomatoes snippets
# packed into windows of 64 tokens, batch 16, AdamW 1e-3 without weight decay,
# dropout 0. accel-bench: `accel-bench run` of each rung in RUNGS
# (configs/ladder/lm-cpu/, in the precision asked), cut to WARMUP + STEPS steps;
# l03-packing computes the whole logits and then the loss, as the peer does;
# l04-chunked-loss fuses them over chunks. The peer: bench/lm_peer.py on the pip
# torch whose LibTorch the CUDA leg builds on (build-cuda/ links it), with torch's
# fused CPU AdamW (ADAM; its fastest here). For each precision and thread count,
# ROUNDS rounds alternate the peer and each rung; the medians are reported.
# tokens/s = batch x 64 / mean step time after the warm-up on both sides
# (accel-bench's result.json samples_per_s x 64, the windows being full).
# ratio = accel / peer: above 1 means accel-bench is faster; it checks for 1.3
# (TARGET_RATIO). accel-bench's step time includes its data loader (windows
# collated on the host); the peer's windows are tensors made before timing, so
# the comparison does not favour accel-bench.
#
# The peer runs twice a round: as a PyTorch user runs it, and with the glibc
# malloc settings accel-bench sets itself (MALLOC_MMAP_THRESHOLD_ 256 MiB,
# MALLOC_TRIM_THRESHOLD_ 1 GiB: apps/accel-bench/main.cpp,
# keep_large_allocations), so the table tells what the allocator buys (the
# step's 125 MB logits and their gradient otherwise come as fresh pages, faulted
# in every step) from what the training core does.
#
#   bash bench/lm_peer.sh                       # 3 rounds, 10 warm-up + 40 steps
#   ROUNDS=5 THREADS="2" RUNGS=l03-packing bash bench/lm_peer.sh
#
# Needs build-cuda/accel-bench (bash scripts/test-cuda-leg.sh builds it, or
# BUILD_DIR=build-cuda bash scripts/build.sh with its CMAKE_PREFIX_PATH) and the
# peer (bash scripts/setup.sh --bench). Environment: BUILD_DIR (build-cuda),
# ROUNDS (3), RUNGS ("l03-packing l04-chunked-loss"), PRECISIONS (32-true),
# THREADS ("1 2"), WARMUP (10), STEPS (40), ADAM (fused; foreach, for-loop),
# TARGET_RATIO (1.3), OUT (runs/lm-peer/<UTC time>).
# bf16 timings mean something only where the CPU has AVX512-BF16 or AMX (lscpu).
# Not part of any test command: it measures, and only says whether the ratio reaches TARGET_RATIO.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
die() { echo "lm_peer: error: $*" >&2; exit 1; }
say() { echo "lm_peer: $*" >&2; }
case "${1:-}" in -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  "") ;; *) die "no arguments (settings are environment variables; see --help)" ;; esac

BUILD_DIR=${BUILD_DIR:-build-cuda}
ROUNDS=${ROUNDS:-3} WARMUP=${WARMUP:-10} STEPS=${STEPS:-40} ADAM=${ADAM:-fused}
RUNGS=${RUNGS:-l03-packing l04-chunked-loss}
PRECISIONS=${PRECISIONS:-32-true} THREADS=${THREADS:-1 2} TARGET_RATIO=${TARGET_RATIO:-1.3}
for v in ROUNDS WARMUP STEPS; do [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a whole number: ${!v}"; done
[ "$ROUNDS" -ge 1 ] && [ "$STEPS" -ge 1 ] || die "ROUNDS and STEPS must be at least 1"
for t in $THREADS; do [[ $t =~ ^[1-9][0-9]*$ ]] || die "THREADS: $t is not a thread count"; done
for p in $PRECISIONS; do case "$p" in 32-true|bf16-mixed) ;; *) die "PRECISIONS: $p is not 32-true or bf16-mixed" ;; esac; done
case "$ADAM" in fused|foreach|for-loop) ;; *) die "ADAM: $ADAM is not fused, foreach or for-loop" ;; esac
for r in $RUNGS; do
  [ -f "configs/ladder/lm-cpu/$r.json" ] || die "RUNGS: configs/ladder/lm-cpu/$r.json not found"
done

BIN=$BUILD_DIR/accel-bench
[ -x "$BIN" ] || die "$BIN not found (bash scripts/test-cuda-leg.sh builds build-cuda/; or set BUILD_DIR)"
read -r PYTHON PEER_SITE < <(bash scripts/setup-peer.sh --where | tail -n 1) \
  || die "the peer is not installed (bash scripts/setup.sh --bench installs it)"
export PYTHONPATH=$PEER_SITE${PYTHONPATH:+:$PYTHONPATH}
err=$("$PYTHON" -W ignore -c 'import torch, tokenizers' 2>&1 >/dev/null) \
  || die "$PYTHON cannot import the peer ($(tail -n 1 <<<"$err")); bash scripts/setup.sh --bench installs it into $PEER_SITE"
. bench/lib.sh
warn_unless_same_libtorch "$BIN"
bf16_hw=$(bf16_hardware)
case " $PRECISIONS " in *" bf16-mixed "*) [ "$bf16_hw" = native ] ||
  say "warning: this CPU has neither AMX nor AVX512-BF16: bf16 is emulated on both sides (10-40x slower)" ;; esac

# accel-bench runs with passive OpenMP waits (it re-executes itself so); the peer too.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
out=${OUT:-runs/lm-peer/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
: >"$out/peer.jsonl"

# Enough snippets for every step in one epoch (about 25 tokens a snippet: 4,000
# fill 1,500 windows, 90 batches); one evaluation batch; no checkpoint.
sets=(--set train.warmup_steps="$WARMUP" --set train.max_steps=$((WARMUP + STEPS))
      --set train.limit_eval_batches=1 --set train.save_checkpoint=false --set train.log_every=1000)
[ $((16 * (WARMUP + STEPS))) -le 1400 ] || sets+=(--set data.train_subset=$((16 * (WARMUP + STEPS) * 3)))

rows=()
for prec in $PRECISIONS; do
  for th in $THREADS; do
    declare -A a_tps=() a_ms=()
    p_tps=() p_ms=() k_tps=()
    for ((r = 1; r <= ROUNDS; r++)); do
      for malloc in default kept; do
        say "$prec, $th thread(s), round $r: the nanoGPT-style peer ($malloc malloc)"
        pj=$out/peer-$malloc-$prec-t$th-r$r.json
        envs=()
        [ "$malloc" = kept ] && envs=(MALLOC_MMAP_THRESHOLD_=268435456 MALLOC_TRIM_THRESHOLD_=1073741824)
        line=$(env ${envs[@]+"${envs[@]}"} "$PYTHON" -W ignore bench/lm_peer.py --precision "$prec" --threads "$th" \
                 --warmup "$WARMUP" --steps "$STEPS" --adam "$ADAM" 2>"${pj%.json}.log" | tail -n 1) \
          || die "lm_peer.py failed ($prec, $th threads, $malloc malloc): $(tail -n 1 "${pj%.json}.log")"
        echo "$line" >>"$out/peer.jsonl"
        printf '%s' "$line" >"$pj"
        if [ "$malloc" = default ]; then
          p_tps+=("$(json "$pj" 'd["tokens_per_s"]')")
          p_ms+=("$(json "$pj" 'd["step_ms_median"]')")
        else
          k_tps+=("$(json "$pj" 'd["tokens_per_s"]')")
        fi
      done
      for rung in $RUNGS; do
        dir=$out/$rung-$prec-t$th-r$r
        say "$prec, $th thread(s), round $r: accel-bench $rung"
        "$BIN" run -c "configs/ladder/lm-cpu/$rung.json" --out "$dir" --force -q "${sets[@]}" \
          --set runtime.precision="$prec" --set runtime.threads="$th" >"$dir.log" 2>&1 \
          || die "accel-bench failed ($rung, $prec, $th threads): $(tail -n 1 "$dir.log") [log: $dir.log]"
        a_tps[$rung]+="$(json "$dir/result.json" 'd["samples_per_s"] * 64') "
        a_ms[$rung]+="$(json "$dir/result.json" 'd["step_time_ms"]["median"]') "
        pa=$(json "$dir/result.json" 'd["params"]')
        pp=$(json "$pj" 'd["params"]')
        [ "$pa" = "$pp" ] || say "warning: accel-bench's model has $pa parameters, the peer's $pp: not the same model"
      done
    done
    for rung in $RUNGS; do
      # shellcheck disable=SC2086  # the per-round values, split on purpose
      # The ratio's spread: the rounds' own ratios (each round runs both sides back to back).
      rows+=("$(awk -v rung="$rung" -v p="$prec" -v t="$th" -v ai="$(median ${a_tps[$rung]})" \
        -v pi="$(median "${p_tps[@]}")" -v ki="$(median "${k_tps[@]}")" -v am="$(median ${a_ms[$rung]})" \
        -v pm="$(median "${p_ms[@]}")" -v g="$TARGET_RATIO" -v ar="${a_tps[$rung]}" -v pr="${p_tps[*]}" \
        -v kr="${k_tps[*]}" 'function spread(a, b,   n, m, xs, ys, i, lo, hi, x) {
            n = split(a, xs, " "); m = split(b, ys, " "); lo = 1e30; hi = 0
            for (i = 1; i <= n && i <= m; i++) { x = xs[i] / ys[i]; if (x < lo) lo = x; if (x > hi) hi = x }
            return sprintf("%.2f-%.2f", lo, hi) }
          function ints(a,   n, xs, i, o) {
            n = split(a, xs, " "); o = ""; for (i = 1; i <= n; i++) o = o (i > 1 ? " " : "") sprintf("%.0f", xs[i]); return o }
          BEGIN {
          r = ai / pi; k = ai / ki
          printf "| %s | %s | %d | %.0f | %.0f | %.2fx (%s) | %s | %.0f | %.2fx (%s) | %.0f | %.0f | %s / %s / %s |",
                 rung, p, t, ai, pi, r, spread(ar, pr), (r >= g ? "yes" : "no"), ki, k, spread(ar, kr), am, pm,
                 ints(ar), ints(pr), ints(kr) }')")
    done
    unset a_tps a_ms
  done
done

first=$(ls "$out"/peer-default-*-r1.json | head -n 1)
versions=$(json "$first" '"torch %s, AdamW %s" % (d["torch"], d["adam"])')
lt=$(json "$(ls -d "$out"/l0*-r1 | head -n 1)/result.json" 'd["env"]["libtorch_version"]')
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -n 1)
{
  echo "CPU: $cpu, $(nproc) cores, bf16 $bf16_hw; $("$BIN" --version 2>/dev/null | head -n 1) from $BUILD_DIR (LibTorch $lt); peer: eager nanoGPT-style GPT, $versions"
  echo "gpt_tiny (4 x 128), batch 16, packed windows of 64 tokens, $WARMUP warm-up + $STEPS timed steps, $ROUNDS round(s) alternating (medians), $(date -u +%FT%TZ)"
  echo
  echo "Ratios: the medians' (the rounds' lowest-highest). Peer, kept malloc: the peer with accel-bench's own glibc malloc settings (mmap threshold 256 MiB, trim threshold 1 GiB)."
  echo
  echo "| accel-bench rung | precision | threads | accel-bench tokens/s | peer tokens/s | accel / peer | >= ${TARGET_RATIO}x | peer, kept malloc, tokens/s | accel / peer, kept malloc | accel step ms (median) | peer step ms (median) | rounds tokens/s accel / peer / peer, kept malloc |"
  echo "|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---|"
  printf '%s\n' "${rows[@]}"
} | tee "$out/table.md"
say "runs, peer JSON lines and table.md in $out/"
