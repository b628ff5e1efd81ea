#!/usr/bin/env bash
# Two SoftRoCE nodes with a wire between them: two VMs (Debian's kernel
# under software emulation) joined by a QEMU socket network device, each
# with its own rxe0 on its virtio NIC. Runs PROGRAM as a 4-rank job, ranks
# 0 and 1 on node a, 2 and 3 on node b (ranks of one node share memory, the
# others talk RDMA over the wire), and exits non-zero if any rank fails.
# SODE_CLUSTER_RANKS_A and SODE_CLUSTER_RANKS_B list other ranks per node
# (the job's size is their number).
#
#   bash ci/softroce/cluster.sh PROGRAM ARGS...
#
# With SODE_CLUSTER_GUEST=ci/softroce/cluster-mpi-guest.sh, Open MPI's
# mpirun on node a starts PROGRAM instead (2 ranks a node).
#
# A boot under emulation hangs now and then: nodes not up (their wire and
# rxe0 ready) in time are stopped, with the host's state and their last
# console lines printed, and both booted once more (boot-watch.sh says
# when).
set -euo pipefail
PATH="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"
export PATH
here=$(cd "$(dirname "$0")" && pwd)
guest=${SODE_CLUSTER_GUEST:-$here/cluster-guest.sh}
kernel=$(bash "$here/install.sh" | tail -n 1)
out=$(mktemp -d /tmp/sode-cluster.XXXXXX)
trap 'rm -rf "$out"' EXIT
free_port() { python3 "$here/../free_port.py"; }
cmd=$(printf '%q ' "$@")
job="cluster$$"
# The job's secret travels in the shared directory (mode 0700), not on a
# command line other users could read.
od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$out/secret"
chmod 600 "$out/secret"
start=$(date +%s)

boot() { # node, ip, listen|connect, mac
  # In the background, so that its pid can be recorded for an early stop.
  # --force-9p: vng would first try virtiofsd for each shared directory,
  # seconds lost each time Debian 12's (QEMU's own) refuses its options.
  vm_start "$1" all vng --run "$kernel" --disable-kvm --force-9p --cpus 2 --memory 1G -v --name "node-$1" \
    --rwdir "$out" --cwd "$PWD" \
    --qemu-opts="-netdev socket,id=wire,$3=127.0.0.1:$wire -device virtio-net-pci,netdev=wire,mac=$4" \
    -- "SODE_CLUSTER_RANKS_A='${SODE_CLUSTER_RANKS_A:-0 1}' SODE_CLUSTER_RANKS_B='${SODE_CLUSTER_RANKS_B:-2 3}' SODE_VM_OUT=$out SODE_NODE=$1 SODE_NODE_IP=$2 SODE_NODE_MAC=$4 SODE_PEER_NODE=$5 SODE_CLUSTER_ROOT=10.78.0.1:7700 SODE_CLUSTER_JOB=$job bash $guest $cmd" \
    || return 1
  wait "$(cat "$out/pid-$1")" || true
  # and the console's copy
  wait
}
# shellcheck source=ci/softroce/boot-watch.sh
. "$here/boot-watch.sh"

# Both nodes, from boot to end; 1 if they did not come up.
run_nodes() {
  rm -f "$out"/*.ready "$out"/*.status "$out"/pid-*
  wire=$(free_port)
  boot a 10.78.0.1 listen 52:54:00:78:00:01 b &
  vm_a=$!
  # QEMU's connecting side gives up if nobody listens yet; wait for node a's
  # socket (without connecting to it: it accepts one peer only).
  for _ in $(seq 600); do
    ss -ltn "sport = :$wire" | grep -q LISTEN && break
    sleep 0.1
  done
  boot b 10.78.0.2 connect 52:54:00:78:00:02 a &
  vm_b=$!
  if ! boots_up a b; then
    wait $vm_a $vm_b || true
    return 1
  fi
  if [ -n "${SODE_CLUSTER_UNTIL_A:-}" ]; then
    # Node b is expected to go (node-death.sh powers it off): once node a is
    # done, give node b's VM 30 s to end, then stop it. A guest halted by
    # sysrq under emulation sometimes never exits QEMU, which would hold the
    # run until SODE_VM_TIMEOUT.
    wait $vm_a || true
    for _ in $(seq 300); do
      kill -0 $vm_b 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 $vm_b 2>/dev/null; then
      echo "cluster: node b's VM still runs 30 s after node a ended: stopping it" >&2
      kill "$(cat "$out/pid-b")" 2>/dev/null || true
    fi
  fi
  wait $vm_a $vm_b || true
}
if ! run_nodes; then
  echo "cluster: booting both nodes again" >&2
  run_nodes || true
fi
status=0
for node in a b; do
  for f in "$out"/"$node"-r*.log; do
    [ -f "$f" ] || continue
    r=${f##*-r}; r=${r%.log}
    sed "s/^/[node $node rank $r] /" "$f"
  done
  s=$(cat "$out/$node.status" 2>/dev/null || echo 99)
  echo "cluster: node $node finished with status $s" >&2
  if [ "$s" != 0 ]; then
    status=$s
    echo "cluster: node $node's console:" >&2
    tail -n 40 "$out/vm-$node.log" >&2
  fi
done
echo "cluster: both nodes done in $(( $(date +%s) - start )) s" >&2
exit "$status"
