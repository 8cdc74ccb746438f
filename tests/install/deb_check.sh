#!/usr/bin/env bash
# `make deb-check`: the Debian packages as a site uses them, on this machine's Debian and
# Slurm. Run in a chroot with Debian's Slurm and munge only (tests/install/clean_room.sh runs it in
# bookworm, trixie and sid): it installs and purges packages system-wide, so it refuses to run where
# slurm-ipu is installed already.
#
#  1. `make deb` twice (builds 1 and 2: the upgrade), lintian without error;
#  2. what the packages say: none depends on slurm-wlm, slurmctld, slurmd or munge; slurm-ipu (the
#     hooks) carries no emulator or lab; slurm-ipu-spank depends on the libslurm it was built against;
#  3. apt installs build 1 from the files; the admin puts a site description (the lab's) at
#     /etc/slurm-ipu/site.yaml and runs `slurm-ipu setup`; a lab on the installed packages runs IPU
#     jobs (srun, sbatch) and doctor says ok;
#  4. apt upgrades to build 2 under a running IPU job: the admin's site description is kept, the job
#     keeps running, and its end still removes its partition (its epilog found the hook);
#  5. remove is refused while the running Slurm loads the plugin; then it keeps the site description and the state; purge with a partition recorded leaves the
#     state directory and says why; purge without one leaves nothing but the admin's own files;
#     the node's Slurm packages are as before.
set -euo pipefail
cd "$(dirname "$0")/../.."
CHECKOUT=$PWD
NAME=deb-check
# shellcheck source=tests/install/lib.sh
. tests/install/lib.sh
[ "$(id -u)" = 0 ] || fail "run as root (it installs packages)"
if grep -Eqv '^(not-installed|)$' <<<"$(dpkg-query -W -f='${db:Status-Status}\n' slurm-ipu slurm-ipu-spank \
  slurm-ipu-lab 2>/dev/null || true)"; then
  fail "slurm-ipu packages are installed here already: deb-check installs and purges its own; run it in a chroot" \
    "(tests/install/clean_room.sh)"
fi
[ ! -e /etc/slurm-ipu ] || fail "/etc/slurm-ipu exists: deb-check writes there; run it in a chroot (tests/install/clean_room.sh)"
export PATH=/usr/sbin:/usr/bin:/sbin:/bin  # what an admin's root shell has: Debian's python3, no venv
ROOT=$(mktemp -d /tmp/slurm-ipu-deb-check-XXXXXX)
chmod 755 "$ROOT"
LAB=$ROOT/lab
BASE=$(free_ports)
LABARGS=(--dir "$LAB" --ctld-port "$BASE" --node-port $((BASE + 1)) --vipu-port $((BASE + 7)) --prefix /usr)
cleanup() {
  [ -x /usr/bin/slurm-ipu ] && [ -f "$LAB/pids.json" ] && /usr/bin/slurm-ipu lab down "${LABARGS[@]}" >/dev/null 2>&1
  rm -rf "$ROOT"
}
trap cleanup EXIT
apt_install() { DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -q \
  -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "$@" >"$ROOT/apt.log" 2>&1 \
  || { tail -n 20 "$ROOT/apt.log" >&2; fail "apt-get install $*: $(tail -n 1 "$ROOT/apt.log")"; }; }
PACKAGES=$(slurm_packages)
# every path a package holds (directories shared with others, like /usr/bin, are not its to remove)
owned() { dpkg-query -L "$@" 2>/dev/null | while read -r f; do [ -d "$f" ] || echo "$f"; done; }

# 1. build 1 and build 2 of this tree
say "make deb (builds 1 and 2)"
make -s -C "$CHECKOUT" deb DEB_OUT="$ROOT/deb1" DEB_REVISION=1 >"$ROOT/deb1.log" 2>&1 \
  || { cat "$ROOT/deb1.log" >&2; fail "make deb: $(tail -n 1 "$ROOT/deb1.log")"; }
grep '^deb:' "$ROOT/deb1.log" | sed 's/^/  /' >&2
grep -hE '^(E|W):' "$ROOT"/deb1/lintian-*.txt | sed 's/^/  lintian /' >&2 || true
make -s -C "$CHECKOUT" deb DEB_OUT="$ROOT/deb2" DEB_REVISION=2 DEB_LINTIAN=0 >"$ROOT/deb2.log" 2>&1 \
  || { cat "$ROOT/deb2.log" >&2; fail "make deb (build 2): $(tail -n 1 "$ROOT/deb2.log")"; }
# each build's packages, in this order: slurm-ipu, slurm-ipu-spank, slurm-ipu-lab
debs() { local name; for name in slurm-ipu slurm-ipu-spank slurm-ipu-lab; do
  compgen -G "$1/${name}_*.deb" || fail "make deb built no $name in $1"; done; }
mapfile -t BUILD1 < <(debs "$ROOT/deb1")
mapfile -t BUILD2 < <(debs "$ROOT/deb2")
[ ${#BUILD1[@]} = 3 ] && [ ${#BUILD2[@]} = 3 ] || fail "make deb did not build the three packages: ${BUILD1[*]}"
# DEB_HANDOFF (clean_room.sh, in a chroot): the installed tier that runs next there installs these
# instead of building the same tree a third time (about 40 s of CI per release).
if [ -n "${DEB_HANDOFF:-}" ]; then mkdir -p "$DEB_HANDOFF" && cp "${BUILD2[@]}" "$DEB_HANDOFF/"; fi
HOOKS=${BUILD1[0]} SPANK=${BUILD1[1]}

# 2. what the packages say of themselves
for deb in "${BUILD1[@]}"; do
  rel=$(dpkg-deb -f "$deb" Depends Pre-Depends Recommends | sed 's/^[A-Za-z-]*: //' | tr ',|' '\n\n' \
        | awk '{print $1}')
  bad=$(grep -Ex 'slurm-wlm|slurmctld|slurmd|munge|slurm-client' <<<"$rel" || true)
  [ -z "$bad" ] || fail "$(basename "$deb") depends on $bad: packages never bring a node's Slurm"
done
# (a listing read whole: `dpkg-deb -c | grep -q` under pipefail fails when grep leaves early)
listing=$(dpkg-deb -c "$HOOKS")
! grep -Eq 'slurm_ipu/(emulator|lab)/|bin/vipu' <<<"$listing" || fail "slurm-ipu carries the emulator or the lab"
grep -q 'usr/libexec/slurm-ipu/slurm-ipu-hook$' <<<"$listing" || fail "slurm-ipu lacks slurm-ipu-hook"
LIBSLURM=$(dpkg-query -W -f='${Depends}' libslurm-dev | grep -o '^libslurm[0-9]*')
grep -q "$LIBSLURM (>= " <<<"$(dpkg-deb -f "$SPANK" Depends)" \
  || fail "slurm-ipu-spank does not depend on $LIBSLURM: $(dpkg-deb -f "$SPANK" Depends)"
RELEASE=$(dpkg-query -W -f='${Version}' libslurm-dev | cut -d. -f1-2)
grep -q "slurm-wlm-basic-plugins (<< $RELEASE~)" <<<"$(dpkg-deb -f "$SPANK" Breaks)" \
  || fail "slurm-ipu-spank does not break Slurm's plugins of releases before $RELEASE: $(dpkg-deb -f "$SPANK" Breaks)"

# 3. install build 1 as a site does, describe the site, run IPU jobs on the installed files. The node
# was upgraded from a release whose unit was slurm-ipu-reaper.service, enabled, with setup's drop-in:
# its files went with that package, its enabled link and drop-in stayed.
UNITS=/etc/systemd/system
mkdir -p "$UNITS/multi-user.target.wants" "$UNITS/slurm-ipu-reaper.service.d"
ln -sfn /lib/systemd/system/slurm-ipu-reaper.service "$UNITS/multi-user.target.wants/slurm-ipu-reaper.service"
printf '[Service]\nUser=slurm\n' >"$UNITS/slurm-ipu-reaper.service.d/site.conf"
say "apt install build 1 (${BUILD1[*]##*/})"
apt_install "${BUILD1[@]}"
[ -e "$UNITS/multi-user.target.wants/slurm-ipu.service" ] || fail "the unit enabled under its earlier name is" \
  "not enabled as slurm-ipu.service"
[[ "$(readlink "$UNITS/slurm-ipu-reaper.service")" == */systemd/system/slurm-ipu.service ]] \
  || fail "slurm-ipu-reaper.service is not an alias of slurm-ipu.service: $(ls -l "$UNITS" | tr '\n' ' ')"
[ ! -L "$UNITS/multi-user.target.wants/slurm-ipu-reaper.service" ] || fail "the earlier name's dangling link stayed"
[ ! -e "$UNITS/slurm-ipu-reaper.service.d" ] || fail "setup left the earlier unit's drop-in"
grep -q "^ExecStart=/usr/bin/python3 -m slurm_ipu.cli service$" "$UNITS/slurm-ipu-reaper.service" \
  || fail "the packaged unit does not run slurm-ipu service"
[ "$(command -v slurm-ipu)" = /usr/bin/slurm-ipu ] || fail "slurm-ipu is not /usr/bin/slurm-ipu"
[ -f /etc/slurm-ipu/slurm-ipu-hook.conf ] || fail "postinst did not run slurm-ipu setup (no hook settings)"
setpriv --reuid=65534 --regid=65534 --clear-groups env -i PATH=/usr/bin:/bin ipurun --help >/dev/null \
  || fail "a non-root user cannot run the installed ipurun"
out=$(slurm-ipu setup --site /nonexistent.yaml 2>&1) && fail "setup with a missing site description succeeded"
[ "$(wc -l <<<"$out")" = 1 ] && ! grep -q Traceback <<<"$out" || fail "setup's refusal is not one line: $out"
say "the admin's site description (the lab's) at /etc/slurm-ipu/site.yaml; slurm-ipu setup"
slurm-ipu lab site "${LABARGS[@]}" >/etc/slurm-ipu/site.yaml
echo "# the admin's edit" >>/etc/slurm-ipu/site.yaml
ADMIN=$(sha256sum </etc/slurm-ipu/site.yaml)
slurm-ipu setup >&2
say "lab up on the installed packages"
eval "$(slurm-ipu lab up "${LABARGS[@]}")"
/usr/libexec/slurm-ipu/slurm-ipu-hook --check >&2 || fail "slurm-ipu-hook --check failed after setup"
grep -q "^exec /usr/bin/python3 " "$LAB/bin/slurm-ipu" || fail "the lab's slurm-ipu is not the installed one"
out=$(timeout 120 srun -N2 --gres=ipu:8 printenv IPUOF_VIPU_API_PARTITION_ID) || fail "srun failed"
[ "$(sort -u <<<"$out" | wc -l)" = 1 ] && [[ $out == slurm_* ]] || fail "tasks saw: $out"
job=$(timeout 60 sbatch --parsable -N2 --gres=ipu:4 -o /dev/null --wrap 'sleep 300') || fail "sbatch failed"
poll 60 shows "^RUNNING$" timeout 30 squeue -h -j "$job" -o %T || fail "job $job never ran; last saw: $seen"
timeout 120 slurm-ipu doctor >&2 || fail "doctor found a problem on the installed packages"
seen=$(shows "\bslurm_$job\b" timeout 60 vipu list partitions) || fail "no partition slurm_$job: $seen"

# 4. the upgrade under the running job
say "apt upgrade to build 2 while job $job runs"
apt_install "${BUILD2[@]}"
[ "$(dpkg-query -W -f='${Version}' slurm-ipu)" = "$(dpkg-deb -f "${BUILD2[0]}" Version)" ] || fail "not upgraded"
[ "$(sha256sum </etc/slurm-ipu/site.yaml)" = "$ADMIN" ] || fail "the upgrade changed the admin's site description"
seen=$(shows "^RUNNING$" timeout 30 squeue -h -j "$job" -o %T) || fail "job $job did not survive the upgrade: $seen"
timeout 30 scancel "$job" || fail "scancel $job failed"
poll 60 lacks "slurm_$job\b" timeout 30 vipu list partitions || fail "slurm_$job outlived its job; last saw: $seen"
out=$(timeout 120 srun -N1 --gres=ipu:4 printenv IPUOF_VIPU_API_PARTITION_ID) || fail "srun after the upgrade failed"
[[ $out == slurm_* ]] || fail "a task after the upgrade saw: $out"
out=$(DEBIAN_FRONTEND=noninteractive timeout 120 apt-get remove -y -q slurm-ipu-spank 2>&1) \
  && fail "slurm-ipu-spank was removed while the running Slurm loads it"
grep -q "loads the SPANK plugin" <<<"$out" || fail "the refused remove did not say why: $(tail -n 3 <<<"$out")"
[ "$(dpkg-query -W -f='${db:Status-Status}' slurm-ipu-spank)" = installed ] || fail "the refused remove left" \
  "slurm-ipu-spank $(dpkg-query -W -f='${db:Status-Status}' slurm-ipu-spank)"
STATE=$(sed -n 's|^socket=\(/.*\)/hooks\.sock$|\1|p' /etc/slurm-ipu/slurm-ipu-hook.conf)
[ -d "$STATE" ] || fail "no state directory named in /etc/slurm-ipu/slurm-ipu-hook.conf"
timeout 180 slurm-ipu lab down "${LABARGS[@]}" >/dev/null 2>&1
rm -f "$LAB/pids.json"

# 5. remove, then purge with a partition recorded, then install again and purge clean
FILES=$(owned slurm-ipu slurm-ipu-spank slurm-ipu-lab)
say "apt remove"
DEBIAN_FRONTEND=noninteractive timeout 300 apt-get remove -y -q slurm-ipu slurm-ipu-spank slurm-ipu-lab \
  >"$ROOT/apt.log" 2>&1 || fail "apt-get remove: $(tail -n 1 "$ROOT/apt.log")"
left=$(for f in $FILES; do { [ -e "$f" ] || [ -L "$f" ]; } && [ "$f" != /etc/slurm-ipu/site.yaml ] && echo "$f"; done \
       || true)
[ -z "$left" ] || fail "remove left the packages' files: $left"
[ "$(sha256sum </etc/slurm-ipu/site.yaml)" = "$ADMIN" ] || fail "remove did not keep the site description"
[ -d "$STATE" ] || fail "remove did not keep the state directory"
mkdir -p "$STATE/created"
echo '{"partition": "slurm_999999"}' >"$STATE/created/slurm_999999.json"
say "dpkg --purge with a partition recorded"
dpkg --purge slurm-ipu slurm-ipu-spank slurm-ipu-lab >"$ROOT/purge.log" 2>&1 || fail "purge: $(tail -n 1 "$ROOT/purge.log")"
grep -q "left $STATE: it records V-IPU partitions" "$ROOT/purge.log" || fail "purge did not say why: $(cat "$ROOT/purge.log")"
[ -f "$STATE/created/slurm_999999.json" ] || fail "purge removed a state directory that records a partition"
[ ! -e /etc/slurm-ipu/site.yaml ] || fail "purge kept the site description"
rm "$STATE/created/slurm_999999.json"
say "install again; dpkg --purge with nothing recorded"
apt_install "${BUILD2[@]}"
dpkg --purge slurm-ipu slurm-ipu-spank slurm-ipu-lab >"$ROOT/purge.log" 2>&1 || fail "purge: $(tail -n 1 "$ROOT/purge.log")"
left=$(for f in $FILES /etc/slurm-ipu "$UNITS"/slurm-ipu*.service* "$UNITS"/multi-user.target.wants/slurm-ipu* "$STATE" \
    /usr/libexec/slurm-ipu \
    /usr/lib/python3/dist-packages/slurm_ipu /var/cache/slurm-ipu; do
  { [ -e "$f" ] || [ -L "$f" ]; } && echo "$f"; done || true)
[ -z "$left" ] || fail "purge left: $left"
[ "$(slurm_packages)" = "$PACKAGES" ] || fail "the packages changed the node's Slurm packages: $(diff <(echo \
  "$PACKAGES") <(slurm_packages) | tr '\n' ' ')"
say "ok: built and lintian-clean; installed with apt, IPU jobs on the installed files, doctor ok; upgraded under a" \
  "running job that then ended cleanly; removed and purged without a trace; Slurm's packages untouched"
