#!/usr/bin/env bash
# `make slurm-installed`: the real-Slurm tier against the Debian packages installed on this machine
# instead of the checkout (the chroot tiers exercise what sites install). In a chroot with
# Debian's Slurm only (tests/install/clean_room.sh runs it in trixie and sid): `make deb`, apt installs
# the three packages from the files, then tests/slurm (SLURM_MARKS, PYTEST_ARGS) runs from a venv that
# sees Debian's python3 site (the packages' slurm_ipu) and adds only the test tools (pyproject.toml's
# `test` extra, less the linter), with pytest's
# --import-mode=append and its working directory outside the checkout, so nothing imports the
# checkout's slurm_ipu (tests/slurm/conftest.py refuses to start otherwise). The packages are purged
# at the end, whatever happened.
set -euo pipefail
cd "$(dirname "$0")/../.."
CHECKOUT=$PWD
NAME=slurm-installed
# shellcheck source=tests/install/lib.sh
. tests/install/lib.sh
[ "$(id -u)" = 0 ] || fail "run as root (it installs packages)"
[ ! -e /usr/lib/python3/dist-packages/slurm_ipu ] || fail "slurm_ipu is installed here already; run it in a chroot" \
  "(tests/install/clean_room.sh)"
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
ROOT=$(mktemp -d /tmp/slurm-ipu-installed-XXXXXX)
chmod 755 "$ROOT"
cleanup() {
  dpkg --purge slurm-ipu-lab slurm-ipu-spank slurm-ipu >/dev/null 2>&1 || true
  rm -rf "$ROOT"
}
trap cleanup EXIT
if [ -n "${DEB_HANDOFF:-}" ] && [ "$(compgen -G "$DEB_HANDOFF/*.deb" | wc -l)" = 3 ]; then
  mkdir "$ROOT/deb" && cp "$DEB_HANDOFF"/*.deb "$ROOT/deb/"  # what deb-check built of this tree just before
  say "the packages deb-check built of this tree ($DEB_HANDOFF)"
else
  make -s -C "$CHECKOUT" deb DEB_OUT="$ROOT/deb" DEB_LINTIAN=0 >"$ROOT/deb.log" 2>&1 \
    || { tail -n 20 "$ROOT/deb.log" >&2; fail "make deb: $(tail -n 1 "$ROOT/deb.log")"; }
fi
DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -q "$ROOT"/deb/slurm-ipu_*.deb \
  "$ROOT"/deb/slurm-ipu-spank_*.deb "$ROOT"/deb/slurm-ipu-lab_*.deb >"$ROOT/apt.log" 2>&1 \
  || { tail -n 20 "$ROOT/apt.log" >&2; fail "apt-get install: $(tail -n 1 "$ROOT/apt.log")"; }
say "installed $(dpkg-query -W -f='${Package} ${Version}  ' slurm-ipu slurm-ipu-spank slurm-ipu-lab)"
/usr/bin/python3 -m venv --system-site-packages "$ROOT/venv"
# shellcheck disable=SC2046  # one word per requirement
"$ROOT/venv/bin/python" -m pip install -q --disable-pip-version-check $("$ROOT/venv/bin/python" -c '
import sys, tomllib
extra = tomllib.load(open(sys.argv[1], "rb"))["project"]["optional-dependencies"]["test"]
print(" ".join(r for r in extra if not r.startswith("ruff")))' "$CHECKOUT/pyproject.toml") >"$ROOT/pip.log" 2>&1 \
  || { tail -n 5 "$ROOT/pip.log" >&2; fail "pip install the test tools: $(tail -n 1 "$ROOT/pip.log")"; }
mkdir "$ROOT/run"
cd "$ROOT/run"
# shellcheck disable=SC2086  # PYTEST_ARGS is a list of words
SLURM_IPU_TEST_PACKAGES=1 "$ROOT/venv/bin/python" -P -m pytest -q -p no:cacheprovider --import-mode=append \
  -c "$CHECKOUT/pyproject.toml" --rootdir "$CHECKOUT" "$CHECKOUT/tests/slurm" -m "${SLURM_MARKS:-not long}" \
  ${PYTEST_ARGS:-}
