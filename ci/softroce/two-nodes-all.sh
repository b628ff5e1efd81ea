#!/usr/bin/env bash
# The jobs across the two VMs of ci/softroce/cluster.sh on one boot, each
# judged as when it runs alone: two-nodes.sh, reorder.sh (with ROUNDS and
# ITERS as set), two-nodes-mpi.sh and, last as it powers node b off,
# node-death.sh. A boot of two VMs under emulation takes about half a
# minute; this saves three. Fails if any job fails, after judging them all.
#   bash ci/softroce/two-nodes-all.sh [HEALTH_TEST_EXE]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
health=${1:-}
dir=$(mktemp -d /tmp/sode-two-nodes.XXXXXX)
trap 'rm -rf "$dir"' EXIT
names=(two-nodes reorder two-nodes-mpi node-death)
dirs=()
for i in "${!names[@]}"; do
  extra=()
  [ "${names[$i]}" = node-death ] && [ -n "$health" ] && extra=("$health")
  bash "$here/${names[$i]}.sh" --job "$dir/$i" "${extra[@]}"
  dirs+=("$dir/$i")
done
# The four jobs take about 7 minutes here; node b's end is node-death's.
SODE_CLUSTER_UNTIL_A=1 SODE_VM_TIMEOUT=${SODE_VM_TIMEOUT:-1800} \
  bash "$here/cluster.sh" --jobs "${dirs[@]}" 2>&1 | tee "$dir/log" || true
failed=()
for i in "${!names[@]}"; do
  # The job's part of the output: from its "cluster: job N of M" line to
  # the next job's.
  awk -v n=$((i + 1)) '/^cluster: job [0-9]+ of [0-9]+:/ { job = $3 + 0 } job == n' "$dir/log" >"$dir/log-$i"
  echo "-- ${names[$i]}"
  bash "$here/${names[$i]}.sh" --check "$dir/log-$i" || failed+=("${names[$i]}")
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "two-nodes-all: failed: ${failed[*]}" >&2
  exit 1
fi
echo "two-nodes-all: ${names[*]}: all passed on one boot of the two VMs"
