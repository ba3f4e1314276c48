#!/usr/bin/env bash
# accel-bench against its peer, PyTorch with Lightning Fabric, on the same model,
# batch and precision, measured back to back in one run.
#
# For each precision and batch: `accel-bench run` of configs/gpu-check/00-32-true.json
# (vit_b_16 from random init, synthetic data resized to 224, Adam 5e-5, the
# Fabric-style loop) cut to WARMUP + STEPS steps, then bench/fabric_peer.py
# (torchvision's vit_b_16 through lightning.fabric.Fabric, synthetic tensors)
# with the same steps; ROUNDS rounds alternate the two and the
# medians are reported. Neither side waits for the device inside a step (the
# peer reads its loss only after the loop, accel-bench at log steps), and two
# throughputs are set side by side:
# - event img/s: batch / mean step time, each step timed by a CUDA event pair
#   on the stream (accel-bench's images_per_s; the peer's likewise). On
#   accel-bench's side the events leave out the wait for the loader's next
#   batch, so this one can favour accel-bench.
# - wall img/s: images of the timed steps / the host's wall seconds over them,
#   loader waits and host overhead included (accel-bench's wall_images_per_s;
#   the peer's loop from before its first timed step to a final synchronize).
#   accel-bench's loader resizes 28 px images on the CPU and copies them to
#   the GPU (in its prefetch threads); the peer copies a pinned host batch each
#   step (--inputs host) or, with --inputs device, keeps its inputs on the
#   device, which favours the peer.
# Like for like: both sides step the fused Adam (the peer's
# torch.optim.Adam(fused=True), accel-bench's ATen fused kernel on a GPU), and
# both copy each step's batch from pinned host memory without waiting
# (--inputs host; --inputs device gives the peer inputs made once on the
# device, as before). --compile "default reduce-overhead" adds, per mode,
# accel-bench's CUDA Graphs rung (runtime.cuda_graphs) against the peer under
# torch.compile(mode=...), the article's rung 02, with the peer's compile time
# reported apart (its first warm-up step), never inside the timed steps.
# The target (TARGET_RATIO, 1.10) is judged on the wall ratio: accel / Fabric,
# above 1 means accel-bench is faster. ROUNDS rounds alternate the two sides,
# and each cell is their median with every round's value beside it.
#
#   bash bench/fabric_peer.sh                                   # batch 16 and 128, 32-true and bf16-mixed
#   bash bench/fabric_peer.sh --large-batch 256 --precisions bf16-mixed --rounds 3
#   bash bench/fabric_peer.sh --tiny --device cpu --steps 5 --warmup 2 --large-batch 32   # CPU test
#
# Options: --batch N (16), --large-batch N (128; 0 = only --batch), --precisions
# "LIST" ("32-true bf16-mixed"), --steps N (50), --warmup N (10), --rounds N (1),
# --optimizer fused|foreach (the peer's Adam; fused), --inputs host|device (host),
# --compile "LIST" (torch.compile modes: default, reduce-overhead; none by default),
# --compiled-only (with --compile: leave out the eager pairs),
# --matmul-precision highest|high|medium (highest), --device cuda|cpu (cuda),
# --tiny (a 2-block ViT at 32 px, for testing on a CPU), --out DIR (default
# runs/fabric-peer/<UTC time>: each run's result.json, fabric.jsonl, table.md).
# Environment: BUILD_DIR (build-gpu where it has accel-bench, else build),
# PYTHON (python3; needs torch, torchvision and lightning, best the torch whose
# LibTorch accel-bench was built against), TARGET_RATIO (1.10).
# Not part of any test command: it measures, and only says whether the target is met.
set -euo pipefail
caller_pwd=$PWD
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

die() { echo "fabric_peer: error: $*" >&2; exit 1; }
say() { echo "fabric_peer: $*" >&2; }

batch=16 large=128 precisions="32-true bf16-mixed" steps=50 warmup=10 rounds=1
matmul=highest device=cuda model=vit_b_16 out="" optimizer=fused inputs=host compiles="" compiled_only=0
while [ $# -gt 0 ]; do
  case "$1" in --tiny|--compiled-only|-h|--help) ;; *) [ $# -ge 2 ] || die "$1 needs a value (see --help)" ;; esac
  case "$1" in
    --batch) batch=$2; shift 2 ;;
    --large-batch) large=$2; shift 2 ;;
    --precisions) precisions=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --matmul-precision) matmul=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --optimizer) optimizer=$2; shift 2 ;;
    --inputs) inputs=$2; shift 2 ;;
    --compile) compiles=$2; shift 2 ;;
    --compiled-only) compiled_only=1; shift ;;
    --tiny) model=tiny; shift ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
for v in batch large steps warmup rounds; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "--${v/large/large-batch} must be a whole number: ${!v}"
done
[ "$batch" -ge 1 ] && [ "$steps" -ge 1 ] && [ "$rounds" -ge 1 ] || die "--batch, --steps and --rounds must be at least 1"
case "$device" in cuda|cpu) ;; *) die "--device must be cuda or cpu: $device" ;; esac
case "$matmul" in highest|high|medium) ;; *) die "--matmul-precision must be highest, high or medium: $matmul" ;; esac
case "$optimizer" in fused|foreach) ;; *) die "--optimizer must be fused or foreach: $optimizer" ;; esac
case "$inputs" in host|device) ;; *) die "--inputs must be host or device: $inputs" ;; esac
for c in $compiles; do
  case "$c" in default|reduce-overhead) ;; *) die "--compile: $c: expected default or reduce-overhead" ;; esac
done
[ -z "${compiles// /}" ] || [ "$device" = cuda ] || die "--compile pairs the peer with accel-bench's CUDA Graphs rung: --device cuda only"
[ "$compiled_only" = 0 ] || [ -n "${compiles// /}" ] || die "--compiled-only needs --compile"
[ -n "${precisions// /}" ] || die "--precisions is empty"
case "$out" in ""|/*) ;; *) out=$caller_pwd/$out ;; esac
for p in $precisions; do
  case "$p" in 32-true|bf16-mixed|16-mixed|bf16-true) ;; *) die "precision $p: expected 32-true, bf16-mixed, 16-mixed or bf16-true" ;; esac
done
batches=("$batch")
[ "$large" -gt 0 ] && [ "$large" -ne "$batch" ] && batches+=("$large")
TARGET_RATIO=${TARGET_RATIO:-1.10}

# --- the two sides ----------------------------------------------------------------
if [ -n "${BUILD_DIR:-}" ]; then
  build=$BUILD_DIR
elif [ -x build-gpu/accel-bench ]; then
  build=build-gpu
else
  build=build
fi
BIN=$build/accel-bench
[ -x "$BIN" ] || die "$BIN not found; build it (scripts/gpu-check.sh builds build-gpu/) or set BUILD_DIR"
if [ "$device" = cuda ] && ! grep -qx ACCEL_WITH_CUDA=1 "$build/accel-features.txt" 2>/dev/null; then
  die "$build was built without CUDA (accel-features.txt); build against a CUDA LibTorch or pass --device cpu"
fi
PYTHON=${PYTHON:-python3}
command -v "$PYTHON" >/dev/null || die "$PYTHON not found; set PYTHON to a python with torch, torchvision and lightning"
# Lightning's fabric, or the standalone lightning-fabric package.
err=$("$PYTHON" -W ignore -c '
import torch, torchvision
try:
    import lightning.fabric
except ImportError:
    import lightning_fabric' 2>&1 >/dev/null) \
  || die "$PYTHON cannot import lightning.fabric (or lightning_fabric), torchvision or torch ($(tail -n 1 <<<"$err")); pip install lightning torchvision, or set PYTHON"
if [ "$device" = cuda ]; then
  "$PYTHON" -W ignore -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null \
    || die "torch in $PYTHON sees no GPU; --device cpu measures on the CPU"
fi
# Same LibTorch on both sides? A different one makes the ratio a version comparison.
. bench/lib.sh
warn_unless_same_libtorch "$BIN"

# accel-bench runs with passive OpenMP waits (it re-executes itself so); the
# peer gets the same, or on a CPU its threads spin against each other.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
out=${out:-runs/fabric-peer/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
: >"$out/fabric.jsonl"


peer=(bench/fabric_peer.py --model "$model" --warmup "$warmup" --steps "$steps"
      --accelerator "$device" --matmul-precision "$matmul" --optimizer "$optimizer" --inputs "$inputs")
# accel-bench: the same model (tiny: its dims as model.preset=custom), enough
# synthetic images for every step in one epoch, one evaluation batch, no checkpoint.
sets=(--set runtime.accelerator="$device" --set runtime.matmul_precision="$matmul"
      --set train.warmup_steps="$warmup" --set train.max_steps=$((warmup + steps))
      --set train.limit_eval_batches=1 --set train.save_checkpoint=false --set train.log_every=1000)
if [ "$model" = tiny ]; then
  spec=$("$PYTHON" bench/fabric_peer.py --model tiny --print-spec)
  sets+=(--set model.preset=custom)
  for k in image_size patch_size dim depth heads mlp_dim; do
    sets+=(--set "model.$k=$("$PYTHON" -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$spec" "$k")")
  done
fi

# table.md of the rows so far: rewritten after each, so a run cut short keeps them.
write_table() {
  local ff fa dev_name versions lt
  ff=$(ls "$out"/fabric-*-r1.json 2>/dev/null | head -n 1) || true
  fa=$(ls -d "$out"/accel-*-r1 2>/dev/null | head -n 1) || true
  [ -n "$ff" ] && [ -n "$fa" ] && [ "${#rows[@]}" -gt 0 ] || return 0
  dev_name=$(json "$ff" 'd["device_name"]')
  versions=$(json "$ff" '"torch %s, lightning %s" % (d["torch"], d["lightning"])')
  lt=$(json "$fa/result.json" 'd["env"]["libtorch_version"]')
  {
    echo "Device: $dev_name ($device); $("$BIN" --version 2>/dev/null | head -n 1) from $build (LibTorch $lt); peer: $versions"
    echo "$warmup warm-up + $steps timed steps, $rounds round(s) (medians), matmul precision $matmul, the peer's Adam $optimizer, its inputs from $inputs memory, $(date -u +%FT%TZ)"
    echo
    echo "Neither side syncs the host inside a step. wall: images over the timed steps' wall seconds (loader waits included);"
    echo "event: batch / mean CUDA-event-timed step (accel-bench's events leave out loader waits). The target is judged on the wall ratio."
    echo
    echo "| model | accel / Fabric | precision | batch | accel wall img/s | Fabric wall img/s | wall ratio | accel event img/s | Fabric event img/s | event ratio | wall >= ${TARGET_RATIO}x | accel step ms (median) | Fabric step ms (median) | Fabric compile (apart) | rounds wall img/s accel / Fabric |"
    echo "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---|"
    printf '%s\n' "${rows[@]}"
  } >"$out/table.md.new" && mv -f "$out/table.md.new" "$out/table.md"
}

rows=()
# Variants: eager against eager, then per --compile mode accel-bench's CUDA
# Graphs rung against the compiled peer (bf16-mixed and 32-true only: a
# captured step cannot hold 16-mixed's GradScaler).
variants=()
[ "$compiled_only" = 1 ] || variants=(eager)
for c in $compiles; do variants+=("$c"); done
for prec in $precisions; do
  for b in "${batches[@]}"; do
   for v in "${variants[@]}"; do
    if [ "$v" != eager ] && [ "$prec" = 16-mixed ]; then continue; fi
    a_ips=() f_ips=() a_ms=() f_ms=() a_wall=() f_wall=() f_compile=()
    tag=$prec-b$b$([ "$v" = eager ] || echo "-$v")
    a_sets=()
    [ "$v" = eager ] || a_sets=(--set runtime.cuda_graphs=true)
    p_args=()
    [ "$v" = eager ] || p_args=(--compile "$v")
    # val_fraction 0.05 of the config: n / 0.95 images leave n for training.
    n_train=$(( (b * (warmup + steps + 1) * 100 + 94) / 95 ))
    for ((r = 1; r <= rounds; r++)); do
      dir=$out/accel-$tag-r$r
      say "$prec, batch $b, $v, round $r: accel-bench"
      "$BIN" run -c configs/gpu-check/00-32-true.json --out "$dir" --force -q "${sets[@]}" "${a_sets[@]}" \
        --set runtime.precision="$prec" --set train.batch_size="$b" \
        --set data.synthetic_train="$n_train" --set data.synthetic_test="$b" \
        --set train.eval_batch_size="$b" >"$dir.log" 2>&1 \
        || die "accel-bench failed ($prec, batch $b, $v): $(tail -n 1 "$dir.log") [log: $dir.log]"
      a_ips+=("$(json "$dir/result.json" 'd["images_per_s"]')")
      a_ms+=("$(json "$dir/result.json" 'd["step_time_ms"]["median"]')")
      a_wall+=("$(json "$dir/result.json" 'd.get("wall_images_per_s") or float("nan")')")
      # The peer takes accel-bench's input channels (its synthetic images have one).
      ch=$(json "$dir/result.json" 'd["model"]["in_channels"]')
      say "$prec, batch $b, $v, round $r: Fabric"
      line=$("$PYTHON" -W ignore "${peer[@]}" "${p_args[@]}" --precision "$prec" --batch "$b" --in-channels "$ch" 2>"$out/fabric-$tag-r$r.log" | tail -n 1) \
        || die "fabric_peer.py failed ($prec, batch $b, $v): $(tail -n 1 "$out/fabric-$tag-r$r.log")"
      echo "$line" >>"$out/fabric.jsonl"
      printf '%s' "$line" >"$out/fabric-$tag-r$r.json"
      f_ips+=("$(json "$out/fabric-$tag-r$r.json" 'd["images_per_s"]')")
      f_ms+=("$(json "$out/fabric-$tag-r$r.json" 'd["step_ms_median"]')")
      f_wall+=("$(json "$out/fabric-$tag-r$r.json" 'd["wall_images_per_s"]')")
      f_compile+=("$(json "$out/fabric-$tag-r$r.json" 'd.get("compile_s") or float("nan")')")
      pa=$(json "$dir/result.json" 'd["params"]')
      pf=$(json "$out/fabric-$tag-r$r.json" 'd["params"]')
      [ "$pa" = "$pf" ] || say "warning: accel-bench's model has $pa parameters, the peer's $pf: not the same model"
    done
    a_med=$(median "${a_ips[@]}") f_med=$(median "${f_ips[@]}")
    what="eager / eager"
    [ "$v" = eager ] || what="CUDA Graphs / torch.compile($v)"
    rows+=("$(awk -v m="$model" -v p="$prec" -v b="$b" -v ai="$a_med" -v fi="$f_med" -v am="$(median "${a_ms[@]}")" \
      -v fm="$(median "${f_ms[@]}")" -v t="$TARGET_RATIO" -v ar="${a_wall[*]}" -v fr="${f_wall[*]}" \
      -v aw="$(median "${a_wall[@]}")" -v fw="$(median "${f_wall[@]}")" -v what="$what" \
      -v fc="$([ "$v" = eager ] && echo - || median "${f_compile[@]}")" 'BEGIN {
        r = ai / fi; rw = (aw == aw && fw > 0) ? aw / fw : -1
        n = split(ar, xs, " "); ar = ""; for (i = 1; i <= n; i++) ar = ar (i > 1 ? " " : "") sprintf("%.0f", xs[i])
        n = split(fr, xs, " "); fr = ""; for (i = 1; i <= n; i++) fr = fr (i > 1 ? " " : "") sprintf("%.0f", xs[i])
        printf "| %s | %s | %s | %d | %.1f | %.1f | %.2fx | %.1f | %.1f | %s | %s | %.1f | %.1f | %s | %s / %s |", m, what, p, b,
               aw, fw, rw, ai, fi, sprintf("%.2fx", r), (rw < 0 ? "n/a" : (rw >= t ? "yes" : "no")), am, fm,
               (fc == "-" ? "-" : sprintf("%.1f s", fc)), ar, fr }')")
    write_table
   done
  done
done

write_table
cat "$out/table.md"
say "runs, peer JSON lines and table.md in $out/"
