#!/usr/bin/env bash
# The Fortran example as a 4-rank job started by Open MPI's mpirun across
# the two SoftRoCE VMs (ci/softroce/cluster.sh with cluster-mpi-guest.sh:
# 2 ranks a node; sode: shared memory inside a node, RDMA between; MPI:
# UCX rc over rxe0), every halo cell compared with MPI's, bit for bit. It
# meets its ranks through MPI (sode_comm_create_mpi over the C ABI, as a C
# program does); the C example runs across the VMs in two-nodes.sh, and
# against MPI on one node in ci/capi.sh. Needs the example built by
# ci/capi.sh.
#   bash ci/softroce/two-nodes-mpi.sh [--job DIR | --check LOG]   (cluster-job.sh)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
f=$root/target/capi-examples-fortran/stencil3d
[ -x "$f" ] || { echo "two-nodes-mpi: $f is missing: run ci/capi.sh first" >&2; exit 1; }
here=$root/ci/softroce
# shellcheck source=ci/softroce/cluster-job.sh
. "$here/cluster-job.sh"
job() {
  mkdir -p "$1"
  echo two-nodes-mpi >"$1/name"
  printf 'SODE_CLUSTER_GUEST=%q\n' "$here/cluster-mpi-guest.sh" >"$1/env"
  printf '%q ' "$f" --grid 2x2x1 >"$1/command"
}
check() {
  nodes_finished "$1" two-nodes-mpi || return 1
  local f_ok
  f_ok=$(grep -cE "^\[node a rank 0\] ok grid [0-9]+x[0-9]+x[0-9]+ periodic .*equal to MPI's, bit for bit" "$1" || true)
  # 4 ranks on a 2x2x1 grid, whose every rank has a neighbour on each node
  # (the 1x4 and 4x1 grids run on one node in ci/capi.sh), with 3
  # periodicities and 2 shapes, on the program's arrays and on fields sode
  # keeps.
  if [ "$f_ok" != 12 ]; then
    echo "two-nodes-mpi: $f_ok of 12 Fortran configurations matched MPI" >&2
    return 1
  fi
  echo "two-nodes-mpi: mpirun across 2 VMs, 4 ranks on a 2x2x1 grid: 12 Fortran configurations (half on fields sode keeps) equal to MPI's, bit for bit"
}
cluster_job_main "$@"
