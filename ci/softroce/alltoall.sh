#!/usr/bin/env bash
# sode's persistent all-to-all beside MPI_Alltoall across the two SoftRoCE
# VMs: 4 ranks started by Open MPI's mpirun (2 a node; sode: shared memory
# inside a node, RDMA between; MPI: UCX rc over rxe0), the two programs
# alternating ROUNDS times in one boot. Prints, per round and block size,
# the slowest rank's median time per all-to-all and the ratio. Both
# programs check the blocks they received.
#   bash ci/softroce/alltoall.sh      # after: bash ci/alltoall.sh (builds both)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
rounds=${ROUNDS:-2}
iters=${ITERS:-20}
mpi=$root/target/mpi/alltoall
sode=$root/target/release/examples/alltoall_bench
for p in "$mpi" "$sode"; do
  [ -x "$p" ] || { echo "alltoall: $p is missing: run ci/alltoall.sh first" >&2; exit 1; }
done
args=()
for r in $(seq "$rounds"); do
  [ "$r" = 1 ] || args+=(--next)
  args+=("$mpi" "$iters" 5 --next "$sode" --iters "$iters" --rounds 5 --engines "${ENGINES:-2}")
done
log=$(mktemp)
trap 'rm -f "$log"' EXIT
SODE_CLUSTER_GUEST=$root/ci/softroce/cluster-mpi-guest.sh \
  bash "$root/ci/softroce/cluster.sh" "${args[@]}" 2>&1 | tee "$log" >&2
echo "| round | bytes per pair | Open MPI (UCX rc) us, median (min) | sode us, median (min) | sode / MPI |"
echo "|---:|---:|---:|---:|---:|"
for r in $(seq "$rounds"); do
  m_run=$(( 2 * (r - 1) )); s_run=$(( 2 * (r - 1) + 1 ))
  for b in 8 1024 65536 1048576; do
    m=$(sed -n "s/^\[node a rank $m_run\] mpi $b \(.*\)/\1/p" "$log")
    s=$(sed -n "s/^\[node a rank $s_run\] \(\[0\] \)\{0,1\}sode $b \(.*\)/\2/p" "$log")
    [ -n "$m" ] && [ -n "$s" ] || { echo "alltoall: no result at $b bytes in round $r (MPI: '$m', sode: '$s')" >&2; exit 1; }
    awk -v r="$r" -v b="$b" -v m="$m" -v s="$s" 'BEGIN {
      split(m, mm, " "); split(s, ss, " ");
      printf "| %d | %d | %.1f (%.1f) | %.1f (%.1f) | %.2f |\n", r, b, mm[1], mm[2], ss[1], ss[2], ss[1] / mm[1] }'
  done
done
