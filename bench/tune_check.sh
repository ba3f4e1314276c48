#!/usr/bin/env bash
# What `accel-bench tune` finds on this machine, and whether it holds up:
# tune on the text ladder's t01 (target 0.78 validation accuracy) and on the
# vision ladder's 01 (target 0.90), each within a budget, then a fresh score
# of the winner beside the base config: RUNS runs each (seeds shared) trained
# to the target and MLPerf-scored by `sweep --runs RUNS --to-target` and
# `report` (a suite of two rungs made here, the base the convergence
# reference). The ladder's best rung comes from this machine's committed
# ladder set (its one run's epoch-granular time to the target).
#
#   bash bench/tune_check.sh   # TEXT_BUDGET (14m), VISION_BUDGET (8m), RUNS (5),
#                              # TUNE_RUNS (4: runs a confirmed setting gets in tune),
#                              # OUT (runs/tune-check/<time>; rerun with the same OUT
#                              # to continue), TABLE (results/bench/tune-check/<machine-id>.md)
#
# First calibrates this machine (matmul peaks, and the Gloo collectives for
# predict) into OUT/peaks.json. About 45 minutes on a 2-core machine; keep it
# otherwise idle. Not part of any test command: it measures.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
die() { echo "tune_check: error: $*" >&2; exit 1; }
say() { echo "tune_check: $*" >&2; }
. bench/lib.sh
case "${1:-}" in -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  "") ;; *) die "no arguments (settings are environment variables; see --help)" ;; esac

TEXT_BUDGET=${TEXT_BUDGET:-14m} VISION_BUDGET=${VISION_BUDGET:-8m} RUNS=${RUNS:-5} TUNE_RUNS=${TUNE_RUNS:-4}
[[ $RUNS =~ ^[0-9]+$ ]] && [ "$RUNS" -ge 4 ] || die "RUNS must be a whole number >= 4"
[[ $TUNE_RUNS =~ ^[0-9]+$ ]] && [ "$TUNE_RUNS" -ge 4 ] || die "TUNE_RUNS must be a whole number >= 4"
src=${BIN:-build/accel-bench}
[ -x "$src" ] || die "no $src (scripts/build.sh builds it)"
out=${OUT:-runs/tune-check/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out/bin"
# A copy: a rebuild while this runs must not change the binary mid-way.
[ -x "$out/bin/accel-bench" ] || cp "$src" "$out/bin/accel-bench"
bin=$out/bin/accel-bench
machine=$("$bin" sweep --machine-id)
table=${TABLE:-results/bench/tune-check/$machine.md}
mkdir -p "$(dirname "$table")"
lt=$("$bin" --version | sed -n 's/.*LibTorch \([^)]*\)).*/\1/p')
commit=$(git rev-parse --short HEAD 2>/dev/null || echo "?")
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
say "machine $machine, LibTorch $lt, commit $commit -> $out"

if [ ! -f "$out/peaks.json" ] || ! grep -q '"comm"' "$out/peaks.json"; then
  say "calibrating matmul peaks and Gloo collectives"
  "$bin" calibrate --out "$out/peaks.json" >"$out/calibrate.log" 2>&1
  "$bin" calibrate --comm --max-bytes 16777216 --out "$out/peaks.json" >>"$out/calibrate.log" 2>&1
fi

# tune_one NAME CONFIG TARGET BUDGET
tune_one() {
  local name=$1 config=$2 target=$3 budget=$4 resume=()
  [ -f "$out/$name/tune.json" ] && resume=(--resume)
  say "tune $name: $config to $target within $budget"
  "$bin" tune -c "$config" --target "$target" --budget "$budget" --runs "$TUNE_RUNS" \
    --calibration "$out/peaks.json" -o "$out/$name" "${resume[@]}" >"$out/$name.log" 2>&1 ||
    die "tune $name failed: see $out/$name.log"
}

# score NAME CONFIG TARGET: a suite of the base and the winner, RUNS runs each to the target.
score() {
  local name=$1 config=$2 target=$3
  local dir=$out/score-$name
  [ -f "$out/$name/winner.json" ] || { say "$name: no winner to score"; return 0; }
  mkdir -p "$dir"
  "${PYTHON:-python3}" - "$dir/suite.json" "$(realpath "$config")" "$(realpath "$out/$name/winner.json")" "$target" <<'EOF'
import json, sys
path, base, winner, target = sys.argv[1:5]
import os
tune = json.load(open(os.path.join(os.path.dirname(winner), "tune.json")))
# The base validated as tune validated it (the winner's config carries its own cadence).
every = max(1, tune["eval_every_samples"] // tune["base_global_batch"])
json.dump({"suite": "tune-score", "target_accuracy": float(target), "convergence_reference": "base",
           "description": "the base config and tune's winner, trained to the target and MLPerf-scored",
           "rungs": [{"id": "base", "config": base, "changes": "the base config",
                      "set": [f"train.val_every_steps={every}"]},
                     {"id": "winner", "config": winner, "changes": "tune's winner"}]},
          open(path, "w"), indent=2)
EOF
  local resume=()
  [ -d "$dir/sets" ] && resume=(--resume)
  say "scoring $name: base and winner, $RUNS runs each to $target"
  "$bin" sweep --suite "$dir/suite.json" --runs "$RUNS" --seeds 1,2,3,4,5,6,7,8,9,10 --to-target \
    --out "$dir/sets" "${resume[@]}" >"$dir/sweep.log" 2>&1 || die "scoring $name failed: see $dir/sweep.log"
  local set
  set=$(ls -d "$dir/sets/tune-score/"*/ | head -1)
  "$bin" report "$set" >"$dir/report.log" 2>&1 || die "report of $set failed"
  ln -sfn "$(realpath "$set")" "$dir/set"
}

tune_one text configs/ladder/text-cpu/t01-plain.json 0.78 "$TEXT_BUDGET"
score text configs/ladder/text-cpu/t01-plain.json 0.78
tune_one vision configs/ladder/cpu/01-finetune.json 0.90 "$VISION_BUDGET"
score vision configs/ladder/cpu/01-finetune.json 0.90
finished=$(date -u +%Y-%m-%dT%H:%M:%SZ)

# The table.
"${PYTHON:-python3}" - "$out" "$machine" "$lt" "$commit" "$started" "$finished" "$RUNS" "$TUNE_RUNS" \
  "$TEXT_BUDGET" "$VISION_BUDGET" >"$table" <<'EOF'
import json, os, re, sys
out, machine, lt, commit, started, finished, runs, tune_runs, tb, vb = sys.argv[1:11]
def load(p):
    try:
        return json.load(open(p))
    except (OSError, ValueError):
        return None
def fmt_s(v):
    return "n/a" if v is None else (f"{v / 60:.2f} min" if v >= 120 else f"{v:.1f} s")
def ladder_best(suite_dir, target):
    # This machine's committed ladder set: each rung's time to the target from its epochs.
    best = None
    d = os.path.join("results", suite_dir, machine)
    if not os.path.isdir(d):
        return None
    for rung in sorted(os.listdir(d)):
        r = load(os.path.join(d, rung, "result.json"))
        if not r or r.get("status") != "ok":
            continue
        t = 0
        for e in r.get("epochs", []):
            t += e.get("time_s", 0)
            if (e.get("val_acc") or 0) >= target:
                if best is None or t < best[1]:
                    best = (rung, t)
                break
    return best
print(f"# tune on {machine}\n")
print(f"`bash bench/tune_check.sh` ({started} - {finished}, commit {commit}, LibTorch {lt}); "
      f"every figure from this machine, shared and noisy: each throughput figure is one short run, "
      f"each time to target an MLPerf olympic mean of {tune_runs} runs (tune) or {runs} runs (the fresh score), "
      f"the fastest and the slowest dropped.\n")
print("| ladder | base config | target | budget | spent | settings: candidates / pruned / measured / confirmed "
      "| winner | winner vs base in tune | fresh score: base | fresh score: winner | winner vs base, fresh | "
      "winner's convergence, fresh | the ladder's best rung (committed, one run, epoch-granular) |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for name, config, target, budget, suite in (("text", "configs/ladder/text-cpu/t01-plain.json", 0.78, tb, "ladder-text-cpu"),
                                            ("vision", "configs/ladder/cpu/01-finetune.json", 0.90, vb, "ladder-cpu")):
    t = load(os.path.join(out, name, "tune.json"))
    if not t:
        print(f"| {name} | {config} | {target} | {budget} | not run | | | | | | | | |")
        continue
    rows = t.get("rows", [])
    pruned = len(t.get("pruned", []))
    measured = sum(1 for r in rows if r.get("samples_per_s") is not None)
    confirmed = sum(1 for r in rows if r.get("confirmed"))
    win = next((r for r in rows if r.get("rank") == 1), None)
    base = next((r for r in rows if r.get("is_base")), None)
    def ttt(r):
        return r["time_to_target"]["mean_s"] if r and r.get("confirmed") and r["time_to_target"]["valid"] else None
    in_tune = "n/a"
    if win and base and ttt(win) and ttt(base):
        in_tune = f"{ttt(base) / ttt(win):.2f}x ({fmt_s(ttt(win))} vs {fmt_s(ttt(base))})"
    fresh_base = fresh_win = fresh_ratio = conv = "n/a"
    rep = os.path.join(out, f"score-{name}", "set", "report.md")
    if os.path.exists(rep):
        md = open(rep).read()
        cells = {}
        for line in md.splitlines():
            m = re.match(r"\| (base|winner) \| (\d+) \| (\d+) \| ([^|]+) \| ([^|]+) \| ([^|]+) \| ([^|]+) \|", line)
            if m and "MLPerf" in md[:md.find(line)]:
                cells[m.group(1)] = m.groups()
        if "base" in cells:
            fresh_base = f"{cells['base'][3].strip()} ({cells['base'][4].strip()}; reached {cells['base'][2]}/{cells['base'][1]})"
        if "winner" in cells:
            fresh_win = f"{cells['winner'][3].strip()} ({cells['winner'][4].strip()}; reached {cells['winner'][2]}/{cells['winner'][1]})"
            conv = cells["winner"][6].strip()
        def secs(text):
            m = re.match(r"([\d.]+) (s|min)", text.strip())
            return None if not m else float(m.group(1)) * (60 if m.group(2) == "min" else 1)
        if "base" in cells and "winner" in cells and secs(cells["base"][3]) and secs(cells["winner"][3]):
            fresh_ratio = f"{secs(cells['base'][3]) / secs(cells['winner'][3]):.2f}x"
    best = ladder_best(suite, target)
    best_text = f"{best[0]}: {fmt_s(best[1])}" if best else "n/a (no committed set of this machine reaches it)"
    print(f"| {name} | {config} | {target} | {budget} | {fmt_s(t.get('elapsed_s'))} | "
          f"{len(rows) + pruned - 1} / {pruned} / {measured} / {confirmed} | {win['label'] if win else 'none'} | "
          f"{in_tune} | {fresh_base} | {fresh_win} | {fresh_ratio} | {conv} | {best_text} |")
print("\nEach tune's own table (ranked settings, what was pruned and why, what the budget left out) is its "
      "tune.md; the fresh scores are the report.md of each score set (section \"Time to target, MLPerf-scored\").")
EOF
cat "$table"
mkdir -p "$(dirname "$table")/$machine"
for name in text vision; do
  [ -f "$out/$name/tune.md" ] && cp "$out/$name/tune.md" "$(dirname "$table")/$machine/tune-$name.md"
  [ -f "$out/score-$name/set/report.md" ] && cp "$out/score-$name/set/report.md" "$(dirname "$table")/$machine/score-$name.md"
done
say "wrote $table"
