#!/usr/bin/env bash
# The main job: set up, build, run both ladders through the sweep and report them:
# the vision ladder (cvpr2023: configs/ladder/cpu/suite.json), then the text
# ladder (the Lightning blog: configs/ladder/text-cpu/suite.json), into one
# result root. `accel-bench sweep` runs a suite's upstream runs (vision's
# pretrain: its checkpoint stands in for ImageNet weights, its time is
# reported apart), then the rungs in order, each as a child `accel-bench run`;
# a failing rung is recorded and the sweep goes on. Results:
# runs/sweep/<suite>/<machine-id>/<rung>/.
# First `accel-bench calibrate` measures this CPU's matmul peaks: `sweep
# --plan` prints what every rung will train and evaluate here and about how
# long it takes (each suite's committed runs scaled by the two machines'
# peaks). On a machine where that exceeds the budget (LADDER_BUDGET_MIN, 16
# minutes of runs, so that set-up, build and reports keep the whole job within
# 25 minutes on a 2-core machine), every rung trains the same share of its
# batches so that the runs fit (at least 30%; beyond that the plan cuts the
# emulated rungs' steps, then the timing runs, then the evaluations: docs/CLI.md),
# and says so; the sweep prints the time left
# as runs finish. The reports' MFU divide by the same peaks. `accel-bench
# calibrate --comm` fits the collectives once (the report's predicted
# scaling), and `accel-bench report --html` writes report.md, report.csv,
# report.html (one self-contained page) and charts/ (runtime, accuracy and
# speedup: CSV, SVG, PNG) beside each set and prints its table.
# After every rung's full run, LADDER_TIMING_RUNS (2) short timing runs of
# each rung's config (its warm-up and 12 steps, one evaluation batch), round-
# robin across the rungs, give every speedup between-run samples of both
# rungs' speed (`sweep --timing-runs`; within the budget); with --repeats or
# --seeds the repeats are those samples and no timing runs are made.
# Extra arguments go to the sweep (e.g. --resume, --repeats 3).
# LADDER_OUT overrides the output root; LADDER_SUITE runs one suite file
# alone; LADDER_BUDGET_MIN=0 runs the ladders as configured whatever they take.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The CLI alone (the test command builds the tests and benchmarks).
BUILD_TARGETS=accel-bench bash scripts/build.sh
out=${LADDER_OUT:-runs/sweep}
if [ -n "${LADDER_SUITE:-}" ]; then
  suites=("$LADDER_SUITE")
else
  suites=(configs/ladder/cpu/suite.json configs/ladder/text-cpu/suite.json)
fi
machine=$(./build/accel-bench sweep --machine-id)
mkdir -p "$out"
peaks="$out/peaks-$machine.json"
./build/accel-bench calibrate --out "$peaks" >/dev/null
budget=${LADDER_BUDGET_MIN:-16}
args=()
for suite in "${suites[@]}"; do args+=(--suite "$suite"); done
args+=(--out "$out" --peaks "$peaks")
[ "$budget" != 0 ] && args+=(--budget "$budget")
timing=${LADDER_TIMING_RUNS:-2}
for a in "$@"; do case "$a" in --repeats|--repeats=*|--runs|--runs=*|--seeds|--seeds=*) timing=0 ;; esac; done
[ "$timing" != 0 ] && args+=(--timing-runs "$timing")
# What runs here and about how long it takes. Where bf16 is emulated the
# suites' where_emulated settings cut the bf16 rungs short and run the rungs
# not about bf16 in 32-true; the plan marks them.
./build/accel-bench sweep --plan "${args[@]}" "$@" | sed 's/^/ladder: /'
start=$(date +%s)
rc=0
./build/accel-bench sweep "${args[@]}" "$@" || rc=$?
[ "$rc" -eq 2 ] && exit 2  # bad suite or arguments: nothing ran
[ "$rc" -eq 3 ] && exit 3  # interrupted: `--resume` continues
echo "ladder: sweeps finished in $(( $(date +%s) - start )) s (exit $rc)"
comm=""
for suite in "${suites[@]}"; do
  name=$(sed -n 's/^ *"suite": *"\([^"]*\)".*/\1/p' "$suite" | head -1)
  set_dir="$out/$name/$machine"
  [ -d "$set_dir" ] || continue
  if [ ! -f "$set_dir/peaks.json" ]; then
    if [ -n "$comm" ]; then  # this machine's, with the collectives fitted for the set before
      cp "$comm" "$set_dir/peaks.json"
    else
      cp "$peaks" "$set_dir/peaks.json"
      # The collectives' fit beside the matmul peaks: the report's predicted scaling.
      ./build/accel-bench calibrate --comm --out "$set_dir/peaks.json" >/dev/null
    fi
  fi
  comm="$set_dir/peaks.json"
  ./build/accel-bench report --html "$set_dir"
  echo "ladder: results, report (report.md, report.html) and charts in $set_dir/"
done
echo "ladder: done in $(( $(date +%s) - start )) s"
exit $rc
