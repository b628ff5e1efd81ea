#!/usr/bin/env bash
# What forwarding costs over RDMA: the bounded_cost example in the SoftRoCE
# guest, N ranks (default 8) on rxe0, every connection a queue pair. Prints
# the example's two tables (one message between ranks 0 and 2, direct then
# forwarded; an all-to-all with every pair connected, then at most 2 and 3
# connections per rank), each cell the slowest rank's median (min).
#   bash ci/softroce/bounded.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
n=${N:-8}
cd "$root"
cargo build --release --locked -p sode-examples --example bounded_cost >&2
out=$root/target/vm-out/bounded-cost.txt
rm -f "$out"
bash ci/softroce/run.sh bash -c "SODE_REQUIRE_RDMA=1 $root/target/release/examples/bounded_cost -n $n --transport rdma --iters ${ITERS:-30} --rounds ${ROUNDS:-5} > $out 2>&1"
sed -n 's/^\[0\] //p' "$out"
grep -q '^\[0\] | 16384 ' "$out" || { echo "bounded: no all-to-all result; the guest's output:" >&2; cat "$out" >&2; exit 1; }
