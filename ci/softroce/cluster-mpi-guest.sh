#!/usr/bin/env bash
# On one node of ci/softroce/cluster.sh with SODE_CLUSTER_GUEST pointing
# here: a job started by Open MPI's mpirun on node a, 2 ranks a node. There
# is no ssh between the VMs, so mpirun's launch agent (this script, called
# as `agent HOST COMMAND...`) hands node b the command to run (mpirun's
# daemon) through the shared directory, and node b runs it. MPI talks UCX rc
# over rxe0; sode shared memory inside a node and RDMA between. Writes the
# node's status to $SODE_VM_OUT/$SODE_NODE.status.
set -uo pipefail
out=${SODE_VM_OUT:?}

if [ "${1:-}" = agent ]; then
  host=$2
  shift 2
  if [ "$host" = 10.78.0.1 ] || [ "$host" = node-a ]; then
    exec bash -c "$*"
  fi
  rm -f "$out/remote.exit"
  # Like ssh: the rest is a shell command line.
  echo "$*" > "$out/remote.cmd.tmp"
  mv "$out/remote.cmd.tmp" "$out/remote.cmd"
  while [ ! -f "$out/remote.exit" ]; do sleep 0.2; done
  s=$(cat "$out/remote.exit")
  echo "agent: node b's daemon exited with $s" >&2
  exit "$s"
fi

node=${SODE_NODE:?}
# shellcheck source=ci/softroce/cluster-net.sh
. "$(dirname "$0")/cluster-net.sh"
bring_up_node

if [ "$node" = b ]; then
  # Run what node a's launch agent hands over, until node a is done.
  while [ ! -f "$out/a.status" ]; do
    if [ -f "$out/remote.cmd" ]; then
      mv "$out/remote.cmd" "$out/remote.running"
      s=0
      { echo "daemon: $(cat "$out/remote.running")"; bash "$out/remote.running"; } >>"$out/b-r0.log" 2>&1 || s=$?
      echo "$s" > "$out/remote.exit"
    fi
    sleep 0.2
  done
  echo 0 > "$out/b.status"
  exit 0
fi

here=$(cd "$(dirname "$0")" && pwd)
# PROGRAM ARGS [--next PROGRAM ARGS ...]: one mpirun each, in turn; the
# output of the i-th in a-r<i>.log.
status=0
runs=0
job=()
run() {
  timeout 1200 mpirun --allow-run-as-root --oversubscribe -np 4 --host 10.78.0.1:2,10.78.0.2:2 \
    --mca plm_rsh_agent "$here/cluster-mpi-guest.sh agent" --mca plm_rsh_no_tree_spawn 1 \
    --mca oob_tcp_if_include 10.78.0.0/24 --mca btl_tcp_if_include 10.78.0.0/24 \
    --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any \
    -x UCX_TLS=rc,self,sm -x UCX_NET_DEVICES=rxe0:1 -x UCX_UD_VERBS_ETH_DGID_CHECK=n \
    "${job[@]}" >"$out/a-r$runs.log" 2>&1 || status=$?
  runs=$((runs + 1))
  job=()
}
for arg in "$@"; do
  if [ "$arg" = --next ]; then run; else job+=("$arg"); fi
done
run
echo "$status" > "$out/a.status"
