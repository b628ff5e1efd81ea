#!/usr/bin/env bash
# Runs inside the SoftRoCE guest: loads rdma_rxe, creates rxe0 over a veth
# pair with IPv4 addresses (RoCE v2 GIDs), then runs the given command and
# writes its exit status to $SODE_VM_OUT/status.
set -uo pipefail
out=${SODE_VM_OUT:?}
# The host (run.sh) keeps the guest's stderr with its console; what the
# command says goes to its stdout, in order.
exec 2>&1
{
  set -e
  modprobe rdma_rxe
  ip link add veth0 type veth peer name veth1
  ip addr add 10.77.0.1/24 dev veth0
  ip addr add 10.77.0.2/24 dev veth1
  ip link set lo up
  ip link set veth0 up
  ip link set veth1 up
  rdma link add rxe0 type rxe netdev veth0
  # Memory registration needs more than the default 8 MiB of locked memory.
  ulimit -l unlimited
} || { echo 90 > "$out/status"; exit 90; }
# The host's watchdog (run.sh) waits for this before it trusts the boot.
echo "softroce: guest up, rxe0 ready, $(cut -d' ' -f1 /proc/uptime) s after boot" >&2
touch "$out/guest.ready"
# The setup block turned errexit on; the command's failure must still be
# reported as its status.
set +e
ulimit -l unlimited
# A copy of what the command says, in the directory shared with the host:
# the console loses the first lines a guest prints, all of them when the
# command ends at once, and run.sh shows the copy when it failed.
"$@" 2>&1 | tee "$out/command.log"
echo "${PIPESTATUS[0]}" > "$out/status"
