# What the install checks share (check.sh, deb_check.sh, installed_tier.sh), sourced by each after
# it sets NAME, the prefix of its progress lines.

say() { echo "$NAME: $*" >&2; }
fail() { say "FAILED: $*"; exit 1; }

# free_ports: the first of 8 free loopback ports in a row, for a lab. Below Linux's ephemeral range
# (32768 up: a port there can be taken by any outgoing connection between this check and the lab
# binding it), above the pytest labs' range (20000-29999), unless SLURM_IPU_TEST_PORTS gives this
# run a range of its own (tests/tiers.sh).
free_ports() {
  local base
  base=$(/usr/bin/python3 -c '
import os, random, socket
for _ in range(50):
    low, high = map(int, (os.environ.get("SLURM_IPU_TEST_PORTS") or "30000-32760").split("-"))
    base = random.randrange(low, high - 8)
    try:
        socks = [socket.create_server(("127.0.0.1", p)) for p in range(base, base + 8)]
    except OSError:
        continue
    [s.close() for s in socks]
    print(base)
    break
')
  [ -n "$base" ] || fail "no free block of 8 loopback ports"
  echo "$base"
}

# poll LIMIT CMD...: CMD until it succeeds, at most LIMIT seconds; its last output (stdout and
# stderr) stays in $seen for the failure message.
seen=
poll() { local limit=$1; shift; local end=$((SECONDS + limit)); until seen=$("$@" 2>&1); do
  [ $SECONDS -lt $end ] || return 1; sleep 0.2; done; }
# shows PATTERN CMD...: CMD succeeds and a line of its output matches PATTERN (grep -E); the output
# goes to stdout either way (no pipe into grep -q, whose early exit can SIGPIPE CMD under pipefail)
shows() { local pattern=$1 out rc=0; shift; out=$("$@" 2>&1) || rc=$?; printf '%s\n' "$out"
  [ $rc -eq 0 ] || { echo "(exit $rc)"; return 1; }; grep -Eq -- "$pattern" <<<"$out"; }
# lacks PATTERN CMD...: CMD succeeds and no line of its output matches PATTERN
lacks() { local pattern=$1 out rc=0; shift; out=$("$@" 2>&1) || rc=$?; printf '%s\n' "$out"
  [ $rc -eq 0 ] || { echo "(exit $rc)"; return 1; }; ! grep -Eq -- "$pattern" <<<"$out"; }

# The node's Slurm and munge packages (slurm-ipu's own left out): an install must leave them as they were.
slurm_packages() { dpkg-query -W -f='${Package} ${Version} ${db:Status-Status}\n' 'slurm*' 'libslurm*' munge \
  'libmunge*' 2>/dev/null | grep -v '^slurm-ipu' | sort || true; }
