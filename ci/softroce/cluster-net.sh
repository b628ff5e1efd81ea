# Sourced by the guests of ci/softroce/cluster.sh (and nic_up by
# three-nodes-guest.sh): brings up the wire and rxe0 over it on this node
# (unless a job before did), then waits until the other node is as far:
# both have left their mark in $out, the boot's or the job's directory.
# Needs $out, $node and the SODE_NODE_* variables; on failure writes this
# node's status (90: network, 91: the other node never came) and exits.
# Gives the interface with MAC $1 the address $2 (with its prefix) and
# brings it up; with a third argument "rxe", puts rxe0 on it.
nic_up() {
  local ifname="" i
  for i in /sys/class/net/*; do
    [ "$(cat "$i/address")" = "$1" ] && ifname=$(basename "$i")
  done
  [ -n "$ifname" ] || { echo "no interface with MAC $1" >&2; return 1; }
  # Explicit: `set -e` does not hold where callers test the result.
  ip addr add "$2" dev "$ifname" || return 1
  ip link set "$ifname" up || return 1
  if [ "${3:-}" = rxe ]; then
    rdma link add rxe0 type rxe netdev "$ifname" || return 1
  fi
}

bring_up_node() {
  # Once a boot: the jobs after the first find the wire and rxe0 up.
  if [ ! -e /sys/class/infiniband/rxe0 ]; then
    { modprobe rdma_rxe && ip link set lo up && nic_up "$SODE_NODE_MAC" "$SODE_NODE_IP/24" rxe; } \
      || { echo 90 > "$out/$node.status"; exit 90; }
  fi
  ulimit -l unlimited
  # Both nodes ready before any rank starts (the boots are tens of seconds
  # apart under emulation); the shared directory carries the marks.
  touch "$out/$node.ready"
  for _ in $(seq 3000); do
    [ -f "$out/$SODE_PEER_NODE.ready" ] && break
    sleep 0.1
  done
  [ -f "$out/$SODE_PEER_NODE.ready" ] || { echo 91 > "$out/$node.status"; exit 91; }
}
