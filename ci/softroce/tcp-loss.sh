#!/usr/bin/env bash
# TCP setup through packet loss, in the guest (whose kernel has netem):
# with 10 % of the packets on loopback dropped, the stencil example over
# TCP (4 ranks: the rendezvous, the peer links and the data connections)
# must start and finish, checked bit for bit, every time. A handshake
# delayed past its peer's patience by lost packets is dialled again.
#   bash ci/softroce/run.sh bash ci/softroce/tcp-loss.sh [runs] [loss %]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
stencil=${STENCIL:-$root/target/release/examples/stencil}
runs=${1:-6}
loss=${2:-10}
modprobe sch_netem 2>/dev/null || true
tc qdisc add dev lo root netem loss "$loss%" \
  || { echo "tcp-loss: no netem on this kernel" >&2; exit 1; }
trap 'tc qdisc del dev lo root 2>/dev/null || true' EXIT
log=$(mktemp)
for i in $(seq "$runs"); do
  start=$(date +%s%N)
  if timeout 300 "$stencil" -n 4 --dims 2 --size 64 --neighbours 8 --iters 5 --transport tcp > "$log" 2>&1; then
    echo "run $i: ok in $(( ($(date +%s%N) - start) / 1000000 )) ms"
  else
    cat "$log" >&2
    echo "tcp-loss: run $i of $runs failed with $loss % loss" >&2
    exit 1
  fi
done
echo "tcp-loss: $runs of $runs runs over TCP with $loss % packet loss finished, bit for bit"
