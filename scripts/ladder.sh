#!/usr/bin/env bash
# The main job: set up, build, run the CPU ladder through the sweep and report it.
# `accel-bench sweep` runs the suite's upstream run (pretrain: its checkpoint
# stands in for ImageNet weights, its time is reported apart), then the rungs
# in order, each as a child `accel-bench run`; a failing rung is recorded and
# the sweep goes on. Results: runs/sweep/ladder-cpu/<machine-id>/<rung>/.
# Then `accel-bench calibrate` measures this CPU's matmul peak for MFU (once
# per result set) and `accel-bench report` writes report.md, report.csv and
# charts/ (CSV, SVG, PNG) beside the results and prints the table.
# Extra arguments go to the sweep (e.g. --resume, --repeats 3, --set train.epochs=1).
# LADDER_OUT overrides the output root; LADDER_SUITE the suite file.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
out=${LADDER_OUT:-runs/sweep}
suite=${LADDER_SUITE:-configs/ladder/cpu/suite.json}
start=$(date +%s)
rc=0
./build/accel-bench sweep --suite "$suite" --out "$out" "$@" || rc=$?
[ "$rc" -eq 2 ] && exit 2  # bad suite or arguments: nothing ran
echo "ladder: sweep finished in $(( $(date +%s) - start )) s (exit $rc)"
name=$(sed -n 's/^ *"suite": *"\([^"]*\)".*/\1/p' "$suite" | head -1)
set_dir="$out/$name/$(./build/accel-bench sweep --machine-id)"
if [ ! -f "$set_dir/peaks.json" ]; then
  ./build/accel-bench calibrate --out "$set_dir/peaks.json" >/dev/null
fi
./build/accel-bench report "$set_dir"
echo "ladder: done in $(( $(date +%s) - start )) s; results, report and charts in $set_dir/"
exit $rc
