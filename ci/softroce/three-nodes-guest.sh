#!/usr/bin/env bash
# On one node of ci/softroce/three-nodes.sh: brings up this node's wires
# (rxe0 on the one that has RDMA), waits for the other nodes, then runs the
# three jobs of the test in turn, each node its ranks of each, and writes
# their statuses to $SODE_VM_OUT/$SODE_NODE.<job>.status. Nodes wait for each
# other between jobs (marks in the shared directory).
#
# SODE_NICS: "mac=address/prefix[=rxe] ..."; the ranks meet at
# $SODE_NODE_ROOT (a host: node b's address on this node's wire) but for
# the ranks listed in SODE_CLUSTER_ROOT_OF ("rank=host ..."); each job has a port of
# its own. The ranks of each job on this node: SODE_<JOB>_RANKS.
set -uo pipefail
out=${SODE_VM_OUT:?}
node=${SODE_NODE:?}
# shellcheck source=ci/softroce/cluster-net.sh
. "$(dirname "$0")/cluster-net.sh"
up() {
  modprobe rdma_rxe && ip link set lo up || return 1
  for nic in $SODE_NICS; do
    mac=${nic%%=*}; rest=${nic#*=}; addr=${rest%%=*}; rxe=${rest#"$addr"}
    nic_up "$mac" "$addr" "${rxe#=}" || return 1
  done
}
up || { echo 90 > "$out/$node.status"; exit 90; }
ulimit -l unlimited
ip -br addr >&2
rdma link >&2 || true

# Waits (up to 5 minutes: boots are tens of seconds apart under emulation)
# until every node has left the mark $1.
meet() {
  touch "$out/$node.$1"
  for _ in $(seq 3000); do
    local all=1
    for n in $SODE_ALL_NODES; do [ -f "$out/$n.$1" ] || all=0; done
    [ $all = 1 ] && return 0
    sleep 0.1
  done
  echo "three-nodes: node $node: the other nodes never reached '$1'" >&2
  echo 91 > "$out/$node.status"
  exit 91
}

# Runs this node's ranks of one job: job name, port, ranks here, job size,
# then the command. The rank in SODE_STOPPED (stopped on purpose) is killed
# once the others of this node have ended.
run_job() {
  local job=$1 port=$2 ranks=$3 size=$4
  shift 4
  local pids=() status=0 r p
  for r in $ranks; do
    local root=$SODE_NODE_ROOT
    for o in ${SODE_CLUSTER_ROOT_OF:-}; do [ "${o%%=*}" = "$r" ] && root=${o#*=}; done
    SODE_RANK=$r SODE_SIZE=$size SODE_ROOT=$root:$port SODE_JOB_ID="$SODE_CLUSTER_JOB-$job" \
      SODE_JOB_SECRET=$(cat "$out/secret") \
      timeout -s KILL 240 "$@" >"$out/$node-$job-r$r.log" 2>&1 &
    pids+=("$r:$!")
  done
  for p in "${pids[@]}"; do
    r=${p%%:*}
    if [ "$r" = "${SODE_STOPPED:-x}" ]; then continue; fi
    wait "${p#*:}" || status=$?
  done
  # A stopped rank is killed once the others of this node have reported.
  for p in "${pids[@]}"; do
    r=${p%%:*}
    if [ "$r" = "${SODE_STOPPED:-x}" ]; then
      kill -KILL "${p#*:}" 2>/dev/null || true
      wait "${p#*:}" 2>/dev/null || true
    fi
  done
  echo "$status" > "$out/$node.$job.status"
  echo "three-nodes: node $node: job $job ended with status $status" >&2
}

meet ready
# 1. The stencil across the three nodes, bit for bit.
run_job stencil 7701 "$SODE_STENCIL_RANKS" 6 "$SODE_STENCIL" --dims 2 --size 48 --neighbours 8 --periodic --iters 10
meet stencil
# 2. The health chain (0 - 1 - 2 - 3): rank 2, node c's only rank, is
#    killed; every other rank must report it.
SODE_HEALTH_TEST=auto,2,kill SODE_HEALTH_TIMEOUT=3 \
  run_job killed 7702 "$SODE_CHAIN_RANKS" 4 "$SODE_HEALTH_EXE" --exact rank --nocapture --test-threads=1
leftover=$(ls /dev/shm | grep -F "$SODE_CLUSTER_JOB" | tr '\n' ' ' || true)
echo "node $node: leftover segments: [$leftover]" > "$out/$node-killed-leftover.log"
meet killed
# 3. The same chain; rank 0 (node b's gateway, and the health tree's root) is
#    stopped: links through it go silent.
SODE_STOPPED=0 SODE_HEALTH_TEST=auto,0,stop SODE_HEALTH_TIMEOUT=3 \
  run_job stopped 7703 "$SODE_CHAIN_RANKS" 4 "$SODE_HEALTH_EXE" --exact rank --nocapture --test-threads=1
meet stopped
# 4. The stencil again, reordered: round trips measured between the nodes
#    (a-c forwarded by b) weigh the placement.
run_job reorder 7704 "$SODE_STENCIL_RANKS" 6 "$SODE_STENCIL" --dims 2 --size 48 --neighbours 4 --iters 10 --reorder
meet reorder
echo 0 > "$out/$node.status"
