#!/usr/bin/env bash
# The GPU check: on a Linux machine with an NVIDIA GPU and a pip-installed
# PyTorch, builds accel-bench against that torch's LibTorch, runs the GPU tests
# (ctest names starting with "gpu "), then a GPU smoke ladder on synthetic data
# (configs/gpu-check/: vit_b_16 at 224, 40 steps each of 32-true, bf16-mixed,
# bf16-mixed + CUDA Graphs, and with 2+ GPUs DDP and FSDP over all of them;
# then bert_base on synthetic tokens in bf16-mixed)
# through `accel-bench sweep`, and writes the report beside the results. Meant
# to take under 8 minutes on one H100/H200-class GPU with 16 cores. Needs
# cmake, a C++17 compiler and the CUDA toolkit (nvcc) of torch's CUDA major
# (find_package(Torch) of a CUDA LibTorch enables the CUDA language), but no
# apt and no network: CLI11, nlohmann/json, doctest and zlib come from the
# system, or else from Debian .deb files carried beside the tree (see
# --fetch-debs), unpacked with dpkg -x (or ar + tar) under the build folder.
# Google Benchmark is not needed (ACCEL_BUILD_BENCH=OFF).
#
#   scripts/gpu-check.sh                   # build, GPU tests, smoke ladder, report
#   scripts/gpu-check.sh --set train.batch_size=32   # extra arguments go to the sweep
#   scripts/gpu-check.sh --fetch-debs [DIR]          # on a Debian machine with apt:
#                          # download the .debs into DIR (default .debs at the repo root;
#                          # zlib's are for this machine's architecture)
#
# Results: ACCEL_GPU_CHECK_OUT/gpu-check/<machine-id>/ (the sweep's layout: <rung>/result.json,
# sweep.json, suite.json, report.md, report.csv), e.g.
# results/gpu-check/nvidia-h200-x1-lt2.11.0-cu13.0/. Exit 1 when a phase failed
# (each is named at the end); later phases still run where they can.
#
# Environment:
#   ACCEL_PYTHON       python with torch (default python3); its
#                      torch.utils.cmake_prefix_path is the LibTorch built against
#   BUILD_DIR          build folder (default build-gpu)
#   ACCEL_GPU_CHECK_OUT  output root (default results; runs in the CPU test mode)
#   ACCEL_DEBS_DIR     where the .deb files are (default .debs at the repo root)
#   ACCEL_GPU_CHECK_DEPS  auto (default: .debs only for what cmake cannot find on
#                      the system), debs (every header dependency from the .debs,
#                      even where the system has it), system (never the .debs)
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
die() { echo "gpu-check: error: $*" >&2; exit 1; }

# CMake package (find_package in CMakeLists.txt, or utf8proc's find_library)
# -> the Debian packages that provide it. The runtime packages (zlib1g,
# libbz2-1.0, libssl3, libutf8proc2) are there for the libraries their -dev
# packages' .so links point at. Torch comes from pip, Threads from libc;
# benchmark (Google Benchmark, compiled, not header-only) is not needed: the
# build turns ACCEL_BUILD_BENCH off.
DEPS=(nlohmann_json CLI11 doctest ZLIB BZip2 OpenSSL utf8proc)
debs_for() {
  case "$1" in
    nlohmann_json) echo nlohmann-json3-dev ;;
    CLI11) echo libcli11-dev ;;
    doctest) echo doctest-dev ;;
    ZLIB) echo zlib1g-dev zlib1g ;;
    BZip2) echo libbz2-dev libbz2-1.0 ;;
    OpenSSL) echo libssl-dev libssl3 ;;
    utf8proc) echo libutf8proc-dev libutf8proc2 ;;
    *) return 1 ;;
  esac
}
ALL_DEBS=(nlohmann-json3-dev libcli11-dev doctest-dev zlib1g-dev zlib1g libbz2-dev libbz2-1.0
          libssl-dev libssl3 libutf8proc-dev libutf8proc2)

# --- --fetch-debs: on a Debian machine, download the .debs to carry along ----------
if [ "${1:-}" = --fetch-debs ]; then
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
  say "carry $dir to the GPU machine as .debs/ at the repo root (or set ACCEL_DEBS_DIR)"
  exit 0
fi
case "${1:-}" in -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;; esac

# --- phases and their times ----------------------------------------------------------
T0=$(date +%s)
phase_names=() phase_secs=() failed=()
cur_phase="" cur_t0=$T0
phase() {  # phase NAME: ends the current phase, starts NAME
  local now
  now=$(date +%s)
  if [ -n "$cur_phase" ]; then
    phase_names+=("$cur_phase")
    phase_secs+=($((now - cur_t0)))
    say "$cur_phase: $((now - cur_t0)) s"
  fi
  cur_phase=$1 cur_t0=$now
  [ -n "$1" ] && say "--- $1 ($((now - T0)) s so far)"
  return 0
}
summary() {
  local rc=$? i
  phase ""
  echo "gpu-check: time per phase:"
  for i in "${!phase_names[@]}"; do
    printf 'gpu-check:   %-12s %5d s\n' "${phase_names[$i]}" "${phase_secs[$i]}"
  done
  local total=$(($(date +%s) - T0))
  printf 'gpu-check:   %-12s %5d s\n' total "$total"
  [ "$total" -le 480 ] || [ "${cpu_mode:-0}" = 1 ] || warn "over the 8-minute budget ($total s)"
  if [ "$rc" -eq 0 ] && [ "${#failed[@]}" -eq 0 ]; then
    say "OK${set_dir:+; results and report in $set_dir/}"
  else
    [ "${#failed[@]}" -eq 0 ] || say "FAILED: ${failed[*]}${set_dir:+; results in $set_dir/}"
    [ "$rc" -ne 0 ] || exit 1
  fi
}

cpu_mode=0
BUILD_DIR=${BUILD_DIR:-build-gpu}
DEBS_DIR=${ACCEL_DEBS_DIR:-.debs}
DEPS_MODE=${ACCEL_GPU_CHECK_DEPS:-auto}
case "$DEPS_MODE" in auto|debs|system) ;; *) die "ACCEL_GPU_CHECK_DEPS must be auto, debs or system: $DEPS_MODE" ;; esac
case "${ACCEL_GPU_CHECK_ALLOW_CPU:-0}" in 0|1) ;; *) die "ACCEL_GPU_CHECK_ALLOW_CPU must be 0 or 1" ;; esac

# --- torch: the python, its LibTorch, the GPUs it sees --------------------------------
# Refusals here are one line and leave nothing behind; the phase table starts after.
PY=${ACCEL_PYTHON:-python3}
PY=$(command -v "$PY") || die "${ACCEL_PYTHON:-python3} not found; install Python 3 with a pip PyTorch, or set ACCEL_PYTHON"
# A venv's cmake and ninja (pip wheels) serve where the system has none.
PATH=$PATH:$(dirname "$PY")
# Output as key=value lines; an import failure is a value, not a crash.
info=$("$PY" -W ignore - <<'EOF' 2>/dev/null || true
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
EOF
)
val() { sed -n "s/^$1=//p" <<<"$info" | head -n 1; }
torch_prefix=""
if [ -z "$(val version)" ]; then
  why=$(val import_error)
  [ "${ACCEL_GPU_CHECK_ALLOW_CPU:-0}" = 1 ] \
    || die "$PY cannot import torch (${why:-no output}); install PyTorch with pip, or set ACCEL_PYTHON to a python that has it"
  cpu_mode=1 gpus=0
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
    say "torch $(val version) (CUDA ${cuda_build:-none}) from $PY; LibTorch at $torch_prefix"
  fi
  if [ "$cpu_mode" = 1 ]; then
    say "no GPU ($why); ACCEL_GPU_CHECK_ALLOW_CPU=1: CPU test mode (tiny ViT at 32 px)"
  else
    say "$gpus GPU(s) visible to torch; GPU 0: $(val gpu_name)"
    if command -v nvidia-smi >/dev/null; then nvidia-smi -L 2>/dev/null | sed 's/^/gpu-check:   /' || true; fi
  fi
fi

cur_phase=torch
trap summary EXIT
mkdir -p "$BUILD_DIR/gpu-check"
WORK=$(cd "$BUILD_DIR/gpu-check" && pwd)

# --- the CUDA toolkit: find_package(Torch) of a CUDA LibTorch needs nvcc -----------
if [ -n "${cuda_build:-}" ]; then
  phase toolkit
  export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
  if ! command -v nvcc >/dev/null && [ -x "$CUDA_HOME/bin/nvcc" ]; then
    export PATH=$CUDA_HOME/bin:$PATH
  fi
  command -v nvcc >/dev/null \
    || die "no CUDA toolkit: nvcc is neither on PATH nor in $CUDA_HOME/bin (find_package(Torch) of a CUDA LibTorch needs it); set CUDA_HOME"
  tk=$(nvcc --version | sed -n 's/.*release \([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p')
  # Compiling against one CUDA major and loading torch's libraries of another
  # puts two cudarts in the process.
  [ "${tk%%.*}" = "${cuda_build%%.*}" ] \
    || die "torch is built for CUDA $cuda_build, nvcc ($(command -v nvcc)) is CUDA $tk; set CUDA_HOME to a CUDA ${cuda_build%%.*} toolkit"
  say "CUDA toolkit $tk at $(dirname "$(dirname "$(command -v nvcc)")")"
  # Where ld.so's cache lacks the toolkit's libraries, find them this way.
  if [ -d "$CUDA_HOME/lib64" ] && ! ldconfig -p 2>/dev/null | grep -q 'libcublas\.so\.'; then
    export LD_LIBRARY_PATH=$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  fi
fi

# --- library dependencies: the system's, else the .debs ------------------------------
phase deps
command -v cmake >/dev/null || die "cmake not found (3.18 or newer; the distribution's or pip's cmake)"
# Every find_package of CMakeLists.txt must be one this script knows how to provide.
for p in $(sed -n 's/^ *find_package(\([A-Za-z0-9_]*\).*/\1/p' CMakeLists.txt); do
  case "$p" in Torch|Threads|benchmark) ;; *)
    debs_for "$p" >/dev/null || warn "CMakeLists.txt finds package $p, which gpu-check.sh does not know how to provide" ;;
  esac
done

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
endif()
find_package(nlohmann_json 3 QUIET)
find_package(CLI11 QUIET)
find_package(doctest QUIET)
find_package(ZLIB QUIET)
find_package(BZip2 QUIET)
find_package(OpenSSL QUIET)
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
if(UTF8PROC_INCLUDE_DIR AND UTF8PROC_LIBRARY)
  string(APPEND out "utf8proc ${UTF8PROC_INCLUDE_DIR};${UTF8PROC_LIBRARY}\n")
endif()
file(WRITE "${CMAKE_BINARY_DIR}/../found.txt" "${out}")
EOF
  cmake -S "$dir/src" -B "$dir/build" "$@" >"$dir/cmake.log" 2>&1 \
    || die "the dependency probe failed to configure ($(grep -m 1 'Error' "$dir/cmake.log" || echo 'see the log')): $dir/cmake.log"
}
found_in() { awk -v p="$1" '$1 == p { $1 = ""; sub(/^ /, ""); print; exit }' "$WORK/$2/found.txt"; }

missing=() why_debs="cmake does not find it on this system"
if [ "$DEPS_MODE" = debs ]; then
  missing=("${DEPS[@]}") why_debs="ACCEL_GPU_CHECK_DEPS=debs"
  say "ACCEL_GPU_CHECK_DEPS=debs: every header dependency from $DEBS_DIR"
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
  want=()
  for p in "${missing[@]}"; do
    for d in $(debs_for "$p"); do
      f=$(ls "$DEBS_DIR/${d}"_*.deb 2>/dev/null | sort -V | tail -n 1 || true)
      [ -n "$f" ] || die "$p must come from $DEBS_DIR ($why_debs), which has no ${d}_*.deb; run 'scripts/gpu-check.sh --fetch-debs' on a Debian machine and carry the folder here as $DEBS_DIR (or set ACCEL_DEBS_DIR)"
      want+=("$f")
    done
  done
  root=$WORK/deps
  stamp=$(for f in "${want[@]}"; do echo "$(basename "$f") $(wc -c <"$f")"; done)
  if [ "$(cat "$root.stamp" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$root" "$root.stamp" && mkdir -p "$root"
    for f in "${want[@]}"; do
      # zlib's .debs are per architecture (the header-only ones are "all").
      if command -v dpkg-deb >/dev/null && command -v dpkg >/dev/null; then
        a=$(dpkg-deb -f "$f" Architecture)
        [ "$a" = all ] || [ "$a" = "$(dpkg --print-architecture)" ] \
          || die "$f is for $a, this machine is $(dpkg --print-architecture); fetch the .debs for this architecture"
      fi
      if command -v dpkg >/dev/null; then
        dpkg -x "$f" "$root" || die "dpkg -x $f failed"
      else  # a .deb is an ar archive holding data.tar.{xz,zst,gz}
        t=$(mktemp -d "$WORK/deb.XXXXXX")
        (cd "$t" && ar x "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")") || die "ar x $f failed (binutils' ar is needed without dpkg)"
        tar -xf "$t"/data.tar.* -C "$root" || die "unpacking $f's data.tar failed"
        rm -rf "$t"
      fi
      say "unpacked $(basename "$f")"
    done
    # zlib1g-dev's libz.so is an absolute link (/lib/<arch>/libz.so.1.x): point
    # such links at the unpacked copy.
    while IFS= read -r l; do
      t=$(readlink "$l")
      if [ "${t#/}" != "$t" ] && [ -e "$root$t" ]; then ln -sfn "$root$t" "$l"; fi
    done < <(find "$root" -type l)
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
fi

# --- build -----------------------------------------------------------------------------
phase build
prefixes=$torch_prefix
[ -n "$deps_prefix" ] && prefixes=${prefixes:+$prefixes;}$deps_prefix
cfg=(-DCMAKE_BUILD_TYPE=Release -DACCEL_BUILD_TESTS=ON -DACCEL_BUILD_BENCH=OFF)
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
say "building in $BUILD_DIR with $(nproc) jobs${build_args:+ (configuring: ${cfg[*]})}"
BUILD_DIR=$BUILD_DIR bash scripts/build.sh "${build_args[@]}" || die "the build failed"
printf '%s\n' "${cfg[@]}" >"$args_file"
features=$BUILD_DIR/accel-features.txt
[ -f "$features" ] || die "$features missing (written by cmake/torch_features.cmake)"
say "$(tr '\n' ' ' <"$features")"
if [ "$cpu_mode" = 0 ]; then
  grep -qx ACCEL_WITH_CUDA=1 "$features" || die "this LibTorch did not turn CUDA on in $BUILD_DIR"
  if ! grep -qx ACCEL_WITH_NCCL=1 "$features"; then
    [ "$gpus" -lt 2 ] || die "this LibTorch did not turn the NCCL process group on ($gpus GPUs: DDP/FSDP need it)"
    warn "no NCCL process group in this LibTorch (only matters with 2+ GPUs)"
  fi
fi
BIN=$BUILD_DIR/accel-bench
for bin in "$BIN" "$BUILD_DIR/tests/accel_tests"; do
  [ -x "$bin" ] || die "$bin was not built"
  # Without a GPU the driver (libcuda.so.1) is absent; torch opens it lazily.
  nf=$(ldd "$bin" | awk -v cpu="$cpu_mode" '/not found/ && !(cpu == 1 && $1 == "libcuda.so.1") { print $1 }' | tr '\n' ' ')
  [ -z "$nf" ] || die "$bin: libraries not found: $nf"
done
"$BIN" --version >/dev/null || die "$BIN does not start"

# --- GPU tests ---------------------------------------------------------------------------
phase gpu-tests
log=$WORK/ctest-gpu.log
# One at a time: they share the GPU(s), and multi-GPU tests take ports.
rc=0
(cd "$BUILD_DIR" && ctest -R '^gpu ' --output-on-failure --timeout 300) >"$log" 2>&1 || rc=$?
grep -v '^[[:space:]]*$' "$log" | sed 's/^/  /' | tail -n 40 || true
ran=$(sed -n 's/^[0-9]*% tests passed, [0-9]* tests failed out of \([0-9]*\).*/\1/p' "$log" | tail -n 1)
# ctest lists skipped tests under "The following tests did not run:" as
# "  12 - gpu name (Skipped)"; a GPU test prints "skipped: no GPU" when it sees none.
skipped=$(grep -cE '^[[:space:]]*[0-9]+ - gpu .*\((Skipped|Not Run|Disabled)\)$' "$log" || true)
if grep -q 'No tests were found' "$log" || [ "${ran:-0}" = 0 ]; then
  warn "no GPU tests in $BUILD_DIR (no ctest name starts with 'gpu '): nothing tested on the GPU here"
elif [ "$rc" -ne 0 ] && ! grep -qE 'tests failed out of' "$log"; then
  failed+=(gpu-tests); warn "ctest did not run (exit $rc): see $log"
else
  grep -qE ' 0 tests failed out of' "$log" || { failed+=(gpu-tests); warn "GPU tests failed: see $log"; }
  if [ "$skipped" -gt 0 ] && [ "$cpu_mode" = 0 ]; then
    # The GPU is process-wide: when any GPU test ran on it, skips on one GPU are
    # the tests that need two (they print the same line).
    if [ "$gpus" -ge 2 ] || [ "$skipped" -ge "$ran" ]; then
      failed+=(gpu-tests)
      warn "$skipped of $ran GPU tests printed 'skipped: no GPU' although torch sees $gpus GPU(s): the tests do not see the GPU (CUDA_VISIBLE_DEVICES? another LibTorch in $BUILD_DIR?)"
    else
      say "$skipped GPU test(s) skipped on this 1-GPU machine (they need 2 GPUs)"
    fi
  elif [ "$skipped" -gt 0 ]; then
    say "$skipped GPU test(s) skipped (CPU test mode: expected)"
  fi
fi

# --- smoke ladder: the suite, fitted to this machine, through the sweep ---------------
phase ladder
OUT_ROOT=${ACCEL_GPU_CHECK_OUT:-results}
[ "$cpu_mode" = 1 ] && OUT_ROOT=${ACCEL_GPU_CHECK_OUT:-runs}
suite=$WORK/suite.json
# The committed suite with absolute config paths; multi-GPU rungs over every
# GPU when there are more than their 2 (an overlay config per rung). With one
# GPU they stay: the sweep records them as skipped (needs 2 GPUs). The CPU test
# mode leaves out CUDA Graphs and gives each rung a tiny model of its family.
"$PY" - "$PWD/configs/gpu-check/suite.json" "$suite" "$cpu_mode" "${gpus:-0}" <<'EOF' || die "could not write $suite"
import json, os, sys
src, dst, cpu, gpus = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
base = os.path.dirname(src)

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
        path = os.path.join(os.path.dirname(dst), "%s-fitted.json" % r["id"])
        with open(path, "w") as f:
            json.dump({"extends": cfg, **overlay}, f, indent=2)
        cfg = path
    r["config"] = cfg
    rungs.append(r)
suite["rungs"] = rungs
if cpu:
    suite["description"] = "CPU test mode of scripts/gpu-check.sh (tiny models, 32 px / 32 tokens, a few steps): proves the flow, measures nothing. " + suite.get("description", "")
    suite["set"] = suite.get("set", []) + [
        "runtime.accelerator=cpu", "train.batch_size=8", "train.max_steps=6",
        "train.warmup_steps=2", "train.eval_batch_size=16", "train.limit_eval_batches=1",
        "data.synthetic_train=256", "data.synthetic_test=16"]
with open(dst, "w") as f:
    json.dump(suite, f, indent=2)
    f.write("\n")
EOF
set_dir=$OUT_ROOT/gpu-check/$("$BIN" sweep --machine-id)
say "sweep of $suite into $set_dir"
rc=0
"$BIN" sweep --suite "$suite" --out "$OUT_ROOT" "$@" || rc=$?
[ "$rc" -ne 2 ] || die "the sweep refused the suite or its arguments (exit 2)"
[ "$rc" -eq 0 ] || failed+=(ladder)
if [ -d "$set_dir" ]; then cp "$suite" "$set_dir/suite.json"; fi

phase report
if "$BIN" report "$set_dir" >"$WORK/report.out" 2>"$WORK/report.err"; then
  cat "$WORK/report.out"
  grep -v '^$' "$WORK/report.err" | sed 's/^/gpu-check: /' || true
else
  failed+=(report)
  warn "accel-bench report failed: $(tail -n 1 "$WORK/report.err")"
fi
