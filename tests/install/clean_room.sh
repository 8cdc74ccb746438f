#!/usr/bin/env bash
# Clean-room acceptance: slurm-ipu's install on a BARE Debian 12 (bookworm), not on this host.
#
# CLEAN_ROOM_SUITE=trixie|sid builds that Debian instead (Slurm 24.11, 26.05), and
# CLEAN_ROOM_TARGET=<make targets> runs those targets in it, in turn, instead of install-check (e.g.
# "deb-check slurm": the Debian packages, then the real-Slurm tier against that Slurm; PYTEST_ARGS,
# SLURM_MARKS and SLURM_IPU_TEST_PORTS pass through).
#
#   sudo tests/install/clean_room.sh            (root; Debian/Ubuntu host with apt; network)
#
# 1. debootstrap --variant=minbase bookworm (+ make, ca-certificates: what a checkout needs
#    before its own Makefile can run) into /var/tmp/slurm-ipu-cleanroom-XXXXXX.
#    A complete rootfs tarball is cached in $CLEAN_ROOM_CACHE (default
#    /var/tmp/slurm-ipu-cleanroom-cache, rebuilt after $CLEAN_ROOM_CACHE_DAYS days), with the
#    .debs the run downloaded; CI starts WITHOUT it (a cold run), a rerun reuses it. Only the bare
#    base system and downloads are cached: every run starts from bare dpkg state.
# 2. `git archive HEAD` of this checkout into <chroot>/src (committed files only).
# 3. In private mount + pid namespaces (every process the run starts dies with it), with /proc,
#    /sys, /dev, /dev/pts and /dev/shm mounted, services barred by policy-rc.d, an empty
#    environment, as root in the chroot: `make install-check` (tests/install/check.sh) at the
#    default paths (PREFIX=/opt/slurm-ipu, BINDIR=/usr/local/bin): the check's own set-up installs
#    Debian's Slurm as the node's (make install itself installs only gcc, python3-venv and the
#    like, never Slurm); then: every package in place, no process left.
# 4. Always: processes rooted in the chroot killed, mounts undone (lazy fallback), chroot removed.
#
# Progress lines start with "clean-room:"; a failure is one "clean-room: FAILED: <reason>" line
# (plus the tail of the failing step's log) and exit 1; CLEAN_ROOM_LOGS=DIR keeps the chroot's step
# logs (and the lab's, on failure) there. Every wait has a deadline.
set -euo pipefail

say() { echo "clean-room: $*" >&2; }
fail() { say "FAILED: $*"; exit 1; }

# ---------------------------------------------------------------------------------------------
# Mode 3: inside the chroot (root, empty environment).
# ---------------------------------------------------------------------------------------------
# One make target in the chroot, its log kept, its time said.
make_target() {
  local target=$1 t=$SECONDS log=$LOGS/$1.log
  say "[chroot] make $target ${PYTEST_ARGS:+PYTEST_ARGS='$PYTEST_ARGS' }on bare Debian $(cat /etc/debian_version)"
  if ! timeout 3000 make "$target" PYTEST_ARGS="${PYTEST_ARGS:-}" ${SLURM_MARKS:+SLURM_MARKS="$SLURM_MARKS"} \
      >"$log" 2>&1; then
    tail -n 40 "$log" | sed 's/^/    | /' >&2
    fail "make $target: $(grep -v '^\s*$' "$log" | tail -n 1)"
  fi
  grep -E "^(deb-check|deb):" "$log" | sed 's/^/  /' >&2 || tail -n 3 "$log" | sed 's/^/  /' >&2
  say "[chroot] slurm $(dpkg-query -W -f='${Version}' slurm-wlm 2>/dev/null || /opt/slurm/sbin/slurmctld -V): make" \
      "$target passed in $((SECONDS - t)) s"
}

# The product's own acceptance, at the default paths (/opt/slurm-ipu, /usr/local/bin, Slurm's
# plugin directory), from bare Debian: its make targets must install everything they need.
install_check() {
  local t=$SECONDS log=$LOGS/install-check.log missing
  say "[chroot] make install-check PREFIX=/opt/slurm-ipu BINDIR=/usr/local/bin, on bare Debian"
  if ! INSTALL_CHECK_PREFIX=/opt/slurm-ipu INSTALL_CHECK_BINDIR=/usr/local/bin timeout 1200 make install-check \
      >"$log" 2>&1; then
    tail -n 25 "$log" | sed 's/^/    | /' >&2
    fail "make install-check: $(grep -v '^\s*$' "$log" | tail -n 1)"
  fi
  grep '^install-check:' "$log" | sed 's/^/  /' >&2
  missing=$(for p in slurm-wlm munge libslurm-dev gcc musl-tools make numactl hwloc lua5.1 python3 python3-venv; do
    dpkg-query -W -f='${db:Status-Status}\n' "$p" 2>/dev/null | grep -qx installed || echo "$p"; done)
  [ -z "$missing" ] || fail "make install left packages uninstalled: $missing"
  say "[chroot] make install-check passed in $((SECONDS - t)) s"
}

in_chroot() {
  export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
  export DEB_HANDOFF=/var/tmp/slurm-ipu-debs  # deb-check's packages for the installed tier after it (a fresh chroot)
  local LOGS=/root/logs t0=$SECONDS log missing left
  mkdir -p "$LOGS"
  # every process in this pid namespace but pid 1 (the namespace's shell) and this one
  others() {
    local d pid comm out=()
    for d in /proc/[0-9]*; do
      pid=${d#/proc/}
      [ "$pid" = 1 ] || [ "$pid" = $$ ] || [ "$pid" = "$BASHPID" ] && continue
      comm=; read -r comm <"$d/comm" 2>/dev/null || continue
      out+=("$pid:$comm")
    done
    echo "${out[*]}"
  }
  cd /src
  missing=$(for p in slurm-wlm munge libslurm-dev gcc python3 python3-venv; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done)
  [ -n "$missing" ] || fail "the chroot is not bare: slurm-wlm, munge, ... already installed"
  local target
  for target in $TARGET; do  # e.g. "install-check deb-check", "deb-check slurm": each in turn, each timed
    if [ "$target" = install-check ]; then install_check; else make_target "$target"; fi
    case $target in install-check|deb-check)  # they stop what they start (a test tier's leftovers die with the namespace)
      left=$(others)
      [ -z "$left" ] || fail "processes left after make $target: $left" ;;
    esac
  done
  say "[chroot] all passed in $((SECONDS - t0)) s"
}

# ---------------------------------------------------------------------------------------------
# Mode 2: pid 1 of fresh mount + pid namespaces, on the host's filesystem: mount, chroot, unmount.
# ---------------------------------------------------------------------------------------------
in_namespace() {
  NS_ROOT=$1
  local C=$1
  umount_all() {
    set +e
    local m
    for m in dev/shm dev/pts dev sys proc; do
      mountpoint -q "$NS_ROOT/$m" && { umount -R "$NS_ROOT/$m" 2>/dev/null || umount -l "$NS_ROOT/$m"; }
    done
    return 0
  }
  trap umount_all EXIT
  mount -t proc -o nosuid,nodev,noexec proc "$C/proc"
  # slurmd 22.05 will not start without a cgroup filesystem on /sys/fs/cgroup (even with
  # proctrack/linuxproc), which every booted Debian 12 has: /sys with its submounts there. Newer
  # Slurm gets a /sys without cgroups, so the lab's own cgroup.conf (slurm/releases.py) is what
  # lets slurmd start.
  if [ "${CLEAN_ROOM_SUITE:-bookworm}" = bookworm ]; then
    mount --rbind /sys "$C/sys"
  else
    mount -t sysfs -o nosuid,nodev,noexec sysfs "$C/sys"
  fi
  mount --bind /dev "$C/dev"
  mount --bind /dev/pts "$C/dev/pts"
  mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$C/dev/shm"
  local env=(HOME=/root LANG=C.UTF-8 TERM=dumb USER=root LOGNAME=root "TARGET=$TARGET" "PYTEST_ARGS=${PYTEST_ARGS:-}"
             "SLURM_MARKS=${SLURM_MARKS:-}" "SLURM_IPU_TEST_PORTS=${SLURM_IPU_TEST_PORTS:-}"
             "SLURM_SRC=${SLURM_SRC_IN:-}")
  local v
  for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
    [ -n "${!v:-}" ] && env+=("$v=${!v}")
  done
  local rc=0
  chroot "$C" /usr/bin/env -i "${env[@]}" /bin/bash /root/clean_room.sh --in-chroot || rc=$?
  umount_all
  return $rc
}

case "${1:-}" in
  --in-chroot) shift; in_chroot "$@"; exit 0 ;;
  --in-namespace) shift; in_namespace "$@"; exit $? ;;
  "") ;;
  *) echo "usage: $0   (as root; see the comment at its top)" >&2; exit 2 ;;
esac

# ---------------------------------------------------------------------------------------------
# Mode 1: the host.
# ---------------------------------------------------------------------------------------------
START=$SECONDS
SELF=$(readlink -f "$0")
cd "$(dirname "$0")/../.."
CHECKOUT=$PWD
[ "$(id -u)" = 0 ] || fail "run as root (debootstrap, chroot and mounts need it)"
git -C "$CHECKOUT" rev-parse --verify -q HEAD >/dev/null || fail "$CHECKOUT is not a git checkout with a commit"

SUITE=${CLEAN_ROOM_SUITE:-bookworm}
export TARGET=${CLEAN_ROOM_TARGET:-install-check}
MIRROR=${CLEAN_ROOM_MIRROR:-http://deb.debian.org/debian}
SECURITY=${CLEAN_ROOM_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
INCLUDE=make,ca-certificates
CACHE=${CLEAN_ROOM_CACHE:-/var/tmp/slurm-ipu-cleanroom-cache}
CACHE_DAYS=${CLEAN_ROOM_CACHE_DAYS:-7}
TIMEOUT=${CLEAN_ROOM_TIMEOUT:-3600}   # the whole in-chroot part
KEY=$(printf '%s\n' v1 "$SUITE" "$MIRROR" "$SECURITY" minbase "$INCLUDE" "$(dpkg --print-architecture)" | sha256sum | cut -c1-16)

C=
NS_PID=
cleanup() {
  local rc=$?
  set +e  # a failing kill or wait must not end the cleanup half way
  trap - EXIT INT TERM
  [ -n "$NS_PID" ] && kill -KILL "$NS_PID" 2>/dev/null && wait "$NS_PID" 2>/dev/null
  if [ -n "$C" ] && [ -d "$C" ]; then
    # processes whose root is in the chroot (the pid namespace's end should have taken them all)
    local d p pids end
    any_alive() { for p in "$@"; do [ -e "/proc/$p" ] && return 0; done; return 1; }
    for sig in TERM KILL; do
      pids=()
      for d in /proc/[0-9]*; do
        [[ $(readlink "$d/root" 2>/dev/null) == "$C"* ]] && pids+=("${d#/proc/}")
      done
      [ ${#pids[@]} = 0 ] && break
      say "cleanup: SIG$sig to ${#pids[@]} process(es) left in the chroot: ${pids[*]}"
      kill -"$sig" "${pids[@]}" 2>/dev/null || true
      end=$((SECONDS + 10))
      while [ $SECONDS -lt $end ] && any_alive "${pids[@]}"; do sleep 0.2; done
    done
    # mounts under the chroot in this namespace (normally none: they live in the run's namespace)
    local m
    for m in $(awk -v c="$C" '$5 == c || index($5, c "/") == 1 {print $5}' /proc/self/mountinfo | sort -r); do
      umount "$m" 2>/dev/null || umount -l "$m" || true
    done
    if awk -v c="$C" '$5 == c || index($5, c "/") == 1 {f=1} END {exit !f}' /proc/self/mountinfo; then
      say "cleanup: mounts remain under $C; NOT removing it"
    else
      rm -rf --one-file-system "$C"
    fi
  fi
  if [ $rc = 0 ]; then say "PASSED in $((SECONDS - START)) s"; else say "failed after $((SECONDS - START)) s"; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# 1. debootstrap on the host
if ! command -v debootstrap >/dev/null; then
  say "installing debootstrap on the host"
  { apt-get install -y -qq debootstrap || { apt-get update -qq && apt-get install -y -qq debootstrap; }; } >/dev/null 2>&1 \
    || fail "apt-get install debootstrap failed on the host"
fi
if command -v zstd >/dev/null; then ZIP=(zstd -q -T0 -3) UNZIP=(zstd -q -d -c) EXT=zst; else ZIP=(gzip -1) UNZIP=(gzip -d -c) EXT=gz; fi
TARBALL=$CACHE/rootfs-$SUITE-$KEY.tar.$EXT
DEBS=$CACHE/debs-$SUITE

# 2. the bare chroot: from the cache, or debootstrap (then cached)
mkdir -p "$DEBS"
C=$(mktemp -d /var/tmp/slurm-ipu-cleanroom-XXXXXX)
chmod 755 "$C"
exec 9>"$CACHE/.lock"
flock -w 1800 9 || fail "another run held $CACHE/.lock for 30 minutes"
if [ -f "$TARBALL.ok" ] && [ -s "$TARBALL" ] && [ -z "$(find "$TARBALL.ok" -mtime +"$CACHE_DAYS")" ]; then
  say "bare $SUITE from the cache ($TARBALL)"
  t=$SECONDS
  "${UNZIP[@]}" "$TARBALL" | tar -x -p --numeric-owner -C "$C" || fail "cannot unpack $TARBALL (remove it to rebuild)"
  say "  unpacked in $((SECONDS - t)) s"
else
  # everything cached lives as long as the base system: a new one starts with no downloads
  rm -rf "$CACHE"/rootfs-"$SUITE"-* "$DEBS"/*
  say "debootstrap --variant=minbase --include=$INCLUDE $SUITE ($MIRROR); no cache yet"
  t=$SECONDS
  debootstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$C" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 \
    || { tail -n 20 "$CACHE/debootstrap.log" >&2; fail "debootstrap failed: $(tail -n 1 "$CACHE/debootstrap.log")"; }
  # the sources of a stock Debian 12 install: updates and security too
  if [ "$SUITE" = sid ]; then
    echo "deb $MIRROR $SUITE main" >"$C/etc/apt/sources.list"
  else
    cat >"$C/etc/apt/sources.list" <<EOF
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb $SECURITY $SUITE-security main
EOF
  fi
  rm -rf "$C"/var/cache/apt/archives/*.deb "$C"/var/lib/apt/lists/*_* "$C/debootstrap"
  say "  debootstrap took $((SECONDS - t)) s; caching it"
  t=$SECONDS
  tar -c --numeric-owner -C "$C" . | "${ZIP[@]}" >"$TARBALL.tmp" && mv "$TARBALL.tmp" "$TARBALL" && touch "$TARBALL.ok" \
    || fail "cannot write the cache $TARBALL"
  say "  cached in $((SECONDS - t)) s ($(du -h "$TARBALL" | cut -f1))"
fi
flock -u 9
[ -x "$C/usr/bin/make" ] && [ -x "$C/usr/bin/apt-get" ] || fail "the chroot has no make or apt-get"

# 3. the checkout's committed files, the run's settings, cached downloads
mkdir -p "$C/src"
git -C "$CHECKOUT" archive HEAD | tar -x -C "$C/src" || fail "git archive HEAD failed"
say "source: $(git -C "$CHECKOUT" rev-parse --short HEAD) ($(git -C "$CHECKOUT" log -1 --format=%s | cut -c1-60)...)"
install -m 755 "$SELF" "$C/root/clean_room.sh"
cp -L /etc/resolv.conf "$C/etc/resolv.conf"
# The host's extra TLS roots (e.g. an intercepting proxy's CA) into the chroot's system store, so
# pip reaches PyPI as it does from the host; nothing else of the host's configuration goes in.
HOST_CA=${CLEAN_ROOM_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
if ! command -v python3 >/dev/null; then
  say "no python3 on the host: not comparing its CA bundle with the chroot's (pip may fail behind a TLS proxy)"
elif [ -s "$HOST_CA" ] && [ -s "$C/etc/ssl/certs/ca-certificates.crt" ]; then
  n=$(python3 - "$HOST_CA" "$C/etc/ssl/certs/ca-certificates.crt" "$C/usr/local/share/ca-certificates" <<'EOF'
import re, sys
pem = re.compile(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", re.S)
norm = lambda b: "".join(b.split())
known = {norm(b) for b in pem.findall(open(sys.argv[2]).read())}
extra = [b for b in pem.findall(open(sys.argv[1]).read()) if norm(b) not in known]
for i, b in enumerate(extra):
    open(f"{sys.argv[3]}/clean-room-host-{i}.crt", "w").write(b + "\n")
print(len(extra))
EOF
  ) || fail "cannot compare the host's CA bundle with the chroot's"
  if [ "$n" != 0 ]; then
    chroot "$C" update-ca-certificates >/dev/null 2>&1 || fail "update-ca-certificates failed in the chroot"
    say "the host trusts $n CA(s) Debian does not ($HOST_CA): added to the chroot's store"
  fi
fi
# Unstable's Release files expire within days, and the mirror here can serve a frozen snapshot.
if [ "$SUITE" = sid ]; then
  echo 'Acquire::Check-Valid-Until "false";' >"$C/etc/apt/apt.conf.d/99clean-room-valid-until"
fi
printf '#!/bin/sh\n# clean-room: no service starts in the chroot\nexit 101\n' >"$C/usr/sbin/policy-rc.d"
chmod 755 "$C/usr/sbin/policy-rc.d"
# the .debs earlier runs downloaded, as hard links (apt never rewrites a complete .deb in place)
find "$DEBS" -name '*.deb' -exec cp -l -t "$C/var/cache/apt/archives/" {} + 2>/dev/null || true

# A Slurm release tarball for `make slurm-built` (SLURM_SRC), and its build from an earlier run:
# the cache keeps /opt/slurm as that target wrote it, keyed by the tarball's sha256 and the suite.
BUILT_CACHE=
if [ -n "${SLURM_SRC:-}" ]; then
  [ -s "$SLURM_SRC" ] || fail "SLURM_SRC=$SLURM_SRC is not a file (a Slurm release tarball)"
  mkdir -p "$C/var/cache/slurm-src"
  cp "$SLURM_SRC" "$C/var/cache/slurm-src/"
  export SLURM_SRC_IN=/var/cache/slurm-src/$(basename "$SLURM_SRC")
  BUILT_CACHE=$CACHE/slurm-built-$SUITE-$(sha256sum "$SLURM_SRC" | cut -c1-16).tar.zst
  if [ -s "$BUILT_CACHE" ]; then
    cp "$BUILT_CACHE" "$C/var/cache/slurm-built.tar.zst"
    say "$(basename "$SLURM_SRC"): its build from the cache ($BUILT_CACHE)"
  else
    say "$(basename "$SLURM_SRC"): no build cached yet; built in the chroot, then cached"
  fi
fi

# 4. the run, in its own mount and pid namespaces (all of its processes die with it)
say "into the chroot $C (timeout ${TIMEOUT}s)"
unshare --mount --pid --fork --kill-child=SIGKILL --propagation private -- \
  "$SELF" --in-namespace "$C" &
NS_PID=$!
end=$((SECONDS + TIMEOUT))
while kill -0 "$NS_PID" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 1; done
kill -0 "$NS_PID" 2>/dev/null && fail "the chroot part took longer than ${TIMEOUT}s"
rc=0; wait "$NS_PID" || rc=$?
NS_PID=
# keep a Slurm built in this run (whether or not its tests passed) and what was downloaded
if [ -n "$BUILT_CACHE" ] && [ ! -s "$BUILT_CACHE" ] && [ -s "$C/var/cache/slurm-built.tar.zst" ]; then
  cp "$C/var/cache/slurm-built.tar.zst" "$BUILT_CACHE.tmp" && mv "$BUILT_CACHE.tmp" "$BUILT_CACHE" \
    && say "the Slurm build cached ($BUILT_CACHE)"
fi
find "$C/var/cache/apt/archives" -maxdepth 1 -name '*.deb' -exec cp -ln -t "$DEBS/" {} + 2>/dev/null || true
say "download cache: $(find "$DEBS" -name '*.deb' | wc -l) .debs"
if [ -n "${CLEAN_ROOM_LOGS:-}" ]; then
  mkdir -p "$CLEAN_ROOM_LOGS" && cp -a "$C/root/logs/." "$CLEAN_ROOM_LOGS/" && say "logs kept in $CLEAN_ROOM_LOGS"
fi
[ $rc = 0 ] || exit $rc
