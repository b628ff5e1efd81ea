#!/usr/bin/env bash
# What forwarding costs over RDMA: the bounded_cost example in the SoftRoCE
# guest, 8 ranks on rxe0, every connection a queue pair; with NODES=2,
# across the two VMs instead (ranks 0 1 4 5 on node a, 2 3 6 7 on node b:
# shared memory inside a node, RDMA between, and ranks 0 and 2 on
# different nodes). Prints the example's two tables (one message between
# ranks 0 and 2, direct then forwarded; an all-to-all with every pair
# connected, then at most 2 and 3 connections per rank), each cell the
# slowest rank's median (min).
#   bash ci/softroce/bounded.sh
#   NODES=2 bash ci/softroce/bounded.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
cargo build --release --locked --workspace --example bounded_cost >&2
exe=$root/target/release/examples/bounded_cost
args=(--iters "${ITERS:-30}" --rounds "${ROUNDS:-5}")
out=$root/target/vm-out/bounded-cost.txt
rm -f "$out"
if [ "${NODES:-1}" = 2 ]; then
  SODE_CLUSTER_RANKS_A="0 1 4 5" SODE_CLUSTER_RANKS_B="2 3 6 7" \
    bash ci/softroce/cluster.sh "$exe" "${args[@]}" >"$out" 2>&1 || true
  prefix='\[node a rank 0\] '
else
  bash ci/softroce/run.sh bash -c "SODE_REQUIRE_RDMA=1 $exe -n 8 --transport rdma ${args[*]} > $out 2>&1"
  prefix='\[0\] '
fi
sed -n "s/^$prefix//p" "$out"
grep -q "^$prefix| 16384 " "$out" || { echo "bounded: no all-to-all result; the output:" >&2; cat "$out" >&2; exit 1; }
