#!/usr/bin/env bash
# Three nodes on two networks (groups and gateways): VMs a and b
# joined by a wire with rxe on both, b and c by a second wire without RDMA,
# a and c not joined at all. Node b is the gateway: its lowest rank relays
# what a and c send each other. Three jobs run in one boot:
#
# 1. the stencil, 6 ranks (b: 0 1, a: 2 3, c: 4 5), 2-D, 8 neighbours,
#    periodic: every rank must match the single-process solve bit for bit,
#    a's ranks reach b's over RDMA and c's forwarded by rank 0, c's reach
#    b's over TCP (c has no RDMA device) and a's forwarded;
# 2. the health chain of halo/tests/health.rs (0 - 1 - 2 - 3; b: 0 3, a: 1,
#    c: 2) with node c's rank killed mid-run: ranks 0, 1 and 3 report it
#    within BOUND_MS (rank 1 hears it through rank 0 on b, rank 2's parent
#    in the health tree, across the networks), and leave no shared-memory
#    segment;
# 3. the same chain with rank 0 stopped (SIGSTOP): the gateway and the
#    health tree's root at once; ranks 1, 2 and 3 report it silent within
#    BOUND_MS (rank 3 through rank 1, its parent);
# 4. the stencil (4 neighbours, walls) with --reorder: the round trips
#    measured between the nodes (a-c through the gateway) must make the
#    chosen order cost less (bytes x distance) than launch order, with no
#    neighbour left forwarded between a and c, bit for bit.
#
# Rank 0 runs on b, the one node every node reaches (SODE_ROOT must be
# reachable from every rank). Exits non-zero on any failure.
#   bash ci/softroce/three-nodes.sh [HEALTH_TEST_EXE]
set -euo pipefail
PATH="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"
export PATH
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
stencil=${STENCIL:-$root/target/release/examples/stencil}
health=${1:-}
if [ -z "$health" ]; then
  health=$(bash "$root/ci/built-exe.sh" test sode health)
fi
[ -x "$stencil" ] || { echo "three-nodes: $stencil is missing: cargo build --release --examples" >&2; exit 1; }
[ -x "$health" ] || { echo "three-nodes: the health test executable is missing" >&2; exit 1; }
bound_ms=${BOUND_MS:-10000}
kernel=$(bash "$here/install.sh" | tail -n 1)
out=$(mktemp -d /tmp/sode-three.XXXXXX)
# SODE_KEEP=1 keeps the logs (the path is printed).
if [ "${SODE_KEEP:-0}" = 1 ]; then echo "three-nodes: logs in $out" >&2; else trap 'rm -rf "$out"' EXIT; fi
free_port() { python3 "$root/ci/free_port.py"; }
od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$out/secret"
chmod 600 "$out/secret"
start=$(date +%s)

# node, NICs for the guest, QEMU network options, then the node's settings.
boot() {
  local node=$1 nics=$2 qemu=$3
  shift 3
  # In the background, so that its pid can be recorded (boot-watch.sh).
  # --force-9p: vng would first try virtiofsd for each shared directory,
  # seconds lost each time Debian 12's (QEMU's own) refuses its options.
  vm_start "$node" all vng --run "$kernel" --disable-kvm --force-9p --cpus 2 --memory 1G -v --name "node-$node" \
    --rwdir "$out" --cwd "$PWD" --qemu-opts="$qemu" \
    -- "env SODE_VM_OUT=$out SODE_NODE=$node SODE_ALL_NODES='a b c' SODE_NICS='$nics' SODE_CLUSTER_JOB=three$$ SODE_STENCIL=$stencil SODE_HEALTH_EXE=$health $* bash $here/three-nodes-guest.sh" \
    || return 1
  wait "$(cat "$out/pid-$node")" || true
  # and the console's copy
  wait
}
listening() { # port: wait until QEMU listens there (without connecting)
  for _ in $(seq 600); do
    ss -ltn "sport = :$1" | grep -q LISTEN && return 0
    sleep 0.1
  done
}
mac() { echo "52:54:00:78:00:$1"; }
# shellcheck source=ci/softroce/boot-watch.sh
. "$here/boot-watch.sh"
# The three nodes, from boot to end; 1 if they did not come up.
run_nodes() {
  # Marks, statuses and consoles of an earlier attempt go.
  rm -f "$out"/[abc].* "$out"/pid-*
  wire1=$(free_port)
  wire2=$(free_port)
  boot a "$(mac 01)=10.78.0.1/24=rxe" \
    "-netdev socket,id=w1,listen=127.0.0.1:$wire1 -device virtio-net-pci,netdev=w1,mac=$(mac 01)" \
    SODE_NODE_ROOT=10.78.0.2 "SODE_STENCIL_RANKS='2 3'" "SODE_CHAIN_RANKS=1" &
  vm_a=$!
  listening "$wire1"
  boot b "$(mac 02)=10.78.0.2/24=rxe $(mac 12)=10.79.0.2/24" \
    "-netdev socket,id=w1,connect=127.0.0.1:$wire1 -device virtio-net-pci,netdev=w1,mac=$(mac 02) -netdev socket,id=w2,listen=127.0.0.1:$wire2 -device virtio-net-pci,netdev=w2,mac=$(mac 12)" \
    SODE_NODE_ROOT=127.0.0.1 SODE_CLUSTER_ROOT_OF=0=0.0.0.0 "SODE_STENCIL_RANKS='0 1'" "SODE_CHAIN_RANKS='0 3'" &
  vm_b=$!
  listening "$wire2"
  boot c "$(mac 13)=10.79.0.3/24" \
    "-netdev socket,id=w2,connect=127.0.0.1:$wire2 -device virtio-net-pci,netdev=w2,mac=$(mac 13)" \
    SODE_NODE_ROOT=10.79.0.2 "SODE_STENCIL_RANKS='4 5'" "SODE_CHAIN_RANKS=2" &
  vm_c=$!
  if ! boots_up a b c; then
    wait $vm_a $vm_b $vm_c || true
    return 1
  fi
  wait $vm_a $vm_b $vm_c || true
}
if ! run_nodes; then
  echo "three-nodes: booting the three nodes again" >&2
  run_nodes || true
fi
log=$out/all.log
for job in stencil killed stopped reorder; do
  for node in a b c; do
    for f in "$out"/"$node-$job"-r*.log; do
      [ -f "$f" ] || continue
      r=${f##*-r}; r=${r%.log}
      sed "s/^/[$job node $node rank $r] /" "$f"
    done
  done
done >"$log"
cat "$log"
cat "$out"/*-killed-leftover.log 2>/dev/null || true
fail=0
for node in a b c; do
  s=$(cat "$out/$node.status" 2>/dev/null || echo 99)
  if [ "$s" != 0 ]; then
    echo "three-nodes: node $node finished with status $s; its console:" >&2
    tail -n 40 "$out/vm-$node.log" >&2
    fail=1
  fi
done

# 1. The stencil: bit for bit everywhere, each path as the networks allow.
s=$(cat "$out"/{a,b,c}.stencil.status 2>/dev/null | sort -u | tr '\n' ' ')
[ "$s" = "0 " ] || { echo "three-nodes: the stencil failed (statuses $s)" >&2; fail=1; }
expect() { # rank, pattern its stencil line must match, what it means
  grep -qE "^\[stencil node . rank $1\] rank $1: $2.*bit for bit" "$log" \
    || { echo "three-nodes: stencil rank $1 did not $3" >&2; fail=1; }
}
for r in 0 1; do expect $r ".*\(shm [1-9][0-9]*, rdma [1-9][0-9]*, tcp [1-9][0-9]*, local 0\)" "use shared memory, RDMA (to a) and TCP (to c) directly"; done
for r in 2 3; do expect $r ".*\(shm [1-9][0-9]*, rdma [1-9][0-9]*, tcp [1-9][0-9]*, local 0, forwarded: rank [45] tcp via rank 0" "use shared memory, RDMA (to b) and TCP to c forwarded by rank 0"; done
for r in 4 5; do expect $r ".*\(shm [1-9][0-9]*, rdma 0, tcp [1-9][0-9]*, local 0, forwarded: rank [23] tcp via rank 0" "use shared memory, TCP to b and TCP to a forwarded by rank 0"; done

# 2 and 3: every survivor reports the doomed rank within the bound.
reported() { # job, rank, what the report must say
  local line ms
  line=$(grep -E "^\[$1 node . rank $2\] .*rank $2: failed after [0-9]+ ms" "$log" | head -n 1 || true)
  if [ -z "$line" ]; then
    echo "three-nodes: $1: rank $2 reported no failure" >&2
    fail=1
    return
  fi
  ms=$(printf '%s\n' "$line" | sed -E 's/.*failed after ([0-9]+) ms.*/\1/')
  printf '%s\n' "$line" | grep -qE "$3" \
    || { echo "three-nodes: $1: rank $2's report does not say '$3': $line" >&2; fail=1; }
  [ "$ms" -lt "$bound_ms" ] \
    || { echo "three-nodes: $1: rank $2 reported after $ms ms (bound $bound_ms)" >&2; fail=1; }
}
# Rank 0 hears it from the health watcher; ranks 1 and 3, its neighbours,
# may hear it first from their streams (rank 1's forwarded by rank 0).
reported killed 0 "the job failed: rank 2 \(on node-c\) closed its health link"
for r in 1 3; do reported killed $r "(the job failed: rank 2 \(on node-c\)|TCP with rank 2 )"; done
for r in 1 2 3; do reported stopped $r "the job failed: rank 0 \(on node-b\) sent no heartbeat"; done
if grep -q "leftover segments: \[.\+\]" "$out"/*-killed-leftover.log 2>/dev/null; then
  echo "three-nodes: segments of the killed job were left behind" >&2
  fail=1
fi
# 4. Reordered by measured distance: cheaper than launch order.
for r in 0 1 2 3 4 5; do
  # Logs are named by launch rank; the line speaks the new rank.
  line=$(grep -E "^\[reorder node . rank $r\] rank [0-9]+: .*bit for bit.*cost [0-9]+, [0-9]+ in launch order" "$log" || true)
  [ -n "$line" ] || { echo "three-nodes: reorder: rank $r did not finish reordered, bit for bit" >&2; fail=1; continue; }
  read -r cost launch_cost <<<"$(printf '%s\n' "$line" | sed -E 's/.*cost ([0-9]+), ([0-9]+) in launch order.*/\1 \2/')"
  [ "$cost" -lt "$launch_cost" ] || { echo "three-nodes: reorder: rank $r: cost $cost, not below launch order's $launch_cost" >&2; fail=1; }
done
# Launched, a's ranks had c's as neighbours through the gateway; the
# order chosen keeps a and c apart.
if grep -E "^\[reorder node" "$log" | grep -q "forwarded:"; then
  echo "three-nodes: reorder: neighbours still forwarded between a and c" >&2
  fail=1
fi
grep -E "^\[reorder node . rank 0\]" "$log" | grep -oE "cost [0-9]+, [0-9]+ in launch order.*" | head -n 1 || true
echo "three-nodes: done in $(( $(date +%s) - start )) s" >&2
[ $fail = 0 ] && echo "three-nodes: a-b RDMA, b-c TCP, a-c TCP forwarded by node b's gateway, bit for bit; node c's rank killed and the gateway stopped: every other rank reported within ${bound_ms} ms; reordered by measured round trips, cheaper than launch order"
exit $fail
