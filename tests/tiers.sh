#!/usr/bin/env bash
# `make test`'s tiers, each timed; the times are printed at the end, and on a failure
# (which stops the run) up to it. PY: the project's Python; PYTEST_ARGS pass through.
set -uo pipefail
PY=${PY:-.venv/bin/python}
names=() secs=()

summary() {
  local i  # not the caller's: side_by_side reads its own i after calling this
  echo "make test: tier times"
  for i in "${!names[@]}"; do printf '  %-38s %5d s\n' "${names[$i]}" "${secs[$i]}"; done
  printf '  %-38s %5d s\n' "all" "$SECONDS"
}

# Two sides at once: side_by_side NAME1 FUNCTION1 NAME2 FUNCTION2. A side is one tier, or a few in
# sequence (a function that calls `step NAME COMMAND...` for each, each timed). The pairs are chosen
# so that they share nothing: a chroot is its own filesystem and pid namespace, each side takes
# loopback ports of its own (SLURM_IPU_TEST_PORTS; the install checks' default range is above the
# pytest labs', the emulator tier's ports are the kernel's ephemeral ones). Their work mostly waits
# on Slurm, so on two cores a pair takes about the longer side's time instead of the sum
# (docs/performance.md). Both sides always run to their end; each one's output follows, with its
# times, then the verdict.
step() {
  local name=$1 t=$SECONDS rc
  shift
  "$@"
  rc=$?
  echo "$((SECONDS - t)) $name" >>"$STEP_TIMES"
  return $rc
}

side_by_side() {
  local t=$SECONDS logs pids=() rcs=() i labels=("$1" "$3") cmds=("$2" "$4") name sec
  logs=$(mktemp -d /tmp/slurm-ipu-tiers-XXXXXX)
  # each in a process group of its own (set -m), so that an interrupt stops each whole
  trap 'for i in "${pids[@]}"; do kill -TERM -- "-$i" 2>/dev/null; done; wait; rm -rf "$logs"; exit 130' INT TERM
  set -m
  for i in 0 1; do
    # a side of one tier is timed as one step under its own name; a sequence adds its own steps
    (export STEP_TIMES="$logs/$i.times"; s=$SECONDS; "${cmds[$i]}"; rc=$?
     [ -s "$STEP_TIMES" ] || echo "$((SECONDS - s)) ${labels[$i]}" >"$STEP_TIMES"
     exit $rc) >"$logs/$i" 2>&1 &
    pids+=($!)
  done
  set +m
  for i in 0 1; do wait "${pids[$i]}"; rcs+=($?); done
  trap - INT TERM
  for i in 0 1; do
    cat "$logs/$i"
    while read -r sec name; do names+=("$name") secs+=("$sec"); done <"$logs/$i.times"
  done
  rm -rf "$logs"
  names+=("  side by side, both") secs+=($((SECONDS - t)))
  for i in 0 1; do
    if [ "${rcs[$i]}" != 0 ]; then
      summary
      echo "make test: ${labels[$i]} failed (exit ${rcs[$i]})"
      exit "${rcs[$i]}"
    fi
  done
}

# The host's real-Slurm tier beside the bookworm clean-room (the install checks' range above
# pytest's), then the unit and emulator tiers (no Slurm), then a few of the host's real-Slurm
# modules of their own labs: that side waits on apt and Slurm less than the host side does, so the
# pair ends about together. Each side has half of pytest's range. Then the two release chroots,
# each with half of pytest's range.
BESIDE=(tests/slurm/test_licence_fuzz.py tests/slurm/test_backup_controller.py tests/slurm/test_mixed_hosts.py
        tests/slurm/test_controllers.py)
# shellcheck disable=SC2086  # PYTEST_ARGS is a list of words
host() {
  local skip=() f
  for f in "${BESIDE[@]}"; do skip+=(--ignore "$f"); done
  SLURM_IPU_TEST_PORTS=20000-24999 "$PY" -m pytest -q tests/slurm -m "not long" "${skip[@]}" ${PYTEST_ARGS:-}
}
# Each step runs even when the one before it failed; the side fails if any did.
# shellcheck disable=SC2086
quick() {
  local rc=0
  step "clean-room (bookworm)" make -s clean-room || rc=1
  step unit "$PY" -m pytest -q tests/unit ${PYTEST_ARGS:-} || rc=1
  step emulator "$PY" -m pytest -q tests/emulator ${PYTEST_ARGS:-} || rc=1
  step "slurm 22.05 (host, beside)" beside || rc=1
  return $rc
}
# pytest's 5 (nothing selected: a PYTEST_ARGS -k that names none of these modules) is no failure.
# shellcheck disable=SC2086
beside() {
  SLURM_IPU_TEST_PORTS=25000-29999 "$PY" -m pytest -q "${BESIDE[@]}" -m "not long" ${PYTEST_ARGS:-}
  local rc=$?
  [ "$rc" = 5 ] && return 0
  return $rc
}
trixie() { SLURM_IPU_TEST_PORTS=20000-24999 make -s slurm-24.11; }
sid() { SLURM_IPU_TEST_PORTS=25000-29999 make -s slurm-26.05; }
side_by_side "slurm 22.05 (host)" host "clean-room, unit, emulator" quick
side_by_side "slurm 24.11" trixie "slurm 26.05" sid
summary
