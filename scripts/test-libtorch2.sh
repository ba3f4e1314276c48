#!/usr/bin/env bash
# Builds and tests accel-bench against LibTorch 2.x: Debian 13 (trixie) libtorch-dev
# 2.6 (CPU), inside a debootstrap chroot cached outside the clone. Idempotent.
#
#   sudo scripts/test-libtorch2.sh                 # create/reuse chroot, build, ctest
#   sudo scripts/test-libtorch2.sh -R Optim        # extra arguments go to ctest
#
# Environment:
#   ACCEL_LT2_CHROOT       chroot path (default /var/cache/accel-bench/trixie-libtorch2)
#   ACCEL_LT2_MIRROR       Debian mirror URL (default: the one in the host's apt sources)
#   ACCEL_LT2_SETUP_ONLY=1 only create/update the chroot (e.g. to warm a CI cache)
#   ACCEL_LT2_CLEAN=1      wipe the chroot's build folder (/build) first
#   ACCEL_LT2_CMAKE_ARGS   extra arguments for the cmake configure step (word-split)
#   ACCEL_LT2_ALL_TESTS=1  also run the tests labelled "process" (left out by default)
#
# Downloads: only in its setup step (1.), which `scripts/setup.sh --tests` runs
# (ACCEL_LT2_SETUP_ONLY=1) before scripts/test.sh's legs, so the legs find the
# cached chroot current; and only Debian packages from the Debian archive the
# host's apt already uses (debootstrap fetches them with wget, through the
# host's apt proxy if one is set). The build and the tests download nothing.
# debootstrap and wget come from scripts/setup.sh --tests.
#
# The checkout is bind-mounted read-only at /src; the build goes to /build inside the
# chroot, so host and chroot builds never mix. Runs as root, needs no terminal.
set -euo pipefail

SUITE=trixie
STAMP_FORMAT=1
# Packages installed into the chroot. Editing this list installs the missing ones
# into an existing chroot on the next run.
PKGS=(
  build-essential cmake ninja-build git pkg-config
  libtorch-dev libgloo-dev libcli11-dev nlohmann-json3-dev doctest-dev
  libbenchmark-dev zlib1g-dev libutf8proc-dev libbz2-dev libssl-dev libboost-math-dev libsqlite3-dev python3-yaml
  dataset-fashion-mnist libopenblas0-openmp
)

say() { echo "test-libtorch2: $*"; }
die() { echo "test-libtorch2: error: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root (debootstrap, chroot and mount need it)"

SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
REPO=$(cd "$(dirname "$SELF")/.." && pwd)
CHROOT=${ACCEL_LT2_CHROOT:-/var/cache/accel-bench/trixie-libtorch2}
case "$CHROOT" in
  /*) ;;
  *) die "ACCEL_LT2_CHROOT must be an absolute path: $CHROOT" ;;
esac
CHROOT=${CHROOT%/}
if [ -z "$CHROOT" ] || [ "$CHROOT" = / ]; then die "refusing to use / as the chroot"; fi
case "$REPO/" in
  "$CHROOT"/*) die "the chroot ($CHROOT) must be outside the checkout ($REPO)" ;;
esac
CACHE_DIR=$(dirname "$CHROOT")
NAME=$(basename "$CHROOT")
PARTIAL=$CHROOT.partial
LOG=$CACHE_DIR/$NAME.log
STAMP_REL=etc/accel-bench-lt2.stamp

# --- once, in the outer process: lock, then re-enter in a private mount namespace ---
if [ -z "${ACCEL_LT2_IN_NS:-}" ]; then
  mkdir -p "$CACHE_DIR"
  exec 9>"$CACHE_DIR/.$NAME.lock"
  if ! flock -n 9; then
    say "waiting for another run holding $CACHE_DIR/.$NAME.lock"
    flock 9
  fi
  export ACCEL_LT2_IN_NS=1
  # Mounts made in a private namespace vanish when the script exits, however it exits.
  if unshare -m --propagation private true 2>/dev/null; then
    exec unshare -m --propagation private -- bash "$SELF" "$@"
  fi
  say "unshare -m unavailable; mounts are undone by an exit trap instead"
fi

T0=$(date +%s)
elapsed() { echo "$(( $(date +%s) - T0 ))s"; }

# --- mounts and the chroot's commands (scripts/chroot-lib.sh) --------------------------
CHROOT_TAG=test-libtorch2
# shellcheck source=scripts/chroot-lib.sh
. "$(dirname "$SELF")/chroot-lib.sh"
trap 'unmount_all' EXIT
trap 'exit 130' INT TERM

stamp_text() {
  echo "format=$STAMP_FORMAT"
  echo "suite=$SUITE"
  printf 'pkg=%s\n' "${PKGS[@]}"
}

# install_pkgs (scripts/chroot-lib.sh), then as scripts/setup.sh does on the
# host: OpenBLAS's OpenMP build for BLAS and LAPACK.
install_lt2_pkgs() {   # install_lt2_pkgs ROOT PKG...
  local r=$1
  install_pkgs "$@"
  in_chroot "$r" 'arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
    for lib in blas lapack; do
      t=/usr/lib/$arch/openblas-openmp/lib$lib.so.3
      [ -e "$t" ] && update-alternatives --set "lib$lib.so.3-$arch" "$t" >/dev/null
    done; true'
}

# --- 1. the chroot ---------------------------------------------------------------------
need_create=1
if [ -e "$CHROOT" ]; then
  [ -f "$CHROOT/$STAMP_REL" ] || die "$CHROOT exists but was not made by this script (no $STAMP_REL); remove it"
  if grep -qx "format=$STAMP_FORMAT" "$CHROOT/$STAMP_REL" && grep -qx "suite=$SUITE" "$CHROOT/$STAMP_REL"; then
    need_create=0
  else
    say "chroot stamp is from another format/suite; recreating $CHROOT"
    remove_tree "$CHROOT"
  fi
fi

if [ "$need_create" = 1 ]; then
  if [ -e "$PARTIAL" ]; then
    say "removing interrupted creation $PARTIAL"
    remove_tree "$PARTIAL"
  fi
  MIRROR=${ACCEL_LT2_MIRROR:-$(detect_mirror)}
  [ -n "$MIRROR" ] || die "no Debian mirror found in /etc/apt/sources.list{,.d/*}; set ACCEL_LT2_MIRROR"
  : >"$LOG"
  command -v debootstrap >/dev/null && command -v wget >/dev/null ||
    die "debootstrap or wget missing: run scripts/setup.sh --tests (it installs them)"
  wget -q -T 30 -t 2 -O /dev/null "$MIRROR/dists/$SUITE/InRelease" \
    || die "Debian archive unreachable (or has no $SUITE): $MIRROR/dists/$SUITE/InRelease"
  avail_kb=$(df -Pk "$CACHE_DIR" | awk 'NR == 2 { print $4 }')
  [ "${avail_kb:-0}" -ge 3000000 ] || die "need about 3 GB free in $CACHE_DIR (have $((avail_kb / 1024)) MB)"

  say "creating Debian $SUITE chroot in $CHROOT from $MIRROR (a few minutes; log: $LOG)"
  logged "debootstrap" debootstrap --variant=minbase "$SUITE" "$PARTIAL" "$MIRROR"
  echo "deb $MIRROR $SUITE main" >"$PARTIAL/etc/apt/sources.list"
  printf '#!/bin/sh\nexit 101\n' >"$PARTIAL/usr/sbin/policy-rc.d"; chmod +x "$PARTIAL/usr/sbin/policy-rc.d"
  say "debootstrap done ($(elapsed)); installing ${#PKGS[@]} packages"
  mount_under "$PARTIAL"
  install_lt2_pkgs "$PARTIAL" "${PKGS[@]}"
  unmount_all
  stamp_text >"$PARTIAL/$STAMP_REL"
  echo "$MIRROR" >"$PARTIAL/etc/accel-bench-lt2.mirror"
  mv -T "$PARTIAL" "$CHROOT"
  say "chroot ready ($(elapsed))"
else
  MIRROR=$(cat "$CHROOT/etc/accel-bench-lt2.mirror" 2>/dev/null || echo "?")
  have=$(sed -n 's/^pkg=//p' "$CHROOT/$STAMP_REL")
  add=()
  for p in "${PKGS[@]}"; do grep -qxF "$p" <<<"$have" || add+=("$p"); done
  mount_under "$CHROOT"
  if [ ${#add[@]} -gt 0 ]; then
    say "installing packages added since the chroot was made: ${add[*]}"
    install_lt2_pkgs "$CHROOT" "${add[@]}"
    stamp_text >"$CHROOT/$STAMP_REL.tmp" && mv "$CHROOT/$STAMP_REL.tmp" "$CHROOT/$STAMP_REL"
  fi
  say "reusing chroot $CHROOT"
fi

if [ "${ACCEL_LT2_SETUP_ONLY:-0}" = 1 ]; then
  say "ACCEL_LT2_SETUP_ONLY=1: not building ($(elapsed))"
  exit 0
fi

# --- 2. build and test -----------------------------------------------------------------
[ ${#MOUNTS[@]} -gt 0 ] || mount_under "$CHROOT"
mkdir -p "$CHROOT/src" "$CHROOT/build"
mount --bind "$REPO" "$CHROOT/src"; MOUNTS+=("$CHROOT/src")
mount -o remount,bind,ro "$CHROOT/src" 2>/dev/null || say "warning: could not make /src read-only"
# The text data and weights scripts/setup.sh unpacked, read-only at the same
# path, where the library's default (and ACCEL_TEXT_DATA) finds them.
TEXT_DATA=${ACCEL_TEXT_DATA:-/opt/accel-bench/text}
if [ -d "$TEXT_DATA" ]; then
  mkdir -p "$CHROOT$TEXT_DATA"
  mount --bind "$TEXT_DATA" "$CHROOT$TEXT_DATA"; MOUNTS+=("$CHROOT$TEXT_DATA")
  mount -o remount,bind,ro "$CHROOT$TEXT_DATA" 2>/dev/null || true
fi
# /build is incremental per checkout: another clone's objects could look newer than
# this clone's sources, so a different checkout path starts from an empty /build.
if [ "${ACCEL_LT2_CLEAN:-0}" = 1 ]; then
  say "ACCEL_LT2_CLEAN=1: wiping /build"
  find "$CHROOT/build" -mindepth 1 -delete
elif [ -e "$CHROOT/build/CMakeCache.txt" ] && [ "$(cat "$CHROOT/build/.accel-lt2-checkout" 2>/dev/null)" != "$REPO" ]; then
  say "/build was made from another checkout; wiping it"
  find "$CHROOT/build" -mindepth 1 -delete
fi
echo "$REPO" >"$CHROOT/build/.accel-lt2-checkout"

torch_ver=$(in_chroot "$CHROOT" 'dpkg-query -W -f="\${Version}" libtorch-dev' || echo "?")
say "building $REPO at /src in /build with libtorch-dev $torch_ver ($(elapsed))"
# shellcheck disable=SC2016,SC2086
in_chroot "$CHROOT" '
  set -e
  git config --global --get-all safe.directory 2>/dev/null | grep -qx /src \
    || git config --global --add safe.directory /src
  cmake -S /src -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DACCEL_BUILD_BENCH=OFF "$@"
  cmake --build /build -j"$(nproc)"
' ${ACCEL_LT2_CMAKE_ARGS:-} || die "build failed against libtorch-dev $torch_ver"

# This leg checks what the LibTorch version decides. Without arguments it
# leaves out the tests labelled "process" (signals, the out-dir lock, the
# launcher and its store, sweep control, input errors: tests/CMakeLists.txt),
# which do not depend on it and run on the other two legs; ACCEL_LT2_ALL_TESTS=1
# runs them too. (The benchmarks are not built here either: -DACCEL_BUILD_BENCH=OFF.)
ctest_args=("$@")
if [ $# -eq 0 ] && [ "${ACCEL_LT2_ALL_TESTS:-0}" != 1 ]; then
  ctest_args=(-LE process)
fi
say "running ctest ${ctest_args[*]} ($(elapsed))"
in_chroot "$CHROOT" 'cd /build && ctest --test-dir /build --output-on-failure -j2 "$@"' "${ctest_args[@]}" \
  || die "ctest failed against libtorch-dev $torch_ver"

# --- 3. the scratch smoke run on both versions, loss by loss --------------------------
# Same config, same data, one thread. The versions differ in rounding (2.x runs
# attention through SDPA's fused kernel; other kernels changed too), and the
# 22 Adam steps at lr 1e-3 amplify it: measured on 2026-11-30, the first 12
# steps agreed within 1.6e-6 and the last within 4.7e-3. So: the first 12
# steps within 1e-5 (same arithmetic up to rounding), all steps within 2e-2
# (the same training trajectory).
EARLY_STEPS=12 EARLY_TOLERANCE=1e-5 LOSS_TOLERANCE=${ACCEL_LT2_LOSS_TOLERANCE:-2e-2}
HOST_CLI=$REPO/build/accel-bench
if [ -x "$HOST_CLI" ]; then
  say "scratch smoke run on both LibTorch versions ($(elapsed))"
  in_chroot "$CHROOT" 'rm -rf /build/legs && /build/accel-bench run -q \
      -c /src/configs/smoke/scratch-smoke.json --out /build/legs/smoke' \
    || die "smoke run failed against libtorch-dev $torch_ver"
  host_out=$(mktemp -d)
  "$HOST_CLI" run -q -c "$REPO/configs/smoke/scratch-smoke.json" --out "$host_out/smoke" \
    || die "smoke run failed on the host's build"
  say "losses, host LibTorch vs libtorch-dev $torch_ver:"
  status=0  # pipefail: a failing compare-losses fails its pipeline
  "$HOST_CLI" compare-losses "$host_out/smoke" "$CHROOT/build/legs/smoke" --first "$EARLY_STEPS" \
      --tolerance "$EARLY_TOLERANCE" | sed 's/^/test-libtorch2:   /' || status=1
  "$HOST_CLI" compare-losses "$host_out/smoke" "$CHROOT/build/legs/smoke" \
      --tolerance "$LOSS_TOLERANCE" | sed 's/^/test-libtorch2:   /' || status=1
  rm -rf "$host_out"
  [ "$status" -eq 0 ] || die "losses differ between LibTorch versions beyond the tolerances above"
else
  say "no host build at $HOST_CLI: skipping the cross-version loss comparison"
fi
say "OK: built and tested against libtorch-dev $torch_ver ($(elapsed))"
