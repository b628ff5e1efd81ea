#!/usr/bin/env bash
# The two-node test: the stencil example as a 4-rank job across two VMs
# joined by a wire (ci/softroce/cluster.sh), in 2-D (8 neighbours) and 3-D
# (26 neighbours), periodic, then the C example (examples/c/stencil2d,
# built by ci/capi.sh against the installed libsode) on a 2 x 2 grid, every
# periodicity and shape, small and with rows long enough to travel in place
# over RDMA. Passes only if every rank matched the
# single-process solve (the owners' values, for C) bit for bit, used both
# shared memory (its same-node peer) and RDMA (the other node's ranks), and
# planned from the job's one model (the median of the two nodes'). Then the
# 2-D stencil once more with RDMA unusable (SODE_DEVICE names no device):
# the automatic choice must fall back to TCP between the nodes, bit for
# bit.
#   bash ci/softroce/two-nodes.sh [--job DIR | --check LOG]   (cluster-job.sh)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
stencil=${STENCIL:-$root/target/release/examples/stencil}
c_stencil=${C_STENCIL:-$root/target/capi-examples/stencil2d}
[ -x "$c_stencil" ] || { echo "two-nodes: $c_stencil is missing: run ci/capi.sh first" >&2; exit 1; }
here=$root/ci/softroce
# shellcheck source=ci/softroce/cluster-job.sh
. "$here/cluster-job.sh"
job() {
  mkdir -p "$1"
  echo two-nodes >"$1/name"
  printf '%q ' bash -c \
    "$stencil --dims 2 --size 64 --neighbours 8 --periodic --iters 20 && $stencil --dims 3 --size 16 --neighbours 26 --periodic --iters 5 && $c_stencil --env 2 2 && $c_stencil --env 2 2 --global 16 1024 && SODE_DEVICE=no-such-device $stencil --dims 2 --size 64 --neighbours 8 --periodic --iters 20" \
    >"$1/command"
}
check() {
  local log=$1
  local fail=0
  nodes_finished "$log" two-nodes || fail=1
  for r in 0 1 2 3; do
    n=$(grep -E "^\[node [ab] rank $r\] rank $r: .*\(shm [1-9][0-9]*, rdma [1-9][0-9]*, .*bit for bit" "$log" | wc -l)
    if [ "$n" != 2 ]; then
      echo "two-nodes: rank $r did not finish both runs over shared memory and RDMA, bit for bit" >&2
      fail=1
    fi
    t=$(grep -E "^\[node [ab] rank $r\] rank $r: .*\(shm [1-9][0-9]*, rdma 0, tcp [1-9][0-9]*, .*bit for bit" "$log" | wc -l)
    if [ "$t" != 1 ]; then
      echo "two-nodes: rank $r did not fall back to TCP between the nodes (shared memory inside), bit for bit" >&2
      fail=1
    fi
    c=$(grep -E "^\[node [ab] rank $r\] ok rank $r grid 2x2 .*bit for bit" "$log" | wc -l)
    if [ "$c" != 12 ]; then
      echo "two-nodes: rank $r of the C stencil did not finish its 2 x 6 configurations bit for bit" >&2
      fail=1
    fi
  done
  # The larger C grid's rows go in place over the wire (RDMA between the VMs).
  if ! grep -qE "^\[node [ab] rank [0-3]\] ok rank [0-3] grid 2x2 .*in place: [1-9][0-9]* sends, [1-9][0-9]* receives" "$log"; then
    echo "two-nodes: no C configuration sent and received faces in place between the VMs" >&2
    fail=1
  fi
  # One model per job: every rank of a run plans from the same measurement,
  # one node's, the median of the two.
  for nb in 8 26; do
    lines=$(grep -E "^\[node [ab] rank [0-3]\] rank [0-3]: .* $nb neighbours .*median of 2 nodes\)" "$log" || true)
    ranks=$(printf '%s\n' "$lines" | grep -c "for a model of" || true)
    models=$(printf '%s\n' "$lines" | grep -oE "for a model of .*" | sort -u | wc -l)
    if [ "$ranks" != 4 ] || [ "$models" != 1 ]; then
      echo "two-nodes: the $nb-neighbour run did not plan from one model agreed by both nodes ($ranks ranks, $models models)" >&2
      fail=1
    fi
  done
  [ $fail = 0 ] && echo "two-nodes: 4 ranks on 2 nodes, 2 Rust runs and 12 C configurations each (faces in place over RDMA in the larger ones): shared memory inside a node, RDMA between; and a Rust run without RDMA over TCP between; all bit for bit"
  return $fail
}
cluster_job_main "$@"
