# Sourced by the guests of ci/softroce/cluster.sh: brings up the wire and
# rxe0 over it on this node, then waits until the other node is as far.
# Needs $out, $node and the SODE_NODE_* variables; on failure writes this
# node's status (90: network, 91: the other node never came) and exits.
bring_up_node() {
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
}
