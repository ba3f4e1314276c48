#!/usr/bin/env bash
# The main job: set up, build, run both ladders through the sweep and report them:
# the vision ladder (cvpr2023: configs/ladder/cpu/suite.json), then the text
# ladder (the Lightning blog: configs/ladder/text-cpu/suite.json), into one
# result root. `accel-bench sweep` runs a suite's upstream runs (vision's
# pretrain: its checkpoint stands in for ImageNet weights, its time is
# reported apart), then the rungs in order, each as a child `accel-bench run`;
# a failing rung is recorded and the sweep goes on. Results:
# runs/sweep/<suite>/<machine-id>/<rung>/. Then `accel-bench calibrate`
# measures this CPU's matmul peaks for MFU and fits its collectives (calibrate
# --comm, for the report's predicted scaling) once per result set, and
# `accel-bench report` writes report.md, report.csv and charts/ (runtime,
# accuracy and speedup: CSV, SVG, PNG) beside each set and prints its table.
# Extra arguments go to every sweep (e.g. --resume, --repeats 3).
# LADDER_OUT overrides the output root; LADDER_SUITE runs one suite file alone.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
out=${LADDER_OUT:-runs/sweep}
if [ -n "${LADDER_SUITE:-}" ]; then
  suites=("$LADDER_SUITE")
else
  suites=(configs/ladder/cpu/suite.json configs/ladder/text-cpu/suite.json)
fi
# Where bf16 is emulated (AVX2 only), the bf16 rungs run cut short or in
# 32-true (each suite's where_emulated): say so before the hour-long surprise.
if ! grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo 2>/dev/null; then
  echo "ladder: this CPU has no native bf16 (AVX512-BF16 or AMX): bf16-mixed rungs run 20 steps" \
       "to measure their speed and the multi-rank rungs run in 32-true; expect about 25 minutes" \
       "on 2 cores instead of 20"
fi
start=$(date +%s)
rc=0
for suite in "${suites[@]}"; do
  t0=$(date +%s)
  src=0
  ./build/accel-bench sweep --suite "$suite" --out "$out" "$@" || src=$?
  [ "$src" -eq 2 ] && exit 2  # bad suite or arguments: nothing ran
  [ "$src" -eq 3 ] && exit 3  # interrupted: `--resume` continues
  [ "$src" -ne 0 ] && rc=$src
  echo "ladder: $suite: sweep finished in $(( $(date +%s) - t0 )) s (exit $src)"
  name=$(sed -n 's/^ *"suite": *"\([^"]*\)".*/\1/p' "$suite" | head -1)
  set_dir="$out/$name/$(./build/accel-bench sweep --machine-id)"
  if [ ! -f "$set_dir/peaks.json" ]; then
    if [ -n "${peaks:-}" ]; then  # the same machine's, measured for the set before
      cp "$peaks" "$set_dir/peaks.json"
    else
      ./build/accel-bench calibrate --out "$set_dir/peaks.json" >/dev/null
      # The collectives' fit beside the matmul peaks: the report's predicted scaling.
      ./build/accel-bench calibrate --comm --out "$set_dir/peaks.json" >/dev/null
    fi
  fi
  peaks="$set_dir/peaks.json"
  ./build/accel-bench report "$set_dir"
  echo "ladder: results, report and charts in $set_dir/"
done
echo "ladder: done in $(( $(date +%s) - start )) s"
exit $rc
