#!/usr/bin/env bash
# The GPU machine's device call, rehearsed on a CPU machine: proves that
# `scripts/gpu-check.sh --out "$OUT"` (docs/GPU.md) builds where nothing but the
# GPU image's tools exist, with only what the call carries, and that what it
# leaves in $OUT is within what comes back. Needs root (debootstrap, chroot,
# mount and unshare); downloads only while the image is first made.
#
# The image: a Debian 12 (minbase) chroot with a C++ compiler, make, dpkg and
# Python 3.11 in a venv holding PyPI's cmake and ninja and, through a .pth,
# PyPI's torch 2.11 CUDA wheel (scripts/setup-torch-venv.sh's, mounted
# read-only) with Lightning Fabric and torchvision beside it; the CUDA 13
# toolkit mounted read-only at /usr/local/cuda; none of the project's -dev
# packages; no network (unshare -n) while the check runs. The GPU image is
# Ubuntu 24.04 with Python 3.12 and torch's nvidia-* wheels, which the
# rehearsal replaces by the toolkit's libraries; no GPU, so gpu-check.sh runs
# in its CPU test mode (ACCEL_GPU_CHECK_ALLOW_CPU=1).
#
# What travels, as the device tool sends it: the tracked and untracked files git
# does not ignore, plus the paths `gpu-check.sh --carry` names (.debs/, made by
# `gpu-check.sh --fetch-debs` where missing), at most 64 MiB, copied into a
# fresh folder. What comes back is checked as the tool limits it: at most 8
# files, each at most 16 MiB, 64 MiB in all, no more than 2 folders deep, names
# of letters, digits, '.', '_' and '-'; and that preflight.txt, gpu-check.log,
# summary.txt and gpu-check.tar.gz are there.
#
#   sudo bash scripts/gpu-rehearse.sh                 # the tree as it is; exit 0 when the check passes
#   sudo bash scripts/gpu-rehearse.sh --rev 7ecb554   # the tree of a commit, run the same way
#   sudo bash scripts/gpu-rehearse.sh --cut-after 60  # SIGKILL the call after 60 s, as the tool's
#                                                     # limit would: the outputs must still be there
#
# Options: --rev REV (git archive of REV instead of the work tree), --cut-after S
# (kill the command after S seconds; then only the outputs are judged),
# --budget S (gpu-check.sh's own budget; default 5400: this 2-core machine
# builds about 8 times slower than the GPU machine's 16 cores), --out DIR (where
# $OUT's files are copied back; default runs/gpu-rehearse/<UTC time>).
# Environment: ACCEL_GPU_IMAGE (the chroot, default
# /var/cache/accel-bench/gpu-image), ACCEL_LT2_MIRROR (the Debian mirror),
# CUDA_HOME (/usr/local/cuda). Not part of the test command: one rehearsal
# builds the whole project against the CUDA LibTorch (about 15-25 minutes).
set -euo pipefail
CALLER_PWD=$PWD
ARGS=("$@")

say() { echo "gpu-rehearse: $*"; }
die() { echo "gpu-rehearse: error: $*" >&2; exit 1; }

SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
REPO=$(cd "$(dirname "$SELF")/.." && pwd)
rev="" cut=0 budget=5400 back=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rev) [ $# -ge 2 ] || die "--rev needs a commit"; rev=$2; shift 2 ;;
    --cut-after) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--cut-after needs whole seconds"; cut=$2; shift 2 ;;
    --budget) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--budget needs whole seconds"; budget=$2; shift 2 ;;
    --out) [ $# -ge 2 ] || die "--out needs a folder"
           case "$2" in /*) back=$2 ;; *) back=$CALLER_PWD/$2 ;; esac; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[ "$(id -u)" -eq 0 ] || die "must run as root (debootstrap, chroot, mount and unshare need it)"
command -v ip >/dev/null || die "ip (iproute2) missing: the rehearsal brings up the loopback of its network namespace with it"
IMAGE=${ACCEL_GPU_IMAGE:-/var/cache/accel-bench/gpu-image}
case "$IMAGE" in /*) ;; *) die "ACCEL_GPU_IMAGE must be an absolute path: $IMAGE" ;; esac
IMAGE=${IMAGE%/}
[ -n "$IMAGE" ] && [ "$IMAGE" != / ] || die "refusing to use / as the image"
CACHE_DIR=$(dirname "$IMAGE")
LOG=$CACHE_DIR/$(basename "$IMAGE").log
SUITE=bookworm STAMP_FORMAT=1 STAMP_REL=etc/accel-bench-gpu-image.stamp
# The GPU image's tools, no more: a compiler, make, dpkg (minbase has it), Python.
PKGS=(g++ make python3 python3-venv ca-certificates)
TOOL_PINS=(cmake==4.1.2 ninja==1.13.0)
# The peer's torchvision for torch 2.11 and what it imports (lightning-fabric
# and the rest come from scripts/setup-peer.sh).
TV_PINS=(torchvision==0.26.0 pillow==12.0.0)
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
CUDA_REAL=$(readlink -f "$CUDA_HOME")
[ -x "$CUDA_REAL/bin/nvcc" ] || die "no CUDA toolkit at $CUDA_HOME (nvcc); set CUDA_HOME"

# --- once: lock, then a private mount namespace -------------------------------------
if [ -z "${ACCEL_REHEARSE_IN_NS:-}" ]; then
  mkdir -p "$CACHE_DIR"
  exec 9>"$CACHE_DIR/.$(basename "$IMAGE").lock"
  flock -n 9 || { say "waiting for another rehearsal"; flock 9; }
  export ACCEL_REHEARSE_IN_NS=1
  exec unshare -m --propagation private -- bash "$SELF" "${ARGS[@]}"
fi
T0=$(date +%s)
elapsed() { echo "$(( $(date +%s) - T0 )) s"; }
CHROOT_TAG=gpu-rehearse
# shellcheck source=scripts/chroot-lib.sh
. "$REPO/scripts/chroot-lib.sh"
trap 'unmount_all' EXIT
trap 'exit 130' INT TERM

# --- 1. the image --------------------------------------------------------------------
torch_prefix=$(bash "$REPO/scripts/setup-torch-venv.sh" | tail -n 1)
TORCH_SITE=${torch_prefix%/torch/share/cmake}
[ -d "$TORCH_SITE/torch" ] || die "no torch in $TORCH_SITE (from setup-torch-venv.sh's $torch_prefix)"
read -r _ PEER_SITE < <(bash "$REPO/scripts/setup-peer.sh" | tail -n 1) || die "scripts/setup-peer.sh failed"
TV_SITE=$CACHE_DIR/gpu-image-torchvision
stamp_text() { echo "format=$STAMP_FORMAT"; echo "suite=$SUITE"; printf 'pkg=%s\n' "${PKGS[@]}" "${TOOL_PINS[@]}"; }
if [ ! -f "$IMAGE/$STAMP_REL" ] || [ "$(cat "$IMAGE/$STAMP_REL")" != "$(stamp_text)" ]; then
  remove_tree "$IMAGE.partial"
  remove_tree "$IMAGE"
  MIRROR=${ACCEL_LT2_MIRROR:-$(detect_mirror)}
  [ -n "$MIRROR" ] || die "no Debian mirror found in the host's apt sources; set ACCEL_LT2_MIRROR"
  command -v debootstrap >/dev/null || die "debootstrap missing: run scripts/setup.sh --tests"
  : >"$LOG"
  say "making the image: Debian $SUITE minbase in $IMAGE from $MIRROR (a few minutes; log: $LOG)"
  logged debootstrap debootstrap --variant=minbase "$SUITE" "$IMAGE.partial" "$MIRROR"
  echo "deb $MIRROR $SUITE main" >"$IMAGE.partial/etc/apt/sources.list"
  printf '#!/bin/sh\nexit 101\n' >"$IMAGE.partial/usr/sbin/policy-rc.d"; chmod +x "$IMAGE.partial/usr/sbin/policy-rc.d"
  mount_under "$IMAGE.partial"
  install_pkgs "$IMAGE.partial" "${PKGS[@]}"
  # The wheels come through the host's pip (its index and certificates), the
  # venv installs them offline.
  rm -rf "$CACHE_DIR/gpu-image-wheels" && mkdir -p "$CACHE_DIR/gpu-image-wheels"
  logged "pip download ${TOOL_PINS[*]}" "$TORCH_SITE/../../../bin/python" -m pip download -q --no-deps \
    --only-binary=:all: -d "$CACHE_DIR/gpu-image-wheels" "${TOOL_PINS[@]}"
  mkdir -p "$IMAGE.partial/tmp/wheels" && cp "$CACHE_DIR"/gpu-image-wheels/*.whl "$IMAGE.partial/tmp/wheels/"
  logged "the tools venv (${TOOL_PINS[*]})" in_chroot "$IMAGE.partial" \
    'python3 -m venv /opt/gpu-image/venv && /opt/gpu-image/venv/bin/pip install -q --no-index --disable-pip-version-check /tmp/wheels/*.whl && rm -rf /tmp/wheels'

  unmount_all
  stamp_text >"$IMAGE.partial/$STAMP_REL"
  mv -T "$IMAGE.partial" "$IMAGE"
  say "image ready ($(elapsed))"
fi
if [ ! -f "$TV_SITE/.stamp" ] || [ "$(cat "$TV_SITE/.stamp")" != "${TV_PINS[*]}" ]; then
  rm -rf "$TV_SITE"
  "$TORCH_SITE/../../../bin/python" -m pip install -q --no-deps --disable-pip-version-check \
    --target "$TV_SITE" "${TV_PINS[@]}" || die "pip install ${TV_PINS[*]} failed"
  echo "${TV_PINS[*]}" >"$TV_SITE/.stamp"
fi

# --- 2. what travels ------------------------------------------------------------------
mapfile -t CARRY < <(bash "$REPO/scripts/gpu-check.sh" --carry)
if [ ! -d "$REPO/.debs" ]; then
  say "no .debs/ in the checkout: fetching them as docs/GPU.md says (gpu-check.sh --fetch-debs)"
  bash "$REPO/scripts/gpu-check.sh" --fetch-debs >/dev/null || die "gpu-check.sh --fetch-debs failed"
fi
WORKROOT=$IMAGE/work
remove_tree "$WORKROOT"
mkdir -p "$WORKROOT/tree" "$WORKROOT/out"
if [ -n "$rev" ]; then
  git -C "$REPO" rev-parse --verify -q "$rev^{commit}" >/dev/null || die "--rev: no commit $rev"
  git -C "$REPO" archive "$rev" | tar -xf - -C "$WORKROOT/tree"
  label="the tree of $(git -C "$REPO" rev-parse --short "$rev")"
else
  (cd "$REPO" && git ls-files -z -co --exclude-standard | tar --null -T - -cf -) | tar -xf - -C "$WORKROOT/tree"
  label="the work tree at $(git -C "$REPO" rev-parse --short HEAD)$(git -C "$REPO" diff --quiet HEAD || echo ' with changes')"
fi
for c in "${CARRY[@]}"; do
  [ -e "$REPO/$c" ] || die "the device call carries $c, which the checkout lacks"
  cp -a "$REPO/$c" "$WORKROOT/tree/$c"
done
sent=$(du -sb "$WORKROOT/tree" | cut -f1)
say "sending $label with ${CARRY[*]}: $((sent / 1024)) KiB"
[ "$sent" -le $((64 * 1024 * 1024)) ] || die "the tree that travels is $((sent / 1048576)) MiB, over the 64 MiB limit"

# --- 3. the device command, in the image, without network ------------------------------
mount_under "$IMAGE"
bind_ro() {  # bind_ro HOST_PATH IMAGE_PATH
  mkdir -p "$IMAGE$2"
  mount --bind "$1" "$IMAGE$2"; MOUNTS+=("$IMAGE$2")
  mount -o remount,bind,ro "$IMAGE$2" 2>/dev/null || true
}
bind_ro "$CUDA_REAL" "$CUDA_REAL"
ln -sfn "$CUDA_REAL" "$IMAGE/usr/local/cuda"
# The image's torch finds cuBLAS, cuDNN and NCCL in its nvidia-* wheels; the
# stand-in finds the toolkit's through the loader's cache.
echo "$CUDA_REAL/lib64" >"$IMAGE/etc/ld.so.conf.d/cuda-toolkit.conf"
chroot "$IMAGE" /sbin/ldconfig
bind_ro "$TORCH_SITE" /opt/gpu-image/torch-site
bind_ro "$PEER_SITE" /opt/gpu-image/peer-site
bind_ro "$TV_SITE" /opt/gpu-image/torchvision-site
# python3 as the image has it: torch, torchvision and Lightning Fabric importable.
printf '%s\n' /opt/gpu-image/torch-site /opt/gpu-image/torchvision-site /opt/gpu-image/peer-site \
  >"$(echo "$IMAGE"/opt/gpu-image/venv/lib/python3*/site-packages)/gpu-image.pth"
device_cmd=$(bash "$REPO/scripts/gpu-check.sh" --device-command)
# An older tree is named by its own sha.
[ -z "$rev" ] || device_cmd="ACCEL_GIT_SHA=$(git -C "$REPO" rev-parse --short=12 "$rev") ${device_cmd#* }"
say "running, as the device call would: $device_cmd (budget $budget s$([ "$cut" -gt 0 ] && echo ", cut off after $cut s")) ($(elapsed))"
killer=()
[ "$cut" -gt 0 ] && killer=(timeout -s KILL "$cut")
rc=0
# No network, as on the device machine, but its loopback up (a new network
# namespace starts with lo down; Gloo's CPU ranks meet on 127.0.0.1).
"${killer[@]}" unshare -n -- /bin/sh -c 'ip link set lo up && exec "$@"' loopback chroot "$IMAGE" /usr/bin/env -i \
    PATH=/opt/gpu-image/venv/bin:/usr/local/bin:/usr/bin:/bin HOME=/root LANG=C.UTF-8 \
    OUT=/work/out ACCEL_GPU_CHECK_ALLOW_CPU=1 ACCEL_GPU_CHECK_BUDGET="$budget" \
    bash -c "cd /work/tree && $device_cmd" </dev/null >"$WORKROOT/console.log" 2>&1 || rc=$?
say "the command exited $rc ($(elapsed)); its last lines:"
tail -n 25 "$WORKROOT/console.log" | sed 's/^/  /'

# --- 4. what comes back ------------------------------------------------------------------
back=${back:-$REPO/runs/gpu-rehearse/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$back"
cp -a "$WORKROOT/out/." "$back/" 2>/dev/null || true
cp "$WORKROOT/console.log" "$back.console.log"
problems=()
n=0 total=0
while IFS= read -r -d '' f; do
  rel=${f#"$WORKROOT/out/"}
  n=$((n + 1))
  size=$(stat -c %s "$f")
  total=$((total + size))
  depth=$(tr -cd / <<<"$rel" | wc -c)
  [ "$size" -le $((16 * 1024 * 1024)) ] || problems+=("$rel is $((size / 1048576)) MiB (16 MiB at most)")
  [ "$depth" -le 2 ] || problems+=("$rel is $depth folders down (2 at most)")
  [[ $rel =~ ^[A-Za-z0-9._/-]+$ ]] || problems+=("$rel: a name outside letters, digits, '.', '_', '-'")
  say "back: $rel ($size bytes)"
done < <(find "$WORKROOT/out" -mindepth 1 \( -type f -o -type l \) -print0)
[ "$n" -le 8 ] || problems+=("$n files (8 at most)")
[ "$total" -le $((64 * 1024 * 1024)) ] || problems+=("$((total / 1048576)) MiB in all (64 at most)")
for f in preflight.txt gpu-check.log summary.txt gpu-check.tar.gz; do
  [ -s "$WORKROOT/out/$f" ] || problems+=("no $f")
done
if [ "$cut" -eq 0 ]; then
  [ "$rc" -eq 0 ] || problems+=("the command exited $rc")
  [ -s "$WORKROOT/out/report.md" ] || problems+=("no report.md")
  # grep -c reads the whole list (grep -q would end tar with SIGPIPE under pipefail).
  [ "$(tar -tzf "$WORKROOT/out/gpu-check.tar.gz" 2>/dev/null | grep -c '/result\.json$' || true)" -gt 0 ] \
    || problems+=("gpu-check.tar.gz holds no rung's result.json")
fi
[ ! -f "$WORKROOT/out/summary.txt" ] || sed 's/^/  summary: /' "$WORKROOT/out/summary.txt"
if [ "${#problems[@]}" -gt 0 ]; then
  printf 'gpu-rehearse: FAILED: %s\n' "${problems[@]}" >&2
  say "outputs in $back/ (console: $back.console.log)"
  exit 1
fi
say "OK: $n files, $((total / 1024)) KiB back from $label ($(elapsed)); outputs in $back/"
