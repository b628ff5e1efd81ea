#!/usr/bin/env bash
# sode's persistent all-to-all beside MPI_Alltoall on this machine (shared
# memory, Open MPI's vader), N ranks (default 4), alternating the two
# programs ROUNDS times (default 3): per round and block size, the slowest
# rank's median time per all-to-all over 7 timed batches, and the ratio.
#   bash ci/alltoall.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=${ROUNDS:-3}
n=${N:-4}
iters=${ITERS:-200}
cargo build --release --locked --workspace --example alltoall_bench >&2
mkdir -p "$root/target/mpi"
mpicc -O2 -o "$root/target/mpi/alltoall" "$root/ci/mpi/alltoall.c"
echo "| round | bytes per pair | Open MPI us (median, min) | sode us (median, min) | sode / MPI |"
echo "|---:|---:|---:|---:|---:|"
for r in $(seq "$rounds"); do
  mpi=$(mpirun --allow-run-as-root --oversubscribe -n "$n" "$root/target/mpi/alltoall" "$iters" 7)
  sode=$("$root/target/release/examples/alltoall_bench" -n "$n" --iters "$iters" 2>/dev/null | sed -n 's/^\[0\] //p')
  for b in 8 1024 65536 1048576; do
    m=$(awk -v b="$b" '$1 == "mpi" && $2 == b { print $3, $4 }' <<<"$mpi")
    s=$(awk -v b="$b" '$1 == "sode" && $2 == b { print $3, $4 }' <<<"$sode")
    [ -n "$m" ] && [ -n "$s" ] || { echo "alltoall: no result at $b bytes (MPI: '$m', sode: '$s')" >&2; exit 1; }
    awk -v r="$r" -v b="$b" -v m="$m" -v s="$s" 'BEGIN {
      split(m, mm, " "); split(s, ss, " ");
      printf "| %d | %d | %.2f (%.2f) | %.2f (%.2f) | %.2f |\n", r, b, mm[1], mm[2], ss[1], ss[2], ss[1] / mm[1] }'
  done
done
