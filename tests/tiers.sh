#!/usr/bin/env bash
# `make test`'s tiers in order, each timed; the times are printed at the end, and on a failure
# (which stops the run) up to it. PY: the project's Python; PYTEST_ARGS pass through.
set -uo pipefail
PY=${PY:-.venv/bin/python}
names=() secs=()

summary() {
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
tier "install-check" make -s install-check
tier "clean-room (bookworm)" make -s clean-room
tier "slurm 24.11 (trixie, release tests)" make -s slurm-24.11
tier "slurm 26.05 (sid, release tests)" make -s slurm-26.05
summary
