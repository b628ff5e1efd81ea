#!/usr/bin/env bash
# bench2d (Open MPI) beside a busy process: for each rank count and
# SODE_WAIT policy, one run of `bench2d ROUNDS DIVISOR LARGEST` while a
# shell loop keeps a core busy, then (QUIET_TOO=1) the same without it;
# the whole set REPEAT times, so the policies alternate. Prints each run's
# rows (bench2d's: median and minimum of sode, of sode on fields it keeps,
# then of the MPI ways, microseconds per exchange).
#
#   bash ci/busy-bench.sh
#   RANKS="2 4" WAITS="auto yield block spin" REPEAT=3 bash ci/busy-bench.sh
#
# Needs target/capi-examples/bench2d (bash ci/capi.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
exe=${BENCH:-target/capi-examples/bench2d}
[ -x "$exe" ] || { echo "busy-bench: $exe is missing: run ci/capi.sh first" >&2; exit 1; }
ranks=${RANKS:-2 4}
waits=${WAITS:-auto yield block}
repeat=${REPEAT:-2}
args=(${ROUNDS:-5} ${DIVISOR:-1} ${LARGEST:-256})
busy=
trap '[ -n "$busy" ] && kill $busy 2>/dev/null || true' EXIT
run() { # label, then env assignments
  local label=$1; shift
  local out
  out=$(env "$@" timeout 600 mpirun --allow-run-as-root --oversubscribe -n "$n" "$exe" "${args[@]}" 2>&1) || {
    printf '%s\n' "$out" >&2
    echo "busy-bench: $label failed" >&2
    exit 1
  }
  echo "$label"
  printf '%s\n' "$out" | grep -E '^\| [0-9]+ x'
}
for round in $(seq "$repeat"); do
  for n in $ranks; do
    for wait in $waits; do
      sh -c 'while :; do :; done' &
      busy=$!
      run "round $round, $n ranks, SODE_WAIT=$wait, beside a busy loop" SODE_WAIT="$wait"
      kill $busy; wait $busy 2>/dev/null || true; busy=
      if [ -n "${QUIET_TOO:-}" ]; then
        run "round $round, $n ranks, SODE_WAIT=$wait, quiet" SODE_WAIT="$wait"
      fi
    done
  done
done
