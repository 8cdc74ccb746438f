#!/usr/bin/env bash
# `make test`'s tiers in order, each timed; the times are printed at the end, and on a failure
# (which stops the run) up to it. PY: the project's Python; PYTEST_ARGS pass through.
set -uo pipefail
PY=${PY:-.venv/bin/python}
names=() secs=()

summary() {
  local i  # not the caller's: side_by_side reads its own i after calling this
  echo "make test: tier times"
  for i in "${!names[@]}"; do printf '  %-34s %5d s\n' "${names[$i]}" "${secs[$i]}"; done
  printf '  %-34s %5d s\n' "all" "$SECONDS"
}

tier() {
  local name=$1 t=$SECONDS rc
  shift
  "$@"
  rc=$?
  names+=("$name") secs+=($((SECONDS - t)))
  if [ $rc != 0 ]; then
    summary
    echo "make test: $name failed (exit $rc)"
    exit $rc
  fi
}

# shellcheck disable=SC2086  # PYTEST_ARGS is a list of words
tier "unit" "$PY" -m pytest -q tests/unit ${PYTEST_ARGS:-}
tier "emulator" "$PY" -m pytest -q tests/emulator ${PYTEST_ARGS:-}
tier "slurm 22.05 (host)" "$PY" -m pytest -q tests/slurm -m "not long" ${PYTEST_ARGS:-}
tier "clean-room (bookworm)" make -s clean-room
# The two release chroots side by side: each is its own chroot and pid namespace with a loopback port
# range of its own (SLURM_IPU_TEST_PORTS), and their tests mostly wait on Slurm, so together they take
# about the longer one's time instead of the sum (docs/performance.md). Both always run to their end;
# each one's output follows, then its verdict.
side_by_side() {
  local t=$SECONDS logs pids=() rcs=() i
  logs=$(mktemp -d /tmp/slurm-ipu-tiers-XXXXXX)
  # each in a process group of its own (set -m), so that an interrupt stops each whole
  trap 'for i in "${pids[@]}"; do kill -TERM -- "-$i" 2>/dev/null; done; wait; rm -rf "$logs"; exit 130' INT TERM
  set -m
  SLURM_IPU_TEST_PORTS=20000-24999 make -s slurm-24.11 >"$logs/24.11" 2>&1 & pids+=($!)
  SLURM_IPU_TEST_PORTS=25000-29999 make -s slurm-26.05 >"$logs/26.05" 2>&1 & pids+=($!)
  set +m
  for i in 0 1; do wait "${pids[$i]}"; rcs+=($?); done
  trap - INT TERM
  cat "$logs/24.11" "$logs/26.05"
  rm -rf "$logs"
  names+=("slurm 24.11 + 26.05 (side by side)") secs+=($((SECONDS - t)))
  for i in 0 1; do
    if [ "${rcs[$i]}" != 0 ]; then
      summary
      echo "make test: slurm $([ "$i" = 0 ] && echo 24.11 || echo 26.05) failed (exit ${rcs[$i]})"
      exit "${rcs[$i]}"
    fi
  done
}
side_by_side
summary
