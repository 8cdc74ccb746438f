#!/usr/bin/env bash
# `make deb`: slurm-ipu's Debian packages for this machine's Debian and its Slurm, built with
# Debian's own tools (dpkg-buildpackage, debhelper, pybuild) in a copy of the tree, then checked by
# lintian (any error fails the build; the warnings it may give are overridden in this directory,
# each with its reason). DEB_OUT (default build/deb) gets the .debs and lintian's report;
# DEB_REVISION (default 1) numbers builds of one version: 0.1.0+deb12.1, +deb13.1, +sid.1;
# DEB_LINTIAN=0 skips lintian (a rebuild already checked).
set -euo pipefail
say() { echo "deb: $*" >&2; }
fail() { say "FAILED: $*"; exit 1; }
cd "$(dirname "$0")/../.."
SRC=$PWD
OUT=${DEB_OUT:-$SRC/build/deb}
REV=${DEB_REVISION:-1}
[[ $REV =~ ^[0-9]+$ ]] || fail "DEB_REVISION=$REV is not a number; use e.g. DEB_REVISION=2"
UPSTREAM=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
# shellcheck disable=SC1091
. /etc/os-release
if [ -n "${VERSION_ID:-}" ]; then TAG=deb$VERSION_ID DIST=$VERSION_CODENAME; else TAG=sid DIST=unstable; fi
DEBVER=$UPSTREAM+$TAG.$REV
WORK=$(mktemp -d /tmp/slurm-ipu-deb-XXXXXX)
[ -n "${DEB_KEEP:-}" ] || trap 'rm -rf "$WORK"' EXIT  # DEB_KEEP=1: keep the build tree (debugging)
T=$WORK/slurm-ipu-$UPSTREAM
mkdir "$T"
tar -C "$SRC" --exclude=./.venv --exclude=./.git --exclude=./build --exclude='*.egg-info' --exclude='*.o' \
  --exclude='*.so' --exclude=__pycache__ --exclude=./.pytest_cache -cf - . | tar -C "$T" -xf -
cp -r templates/debian "$T/debian"
rm "$T/debian/build.sh"
# the build dependencies debian/control names (the one list of them), installed when missing
if ! (cd "$T" && dpkg-checkbuilddeps) >/dev/null 2>&1; then
  say "installing the build dependencies (apt-get build-dep)"
  { apt-get build-dep -y -qq "$T" || { apt-get update -qq && apt-get build-dep -y -qq "$T"; }; } >"$WORK/deps.log" 2>&1 \
    || { tail -n 5 "$WORK/deps.log" >&2; fail "apt-get build-dep: $(tail -n 1 "$WORK/deps.log")"; }
fi
SLURM=$(dpkg-query -W -f='${Version}' libslurm-dev)
cat >"$T/debian/changelog" <<CHANGES
slurm-ipu ($DEBVER) $DIST; urgency=medium

  * Built by \`make deb\` for Debian $DIST with Slurm $SLURM.

 -- slurm-ipu developers <slurm-ipu@lists.example.org>  $(date -R)
CHANGES
say "building slurm-ipu $DEBVER for $DIST (Slurm $SLURM)"
# Debian's own interpreter and tools only (root's PATH can start with a pyenv build)
(cd "$T" && env PATH=/usr/sbin:/usr/bin:/sbin:/bin dpkg-buildpackage -us -uc -b) >"$WORK/build.log" 2>&1 \
  || { tail -n 30 "$WORK/build.log" | sed 's/^/    | /' >&2; fail "dpkg-buildpackage: $(tail -n 1 "$WORK/build.log")"; }
mkdir -p "$OUT"
rm -f "$OUT"/slurm-ipu*_"$DEBVER"_*.deb
cp "$WORK"/*.deb "$OUT/"
CHANGES_FILE=$(ls "$WORK"/*.changes)
if [ "${DEB_LINTIAN:-1}" = 0 ]; then
  say "lintian skipped (DEB_LINTIAN=0)"
elif env PATH=/usr/sbin:/usr/bin:/sbin:/bin lintian --fail-on error --info "$CHANGES_FILE" >"$OUT/lintian-$TAG.txt" 2>&1; then
  say "lintian: no error ($(grep -c '^W:' "$OUT/lintian-$TAG.txt" || true) warnings; $OUT/lintian-$TAG.txt)"
else
  grep -E '^(E|W):' "$OUT/lintian-$TAG.txt" | sed 's/^/    | /' >&2
  fail "lintian found errors (above; $OUT/lintian-$TAG.txt)"
fi
for deb in "$WORK"/*.deb; do echo "$OUT/$(basename "$deb")"; done
