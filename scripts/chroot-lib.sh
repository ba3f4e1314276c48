# The chroot primitives of the scripts that build or run inside a Debian
# chroot (scripts/test-libtorch2.sh, scripts/gpu-rehearse.sh); sourced, as root.
# The caller sets CHROOT_TAG (its name in messages) and LOG (where logged()
# writes), defines die(), and traps EXIT to unmount_all. CHROOT_ENV (an array)
# adds NAME=value pairs to in_chroot's clean environment.
CHROOT_TAG=${CHROOT_TAG:-chroot}
CHROOT_ENV=("${CHROOT_ENV[@]+"${CHROOT_ENV[@]}"}")

MOUNTS=()   # mount points, in mount order
mount_under() {   # mount_under ROOT: /proc /sys /dev /dev/pts /dev/shm, and an empty /src
  local r=$1
  mkdir -p "$r/proc" "$r/sys" "$r/dev" "$r/src"
  mount -t proc proc "$r/proc";               MOUNTS+=("$r/proc")
  mount -t sysfs -o ro sysfs "$r/sys";         MOUNTS+=("$r/sys")
  mount --bind /dev "$r/dev";                  MOUNTS+=("$r/dev")
  mount --make-private "$r/dev" 2>/dev/null || true
  mkdir -p "$r/dev/pts" "$r/dev/shm"
  mount --bind /dev/pts "$r/dev/pts";          MOUNTS+=("$r/dev/pts")
  mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$r/dev/shm"; MOUNTS+=("$r/dev/shm")
  cp -L /etc/resolv.conf "$r/etc/resolv.conf" 2>/dev/null || true
  cp -L /etc/hosts "$r/etc/hosts" 2>/dev/null || true
}
unmount_all() {
  local i
  for (( i=${#MOUNTS[@]}-1; i>=0; i-- )); do
    umount "${MOUNTS[i]}" 2>/dev/null || umount -l "${MOUNTS[i]}" 2>/dev/null || true
  done
  MOUNTS=()
}
# Anything still mounted below DIR (left by a killed run without a namespace).
mounts_below() { awk -v d="$1/" 'index($5 "/", d) == 1 { print $5 }' /proc/self/mountinfo | sort -r; }
remove_tree() {   # remove_tree DIR: unmount leftovers, then delete
  local d=$1 m
  [ -e "$d" ] || return 0
  for m in $(mounts_below "$d"); do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  [ -z "$(mounts_below "$d")" ] || die "cannot unmount everything below $d; not deleting it"
  rm -rf "$d"
}

in_chroot() {   # in_chroot ROOT SCRIPT [ARGS...]: bash -c SCRIPT in ROOT with a clean env
  local r=$1 s=$2; shift 2
  chroot "$r" /usr/bin/env -i \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive \
    ${ACCEL_TEXT_DATA:+ACCEL_TEXT_DATA=$ACCEL_TEXT_DATA} "${CHROOT_ENV[@]}" \
    ${http_proxy:+http_proxy=$http_proxy} ${https_proxy:+https_proxy=$https_proxy} \
    bash -c "$s" bash "$@" </dev/null
}
logged() {   # logged WHAT CMD...: run CMD with output to $LOG; on failure print its tail
  local what=$1; shift
  echo "=== $(date -u +%FT%TZ) $what: $*" >>"$LOG"
  if ! "$@" </dev/null >>"$LOG" 2>&1; then
    echo "$CHROOT_TAG: ---- last lines of $LOG ----" >&2
    tail -n 25 "$LOG" >&2
    die "$what failed (full log: $LOG)"
  fi
}

# The host's Debian mirror: the first non-security/updates/backports "deb" source.
detect_mirror() {
  local f u
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -r "$f" ] || continue
    u=$(awk 'BEGIN { RS = ""; FS = "\n" }
      { types = ""; uris = ""; suites = ""; enabled = "yes"
        for (i = 1; i <= NF; i++) {
          l = $i; if (l ~ /^[ \t]*#/) continue
          k = tolower(l); sub(/:.*/, "", k); v = l; sub(/^[^:]*:[ \t]*/, "", v)
          if (k == "types") types = v; else if (k == "uris") uris = v
          else if (k == "suites") suites = v; else if (k == "enabled") enabled = tolower(v)
        }
        if (enabled == "no" || (" " types " ") !~ / deb /) next
        n = split(suites, s, /[ \t]+/)
        for (j = 1; j <= n; j++)
          if (s[j] != "" && s[j] !~ /-(security|updates|backports|proposed-updates)$/) {
            split(uris, u, /[ \t]+/); print u[1]; exit
          }
      }' "$f")
    [ -n "$u" ] && { echo "$u"; return; }
  done
  cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | awk '
    $1 == "deb" { i = 2
      if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
      if ($(i + 1) !~ /-(security|updates|backports|proposed-updates)$/) { print $i; exit } }'
}

# Host apt proxy (if any) for debootstrap's wget and the chroot's apt.
if [ -z "${http_proxy:-}" ]; then
  HOST_PROXY=""
  eval "$(apt-config shell HOST_PROXY Acquire::http::Proxy 2>/dev/null)" || true
  [ -n "$HOST_PROXY" ] && [ "$HOST_PROXY" != DIRECT ] && export http_proxy=$HOST_PROXY
fi

# install_pkgs ROOT PKG...: apt-get install into ROOT, a clear error naming the
# packages Debian $SUITE at $MIRROR does not have.
install_pkgs() {
  local r=$1; shift
  logged "apt-get update (chroot)" in_chroot "$r" 'apt-get update'
  local missing
  missing=$(in_chroot "$r" 'for p; do
      [ -n "$(apt-cache policy "$p" 2>/dev/null | awk "/Candidate:/ && \$2 != \"(none)\" {print}")" ] || echo "$p"
    done' "$@" | tr '\n' ' ')
  [ -z "$missing" ] || die "package(s) not available in Debian $SUITE from $MIRROR: $missing"
  logged "apt-get install (chroot)" in_chroot "$r" \
    'apt-get install -y --no-install-recommends -o Dpkg::Use-Pty=0 "$@" && apt-get clean' "$@"
}
