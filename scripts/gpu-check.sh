#!/usr/bin/env bash
# The GPU check: on a Linux machine with an NVIDIA GPU and a pip-installed
# PyTorch, builds accel-bench against that torch's LibTorch and measures what
# the GPU path does, the most valuable result first, every stage bounded in
# time, and (with --out) everything it learned packed into at most 6 files:
#
#   1. preflight   the machine, its toolkit, torch and libraries (preflight.txt)
#   2. deps        every find_package of the build, from the system or the .debs
#   3. build-cli   configure, then the accel-bench CLI alone
#   4. ladder      the GPU smoke ladder (configs/gpu-check/: vit_b_16 at 224, 40
#                  steps each of 32-true, bf16-mixed, bf16-mixed + CUDA Graphs;
#                  DDP and FSDP over every GPU where there are 2+; bert_base on
#                  synthetic tokens in bf16-mixed) through `accel-bench sweep`,
#                  each child run bounded; then its report.md
#   5. calibrate   this machine's CPU matmul peaks (accel-bench calibrate)
#   6. peer        the same ViT step through Lightning Fabric beside accel-bench
#                  (bench/fabric_peer.sh, bf16-mixed at the article's batch 16)
#   7. build-tests the test binary
#   8. gpu-tests   the ctest names starting with "gpu " (120 s each at most)
# A failing or timed-out stage is recorded and the next one runs where it can.
# Needs cmake, a C++17 compiler and the CUDA toolkit (nvcc) of torch's CUDA
# major, but no apt and no network: every other dependency comes from the
# system or from Debian .deb files carried beside the tree as .debs/ (see
# --fetch-debs), unpacked with dpkg -x (or ar + tar) under the build folder.
#
#   scripts/gpu-check.sh --out "$OUT"        # the device command (docs/GPU.md)
#   scripts/gpu-check.sh                     # results under results/gpu-check/ only
#   scripts/gpu-check.sh --out DIR --budget 900 -- --set train.batch_size=32
#                          # after --: extra arguments for the sweep
#   scripts/gpu-check.sh --fetch-debs [DIR]  # on a Debian machine with apt: download
#                          # the .debs into DIR (default .debs at the repo root)
#   scripts/gpu-check.sh --check-deps [FILE...]   # every find_package/find_path/
#                          # find_library of the build (default: CMakeLists.txt,
#                          # tests/ and cmake/) is one this script provides; exit 1 if not
#   scripts/gpu-check.sh --carry             # the ignored paths a device call must carry
#   scripts/gpu-check.sh --device-command    # the device call's command, this checkout's sha in it
#
# --out DIR: DIR gets preflight.txt (first), gpu-check.log (the whole output,
# written as it goes), summary.txt (each stage's outcome and time),
# gpu-check.tar.gz (the result set with every rung's result.json, run.log,
# metrics.csv and config.json; the ctest log; the feature flags; the CMake logs
# and the first 40 error: lines of a failed build; ldd of the binaries;
# `accel-bench env`; the calibration; the peer's runs), report.md and peer.md.
# They are rewritten after every stage and from the exit trap, so a command
# cut off by SIGKILL still leaves the stages it finished.
# --budget SECONDS (default 540 or ACCEL_GPU_CHECK_BUDGET, for a 600 s device command): the whole
# script's wall time; every stage is bounded by what is left of it, less 25 s
# kept for packing; a stage that no longer fits is recorded as skipped.
#
# Exit 1 when a stage failed (each is named at the end). Results also stay in
# ACCEL_GPU_CHECK_OUT/gpu-check/<machine-id>/ (default results/; runs/ in the
# CPU test mode), e.g. results/gpu-check/nvidia-h200-x1-lt2.11.0-cu13.0/.
#
# Environment:
#   ACCEL_PYTHON       python with torch (default python3); its
#                      torch.utils.cmake_prefix_path is the LibTorch built against
#   BUILD_DIR          build folder (default build-gpu)
#   ACCEL_GPU_CHECK_OUT  result root (default results; runs in the CPU test mode)
#   ACCEL_DEBS_DIR     where the .deb files are (default .debs at the repo root)
#   ACCEL_GPU_CHECK_DEPS  auto (default: .debs only for what cmake cannot find on
#                      the system), debs (every dependency from the .debs, even
#                      where the system has it), system (never the .debs)
#   CUDA_HOME          the CUDA toolkit, needed by find_package(Torch) of a CUDA
#                      LibTorch (default /usr/local/cuda)
#   ACCEL_GPU_CHECK_ALLOW_CPU=1  where no GPU is seen, run the same flow on the
#                      CPU with a tiny ViT at 32 px (CUDA Graphs rung left out,
#                      DDP/FSDP as 2 CPU ranks) instead of refusing: tests this
#                      script on a machine without a GPU; without torch in
#                      python it builds against the system's LibTorch
set -euo pipefail
CALLER_PWD=$PWD
cd "$(dirname "$0")/.."

say() { echo "gpu-check: $*"; }
warn() { echo "gpu-check: warning: $*" >&2; }
# die WHY: the current stage failed and nothing after it can run.
die() {
  echo "gpu-check: error: $*" >&2
  if [ -n "${cur_stage:-}" ]; then cur_note="FAILED: $*"; failed+=("$cur_stage"); fi
  exit 1
}

# What the build finds (find_package, or find_path/find_library by variable)
# -> the Debian packages that provide it. The runtime packages (zlib1g,
# libbz2-1.0, libssl3, libutf8proc2, libsqlite3-0) are there for the libraries
# their -dev packages' .so links point at; Boost is header-only. Torch comes
# from pip, Threads from libc; benchmark (Google Benchmark) is not needed: the
# build turns ACCEL_BUILD_BENCH off. The NCCL header is torch_features.cmake's,
# found in the CUDA toolkit or torch's nvidia-nccl wheel.
DEPS=(nlohmann_json CLI11 doctest ZLIB BZip2 OpenSSL SQLite3 Boost utf8proc)
debs_for() {
  case "$1" in
    nlohmann_json) echo nlohmann-json3-dev ;;
    CLI11) echo libcli11-dev ;;
    doctest) echo doctest-dev ;;
    ZLIB) echo zlib1g-dev zlib1g ;;
    BZip2) echo libbz2-dev libbz2-1.0 ;;
    OpenSSL) echo libssl-dev libssl3 ;;
    SQLite3) echo libsqlite3-dev libsqlite3-0 ;;
    Boost) echo libboost1.74-dev ;;
    utf8proc) echo libutf8proc-dev libutf8proc2 ;;
    *) return 1 ;;
  esac
}
# Lookups that need no .deb: what pip's torch, libc or the toolkit provide, and
# what the GPU build does not build.
provided_elsewhere() {
  case "$1" in
    Torch|Threads) echo "torch from pip / libc" ;;
    benchmark) echo "not built (ACCEL_BUILD_BENCH=OFF)" ;;
    ACCEL_NCCL_INCLUDE_DIR) echo "the CUDA toolkit or torch's nvidia-nccl wheel" ;;
    *) return 1 ;;
  esac
}
# find_path/find_library result variables -> the dependency they are part of.
dep_of_variable() {
  case "$1" in
    UTF8PROC_INCLUDE_DIR|UTF8PROC_LIBRARY) echo utf8proc ;;
    *) echo "$1" ;;
  esac
}
# Headers that torch's own headers include but its pip wheel does not ship:
# ProcessGroupGloo.hpp (which lib/ includes for CPU ranks) includes gloo's. A
# header the system lacks comes from its .deb (headers only: the wheel's
# libtorch_cpu holds gloo itself; Debian's libgloo-dev is what the CUDA leg of
# scripts/test.sh builds with on Debian 12).
TORCH_HEADER_DEPS=(gloo/algorithm.h)
torch_header_debs() {
  case "$1" in
    gloo/algorithm.h) echo libgloo-dev ;;
    *) return 1 ;;
  esac
}
ALL_DEBS=()
for p in "${DEPS[@]}"; do
  for d in $(debs_for "$p"); do ALL_DEBS+=("$d"); done
done
for h in "${TORCH_HEADER_DEPS[@]}"; do ALL_DEBS+=("$(torch_header_debs "$h")"); done
# The ignored paths a device call carries beside the tracked tree.
CARRY=(.debs)

# --check-deps [FILE...]: each lookup of the build's CMake files, and how this
# script provides it; exit 1 naming the first it cannot.
check_deps() {
  local files=("$@") f line name shown bad=0 how
  # find_package(NAME ...) and find_path/find_library(VAR ...), outside comments.
  # The files are read as data: a file's name is only ever printed (quoted
  # with %q, so a newline in it cannot forge a line), never part of a script.
  local re='(^|[^A-Za-z0-9_])(find_package|find_path|find_library)[[:space:]]*\([[:space:]]*([A-Za-z0-9_]+)'
  [ "${#files[@]}" -gt 0 ] || files=(CMakeLists.txt tests/CMakeLists.txt cmake/*.cmake)
  for f in "${files[@]}"; do
    [ -f "$f" ] || die "--check-deps: no such file: $(printf '%q' "$f")"
    [ -r "$f" ] || die "--check-deps: cannot read $(printf '%q' "$f")"
  done
  for f in "${files[@]}"; do
    shown=$(printf '%q' "$f")
    while IFS= read -r line || [ -n "$line" ]; do
      line=${line%%#*}
      [[ $line =~ $re ]] || continue
      name=${BASH_REMATCH[3]}
      if how=$(provided_elsewhere "$name"); then
        echo "gpu-check: $shown: $name: $how"
      elif debs_for "$(dep_of_variable "$name")" >/dev/null; then
        echo "gpu-check: $shown: $name: $(debs_for "$(dep_of_variable "$name")" | tr ' ' ',')"
      else
        echo "gpu-check: error: $shown looks up $name, which gpu-check.sh does not know how to provide (add it to DEPS and debs_for)" >&2
        bad=1
      fi
    done <"$f"
  done
  return "$bad"
}

# --- modes that build nothing ---------------------------------------------------------
# -h/--help anywhere before a "--" (after it, arguments are the sweep's).
for a in "$@"; do
  case "$a" in
    --) break ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  esac
done
case "${1:-}" in
  --check-deps)
    shift
    # FILEs relative to the folder the script was started from, as --out is.
    deps_files=()
    for f in "$@"; do
      case "$f" in /*) deps_files+=("$f") ;; *) deps_files+=("$CALLER_PWD/$f") ;; esac
    done
    check_deps "${deps_files[@]}"; exit $? ;;
  --carry) printf '%s\n' "${CARRY[@]}"; exit 0 ;;
  --device-command)
    # The tree travels without .git: the sha is named here, where git knows it.
    sha=$(git describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)
    echo "ACCEL_GIT_SHA=$sha bash scripts/gpu-check.sh --out \"\$OUT\""
    exit 0 ;;
  --fetch-debs)
    dir=${ACCEL_DEBS_DIR:-.debs}
    if [ -n "${2:-}" ]; then
      case "$2" in /*) dir=$2 ;; *) dir=$CALLER_PWD/$2 ;; esac
    fi
    command -v apt-get >/dev/null || die "--fetch-debs needs apt-get (a Debian or Ubuntu machine)"
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    # apt's sandbox user (_apt) cannot write to most folders root owns; as root,
    # download as root instead of warning about it for every file.
    apt_opts=()
    [ "$(id -u)" = 0 ] && apt_opts=(-o APT::Sandbox::User=root)
    say "downloading ${ALL_DEBS[*]} into $dir"
    (cd "$dir" && apt-get "${apt_opts[@]}" -q download "${ALL_DEBS[@]}") \
      || die "apt-get download failed (run apt-get update first?)"
    for p in "${ALL_DEBS[@]}"; do
      f=$(ls "$dir/${p}"_*.deb 2>/dev/null | sort -V | tail -n 1)
      [ -n "$f" ] || die "apt-get download gave no ${p}_*.deb in $dir"
      say "fetched $(basename "$f") ($(du -k "$f" | cut -f1) KiB)"
    done
    say "$(du -sh "$dir" | cut -f1) in all; carry $dir to the GPU machine as .debs/ at the repo root (device call: carry [\".debs\"])"
    exit 0 ;;
esac

# --- arguments ---------------------------------------------------------------------------
OUT_DIR="" BUDGET=${ACCEL_GPU_CHECK_BUDGET:-540} SWEEP_ARGS=()
[[ $BUDGET =~ ^[1-9][0-9]*$ ]] || die "ACCEL_GPU_CHECK_BUDGET must be a whole number of seconds: $BUDGET"
while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ $# -ge 2 ] || die "--out needs a folder"
           case "$2" in /*) OUT_DIR=$2 ;; *) OUT_DIR=$CALLER_PWD/$2 ;; esac; shift 2 ;;
    --budget) [ $# -ge 2 ] && [[ $2 =~ ^[1-9][0-9]*$ ]] || die "--budget needs a whole number of seconds"
              BUDGET=$2; shift 2 ;;
    --) shift; SWEEP_ARGS=("$@"); break ;;
    --check-deps|--carry|--device-command|--fetch-debs)
       die "$1 is a mode of its own: give it as the first argument" ;;
    *) die "unknown argument: $(printf '%q' "$1") (arguments for the sweep go after --; --help says more)" ;;
  esac
done
[ "$BUDGET" -ge 60 ] || die "--budget must be at least 60 s (got $BUDGET)"

cpu_mode=0
BUILD_DIR=${BUILD_DIR:-build-gpu}
DEBS_DIR=${ACCEL_DEBS_DIR:-.debs}
DEPS_MODE=${ACCEL_GPU_CHECK_DEPS:-auto}
case "$DEPS_MODE" in auto|debs|system) ;; *) die "ACCEL_GPU_CHECK_DEPS must be auto, debs or system: $DEPS_MODE" ;; esac
case "${ACCEL_GPU_CHECK_ALLOW_CPU:-0}" in 0|1) ;; *) die "ACCEL_GPU_CHECK_ALLOW_CPU must be 0 or 1" ;; esac
for s in ${ACCEL_GPU_CHECK_SKIP:-}; do
  case "$s" in ladder|calibrate|peer) ;; *) die "ACCEL_GPU_CHECK_SKIP: $s is not a stage that can be left out (ladder, calibrate, peer)" ;; esac
done
mkdir -p "$BUILD_DIR/gpu-check"
WORK=$(cd "$BUILD_DIR/gpu-check" && pwd)
T0=$(date +%s)
RESERVE=25  # seconds kept for packing at the end

# --- the output folder: the log as it is written, the rest packed after each stage ------
if [ -n "$OUT_DIR" ]; then
  # Physical paths, before anything is made: an --out that is (or passes
  # through) a link into the checkout is inside it.
  case "$(realpath -m -- "$OUT_DIR")/" in "$(pwd -P)"/*) die "--out must be outside the checkout ($(pwd -P))" ;; esac
  mkdir -p "$OUT_DIR" || die "cannot create --out $OUT_DIR"
  OUT_DIR=$(cd "$OUT_DIR" && pwd -P)
  case "$OUT_DIR/" in "$(pwd -P)"/*) die "--out must be outside the checkout ($(pwd -P))" ;; esac
  # What this script writes there is never written through a link planted in
  # its place (every file but the log goes through a fresh temp file and mv).
  for n in gpu-check.log summary.txt gpu-check.tar.gz report.md peer.md preflight.txt; do
    if [ -L "$OUT_DIR/$n" ] || { [ -e "$OUT_DIR/$n" ] && [ ! -f "$OUT_DIR/$n" ]; }; then
      die "--out: $OUT_DIR/$n is a link or not a regular file; remove it (nothing is written through it)"
    fi
  done
  exec > >(tee -a "$OUT_DIR/gpu-check.log") 2>&1
fi
say "started $(date -u +%FT%TZ) in $PWD; budget $BUDGET s${OUT_DIR:+; outputs in $OUT_DIR}"

# --- stages: outcome, time, bounds -----------------------------------------------------
stage_names=() stage_secs=() stage_notes=() failed=() set_dirs=()
cur_stage="" cur_t0=$T0 cur_note=""
left() { echo $((T0 + BUDGET - RESERVE - $(date +%s))); }
# ACCEL_GPU_CHECK_SKIP="ladder calibrate peer": those measuring stages left
# out (recorded as skipped), for a short rerun of the builds and the tests.
skipping() { case " ${ACCEL_GPU_CHECK_SKIP:-} " in *" $1 "*) cur_note="skipped (ACCEL_GPU_CHECK_SKIP)"; return 0 ;; esac; return 1; }
stage() {  # stage NAME: ends the current stage, starts NAME
  local now
  now=$(date +%s)
  if [ -n "$cur_stage" ]; then
    stage_names+=("$cur_stage") stage_secs+=($((now - cur_t0))) stage_notes+=("${cur_note:-ok}")
    say "$cur_stage: ${cur_note:-ok} ($((now - cur_t0)) s)"
  fi
  cur_stage=$1 cur_t0=$now cur_note=""
  pack
  [ -n "$1" ] && say "--- $1 ($((now - T0)) s so far, $(left) s left)"
  return 0
}
fail() {  # fail WHY: the current stage failed; the next ones still run
  cur_note="FAILED: $*"
  failed+=("$cur_stage")
  warn "$cur_stage: $*"
}
# bounded CAP CMD...: CMD under timeout, at most CAP seconds and what the budget
# leaves; 124 when it ran out of time (killed 10 s after SIGTERM), 125 when no
# time was left to start it.
bounded() {
  local cap=$1 t rc=0
  shift
  t=$(left)
  [ "$t" -lt "$cap" ] && cap=$t
  if [ "$cap" -lt 5 ]; then
    warn "no time left for: $*"
    return 125
  fi
  timeout --kill-after=10 "$cap" "$@" || rc=$?
  [ "$rc" -eq 137 ] && rc=124
  [ "$rc" -eq 124 ] && warn "timed out after $cap s: $*"
  return "$rc"
}
# A stage whose command timed out or found no time says so.
why_rc() {
  case "$1" in 124) echo "timed out" ;; 125) echo "skipped: no time left" ;; *) echo "exit $1" ;; esac
}

# out_put SRC NAME: SRC copied to OUT_DIR/NAME through a fresh temp file
# (mktemp: never a name someone planted) renamed into place.
out_put() {
  local t
  t=$(mktemp "$OUT_DIR/.$2.XXXXXX") || return 1
  if cp "$1" "$t" && chmod 644 "$t" && mv -f "$t" "$OUT_DIR/$2"; then return 0; fi
  rm -f "$t"
  return 1
}

# pack: writes the output folder's files from what exists now (each under
# 16 MiB, at most 6 files). Safe to call at any time, from the exit trap too.
pack() {
  [ -n "$OUT_DIR" ] || return 0
  local s=$WORK/pack i
  {
    echo "gpu-check summary, $(date -u +%FT%TZ), $(($(date +%s) - T0)) s since start (budget $BUDGET s)"
    echo "machine: ${machine_id:-?}; mode: $([ "$cpu_mode" = 1 ] && echo "CPU test mode" || echo GPU)"
    for i in "${!stage_names[@]}"; do
      printf '%-12s %5d s  %s\n' "${stage_names[$i]}" "${stage_secs[$i]}" "${stage_notes[$i]}"
    done
    [ -z "$cur_stage" ] || printf '%-12s %5d s  %s\n' "$cur_stage" $(($(date +%s) - cur_t0)) "(running when packed)"
    echo "failed: ${failed[*]:-none}"
  } >"$WORK/summary.txt.new" && mv -f "$WORK/summary.txt.new" "$WORK/summary.txt" && out_put "$WORK/summary.txt" summary.txt
  rm -rf "$s" && mkdir -p "$s"
  cp "$WORK/summary.txt" "$s/" 2>/dev/null || true
  for f in "$WORK"/*.log "$WORK"/*.txt "$WORK"/*.json "$WORK"/*.err "$BUILD_DIR/accel-features.txt" \
           "$BUILD_DIR/CMakeFiles/CMakeOutput.log" "$BUILD_DIR/CMakeFiles/CMakeError.log" \
           "$BUILD_DIR/CMakeFiles/CMakeConfigureLog.yaml"; do
    [ -f "$f" ] && cp "$f" "$s/" 2>/dev/null
  done
  [ -d "$WORK/system" ] && mkdir -p "$s/probe" && cp "$WORK"/system/cmake.log "$s/probe/system.log" 2>/dev/null
  [ -d "$WORK/debs" ] && mkdir -p "$s/probe" && cp "$WORK"/debs/cmake.log "$s/probe/debs.log" 2>/dev/null
  local d
  : >"$WORK/reports.md.new"
  for d in "${set_dirs[@]}"; do
    [ -d "$d" ] || continue
    # Each set as results/<suite>/<machine-id>/, without checkpoints or anything over 4 MiB.
    mkdir -p "$s/results"
    (cd "$(dirname "$(dirname "$d")")" && find "$(basename "$(dirname "$d")")/$(basename "$d")" -type f ! -name '*.ckpt' \
       ! -name '.lock' -size -4M -print0 | tar --null -T - -cf - 2>/dev/null) | tar -xf - -C "$s/results" 2>/dev/null || true
    [ -f "$d/report.md" ] && { cat "$d/report.md"; echo; } >>"$WORK/reports.md.new"
  done
  for f in "$WORK"/compare-*.md; do
    [ -f "$f" ] && cp "$f" "$s/" && { cat "$f"; echo; } >>"$WORK/reports.md.new"
  done
  for d in peer peer-compile; do
    [ -d "$WORK/$d" ] && (cd "$WORK" && find "$d" -type f ! -name '*.ckpt' -size -4M -print0 |
                            tar --null -T - -cf - 2>/dev/null) | tar -xf - -C "$s" 2>/dev/null || true
  done
  local tgz
  tgz=$(mktemp "$OUT_DIR/.gpu-check.tar.gz.XXXXXX") || return 0
  tar -czf "$tgz" -C "$s" . 2>/dev/null || true
  if [ "$(stat -c %s "$tgz" 2>/dev/null || echo 0)" -gt 15728640 ]; then
    # Over the 16 MiB a file may be: without the runs' logs and per-step rows.
    find "$s" \( -name run.log -o -name metrics.csv \) -delete
    tar -czf "$tgz" -C "$s" . 2>/dev/null || true
  fi
  chmod 644 "$tgz" 2>/dev/null || true
  mv -f "$tgz" "$OUT_DIR/gpu-check.tar.gz" 2>/dev/null || rm -f "$tgz"
  [ -s "$WORK/reports.md.new" ] && out_put "$WORK/reports.md.new" report.md
  if [ -f "$WORK/peer/table.md" ] || [ -f "$WORK/peer-compile/table.md" ]; then
    cat "$WORK/peer/table.md" "$WORK/peer-compile/table.md" 2>/dev/null >"$WORK/peer.md.new" || true
    out_put "$WORK/peer.md.new" peer.md
  fi
  return 0
}

finish() {
  local rc=$? i total
  trap - EXIT
  stage ""
  echo "gpu-check: time per stage:"
  for i in "${!stage_names[@]}"; do
    printf 'gpu-check:   %-12s %5d s  %s\n' "${stage_names[$i]}" "${stage_secs[$i]}" "${stage_notes[$i]}"
  done
  total=$(($(date +%s) - T0))
  printf 'gpu-check:   %-12s %5d s\n' total "$total"
  if [ "$rc" -eq 0 ] && [ "${#failed[@]}" -eq 0 ]; then
    say "OK${set_dir:+; results and report in $set_dir/}"
  else
    [ "${#failed[@]}" -eq 0 ] || say "FAILED: ${failed[*]}${set_dir:+; results in $set_dir/}"
    [ "$rc" -ne 0 ] || rc=1
  fi
  pack  # again: the last lines above are in the log it packs
  [ -z "$OUT_DIR" ] || say "outputs: $(cd "$OUT_DIR" && ls | tr '\n' ' ')"
  exit "$rc"
}
trap finish EXIT
trap 'warn "stopped by a signal"; exit 143' TERM INT HUP

# --- 1. preflight: what this machine is, before anything can fail -------------------------
stage preflight
PY=${ACCEL_PYTHON:-python3}
PY=$(command -v "$PY") || die "${ACCEL_PYTHON:-python3} not found; install Python 3 with a pip PyTorch, or set ACCEL_PYTHON"
# A venv's cmake and ninja (pip wheels) serve where the system has none.
PATH=$PATH:$(dirname "$PY")
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if ! command -v nvcc >/dev/null && [ -x "$CUDA_HOME/bin/nvcc" ]; then
  export PATH=$CUDA_HOME/bin:$PATH
fi
# Output as key=value lines; an import failure is a value, not a crash.
# Unbuffered, so what a slow or stuck import printed before the cap is kept;
# the cap is generous (a first import of torch from a cold disk on a loaded
# machine took over a minute here); stderr kept for the log.
info=$(bounded 150 "$PY" -u -W ignore - <<'EOF' 2>"$WORK/torch-import.err" || true
import glob, os
try:
    import torch, torch.utils
except Exception as e:
    print("import_error=%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else ""))
    raise SystemExit(0)
print("version=" + torch.__version__)
print("prefix=" + torch.utils.cmake_prefix_path)
print("cuda_build=" + (torch.version.cuda or ""))
ok = torch.cuda.is_available()
n = torch.cuda.device_count() if ok else 0
print("cuda_available=%d" % ok)
print("gpus=%d" % n)
print("gpu_name=" + (torch.cuda.get_device_name(0) if n else ""))
try:
    print("cudnn=%s" % torch.backends.cudnn.version())
except Exception as e:
    print("cudnn=? (%s)" % e)
try:
    print("nccl=%s" % ".".join(map(str, torch.cuda.nccl.version())))
except Exception as e:
    print("nccl=? (%s)" % type(e).__name__)
# torch's own CUDA libraries (pip's nvidia-* wheels), preferred over the toolkit's.
site = os.path.dirname(os.path.dirname(torch.__file__))
libs = sorted(set(os.path.dirname(p) for p in glob.glob(os.path.join(site, "nvidia", "*", "lib", "lib*.so*"))))
print("nvidia_libs=" + ":".join(libs))
for mod in ("torchvision", "lightning", "lightning_fabric", "transformers"):
    try:
        print("%s=%s" % (mod, __import__(mod).__version__))
    except Exception as e:
        print("%s=absent (%s)" % (mod, type(e).__name__))
EOF
)
val() { sed -n "s/^$1=//p" <<<"$info" | head -n 1; }
(
  set +e +o pipefail  # a question that fails is an answer here, never the end
  echo "# gpu-check preflight, $(date -u +%FT%TZ)"
  echo "## os"; cat /etc/os-release 2>/dev/null | sed -n 's/^PRETTY_NAME=//p'; uname -srm
  echo "cores: $(nproc); memory: $(free -g 2>/dev/null | awk '/^Mem:/ { print $2 " GiB" }'); disk free here: $(df -h . | awk 'NR == 2 { print $4 }')"
  echo "## nvidia-smi"; bounded 30 nvidia-smi 2>&1 || echo "(nvidia-smi: not available)"
  echo "## tools"
  for t in nvcc cmake ninja g++ c++ gcc make dpkg ar tar; do
    printf '%s: %s; ' "$t" "$(command -v "$t" || echo absent)"
    case "$t" in nvcc|cmake|ninja|g++) ("$t" --version 2>&1 || true) | grep -m 1 -iE 'release|version|[0-9]+\.[0-9]+' ;; *) echo ;; esac
  done
  echo "## python and torch ($PY)"; "$PY" --version 2>&1; echo "$info"
  echo "## ldconfig: CUDA libraries the loader's cache knows"
  (ldconfig -p 2>/dev/null | grep -E 'libcuda\.|libcudart|libcublas|libcudnn|libnccl' || echo "(none)") | head -n 40
  echo "## -dev packages installed"
  (dpkg-query -W -f='${Package} ${Version}\n' 2>/dev/null | grep -- '-dev ' || echo "(none, or no dpkg)") | head -n 200
  echo "## environment"; echo "PATH=$PATH"; echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"; echo "CUDA_HOME=$CUDA_HOME"
  echo "## carried"; ls -l "$DEBS_DIR" 2>&1 | head -n 40
) >"$WORK/preflight.txt" 2>&1
[ -z "$OUT_DIR" ] || out_put "$WORK/preflight.txt" preflight.txt

torch_prefix="" cuda_build="" gpus=0
if [ -z "$(val version)" ]; then
  why=$(val import_error)
  [ -n "$why" ] || why=$(grep -v '^[[:space:]]*$' "$WORK/torch-import.err" 2>/dev/null | tail -n 1)
  [ "${ACCEL_GPU_CHECK_ALLOW_CPU:-0}" = 1 ] \
    || die "$PY cannot import torch (${why:-no output}); install PyTorch with pip, or set ACCEL_PYTHON to a python that has it"
  cpu_mode=1
  say "$PY has no torch (${why:-?}); ACCEL_GPU_CHECK_ALLOW_CPU=1: CPU test mode against the system's LibTorch"
else
  torch_prefix=$(val prefix) gpus=$(val gpus) cuda_build=$(val cuda_build)
  if [ "$(val cuda_available)" != 1 ]; then
    why="torch $(val version) from $PY: torch.cuda.is_available() is False"
    [ -n "$cuda_build" ] || why="torch $(val version) from $PY is a CPU-only build"
    [ "${ACCEL_GPU_CHECK_ALLOW_CPU:-0}" = 1 ] \
      || die "no GPU: $why (ACCEL_GPU_CHECK_ALLOW_CPU=1 runs a CPU test of this script instead)"
    cpu_mode=1 gpus=0
  fi
  if [ ! -d "$torch_prefix/Torch" ]; then
    [ "$cpu_mode" = 1 ] || die "torch.utils.cmake_prefix_path ($torch_prefix) of $PY has no Torch/ folder"
    say "torch $(val version) from $PY has no CMake files; CPU test mode against the system's LibTorch"
    torch_prefix="" cuda_build=""
  else
    say "torch $(val version) (CUDA ${cuda_build:-none}, cuDNN $(val cudnn), NCCL $(val nccl)) from $PY; LibTorch at $torch_prefix"
  fi
  if [ "$cpu_mode" = 1 ]; then
    say "no GPU ($why); ACCEL_GPU_CHECK_ALLOW_CPU=1: CPU test mode (tiny ViT at 32 px)"
  else
    say "$gpus GPU(s) visible to torch; GPU 0: $(val gpu_name)"
  fi
fi

# The CUDA toolkit: find_package(Torch) of a CUDA LibTorch needs nvcc of the same major.
if [ -n "$cuda_build" ]; then
  command -v nvcc >/dev/null \
    || die "no CUDA toolkit: nvcc is neither on PATH nor in $CUDA_HOME/bin (find_package(Torch) of a CUDA LibTorch needs it); set CUDA_HOME"
  tk=$(nvcc --version | sed -n 's/.*release \([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p')
  # Compiling against one CUDA major and loading torch's libraries of another
  # puts two cudarts in the process.
  [ "${tk%%.*}" = "${cuda_build%%.*}" ] \
    || die "torch is built for CUDA $cuda_build, nvcc ($(command -v nvcc)) is CUDA $tk; set CUDA_HOME to a CUDA ${cuda_build%%.*} toolkit"
  say "CUDA toolkit $tk at $(dirname "$(dirname "$(command -v nvcc)")")"
  # The CUDA libraries at run time: torch's own (pip's nvidia-* wheels) first,
  # so that accel-bench maps the cuBLAS, cuDNN and NCCL the Python peer maps;
  # the toolkit's only where torch has none and ld.so's cache lacks them.
  nvidia_libs=$(val nvidia_libs)
  if [ -n "$nvidia_libs" ] && ls ${nvidia_libs//:/ } 2>/dev/null | grep -q '^libcublas\.so'; then
    export LD_LIBRARY_PATH=$nvidia_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    say "CUDA libraries: torch's own first (${nvidia_libs//:/, })"
  elif [ -d "$CUDA_HOME/lib64" ] && ! ldconfig -p 2>/dev/null | grep -q 'libcublas\.so\.'; then
    export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}${nvidia_libs:+$nvidia_libs:}$CUDA_HOME/lib64
    say "CUDA libraries: torch ships no cuBLAS; the toolkit's ($CUDA_HOME/lib64)"
  fi
fi

# --- 2. deps: every lookup of the build provided, before anything is built ----------------
stage deps
command -v cmake >/dev/null || die "cmake not found (3.18 or newer; the distribution's or pip's cmake)"
check_deps >"$WORK/deps.txt" 2>&1 || { cat "$WORK/deps.txt"; die "the build looks up a package this script cannot provide (above)"; }

# unpack_deb FILE ROOT: a .deb's files under ROOT, as dpkg -x unpacks them
# (with binutils' ar and tar where there is no dpkg: a .deb is an ar archive
# holding data.tar.{xz,zst,gz}); refused when it is for another architecture.
unpack_deb() {
  local f=$1 root=$2 a t
  # The runtime .debs are per architecture (the header-only ones are "all").
  if command -v dpkg-deb >/dev/null && command -v dpkg >/dev/null; then
    a=$(dpkg-deb -f "$f" Architecture)
    [ "$a" = all ] || [ "$a" = "$(dpkg --print-architecture)" ] \
      || die "$f is for $a, this machine is $(dpkg --print-architecture); fetch the .debs for this architecture"
  fi
  if command -v dpkg >/dev/null; then
    dpkg -x "$f" "$root" || die "dpkg -x $f failed"
  else
    t=$(mktemp -d "$WORK/deb.XXXXXX")
    (cd "$t" && ar x "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")") || die "ar x $f failed (binutils' ar is needed without dpkg)"
    tar -xf "$t"/data.tar.* -C "$root" || die "unpacking $f's data.tar failed"
    rm -rf "$t"
  fi
}

# probe NAME CMAKE_ARGS...: which of DEPS cmake finds, as "pkg where" lines in
# $WORK/NAME/found.txt (only found ones). A throwaway project: a failed lookup
# must not break, and cannot poison, the real build's cache.
probe() {
  local name=$1 dir=$WORK/$1
  shift
  rm -rf "$dir" && mkdir -p "$dir/src"
  cat >"$dir/src/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.18)
project(accel_deps_probe CXX)
# After project(): the compiler and make program are found as usual, only the
# packages' lookup is kept to CMAKE_PREFIX_PATH.
if(ONLY_PREFIX_PATH)
  foreach(v CMAKE_SYSTEM_PATH SYSTEM_ENVIRONMENT_PATH CMAKE_ENVIRONMENT_PATH
            PACKAGE_REGISTRY SYSTEM_PACKAGE_REGISTRY)
    set(CMAKE_FIND_USE_${v} OFF)
  endforeach()
  set(Boost_NO_SYSTEM_PATHS ON)
endif()
find_package(nlohmann_json 3 QUIET)
find_package(CLI11 QUIET)
find_package(doctest QUIET)
find_package(ZLIB QUIET)
find_package(BZip2 QUIET)
find_package(OpenSSL QUIET)
find_package(SQLite3 QUIET)
find_package(Boost 1.74 QUIET)
find_path(UTF8PROC_INCLUDE_DIR utf8proc.h)
find_library(UTF8PROC_LIBRARY utf8proc)
set(out "")
foreach(p nlohmann_json CLI11 doctest)
  if(${p}_FOUND)
    string(APPEND out "${p} ${${p}_DIR}\n")
  endif()
endforeach()
if(ZLIB_FOUND)
  string(APPEND out "ZLIB ${ZLIB_INCLUDE_DIRS};${ZLIB_LIBRARIES}\n")
endif()
if(BZIP2_FOUND)
  string(APPEND out "BZip2 ${BZIP2_INCLUDE_DIRS};${BZIP2_LIBRARIES}\n")
endif()
if(OPENSSL_FOUND AND OPENSSL_CRYPTO_LIBRARY)
  string(APPEND out "OpenSSL ${OPENSSL_INCLUDE_DIR};${OPENSSL_CRYPTO_LIBRARY}\n")
endif()
if(SQLite3_FOUND)
  string(APPEND out "SQLite3 ${SQLite3_INCLUDE_DIRS};${SQLite3_LIBRARIES}\n")
endif()
if(Boost_FOUND)
  string(APPEND out "Boost ${Boost_INCLUDE_DIRS}\n")
endif()
if(UTF8PROC_INCLUDE_DIR AND UTF8PROC_LIBRARY)
  string(APPEND out "utf8proc ${UTF8PROC_INCLUDE_DIR};${UTF8PROC_LIBRARY}\n")
endif()
file(WRITE "${CMAKE_BINARY_DIR}/../found.txt" "${out}")
EOF
  bounded 60 cmake -S "$dir/src" -B "$dir/build" "$@" >"$dir/cmake.log" 2>&1 \
    || die "the dependency probe failed to configure ($(grep -m 1 'Error' "$dir/cmake.log" || echo 'see the log')): $dir/cmake.log"
}
found_in() { awk -v p="$1" '$1 == p { $1 = ""; sub(/^ /, ""); print; exit }' "$WORK/$2/found.txt"; }

missing=() why_debs="cmake does not find it on this system"
if [ "$DEPS_MODE" = debs ]; then
  missing=("${DEPS[@]}") why_debs="ACCEL_GPU_CHECK_DEPS=debs"
  say "ACCEL_GPU_CHECK_DEPS=debs: every dependency from $DEBS_DIR"
else
  probe system
  for p in "${DEPS[@]}"; do
    where=$(found_in "$p" system)
    if [ -n "$where" ]; then say "$p: $where"; else missing+=("$p"); fi
  done
fi
deps_prefix=""
if [ "${#missing[@]}" -gt 0 ]; then
  [ "$DEPS_MODE" != system ] \
    || die "cmake cannot find ${missing[*]} on this system (ACCEL_GPU_CHECK_DEPS=system)"
  want=() absent=()
  for p in "${missing[@]}"; do
    for d in $(debs_for "$p"); do
      f=$(ls "$DEBS_DIR/${d}"_*.deb 2>/dev/null | sort -V | tail -n 1 || true)
      if [ -n "$f" ]; then want+=("$f"); else absent+=("${d}_*.deb ($p)"); fi
    done
  done
  [ "${#absent[@]}" -eq 0 ] \
    || die "${missing[*]} must come from $DEBS_DIR ($why_debs), which lacks ${absent[*]}; run 'scripts/gpu-check.sh --fetch-debs' on a Debian machine and carry the folder as $DEBS_DIR (device call: carry [\".debs\"])"
  root=$WORK/deps
  stamp=$(for f in "${want[@]}"; do echo "$(basename "$f") $(wc -c <"$f")"; done)
  if [ "$(cat "$root.stamp" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$root" "$root.stamp" && mkdir -p "$root"
    for f in "${want[@]}"; do
      unpack_deb "$f" "$root"
      say "unpacked $(basename "$f")"
    done
    # zlib1g-dev's libz.so is an absolute link (/lib/<arch>/libz.so.1.x): point
    # such links at the unpacked copy.
    while IFS= read -r l; do
      t=$(readlink "$l")
      if [ "${t#/}" != "$t" ] && [ -e "$root$t" ]; then ln -sfn "$root$t" "$l"; fi
    done < <(find "$root" -type l)
    # Headers in the multiarch include folder (libssl-dev's openssl/opensslconf.h
    # is in /usr/include/<arch>/): the compiler searches that folder only under
    # /usr/include, so link them into the unpacked include folder as well.
    for d in "$root"/usr/include/*-linux-gnu; do
      [ -d "$d" ] && cp -as --no-clobber "$d/." "$root/usr/include/"
    done
    # Where the compiler has no multiarch folder (not Debian/Ubuntu), find_library
    # looks in <prefix>/lib only: link the libraries there as well.
    for l in "$root"/usr/lib/*-linux-gnu/lib*; do
      if [ -e "$l" ] && [ ! -e "$root/usr/lib/${l##*/}" ]; then ln -s "$l" "$root/usr/lib/${l##*/}"; fi
    done
    echo "$stamp" >"$root.stamp"
  fi
  deps_prefix=$root/usr
  # Proof that the .debs alone serve: cmake with every system location turned off.
  probe debs -DCMAKE_PREFIX_PATH="$deps_prefix" -DONLY_PREFIX_PATH=ON
  for p in "${missing[@]}"; do
    where=$(found_in "$p" debs)
    case "$where" in
      "$root"/*) say "$p: $where (from $DEBS_DIR)" ;;
      "") die "cmake does not find $p in the unpacked .debs ($deps_prefix); see $WORK/debs/cmake.log" ;;
      *) die "cmake found $p outside the unpacked .debs: $where" ;;
    esac
  done
  # Their shared libraries at run time, after the system's own.
  for l in "$root"/usr/lib/*-linux-gnu; do
    [ -d "$l" ] && export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$l
  done
fi

# Torch's headers' own includes: in torch's include folder or the compiler's,
# else unpacked from the .debs into a folder of their own, searched after
# every other (-isystem), so they stand in for nothing the system has.
header_flags=""
if [ -n "$torch_prefix" ]; then
  torch_inc=$(cd "$torch_prefix/../../include" 2>/dev/null && pwd || true)
  hroot=$WORK/torch-headers
  for h in "${TORCH_HEADER_DEPS[@]}"; do
    if [ -n "$torch_inc" ] && [ -f "$torch_inc/$h" ]; then
      say "$h: in torch's include folder"
    elif echo "#include <$h>" | ${CXX:-c++} -std=c++17 -fsyntax-only -x c++ - >/dev/null 2>&1; then
      say "$h: the compiler finds it"
    else
      d=$(torch_header_debs "$h")
      f=$(ls "$DEBS_DIR/${d}"_*.deb 2>/dev/null | sort -V | tail -n 1 || true)
      [ -n "$f" ] || die "torch's headers include <$h>, which neither torch nor this system has, and $DEBS_DIR lacks ${d}_*.deb; run 'scripts/gpu-check.sh --fetch-debs' on a Debian machine and carry the folder (device call: carry [\".debs\"])"
      if [ ! -f "$hroot/usr/include/$h" ]; then
        mkdir -p "$hroot"
        unpack_deb "$f" "$hroot"
      fi
      [ -f "$hroot/usr/include/$h" ] || die "$(basename "$f") holds no include/$h"
      say "$h: from $(basename "$f") (headers only, in $hroot/usr/include)"
      header_flags="-isystem $hroot/usr/include"
    fi
  done
fi

# --- 3. build-cli: configure, then the CLI alone ------------------------------------------
stage build-cli
prefixes=$torch_prefix
[ -n "$deps_prefix" ] && prefixes=${prefixes:+$prefixes;}$deps_prefix
cfg=(-DCMAKE_BUILD_TYPE=Release -DACCEL_BUILD_TESTS=ON -DACCEL_BUILD_BENCH=OFF)
[ -n "$header_flags" ] && cfg+=(-DCMAKE_CXX_FLAGS="$header_flags")
[ -n "$prefixes" ] && cfg+=(-DCMAKE_PREFIX_PATH="$prefixes")
[ -n "$torch_prefix" ] && cfg+=(-DTorch_DIR="$torch_prefix/Torch")
# Configure only when the folder is new or the arguments changed: the CUDA
# checks in TorchConfig.cmake cost ~15 s each time.
args_file=$WORK/configure.args
if [ -f "$BUILD_DIR/CMakeCache.txt" ] && [ "$(cat "$args_file" 2>/dev/null)" = "$(printf '%s\n' "${cfg[@]}")" ]; then
  build_args=()
else
  build_args=("${cfg[@]}")
fi
BIN=$BUILD_DIR/accel-bench
features=$BUILD_DIR/accel-features.txt
built_cli=0
build_errors() {  # build_errors LOG: its first 40 error lines, for the pack
  grep -E 'error:|Error|CMake Error' "$1" | head -n 40 >"$WORK/errors.txt" || true
}
say "building accel-bench in $BUILD_DIR with $(nproc) jobs${build_args:+ (configuring: ${cfg[*]})}"
rc=0
BUILD_DIR=$BUILD_DIR BUILD_TARGETS=accel-bench bounded 420 bash scripts/build.sh "${build_args[@]}" \
  >"$WORK/build-cli.log" 2>&1 || rc=$?
tail -n 5 "$WORK/build-cli.log" | sed 's/^/  /'
if [ "$rc" -ne 0 ]; then
  build_errors "$WORK/build-cli.log"
  sed 's/^/  /' "$WORK/errors.txt" | head -n 20
  die "building accel-bench failed ($(why_rc "$rc")); log: $WORK/build-cli.log"
fi
printf '%s\n' "${cfg[@]}" >"$args_file"
[ -f "$features" ] || die "$features missing (written by cmake/torch_features.cmake)"
say "$(tr '\n' ' ' <"$features")"
if [ "$cpu_mode" = 0 ]; then
  grep -qx ACCEL_WITH_CUDA=1 "$features" || die "this LibTorch did not turn CUDA on in $BUILD_DIR"
  if ! grep -qx ACCEL_WITH_NCCL=1 "$features"; then
    [ "$gpus" -lt 2 ] || die "this LibTorch did not turn the NCCL process group on ($gpus GPUs: DDP/FSDP need it)"
    warn "no NCCL process group in this LibTorch (only matters with 2+ GPUs)"
  fi
fi
[ -x "$BIN" ] || die "$BIN was not built"
# Without a GPU the driver (libcuda.so.1) is absent; torch opens it lazily.
not_found() {
  ldd "$1" | awk -v cpu="$cpu_mode" '/not found/ && !(cpu == 1 && $1 == "libcuda.so.1") { print $1 }' | tr '\n' ' '
}
ldd "$BIN" >"$WORK/ldd-accel-bench.txt" 2>&1 || true
nf=$(not_found "$BIN")
[ -z "$nf" ] || die "$BIN: libraries not found: $nf"
bounded 30 "$BIN" --version >/dev/null || die "$BIN does not start"
bounded 60 "$BIN" env >"$WORK/env.json" 2>"$WORK/env.err" || warn "accel-bench env failed: $(tail -n 1 "$WORK/env.err")"
built_cli=1
machine_id=$("$BIN" sweep --machine-id)
say "machine id: $machine_id"

# --- 4. ladder: the GPU check's suites, fitted to this machine, through the sweep -------
# In order of value, in case the call is cut: the smoke suite (32-true,
# bf16-mixed, CUDA Graphs at the article's batch; DDP, FSDP; the text step),
# the batch sweep (where the core stops being host-bound, up to the first
# batch that runs out of memory), the text ladder's single-GPU rungs at the
# blog's shape. Each is a committed suite the CLI runs (configs/gpu-check/).
stage ladder
if ! skipping ladder; then
OUT_ROOT=${ACCEL_GPU_CHECK_OUT:-results}
[ "$cpu_mode" = 1 ] && OUT_ROOT=${ACCEL_GPU_CHECK_OUT:-runs}
suites=()
for name in suite batch/suite text/suite; do
suite=$WORK/suite-${name%/suite}.json
# The committed suite with absolute paths; multi-GPU rungs over every
# GPU when there are more than their 2 (an overlay config per rung). With one
# GPU they stay: the sweep records them as skipped (needs 2 GPUs). The CPU test
# mode leaves out CUDA Graphs and gives each rung a tiny model of its family.
"$PY" - "$PWD/configs/gpu-check/$name.json" "$suite" "$cpu_mode" "${gpus:-0}" <<'EOF' || die "could not write $suite"
import json, os, sys
src, dst, cpu, gpus = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
base = os.path.dirname(src)
stem = os.path.splitext(os.path.basename(dst))[0]

def resolved(path):  # the config with its extends chain merged (dicts only)
    with open(path) as f:
        doc = json.load(f)
    out = {}
    if "extends" in doc:
        out = resolved(os.path.join(os.path.dirname(path), doc.pop("extends")))
    for k, v in doc.items():
        out[k] = {**out.get(k, {}), **v} if isinstance(v, dict) else v
    return out

with open(src) as f:
    suite = json.load(f)
# Paths the suite names relative to itself, absolute in its copy.
for key in ("reference", "results"):
    if key in suite:
        suite[key] = os.path.normpath(os.path.join(base, suite[key]))
rungs = []
# CPU test mode: a tiny model of each rung's family (an overlay per rung, as the
# suite's "set" applies to every rung and each family has its own fields).
tiny = {"vit": {"model": {"preset": "custom", "image_size": 32, "patch_size": 8, "dim": 64,
                          "depth": 2, "heads": 2, "mlp_dim": 128}},
        "bert": {"model": {"preset": "bert_tiny"}, "data": {"max_length": 32}},
        "distilbert": {"model": {"preset": "distilbert_tiny"}, "data": {"max_length": 32}}}
for r in suite["rungs"]:
    cfg = os.path.join(base, r["config"])
    conf = resolved(cfg)
    rt = conf.get("runtime", {})
    if cpu and rt.get("cuda_graphs"):
        print("gpu-check: %s: left out (CUDA Graphs need a GPU)" % r["id"])
        continue
    if cpu and rt.get("precision") == "16-mixed":
        print("gpu-check: %s: left out (16-mixed's fp16 autocast needs a GPU)" % r["id"])
        continue
    overlay = {}
    devices = rt.get("devices", 1)
    if isinstance(devices, int) and devices > 1:
        if cpu:
            print("gpu-check: %s: %d CPU ranks over Gloo" % (r["id"], devices))
        elif gpus < devices:
            print("gpu-check: %s: needs %d GPUs, this machine has %d: the sweep records it as skipped"
                  % (r["id"], devices, gpus))
        elif gpus > devices:
            overlay["runtime"] = {"devices": gpus}
            r["changes"] = r.get("changes", "") + " (%d GPUs)" % gpus
    if cpu:
        for k, v in tiny[conf.get("model", {}).get("arch", "vit")].items():
            overlay[k] = {**overlay.get(k, {}), **v}
    if overlay:
        path = os.path.join(os.path.dirname(dst), "%s-%s-fitted.json" % (stem, r["id"]))
        with open(path, "w") as f:
            json.dump({"extends": cfg, **overlay}, f, indent=2)
        cfg = path
    r["config"] = cfg
    rungs.append(r)
# A rung taken against one left out is taken against the rung before it.
ids = set()
for r in rungs:
    ids.add(r["id"])
    ids.update("%s-b%d" % (r["id"], b) for b in r.get("batch_sizes", []))
for r in rungs:
    if r.get("versus") and r["versus"] not in ids:
        del r["versus"]
suite["rungs"] = rungs
if cpu:
    suite["description"] = "CPU test mode of scripts/gpu-check.sh (tiny models, 32 px / 32 tokens, a few steps): proves the flow, measures nothing. " + suite.get("description", "")
    suite["set"] = suite.get("set", []) + [
        "runtime.accelerator=cpu", "train.batch_size=8", "train.max_steps=6",
        "train.warmup_steps=2", "train.eval_batch_size=16", "train.limit_eval_batches=1",
        "data.synthetic_train=2048", "data.synthetic_test=16"]
with open(dst, "w") as f:
    json.dump(suite, f, indent=2)
    f.write("\n")
EOF
suites+=("$suite")
done
set_dirs=()
for suite in "${suites[@]}"; do
  name=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["suite"])' "$suite") \
    || die "$suite: no suite name"
  set_dirs+=("$OUT_ROOT/$name/$machine_id")
done
set_dir=${set_dirs[0]}
say "sweep of ${suites[*]} into ${set_dirs[*]}"
# Each child run at most 150 s (a vit_b_16 rung took 6 s on the H200), the
# whole sweep at most 300 s and what the budget leaves (19 rungs on one GPU:
# about 150 s; a sweep cut short keeps the rungs it finished).
run_timeout=150
[ "$cpu_mode" = 1 ] && run_timeout=300
rc=0
bounded 300 "$BIN" sweep --suite "${suites[@]}" --out "$OUT_ROOT" --run-timeout "$run_timeout" "${SWEEP_ARGS[@]}" || rc=$?
for i in "${!suites[@]}"; do
  [ -d "${set_dirs[$i]}" ] && cp "${suites[$i]}" "${set_dirs[$i]}/suite.json"
done
# A batch series' run that ran out of memory is where the series ends, not a
# failure: the sweep exits 0 with it (and the report shows it).
case "$rc" in
  0) ;;
  2) fail "the sweep refused a suite or its arguments (exit 2)" ;;
  *) fail "the sweep: $(why_rc "$rc")" ;;
esac
for d in "${set_dirs[@]}"; do
  [ -d "$d" ] || continue
  if bounded 60 "$BIN" report "$d" >"$WORK/report.out" 2>"$WORK/report.err"; then
    cat "$WORK/report.out"
    grep -v '^$' "$WORK/report.err" | sed 's/^/gpu-check: /' || true
  else
    fail "accel-bench report $d failed: $(tail -n 1 "$WORK/report.err")"
  fi
done
# Across GPUs: this machine's smoke set against each committed one of another
# machine (results/gpu-check/<machine-id>/), rung by rung with intervals, as a
# CI gate per GPU kind would read them. A difference is the point, not a failure.
if [ -d "$set_dir" ]; then
  for base in "$PWD"/results/gpu-check/*/; do
    base=${base%/}
    [ -f "$base/sweep.json" ] && [ "$(basename "$base")" != "$machine_id" ] || continue
    out_md=$WORK/compare-$(basename "$base").md
    rc=0
    bounded 60 "$BIN" compare "$base" "$set_dir" --format md >"$out_md" 2>"$WORK/compare.err" || rc=$?
    case "$rc" in
      0|1|4) say "compared with $(basename "$base"): $out_md" ;;
      *) rm -f "$out_md"; warn "compare with $base: $(why_rc "$rc"): $(tail -n 1 "$WORK/compare.err")" ;;
    esac
  done
fi

fi

# --- 5. calibrate: this machine's CPU matmul peaks -----------------------------------------
stage calibrate
if ! skipping calibrate; then
rc=0
bounded 90 "$BIN" calibrate -o "$WORK/calibration.json" --max-threads "$(nproc)" --min-seconds 0.1 \
  >"$WORK/calibrate.log" 2>&1 || rc=$?
tail -n 8 "$WORK/calibrate.log" | sed 's/^/  /'
[ "$rc" -eq 0 ] || fail "accel-bench calibrate: $(why_rc "$rc")"

fi

# --- 6. peer: the same step through Lightning Fabric, like for like ---------------------
# Both sides: vit_b_16, bf16-mixed, the fused Adam, each batch copied from pinned
# host memory; eager against eager at the article's batch 16 and at the best
# batch of the batch sweep's eager series (the most samples/s in its report;
# 128 without one), 3 rounds alternating the sides. The compiled peer against
# the CUDA Graphs rung is the last stage (peer-compile): its compilation alone
# takes a minute.
best_batch=128
batch_csv=$(ls "${set_dirs[1]:-/nonexistent}/report.csv" 2>/dev/null || true)
if [ -n "$batch_csv" ]; then
  best_batch=$("$PY" -c '
import csv, re, sys
best = None
for row in csv.DictReader(open(sys.argv[1])):
    m = re.fullmatch(r"bf16-b(\d+)", row["rung"])
    if m and row["status"].startswith("ok") and row["images_per_s_total"]:
        if best is None or float(row["images_per_s_total"]) > best[0]:
            best = (float(row["images_per_s_total"]), int(m.group(1)))
print(best[1] if best else 128)' "$batch_csv" 2>/dev/null) || best_batch=128
  say "the batch sweep's best eager batch: $best_batch"
fi
stage peer
if ! skipping peer; then
peer_args=(--precisions bf16-mixed --batch 16 --large-batch "$best_batch" --steps 40 --warmup 10 --rounds 3)
[ "$cpu_mode" = 1 ] && peer_args=(--tiny --device cpu --precisions 32-true --batch 8 --large-batch 16 --steps 5 --warmup 2 --rounds 2)
rm -rf "$WORK/peer"
rc=0
BUILD_DIR=$BUILD_DIR PYTHON=$PY bounded 150 bash bench/fabric_peer.sh "${peer_args[@]}" --out "$WORK/peer" \
  >"$WORK/peer.log" 2>&1 || rc=$?
tail -n 8 "$WORK/peer.log" | sed 's/^/  /'
[ "$rc" -eq 0 ] || fail "bench/fabric_peer.sh: $(why_rc "$rc"): $(grep -m 1 'error:' "$WORK/peer.log" || tail -n 1 "$WORK/peer.log")"

fi

# --- 7. build-tests ------------------------------------------------------------------------
stage build-tests
rc=0
BUILD_DIR=$BUILD_DIR BUILD_TARGETS=accel_tests bounded 420 bash scripts/build.sh >"$WORK/build-tests.log" 2>&1 || rc=$?
tail -n 3 "$WORK/build-tests.log" | sed 's/^/  /'
tests_bin=$BUILD_DIR/tests/accel_tests
if [ "$rc" -ne 0 ] || [ ! -x "$tests_bin" ]; then
  build_errors "$WORK/build-tests.log"
  fail "building the tests: $(why_rc "$rc")"
else
  ldd "$tests_bin" >"$WORK/ldd-accel_tests.txt" 2>&1 || true
  nf=$(not_found "$tests_bin")
  [ -z "$nf" ] || fail "$tests_bin: libraries not found: $nf"
fi

# --- 8. gpu-tests --------------------------------------------------------------------------
stage gpu-tests
log=$WORK/ctest-gpu.log
if [ -x "$tests_bin" ]; then
  # One at a time: they share the GPU(s), and multi-GPU tests take ports.
  rc=0
  (cd "$BUILD_DIR" && bounded 300 ctest -R '^gpu ' --output-on-failure --timeout 120) >"$log" 2>&1 || rc=$?
  grep -v '^[[:space:]]*$' "$log" | sed 's/^/  /' | tail -n 40 || true
  ran=$(sed -n 's/^[0-9]*% tests passed, [0-9]* tests failed out of \([0-9]*\).*/\1/p' "$log" | tail -n 1)
  # ctest lists skipped tests under "The following tests did not run:" as
  # "  12 - gpu name (Skipped)"; a GPU test prints "skipped: no GPU" when it sees none.
  skipped=$(grep -cE '^[[:space:]]*[0-9]+ - gpu .*\((Skipped|Not Run|Disabled)\)$' "$log" || true)
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 125 ]; then
    fail "ctest: $(why_rc "$rc")"
  elif grep -q 'No tests were found' "$log" || [ "${ran:-0}" = 0 ]; then
    fail "no GPU tests in $BUILD_DIR (no ctest name starts with 'gpu ')"
  elif [ "$rc" -ne 0 ] && ! grep -qE 'tests failed out of' "$log"; then
    fail "ctest did not run (exit $rc): see $log"
  else
    grep -qE ' 0 tests failed out of' "$log" || fail "GPU tests failed: see $log"
    # The image has no debugger: a test that crashed runs once more with
    # scripts/segv-backtrace.c preloaded, its frames named by addr2line.
    crashed=$(sed -nE 's/^[[:space:]]*[0-9]+ - (gpu .*) \((SEGFAULT|Bus error|Child aborted|Exception)\)$/\1/p' "$log" | head -n 3)
    if [ -n "$crashed" ] && command -v cc >/dev/null; then
      bt=$WORK/crash-backtraces.txt shim=$WORK/segv-backtrace.so
      : >"$bt"
      if cc -shared -fPIC -O1 -o "$shim" scripts/segv-backtrace.c -ldl >>"$bt" 2>&1; then
        while IFS= read -r name; do
          echo "== $name" >>"$bt"
          (cd "$BUILD_DIR" && LD_PRELOAD=$shim bounded 120 "$PWD/tests/accel_tests" -tc="$name" >>"$bt" 2>&1) || true
        done <<<"$crashed"
        # Frames of our own binaries, named (the libraries' by object and offset only).
        if command -v addr2line >/dev/null; then
          echo "== frames of accel_tests named" >>"$bt"
          sed -n 's|^.*/accel_tests(+\(0x[0-9a-f]*\)).*$|\1|p' "$bt" | head -n 40 |
            xargs -r addr2line -f -C -i -e "$tests_bin" >>"$bt" 2>&1 || true
        fi
        say "crashed GPU tests rerun with a backtrace: $bt"
      fi
    fi
    if [ "$skipped" -gt 0 ] && [ "$cpu_mode" = 0 ]; then
      # The GPU is process-wide: when any GPU test ran on it, skips on one GPU are
      # the tests that need two (they print the same line).
      if [ "$gpus" -ge 2 ] || [ "$skipped" -ge "$ran" ]; then
        fail "$skipped of $ran GPU tests printed 'skipped: no GPU' although torch sees $gpus GPU(s): the tests do not see the GPU (CUDA_VISIBLE_DEVICES? another LibTorch in $BUILD_DIR?)"
      else
        say "$skipped GPU test(s) skipped on this 1-GPU machine (they need 2 GPUs)"
      fi
    elif [ "$skipped" -gt 0 ]; then
      say "$skipped GPU test(s) skipped (CPU test mode: expected)"
    fi
  fi
else
  fail "no test binary to run"
fi

# --- 9. peer-compile: the CUDA Graphs rung against Fabric with torch.compile ---------------
# The article's rung 02: accel-bench's whole step in one CUDA Graph against the
# peer under torch.compile (modes default and reduce-overhead), at the best
# batch, one round each (what the budget leaves), the peer's compile time apart.
stage peer-compile
if ! skipping peer; then
if [ "$cpu_mode" = 1 ]; then
  cur_note="skipped (CUDA Graphs need a GPU)"
else
  rm -rf "$WORK/peer-compile"
  rc=0
  BUILD_DIR=$BUILD_DIR PYTHON=$PY bounded 300 bash bench/fabric_peer.sh --precisions bf16-mixed --batch "$best_batch" \
    --large-batch 0 --steps 40 --warmup 10 --rounds 1 --compile "default reduce-overhead" --compiled-only \
    --out "$WORK/peer-compile" >"$WORK/peer-compile.log" 2>&1 || rc=$?
  tail -n 6 "$WORK/peer-compile.log" | sed 's/^/  /'
  [ "$rc" -eq 0 ] || fail "bench/fabric_peer.sh --compile: $(why_rc "$rc"): $(grep -m 1 'error:' "$WORK/peer-compile.log" || tail -n 1 "$WORK/peer-compile.log")"
fi
fi
