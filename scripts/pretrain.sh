#!/usr/bin/env bash
# Remakes the CPU ladder's committed upstream run, the stand-in for ImageNet
# weights: trains configs/ladder/cpu/pretrain.json (Fashion-MNIST classes 0-4,
# disjoint from the ladder's target classes 5-9) and exports its weights with
# `accel-bench export`. The result goes to results/upstream/ladder-cpu-pretrain/
# (config.json, result.json, metrics.csv, run.log, model.safetensors), which
# 01-finetune and the rungs after it start from; the sweep reuses that folder
# while its config.json equals the resolved pretrain config, and runs the
# pretrain itself otherwise (or with `sweep --rerun-upstream`).
# Extra arguments go to `accel-bench run` (e.g. --set runtime.threads=2).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
dest=results/upstream/ladder-cpu-pretrain
work=$(mktemp -d runs/pretrain.XXXXXX 2>/dev/null || { mkdir -p runs && mktemp -d runs/pretrain.XXXXXX; })
trap 'rm -rf "$work"' EXIT
./build/accel-bench run -c configs/ladder/cpu/pretrain.json --out "$work/run" --force "$@" \
  2>&1 | tee "$work/run.log"
./build/accel-bench export "$work/run/checkpoint.ckpt" -o "$work/run/model.safetensors"
mkdir -p "$dest"
for f in config.json result.json metrics.csv model.safetensors; do
  cp "$work/run/$f" "$dest/$f.new" && mv "$dest/$f.new" "$dest/$f"
done
cp "$work/run.log" "$dest/run.log"
echo "pretrain: committed run remade in $dest/"
