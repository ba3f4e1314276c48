#!/usr/bin/env bash
# The main job: set up, build, and run the CPU ladder's rungs in order.
# Results land in runs/ladder/<rung>/ (result.json, config.json, metrics.csv).
# Extra arguments are passed to every `accel-bench run` (e.g. --set train.epochs=1).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
out=${ACCEL_LADDER_OUT:-runs/ladder}
mkdir -p "$out"
for cfg in configs/ladder/cpu/[0-9][0-9]-*.json; do
  rung=$(basename "$cfg" .json)
  echo "ladder: rung $rung ($cfg)"
  ./build/accel-bench run --config "$cfg" --out "$out/$rung" --force "$@"
done
echo "ladder: results in $out/"
