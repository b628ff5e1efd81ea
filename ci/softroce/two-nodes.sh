#!/usr/bin/env bash
# The two-node test: the stencil example as a 4-rank job across two VMs
# joined by a wire (ci/softroce/cluster.sh), in 2-D (8 neighbours) and 3-D
# (26 neighbours), periodic. Passes only if every rank matched the
# single-process solve bit for bit and used both shared memory (its
# same-node peer) and RDMA (the other node's ranks).
#   bash ci/softroce/two-nodes.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
stencil=${STENCIL:-$root/target/release/examples/stencil}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
bash "$root/ci/softroce/cluster.sh" bash -c \
  "$stencil --dims 2 --size 64 --neighbours 8 --periodic --iters 20 && $stencil --dims 3 --size 16 --neighbours 26 --periodic --iters 5" \
  2>&1 | tee "$log"
fail=0
for r in 0 1 2 3; do
  n=$(grep -E "^\[node [ab] rank $r\] rank $r: .*\(shm [1-9][0-9]*, rdma [1-9][0-9]*, .*bit for bit" "$log" | wc -l)
  if [ "$n" != 2 ]; then
    echo "two-nodes: rank $r did not finish both runs over shared memory and RDMA, bit for bit" >&2
    fail=1
  fi
done
[ $fail = 0 ] && echo "two-nodes: 4 ranks on 2 nodes, 2 runs each: shared memory inside a node, RDMA between, all bit for bit"
exit $fail
