#!/usr/bin/env bash
# On one node of ci/softroce/cluster.sh: brings up the wire and rxe0 over
# it, waits for the other node, starts this node's two ranks of the job and
# writes their combined status to $SODE_VM_OUT/$SODE_NODE.status.
set -uo pipefail
out=${SODE_VM_OUT:?}
node=${SODE_NODE:?}
{
  set -e
  modprobe rdma_rxe
  ip link set lo up
  ifname=""
  for i in /sys/class/net/*; do
    [ "$(cat "$i/address")" = "$SODE_NODE_MAC" ] && ifname=$(basename "$i")
  done
  [ -n "$ifname" ] || { echo "no interface with MAC $SODE_NODE_MAC" >&2; exit 1; }
  ip addr add "$SODE_NODE_IP/24" dev "$ifname"
  ip link set "$ifname" up
  rdma link add rxe0 type rxe netdev "$ifname"
  ulimit -l unlimited
} || { echo 90 > "$out/$node.status"; exit 90; }
ulimit -l unlimited
# Both nodes ready before any rank starts (the boots are tens of seconds
# apart under emulation); the shared directory carries the marks.
touch "$out/$node.ready"
for _ in $(seq 3000); do
  [ -f "$out/$SODE_PEER_NODE.ready" ] && break
  sleep 0.1
done
[ -f "$out/$SODE_PEER_NODE.ready" ] || { echo 91 > "$out/$node.status"; exit 91; }
case $node in a) ranks="0 1" ;; *) ranks="2 3" ;; esac
pids=()
for r in $ranks; do
  SODE_RANK=$r SODE_SIZE=4 SODE_ROOT=$SODE_CLUSTER_ROOT SODE_JOB_ID=$SODE_CLUSTER_JOB \
    SODE_JOB_SECRET=$(cat "$out/secret") \
    "$@" >"$out/$node-r$r.log" 2>&1 &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do
  wait "$p" || status=$?
done
echo "$status" > "$out/$node.status"
