#!/usr/bin/env bash
# How far `accel-bench compare --fail-slower` can be trusted on this machine:
# false alarms on unchanged code and detection of known slowdowns, for the
# gate that judges one number against a bound (the median whole-run time,
# its point only) and for the interval gate (each change with its 95%
# interval; slower only when the whole interval lies beyond the bound).
#
# The rung: the vision ladder's 00-scratch cut to BATCHES training batches
# (default 24; the first 4 are warm-up), two evaluation batches, both cores.
# Each of PAIRS pairs (default 20) runs, in a seeded shuffled order:
#   - RUNS runs (default 8) of the base and RUNS more of the same config and
#     binary (A/A);
#   - RUNS runs each with train.inject_delay 0.03, 0.07 and 0.15: every step
#     delayed by 3%, 7% and 15% of its own time (fault injection, recorded in
#     result.json; compare names it).
# The first R runs of a side (R = 1, 3, 5 and RUNS) make a result set; each
# pair is compared at bounds of 5%, 7% and 10%. Adaptive repeats (`sweep
# --repeats auto --against BASE --max-repeats RUNS`) are judged on the same
# runs by the same rule: BASE is the pair's first 5 base runs; a side starts
# with 3 runs and takes its next run while its verdict against BASE is
# unresolved, to RUNS, every look at the sweep's level (95% split over the
# looks: `compare --confidence`); the table says the verdicts and the mean
# runs a side it took. Sides of one run use
# this machine's noise, measured first from NOISE_RUNS (default 8) separate
# runs (`accel-bench calibrate --noise`), as a user's gate would.
# What it must show: no false alarm in the A/A pairs at 7% with R = 3; at least 19 of 20
# 15% slowdowns caught at 7% with R = 3; a 3% slowdown never passed as "same"
# with no change seen: it is caught, unresolved, or "same" with the note that
# it is slower beyond doubt yet within the bound (3% is inside every bound
# here). The table counts every verdict.
#
#   bash bench/gate_check.sh   # PAIRS (20), BATCHES (24), NOISE_RUNS (8), RUNS (8),
#                              # OUT (runs/gate-check/<time>; rerun with the same OUT
#                              # to continue: finished runs are kept),
#                              # TABLE (results/bench/gate-check/<machine-id>.md)
#
# About 800 runs of 4-5 s: 60-70 minutes on a 2-core machine. Keep the machine
# otherwise idle: other load is noise the table then reports. Not part of any
# test command: it measures.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
die() { echo "gate_check: error: $*" >&2; exit 1; }
say() { echo "gate_check: $*" >&2; }
. bench/lib.sh
case "${1:-}" in -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  "") ;; *) die "no arguments (settings are environment variables; see --help)" ;; esac

PAIRS=${PAIRS:-20} BATCHES=${BATCHES:-24} NOISE_RUNS=${NOISE_RUNS:-8} RUNS=${RUNS:-8}
[[ $PAIRS =~ ^[1-9][0-9]*$ ]] || die "PAIRS must be a whole number >= 1"
[[ $BATCHES =~ ^[1-9][0-9]*$ ]] && [ "$BATCHES" -ge 8 ] || die "BATCHES must be a whole number >= 8"
[[ $RUNS =~ ^[1-9][0-9]*$ ]] && [ "$RUNS" -ge 5 ] || die "RUNS must be a whole number >= 5"
[[ $NOISE_RUNS =~ ^[1-9][0-9]*$ ]] && [ "$NOISE_RUNS" -ge 3 ] || die "NOISE_RUNS must be a whole number >= 3"
bin=${BIN:-build/accel-bench}
[ -x "$bin" ] || die "no $bin (scripts/build.sh builds it)"
machine=$("$bin" sweep --machine-id)
out=${OUT:-runs/gate-check/$(date -u +%Y%m%dT%H%M%SZ)}
table=${TABLE:-results/bench/gate-check/$machine.md}
mkdir -p "$out/runs" "$out/sets" "$(dirname "$table")"
# One RUNS a folder: continued with another, r6 and up would run at another
# time than the rest, and that hour's drift would read as a change.
if [ -f "$out/RUNS" ] && [ "$(cat "$out/RUNS")" != "$RUNS" ]; then
  die "$out was made with RUNS=$(cat "$out/RUNS"): continue it with that, or give another OUT"
fi
echo "$RUNS" >"$out/RUNS"
config=configs/ladder/cpu/00-scratch.json
rung=00-scratch
settings=(--set train.epochs=1 --set train.limit_train_batches="$BATCHES" --set train.warmup_steps=4
          --set train.limit_eval_batches=2 --set train.eval_batch_size=64 --set train.log_every=1000
          --set train.save_checkpoint=false --set runtime.threads=2)
lt=$("$bin" --version | sed -n 's/.*LibTorch \([^)]*\)).*/\1/p')
say "machine $machine, LibTorch $lt, $PAIRS pairs of $BATCHES-batch runs of $rung -> $out"

# one_run DIR DELAY: one run into DIR unless it finished there before.
one_run() {
  local dir=$1 delay=$2
  if [ -f "$dir/result.json" ] && [ "$(json "$dir/result.json" 'd["status"]')" = ok ]; then return 0; fi
  "$bin" run -c "$config" --out "$dir" --force -q "${settings[@]}" --set train.inject_delay="$delay" \
    >"$dir.log" 2>&1 || die "run $dir failed: $(tail -n 1 "$dir.log")"
}

# make_set NAME RUN_DIR...: a result set (a folder named by the machine id, as
# a sweep's is) of those runs as repeats of the rung.
make_set() {
  local name=$1; shift
  local d=$out/sets/$name/$machine/$rung i=0
  rm -rf "$out/sets/$name"
  mkdir -p "$d"
  # Copies: a set refuses symbolic links that leave it.
  for r in "$@"; do i=$((i + 1)); cp -R "$r" "$d/r$i"; done
  echo "$out/sets/$name/$machine"
}

# This machine's noise, from runs of their own (never the pairs' runs).
noise_runs=()
for ((k = 1; k <= NOISE_RUNS; k++)); do
  one_run "$out/runs/noise-r$k" 0
  noise_runs+=("$out/runs/noise-r$k")
done
"$bin" calibrate --noise "$(make_set noise "${noise_runs[@]}")" -o "$out/noise.json" >/dev/null
say "noise: $(json "$out/noise.json" '"step time sd(log) %.4f, training time %.4f" % (d["noise"]["machine"]["step time"]["sd"], d["noise"]["machine"]["training time"]["sd"])')"

started=$(date +%s)
for ((p = 1; p <= PAIRS; p++)); do
  jobs=()
  for ((k = 1; k <= RUNS; k++)); do jobs+=("base $k 0" "aa $k 0" "s03 $k 0.03" "s07 $k 0.07" "s15 $k 0.15"); done
  mapfile -t order < <(printf '%s\n' "${jobs[@]}" | "${PYTHON:-python3}" -c \
    'import random, sys; l = sys.stdin.read().splitlines(); random.Random(int(sys.argv[1])).shuffle(l); print("\n".join(l))' "$p")
  for j in "${order[@]}"; do
    read -r kind k delay <<<"$j"
    one_run "$out/runs/p$p-$kind-r$k" "$delay"
  done
  el=$(( $(date +%s) - started ))
  say "pair $p/$PAIRS done, ${el}s, about $(( el * (PAIRS - p) / p ))s left"
done

# Compare: per pair and R, base against the A/A side and each slowdown, at each bound.
results=$out/compares.jsonl
: >"$results"
for ((p = 1; p <= PAIRS; p++)); do
  Rs=(1 3 5); [ "$RUNS" -gt 5 ] && Rs+=("$RUNS")
  for R in "${Rs[@]}"; do
    side() { local kind=$1 n=$2 l=(); for ((k = 1; k <= n; k++)); do l+=("$out/runs/p$p-$kind-r$k"); done; make_set "p$p-$kind-R$n" "${l[@]}"; }
    sets=("$(side base $R)" "$(side aa $R)")
    kinds=(aa)
    for s in s03 s07 s15; do sets+=("$(side $s $R)"); kinds+=("$s"); done
    for B in 5 7 10; do
      rc=0
      "$bin" compare "${sets[@]}" --fail-slower "$B" --noise "$out/noise.json" --format json \
        >"$out/compare.json" 2>"$out/compare.err" || rc=$?
      [ "$rc" -le 1 ] || [ "$rc" -eq 4 ] || die "compare failed ($rc): $(cat "$out/compare.err")"
      "${PYTHON:-python3}" - "$out/compare.json" "$p" "$R" "$B" "${kinds[@]}" >>"$results" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
pair, R, bound, kinds = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5:]
for kind, c in zip(kinds, doc["comparisons"]):
    rows = {r["measure"]: r for r in c["rows"]}
    train = rows["training time"]["change"]["point"]
    gated = [r for r in c["rows"] if r["gated"]]
    verdict = ("slower" if c["regressions"] else "unresolved" if c["unresolved"] else
               "faster" if any(r.get("verdict") == "faster" for r in gated) else
               "same, slower within bound" if any(r["note"].startswith("slower beyond doubt") for r in gated) else
               "same")
    print(json.dumps({"pair": pair, "R": R, "bound": bound, "kind": kind, "verdict": verdict,
                      "point_gate": "slower" if train > 1 + bound / 100 else "same",
                      "training_time_ratio": train,
                      "step_time": rows["step time"]["change"], "step_verdict": rows["step time"]["verdict"],
                      "training_verdict": rows["training time"]["verdict"]}))
EOF
    done
  done
done

# Adaptive repeats: per pair, bound and side, against BASE's first 5 runs,
# 3 runs and then one more while compare says unresolved, to RUNS; each look
# at 95% split over the looks, as the sweep judges them.
"${PYTHON:-python3}" - "$bin" "$out" "$machine" "$rung" "$PAIRS" "$RUNS" >>"$results" <<'EOF'
import json, os, shutil, subprocess, sys
bin_, out, machine, rung, pairs, cap = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
first = 3                                    # the sweep's kAdaptiveFirstRuns
level = 1 - 0.05 / (cap - first + 1)         # results::adaptive_confidence
def make_set(name, runs):
    top = os.path.join(out, "sets", name)
    shutil.rmtree(top, ignore_errors=True)
    d = os.path.join(top, machine, rung)
    os.makedirs(d)
    for i, r in enumerate(runs, 1):
        shutil.copytree(r, os.path.join(d, f"r{i}"))
    return os.path.join(top, machine)
def runs_of(p, kind, n):
    return [os.path.join(out, "runs", f"p{p}-{kind}-r{k}") for k in range(1, n + 1)]
for p in range(1, pairs + 1):
    base = make_set(f"p{p}-base-R5", runs_of(p, "base", 5))
    for bound in (5.0, 7.0, 10.0):
        n = {k: first for k in ("aa", "s03", "s07", "s15")}
        done = set()
        while len(done) < len(n):
            open_kinds = [k for k in n if k not in done]
            sets = [make_set(f"p{p}-{k}-A{n[k]}", runs_of(p, k, n[k])) for k in open_kinds]
            proc = subprocess.run([bin_, "compare", base, *sets, "--fail-slower", f"{bound:g}",
                                   "--noise", os.path.join(out, "noise.json"), "--format", "json",
                                   "--confidence", f"{level:.10g}"],
                                  capture_output=True, text=True)
            if proc.returncode not in (0, 1, 4):
                sys.exit(f"compare failed ({proc.returncode}): {proc.stderr}")
            doc = json.loads(proc.stdout)
            for kind, c in zip(open_kinds, doc["comparisons"]):
                gated = [r for r in c["rows"] if r["gated"]]
                verdict = ("slower" if c["regressions"] else "unresolved" if c["unresolved"] else
                           "faster" if any(r.get("verdict") == "faster" for r in gated) else
                           "same, slower within bound" if any(r["note"].startswith("slower beyond doubt") for r in gated) else
                           "same")
                if verdict == "unresolved" and n[kind] < cap:
                    n[kind] += 1
                    continue
                rows = {r["measure"]: r for r in c["rows"]}
                done.add(kind)
                print(json.dumps({"pair": p, "R": "adaptive", "runs": n[kind], "cap": cap, "level": level,
                                  "bound": bound, "kind": kind,
                                  "verdict": verdict, "point_gate": "n/a",
                                  "training_time_ratio": rows["training time"]["change"]["point"],
                                  "step_time": rows["step time"]["change"], "step_verdict": rows["step time"]["verdict"],
                                  "training_verdict": rows["training time"]["verdict"]}))
EOF

# The table.
"${PYTHON:-python3}" - "$results" "$out/noise.json" "$table" "$machine" "$lt" "$PAIRS" "$BATCHES" \
  "$(json "$out/runs/noise-r1/result.json" 'd["env"]["git_sha"]')" "$(date -u +%Y-%m-%d)" "$RUNS" \
  "$(git describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)" <<'EOF'
import collections, json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
noise = json.load(open(sys.argv[2]))["noise"]["machine"]
table, machine, lt, pairs, batches, sha, day, runs_a_kind, judged_by = sys.argv[3:12]
names = {"aa": "A/A (unchanged)", "s03": "3% slower", "s07": "7% slower", "s15": "15% slower"}
count = collections.Counter()
point = collections.Counter()
for r in rows:
    count[(r["kind"], r["R"], r["bound"], r["verdict"])] += 1
    point[(r["kind"], r["R"], r["bound"], r["point_gate"])] += 1
def n(c, *k): return c[k]
out = []
out.append(f"# Can the gate be trusted here? ({machine})\n")
out.append(f"`bash bench/gate_check.sh` (PAIRS={pairs}, BATCHES={batches}, RUNS={runs_a_kind}), {day}, "
           f"machine {machine}, LibTorch {lt}, runs by accel-bench {sha}, judged by its compare at {judged_by}. The rung: vision 00-scratch, {batches} training batches "
           "(4 warm-up), two evaluation batches, 2 threads. A pair is two result sets of R runs each; "
           "the slowdowns are `train.inject_delay` 0.03, 0.07 and 0.15 (every step delayed by that "
           "fraction of its own time). Sides of one run use this machine's noise, measured first "
           "from runs of their own: sd of the log of step time "
           f"{noise['step time']['sd']:.4f}, of training time {noise['training time']['sd']:.4f}.\n")
out.append("Point gate: the old rule, the median whole-run time's ratio against the bound. "
           "Interval gate: `compare --fail-slower B`, slower only when the whole 95% interval of "
           "step time or training time lies beyond the bound, unresolved (exit 4) when it straddles it "
           "(the adaptive rows: the interval at their row's level, every look's).\n")
Rs = sorted({r["R"] for r in rows if r["R"] != "adaptive"}) + ["adaptive"]
ad = [r for r in rows if r["R"] == "adaptive"]
cap, level = (ad[0]["cap"], ad[0]["level"]) if ad else (5, 0.95)
for kind in ["aa", "s03", "s07", "s15"]:
    out.append(f"\n## {names[kind]}\n")
    out.append("| R a side | bound | point gate: slower | interval gate: slower | unresolved | "
               "same, but slower beyond doubt | same | faster |")
    out.append("|---|---|---|---|---|---|---|---|")
    for R in Rs:
        for B in [5.0, 7.0, 10.0]:
            total = sum(v for k, v in count.items() if k[:3] == (kind, R, B))
            if not total: continue
            used = [r.get("runs", 0) for r in rows if r["kind"] == kind and r["R"] == R and r["bound"] == B]
            label = (f"adaptive, 3-{cap} at {level * 100:.4g}% (mean {sum(used) / len(used):.2f})"
                     if R == "adaptive" else str(R))
            pg = "-" if R == "adaptive" else f"{n(point, kind, R, B, 'slower')}/{total}"
            out.append(f"| {label} | {B:g}% | {pg} | "
                       f"{n(count, kind, R, B, 'slower')}/{total} | {n(count, kind, R, B, 'unresolved')} | "
                       f"{n(count, kind, R, B, 'same, slower within bound')} | {n(count, kind, R, B, 'same')} | "
                       f"{n(count, kind, R, B, 'faster')} |")
g1 = n(count, "aa", 3, 7.0, "slower"); t1 = sum(v for k, v in count.items() if k[:3] == ("aa", 3, 7.0))
g2 = n(count, "s15", 3, 7.0, "slower"); t2 = sum(v for k, v in count.items() if k[:3] == ("s15", 3, 7.0))
g3 = sum(n(count, "s03", R, B, "same") for R in [1, 3] for B in [5.0, 7.0, 10.0])
out.append("\n## What the gate must show\n")
out.append(f"- No false alarm in the A/A pairs at 7% with R = 3: {g1} of {t1} -- {'met' if g1 == 0 else 'NOT met'}.")
out.append(f"- At least 19 of 20 15% slowdowns caught at 7% with R = 3: {g2} of {t2} -- "
           f"{'met' if t2 and g2 >= 0.95 * t2 else 'NOT met'}.")
t3 = sum(v for k, v in count.items() if k[0] == "s03" and k[1] in (1, 3))
out.append(f"- 3% slowdowns passed as \"same\" with no change seen: {g3} of {t3} comparisons (R = 1 and 3, "
           f"every bound) -- {'met' if g3 == 0 else 'NOT met'}. A 3% slowdown is inside every bound here, so "
           "\"same\" is the gate's correct verdict on it; what matters is that it never passes unseen.")
big = max(R for R in Rs if R != "adaptive")
if big > 5:
    fa = n(count, "aa", big, 7.0, "slower"); tfa = sum(v for k, v in count.items() if k[:3] == ("aa", big, 7.0))
    cb = n(count, "s15", big, 7.0, "slower"); tcb = sum(v for k, v in count.items() if k[:3] == ("s15", big, 7.0))
    out.append(f"- With R = {big} a side at 7%: false alarms {fa} of {tfa}, 15% slowdowns caught {cb} of {tcb}.")
ga = n(count, "aa", "adaptive", 7.0, "slower")
ta = sum(v for k, v in count.items() if k[:3] == ("aa", "adaptive", 7.0))
gs = n(count, "s15", "adaptive", 7.0, "slower")
ts = sum(v for k, v in count.items() if k[:3] == ("s15", "adaptive", 7.0))
used = [r["runs"] for r in rows if r["R"] == "adaptive" and r["bound"] == 7.0]
if ta:
    out.append(f"- Adaptive repeats at 7% (BASE 5 runs; a side 3 to {cap}, each look at {level * 100:.4g}%): "
               f"false alarms {ga} of {ta} -- "
               f"{'met' if ga == 0 else 'NOT met'}; 15% slowdowns caught {gs} of {ts} -- "
               f"{'met' if ts and gs >= 0.95 * ts else 'NOT met'}; mean runs a side {sum(used) / len(used):.2f} "
               "over every kind (fixed R = 3: 3).")
open(table, "w").write("\n".join(out) + "\n")
print("\n".join(out))
EOF
say "table: $table"
