#!/usr/bin/env bash
# On one node of ci/softroce/cluster.sh: brings up the wire and rxe0 over
# it, waits for the other node, starts this node's two ranks of the job and
# writes their combined status to $SODE_VM_OUT/$SODE_NODE.status.
set -uo pipefail
out=${SODE_VM_OUT:?}
node=${SODE_NODE:?}
# shellcheck source=ci/softroce/cluster-net.sh
. "$(dirname "$0")/cluster-net.sh"
bring_up_node
# Which ranks each node runs (default 0 1 on a, 2 3 on b).
ranks_a=${SODE_CLUSTER_RANKS_A:-0 1}
ranks_b=${SODE_CLUSTER_RANKS_B:-2 3}
size=$(echo $ranks_a $ranks_b | wc -w)
case $node in a) ranks=$ranks_a ;; *) ranks=$ranks_b ;; esac
pids=()
for r in $ranks; do
  SODE_RANK=$r SODE_SIZE=$size SODE_ROOT=$SODE_CLUSTER_ROOT SODE_JOB_ID=$SODE_CLUSTER_JOB \
    SODE_JOB_SECRET=$(cat "$out/secret") \
    "$@" >"$out/$node-r$r.log" 2>&1 &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do
  wait "$p" || status=$?
done
echo "$status" > "$out/$node.status"
