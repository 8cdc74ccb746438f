#!/usr/bin/env bash
# `make slurm-built`: the real-Slurm tier on a Slurm built from its release source, as most large
# sites run one (often a release Debian does not ship), instead of Debian's. In a bare chroot with
# no Debian Slurm package (tests/install/clean_room.sh; `make slurm-25.11` on the host):
# 1. Slurm's build dependencies and munge from Debian (munge is not Slurm), then Slurm from the
#    release tarball SLURM_SRC into /opt/slurm with a RHEL-style layout (configuration in
#    /etc/slurm, no units installed), or from SLURM_BUILT, that build cached by the clean room
#    (keyed by the tarball's sha256: it is written there after a build).
# 2. `make install SLURM_PREFIX=/opt/slurm`: the SPANK plugin built against that Slurm's headers,
#    into its plugin directory, and the rest at the default paths.
# 3. tests/slurm (SLURM_MARKS, PYTEST_ARGS) from the checkout, its labs on that Slurm
#    (SLURM_IPU_SLURM_PREFIX: slurm_ipu/lab/spec.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
CHECKOUT=$PWD
NAME=slurm-built
# shellcheck source=tests/install/lib.sh
. tests/install/lib.sh
[ "$(id -u)" = 0 ] || fail "run as root (it installs packages and /opt/slurm)"
! dpkg -s slurm-wlm >/dev/null 2>&1 || fail "Debian's Slurm is installed here; run it in a chroot (make slurm-25.11)"
PREFIX=/opt/slurm
BUILT=${SLURM_BUILT:-/var/cache/slurm-built.tar.zst}
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
export DEBIAN_FRONTEND=noninteractive
LOGS=${SLURM_BUILT_LOGS:-/root/logs}
mkdir -p "$LOGS"

# Slurm's build and run dependencies (mariadb for accounting_storage/mysql: the lab's slurmdbd;
# http-parser, json-c and jwt for slurmrestd), munge, the tools the tests use; no Slurm.
PKGS="build-essential pkg-config python3 python3-venv python3-dev zstd xz-utils bzip2 munge libmunge-dev
  liblua5.1-0-dev libjson-c-dev libjwt-dev libhttp-parser-dev libdbus-1-dev libmariadb-dev libyaml-dev
  musl-tools numactl hwloc lua5.1 patch mariadb-server-core mariadb-client-core git"
t=$SECONDS
# shellcheck disable=SC2086  # one word per package
{ apt-get update -qq && apt-get install -y -qq $PKGS; } >"$LOGS/apt.log" 2>&1 \
  || { tail -n 20 "$LOGS/apt.log" >&2; fail "apt-get install: $(tail -n 1 "$LOGS/apt.log")"; }
say "build dependencies and munge from Debian in $((SECONDS - t)) s"
! dpkg -l 'slurm*' 'libslurm*' 2>/dev/null | grep -q '^ii' || fail "Debian's Slurm came in with the dependencies"

t=$SECONDS
if [ -s "$BUILT" ]; then
  zstd -q -d -c "$BUILT" | tar -x -C / || fail "cannot unpack $BUILT"
  say "Slurm $("$PREFIX/sbin/slurmctld" -V) from the cached build ($BUILT) in $((SECONDS - t)) s"
else
  [ -n "${SLURM_SRC:-}" ] && [ -s "$SLURM_SRC" ] || fail "SLURM_SRC=${SLURM_SRC:-} is not a Slurm release tarball"
  build=$(mktemp -d /tmp/slurm-build-XXXXXX)
  tar -x -f "$SLURM_SRC" -C "$build" --strip-components=1 || fail "cannot unpack $SLURM_SRC"
  # --enable-multiple-slurmd: the lab's several slurmd on one host (else "Duplicated NodeHostName")
  (cd "$build" && ./configure --prefix="$PREFIX" --sysconfdir=/etc/slurm --enable-multiple-slurmd \
     --disable-static) >"$LOGS/configure.log" 2>&1 \
    || { tail -n 20 "$LOGS/configure.log" >&2; fail "configure: $(tail -n 1 "$LOGS/configure.log")"; }
  make -C "$build" -j"$(nproc)" >"$LOGS/make.log" 2>&1 \
    || { grep -m 5 -i error "$LOGS/make.log" >&2; fail "make: $(tail -n 1 "$LOGS/make.log")"; }
  make -C "$build" install >"$LOGS/make-install.log" 2>&1 \
    || { tail -n 20 "$LOGS/make-install.log" >&2; fail "make install: $(tail -n 1 "$LOGS/make-install.log")"; }
  find "$PREFIX" -name '*.la' -delete
  find "$PREFIX" -type f \( -perm -u+x -o -name '*.so*' \) -exec strip --strip-debug {} + 2>/dev/null || true
  rm -rf "$build"
  tar -c -C / "${PREFIX#/}" | zstd -q -T0 -3 >"$BUILT.tmp" && mv "$BUILT.tmp" "$BUILT"
  say "Slurm $("$PREFIX/sbin/slurmctld" -V) built from $(basename "$SLURM_SRC") in $((SECONDS - t)) s" \
      "($(du -h "$BUILT" | cut -f1) kept for the next run)"
fi
mkdir -p /etc/slurm

t=$SECONDS
make -s install SLURM_PREFIX="$PREFIX" >"$LOGS/install.log" 2>&1 \
  || { tail -n 20 "$LOGS/install.log" >&2; fail "make install SLURM_PREFIX=$PREFIX: $(tail -n 1 "$LOGS/install.log")"; }
plugin=$(find "$PREFIX/lib/slurm" -name spank_ipu.so | head -n 1)
[ -n "$plugin" ] || fail "make install SLURM_PREFIX=$PREFIX put no spank_ipu.so in $PREFIX/lib/slurm"
say "make install SLURM_PREFIX=$PREFIX: $plugin, in $((SECONDS - t)) s"

t=$SECONDS
/usr/bin/python3 -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]' >"$LOGS/pip.log" 2>&1 \
  || { tail -n 5 "$LOGS/pip.log" >&2; fail "pip install: $(tail -n 1 "$LOGS/pip.log")"; }
say "the checkout's venv in $((SECONDS - t)) s"
# shellcheck disable=SC2086  # PYTEST_ARGS is a list of words
SLURM_IPU_SLURM_PREFIX=$PREFIX .venv/bin/python -m pytest -q -p no:cacheprovider "$CHECKOUT/tests/slurm" \
  -m "${SLURM_MARKS:-not long}" ${PYTEST_ARGS:-}
