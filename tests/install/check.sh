#!/usr/bin/env bash
# `make install-check` (run by `make test` in the bookworm clean-room): an install
# outside the checkout's venv. Install into a scratch root, render the lab's site from the installed
# product, install that site, bring the lab up on the installed files, run an IPU job end to
# end, `doctor` all ok, `status` shows the job's partition, then `make uninstall` leaves none of
# the files the install wrote. Every wait is bounded; the lab and the scratch root go on exit.
# INSTALL_CHECK_PREFIX and INSTALL_CHECK_BINDIR install at those paths instead of the scratch
# root (tests/install/clean_room.sh runs it so, at the default paths, in a bare Debian chroot).
set -euo pipefail
cd "$(dirname "$0")/../.."
CHECKOUT=$PWD
NAME=install-check
# shellcheck source=tests/install/lib.sh
. tests/install/lib.sh
ROOT=$(mktemp -d /tmp/slurm-ipu-install-check-XXXXXX)
chmod 755 "$ROOT"
P=${INSTALL_CHECK_PREFIX:-$ROOT/opt/slurm-ipu}
B=${INSTALL_CHECK_BINDIR:-$ROOT/bin}
LAB=$ROOT/lab
BASE=$(free_ports)
LABARGS=(--dir "$LAB" --ctld-port "$BASE" --node-port $((BASE + 1)) --vipu-port $((BASE + 7)) --prefix "$P")

cleanup() {
  if [ -x "$P/venv/bin/slurm-ipu" ]; then "$P/venv/bin/slurm-ipu" lab down "${LABARGS[@]}" >/dev/null 2>&1 || true; fi
  rm -rf "$ROOT"
}
trap cleanup EXIT
# make install never touches the node's Slurm: its packages, after, are as before.
PACKAGES=$(slurm_packages)
# A Slurm under its own prefix, as sites build theirs (no package): this node's headers at micro
# release 99 (Slurm loads a SPANK plugin of its major.minor, src/common/plugin.c), and a slurmd
# saying that release. The install builds against it, the lab's jobs load that build.
V=$(/usr/sbin/slurmd -V | awk '{print $2}')
own_slurm() {  # DIR MAJOR.MINOR: a prefix whose slurmd and headers are that release, micro 99
  mkdir -p "$1/sbin" "$1/include"
  cp -r /usr/include/slurm "$1/include/"
  printf '#!/bin/sh\necho slurm %s.99\n' "$2" > "$1/sbin/slurmd"; chmod 755 "$1/sbin/slurmd"
  sed -i -E "s/^(#define SLURM_VERSION_NUMBER) .*/\1 $(printf '0x%02x%02x63' "${2%.*}" "$((10#${2#*.}))")/" \
    "$1/include/slurm/slurm_version.h"
}
own_slurm "$ROOT/slurm" "${V%.*}"
own_slurm "$ROOT/other" "21.08"
sed -i 's/echo slurm 21.08.99/echo slurm '"${V%.*}"'.99/' "$ROOT/other/sbin/slurmd"  # runs ours, headers another
# make runs in a copy: pip's build/ and the SPANK plugin's objects go there, never into the checkout
SRC=$ROOT/src
mkdir "$SRC"
tar -C "$CHECKOUT" --exclude=./.venv --exclude=./.git --exclude=./build --exclude='*.egg-info' --exclude='*.o' \
  --exclude='*.so' --exclude=__pycache__ -cf - . | tar -C "$SRC" -xf -
say "make install SLURM_PREFIX=<headers of another release>: refused in one line, nothing written"
if out=$(make -s -C "$SRC" install PREFIX="$P" BINDIR="$B" SLURM_PREFIX="$ROOT/other" 2>&1); then
  fail "an install against headers of Slurm 21.08 went through: $out"
fi
grep -q "slurm_version.h is Slurm 21.08.99, but this node runs ${V%.*}.99" <<<"$out" || fail "refusal said: $out"
[ ! -e "$P" ] && [ ! -e "$B/slurm-ipu" ] || fail "the refused install wrote $P or $B/slurm-ipu"

say "make install PREFIX=$P SLURM_PREFIX=$ROOT/slurm (no site yet)"
make -s -C "$SRC" install PREFIX="$P" BINDIR="$B" PLUGIN_DIR="$LAB/lib" SLURM_PREFIX="$ROOT/slurm" >/dev/null
cd "$ROOT"  # nothing below may import the checkout
"$B/slurm-ipu" lab site "${LABARGS[@]}" > "$ROOT/site.yaml"
say "make install SITE=<the lab's site>"
make -s -C "$SRC" install PREFIX="$P" BINDIR="$B" SITE="$ROOT/site.yaml" SLURM_PREFIX="$ROOT/slurm" >/dev/null
MANIFEST=$P/share/slurm-ipu/manifest.json
built=$(/usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["plugin_built_for"])' "$MANIFEST")
[ "$built" = "${V%.*}.99" ] || fail "the SPANK plugin was built for Slurm $built, not the prefix's ${V%.*}.99"
cp "$MANIFEST" "$ROOT/manifest.json"  # uninstall removes it
# every file and link the install wrote (directories it created go only when they end up empty)
INSTALLED=$(/usr/bin/python3 -c 'import json, sys
print("\n".join(e["path"] for e in json.load(open(sys.argv[1]))["entries"] if e["kind"] != "mkdir"))' "$MANIFEST")

# What non-root users run must not depend on root's files (root's python3 can be a pyenv build).
setpriv --reuid=65534 --regid=65534 --clear-groups env -i PATH=/usr/bin:/bin "$B/ipurun" --help >/dev/null \
  || fail "a non-root user cannot run the installed ipurun"

say "lab up on the installed files"
eval "$("$B/slurm-ipu" lab up "${LABARGS[@]}")"
[ "$(command -v slurm-ipu)" = "$LAB/bin/slurm-ipu" ] || fail "the lab's PATH does not come first"
grep -q "$P/venv/bin/python" "$LAB/bin/slurm-ipu" || fail "the lab's slurm-ipu is not the installed one"

out=$(timeout 120 srun -N2 --gres=ipu:8 printenv IPUOF_VIPU_API_PARTITION_ID) || fail "srun failed"
[ "$(echo "$out" | sort -u | wc -l)" = 1 ] && [[ $out == slurm_* ]] || fail "tasks saw: $out"
job=$(timeout 60 sbatch --parsable -N2 --gres=ipu:4 -o /dev/null --wrap 'sleep 120') || fail "sbatch failed"
poll 60 shows "^RUNNING$" timeout 30 squeue -h -j "$job" -o %T || fail "job $job never ran; last saw: $seen"
timeout 120 slurm-ipu doctor >&2 || fail "doctor found a problem"
# Once the job runs its partition exists: one read. Not `status | grep -q`: grep leaves at the first
# match, status's next line meets a closed pipe (exit 141, as any command's would), and pipefail
# failed the check one run in four.
seen=$(shows "^slurm_$job " timeout 60 slurm-ipu status) || fail "status does not show slurm_$job: $seen"
timeout 30 scancel "$job" || fail "scancel $job failed"
poll 60 lacks "slurm_$job\b" timeout 30 vipu list partitions || fail "slurm_$job outlived its job; last saw: $seen"

say "lab down; make uninstall"
timeout 180 "$B/slurm-ipu" lab down "${LABARGS[@]}" >/dev/null 2>&1
make -s -C "$SRC" uninstall PREFIX="$P" >/dev/null
left=$(for f in $INSTALLED; do [ -e "$f" ] || [ -L "$f" ] && echo "$f"; done || true)
[ -z "$left" ] || fail "uninstall left: $left"
[ ! -e "$P" ] || fail "uninstall left $P"
# the plugin's job prolog made ipurun's per-job caches under it (spank/cache.c)
[ ! -e /var/cache/slurm-ipu ] || fail "uninstall left /var/cache/slurm-ipu"
left=$(/usr/bin/python3 -c 'import json, os, sys
print(" ".join(e["path"] for e in json.load(open(sys.argv[1]))["entries"]
      if e["kind"] == "mkdir" and os.path.isdir(e["path"]) and not os.listdir(e["path"])))' "$ROOT/manifest.json")
[ -z "$left" ] || fail "uninstall left empty directories it created: $left"
[ "$(slurm_packages)" = "$PACKAGES" ] || fail "make install changed the node's Slurm packages: $(diff <(echo \
  "$PACKAGES") <(slurm_packages) | tr '\n' ' ')"
say "ok: installed against a Slurm under its own prefix (and refused another release's headers), ran an IPU job" \
  "on the installed files, doctor ok, uninstalled without a trace, the node's Slurm packages untouched"
