#!/usr/bin/env bash
# A node vanishes mid-run: the 4-rank chain of halo/tests/health.rs (ranks 0
# and 1 on node a, 2 and 3 on node b; rank 1 - rank 2 over RDMA between the
# VMs, shared memory inside each) exchanges until rank 3 powers node b off
# (sysrq 'o': no process is ended, no connection closed or reset; the wire
# just goes silent). Passes only if both ranks of node a report, within
# BOUND_MS of the start of the iteration they were in, that a rank of node b
# sent no heartbeat, and leave no shared-memory segment of the job behind.
#   bash ci/softroce/node-death.sh [--job DIR | --check LOG] [HEALTH_TEST_EXE]
# (cluster-job.sh; as the job powers node b off, it is the last of a boot's)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/ci/softroce
# shellcheck source=ci/softroce/cluster-job.sh
. "$here/cluster-job.sh"
mode=()
case ${1:-} in --job | --check) mode=("$1" "${2:-}"); shift 2 || true ;; esac
exe=${1:-}
silence=3
bound_ms=${BOUND_MS:-10000}
job() {
  if [ -z "$exe" ]; then
    exe=$(bash "$root/ci/built-exe.sh" test sode health)
  fi
  [ -x "$exe" ] || { echo "node-death: the health test executable is missing" >&2; exit 1; }
  # Each rank: the chain until rank 3's node goes; then, on node a, rank 0
  # looks for the job's segments once both its ranks have ended.
  local rank_cmd="SODE_HEALTH_TEST=auto,3,poweroff SODE_HEALTH_TIMEOUT=$silence $exe --exact rank --nocapture --test-threads=1; \
s=\$?; if [ \"\$SODE_RANK\" = 0 ]; then sleep 6; echo \"leftover segments: [\$(ls /dev/shm | grep -F \"\$SODE_JOB_ID\" | tr '\n' ' ')]\"; fi; exit \$s"
  mkdir -p "$1"
  echo node-death >"$1/name"
  printf '%q ' bash -c "$rank_cmd" >"$1/command"
}
# Node b never reports a status (it is powered off): cluster.sh fails, and
# the check judges node a's ranks alone. Node b's VM is given 30 s to end
# once node a's is done (SODE_CLUSTER_UNTIL_A): the job powers it off, and
# so must be the last of a boot's.
cluster_env=(SODE_CLUSTER_UNTIL_A=1 SODE_VM_TIMEOUT=600)
check() {
  local log=$1 fail=0 r line ms
  for r in 0 1; do
    line=$(grep -E "^\[node a rank $r\] .*rank $r: failed after [0-9]+ ms" "$log" | head -n 1 || true)
    if [ -z "$line" ]; then
      echo "node-death: rank $r on node a reported no failure" >&2
      fail=1
      continue
    fi
    ms=$(printf '%s\n' "$line" | sed -E 's/.*failed after ([0-9]+) ms.*/\1/')
    if ! printf '%s\n' "$line" | grep -qE "the job failed: rank [23] \(on [^)]*\) sent no heartbeat for ${silence}s"; then
      echo "node-death: rank $r's report does not name a silent rank of node b: $line" >&2
      fail=1
    fi
    if [ "$ms" -ge "$bound_ms" ]; then
      echo "node-death: rank $r reported after $ms ms (bound $bound_ms ms)" >&2
      fail=1
    fi
  done
  grep -qE "^\[node b rank 3\] .*rank 3: powering the node off" "$log" || { echo "node-death: node b was not powered off by rank 3" >&2; fail=1; }
  grep -qE "^\[node a rank 0\] leftover segments: \[\]" "$log" || { echo "node-death: segments of the job left on node a" >&2; fail=1; }
  [ $fail = 0 ] && echo "node-death: node b powered off mid-run; both ranks of node a reported its silent rank within ${bound_ms} ms (SODE_HEALTH_TIMEOUT=$silence), no segments left"
  return $fail
}
cluster_job_main "${mode[@]}"
