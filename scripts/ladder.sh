#!/usr/bin/env bash
# The main job: set up, build, and run the CPU ladder. First the upstream
# "pretrain" run (its checkpoint stands in for ImageNet weights; its time is
# reported apart), then the rungs 00, 01, 03, 04 in order.
# Results land in runs/ladder/<rung>/ (result.json, config.json, metrics.csv,
# checkpoint.ckpt); the finetune configs read runs/ladder/pretrain/checkpoint.ckpt.
# Extra arguments are passed to every `accel-bench run` (e.g. --set train.epochs=1).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
out=runs/ladder
mkdir -p "$out"
start=$(date +%s)
for cfg in configs/ladder/cpu/pretrain.json configs/ladder/cpu/[0-9][0-9]-*.json; do
  rung=$(basename "$cfg" .json)
  echo "ladder: $rung ($cfg)"
  ./build/accel-bench run --config "$cfg" --out "$out/$rung" --force "$@"
done
echo "ladder: done in $(( $(date +%s) - start )) s; results in $out/"
./build/accel-bench summary "$out"/pretrain/result.json "$out"/[0-9][0-9]-*/result.json
