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
#   bash ci/softroce/cluster.sh --jobs DIR...
#
# With SODE_CLUSTER_GUEST=ci/softroce/cluster-mpi-guest.sh, Open MPI's
# mpirun on node a starts PROGRAM instead (2 ranks a node).
#
# With --jobs, several jobs run in turn on one boot of the two VMs (a boot
# under emulation costs more than many a job). Each DIR holds one job:
# `command`, its command line as `printf '%q '` writes it, and optionally
# `env`, shell assignments of SODE_CLUSTER_RANKS_A, SODE_CLUSTER_RANKS_B and
# SODE_CLUSTER_GUEST for it, and `name`. Each job has its own directory in
# the VMs, secret, job id and port (rank 0 listens at 10.78.0.1:7700 in the
# first job, 7701 in the second, ...); its ranks start once both nodes have
# ended the job before. The output of each job follows a line
# "cluster: job N of M: NAME", and ends with each node's
# "cluster: node X finished with status S".
#
# A boot under emulation hangs now and then: nodes not up (their wire and
# rxe0 ready) in time are stopped, with the host's state and their last
# console lines printed, and both booted once more (boot-watch.sh says
# when).
set -euo pipefail
PATH="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"
export PATH
here=$(cd "$(dirname "$0")" && pwd)
kernel=$(bash "$here/install.sh" | tail -n 1)
out=$(mktemp -d /tmp/sode-cluster.XXXXXX)
trap 'rm -rf "$out"' EXIT
free_port() { python3 "$here/../free_port.py"; }
job="cluster$$"
# The jobs, in the shared directory, in order: $out/job1, $out/job2, ...
jobs=()
add_job() { # the directory to take the job from, or "" for this command line
  local dir=$out/job$((${#jobs[@]} + 1))
  mkdir "$dir"
  if [ -n "$1" ]; then
    [ -f "$1/command" ] || { echo "cluster: $1 holds no job (no file 'command')" >&2; exit 2; }
    cp "$1/command" "$dir/command"
    [ -f "$1/env" ] && cp "$1/env" "$dir/env"
    if [ -f "$1/name" ]; then cp "$1/name" "$dir/name"; else basename "$1" >"$dir/name"; fi
  else
    printf '%q ' "${cmd[@]}" >"$dir/command"
    # What is set here; the guests have the defaults.
    local v
    for v in SODE_CLUSTER_RANKS_A SODE_CLUSTER_RANKS_B SODE_CLUSTER_GUEST; do
      if [ -n "${!v:-}" ]; then printf '%s=%q\n' "$v" "${!v}"; fi
    done >"$dir/env"
    basename "${cmd[0]}" >"$dir/name"
  fi
  # Each job's secret travels in the shared directory (mode 0700), not on
  # a command line other users could read.
  od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$dir/secret"
  chmod 600 "$dir/secret"
  jobs+=("$dir")
  echo "$dir" >>"$out/jobs"
}
if [ "${1:-}" = --jobs ]; then
  shift
  [ $# -gt 0 ] || { echo "usage: cluster.sh --jobs DIR..." >&2; exit 2; }
  for d in "$@"; do add_job "$d"; done
else
  [ $# -gt 0 ] || { echo "usage: cluster.sh PROGRAM ARGS... (or --jobs DIR...)" >&2; exit 2; }
  cmd=("$@")
  add_job ""
fi
start=$(date +%s)

boot() { # node, ip, listen|connect, mac
  # In the background, so that its pid can be recorded for an early stop.
  # --force-9p: vng would first try virtiofsd for each shared directory,
  # seconds lost each time Debian 12's (QEMU's own) refuses its options.
  vm_start "$1" all vng --run "$kernel" --disable-kvm --force-9p --cpus 2 --memory 1G -v --name "node-$1" \
    --rwdir "$out" --cwd "$PWD" \
    --qemu-opts="-netdev socket,id=wire,$3=127.0.0.1:$wire -device virtio-net-pci,netdev=wire,mac=$4" \
    -- "SODE_VM_OUT=$out SODE_NODE=$1 SODE_NODE_IP=$2 SODE_NODE_MAC=$4 SODE_PEER_NODE=$5 SODE_CLUSTER_ROOT=10.78.0.1:7700 SODE_CLUSTER_JOB=$job bash $here/cluster-jobs-guest.sh" \
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
  # A second boot starts every job afresh.
  for d in "${jobs[@]}"; do
    find "$d" -mindepth 1 ! -name command ! -name env ! -name name ! -name secret -delete
  done
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
failed_nodes=()
for node in a b; do
  # Set only when the node's network never came up: no job ran there.
  if [ -f "$out/$node.status" ]; then
    echo "cluster: node $node stopped before its jobs with status $(cat "$out/$node.status")" >&2
  fi
done
for i in "${!jobs[@]}"; do
  d=${jobs[$i]}
  echo "cluster: job $((i + 1)) of ${#jobs[@]}: $(cat "$d/name")"
  for node in a b; do
    for f in "$d"/"$node"-r*.log; do
      [ -f "$f" ] || continue
      r=${f##*-r}; r=${r%.log}
      sed "s/^/[node $node rank $r] /" "$f"
    done
    s=$(cat "$d/$node.status" 2>/dev/null || echo 99)
    echo "cluster: node $node finished with status $s" >&2
    if [ "$s" != 0 ]; then
      status=$s
      [[ " ${failed_nodes[*]} " == *" $node "* ]] || failed_nodes+=("$node")
    fi
  done
done
for node in "${failed_nodes[@]}"; do
  echo "cluster: node $node's console:" >&2
  tail -n 40 "$out/vm-$node.log" >&2
done
echo "cluster: both nodes done in $(( $(date +%s) - start )) s" >&2
exit "$status"
