#!/usr/bin/env bash
# What sode adds to a job's start: `mpirun -n 4 startup` (MPI only) against
# `mpirun -n 4 startup sode` (a communicator and one committed exchange),
# alternating, in a segment directory of its own. The first job there
# measures the shared-memory thresholds (as the first job after a node
# boots); later ones read what it kept. Prints each job's wall time, the
# medians, and the commit times rank 0 reports; fails unless the later
# jobs' communicator and commit take a median under LIMIT_MS (50). Wall
# times are printed, not judged: a 2-core machine's launches vary by more.
#
#   bash ci/startup.sh [rounds]     (after ci/capi.sh built the examples)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
limit=${LIMIT_MS:-50}
exe=${STARTUP_EXE:-target/capi-examples/startup}
[ -x "$exe" ] || { echo "startup: $exe is missing: run ci/capi.sh first" >&2; exit 1; }
dir=$(mktemp -d /tmp/sode-startup.XXXXXX)
trap 'rm -rf "$dir"' EXIT
mpirun=(mpirun --oversubscribe -x "SODE_SHM_DIR=$dir")
[ "$(id -u)" -eq 0 ] && mpirun+=(--allow-run-as-root)
ms_now() { echo $(( $(date +%s%N) / 1000000 )); }
job() { # mode: prints "wall_ms commit_ms" (commit "-" without sode)
  local t0 out
  t0=$(ms_now)
  out=$(timeout 120 "${mpirun[@]}" -n 4 "$exe" "$@" 2>&1) || { echo "$out" >&2; return 1; }
  local wall=$(( $(ms_now) - t0 ))
  local commit
  commit=$(sed -n 's/^startup: communicator and commit \([0-9.]*\) ms.*/\1/p' <<<"$out")
  echo "$wall ${commit:--}"
}
median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
read -r first_wall first_commit <<<"$(job sode)"
echo "first job in a fresh directory (thresholds measured): ${first_wall} ms, communicator and commit ${first_commit} ms"
plain=() sode=() commits=()
for r in $(seq "$rounds"); do
  for mode in plain sode; do
    if [ $(( r % 2 )) = 0 ]; then mode=$([ "$mode" = plain ] && echo sode || echo plain); fi
    if [ "$mode" = plain ]; then
      read -r w _ <<<"$(job)"
      plain+=("$w")
    else
      read -r w c <<<"$(job sode)"
      sode+=("$w")
      commits+=("$c")
    fi
    echo "round $r: $mode ${w} ms"
  done
done
p=$(printf '%s\n' "${plain[@]}" | median)
s=$(printf '%s\n' "${sode[@]}" | median)
c=$(printf '%s\n' "${commits[@]}" | median)
echo "mpirun -n 4, $rounds rounds: without sode median ${p} ms, with sode ${s} ms (difference $(awk -v s="$s" -v p="$p" 'BEGIN { print s - p }') ms); communicator and commit median ${c} ms (limit ${limit} ms)"
awk -v c="$c" -v l="$limit" 'BEGIN { exit !(c < l) }' \
  || { echo "startup: later jobs' communicator and commit took a median of $c ms (limit $limit)" >&2; exit 1; }
