#!/usr/bin/env bash
# Reordered ranks across the two VMs: an 8-rank job launched scrambled
# (ranks 0 2 5 7 on node a, 1 3 4 6 on node b: a checkerboard of the 4 x 2
# process grid, so every neighbour is on the other node) runs the 2-D stencil (4 neighbours,
# walls) in launch order and with --reorder, alternately, ROUNDS times.
# Passes only if every run matched the single-process solve bit for bit and
# every reordered run moved fewer bytes between the nodes and used fewer
# RDMA neighbours than launch order; prints the slowest rank's time per
# exchange of each run, for the table in docs/topology.md.
#   bash ci/softroce/reorder.sh [--job DIR | --check LOG]   (cluster-job.sh)
# ROUNDS and ITERS must be the same for --job and --check.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
stencil=${STENCIL:-$root/target/release/examples/stencil}
rounds=${ROUNDS:-2}
iters=${ITERS:-200}
here=$root/ci/softroce
# shellcheck source=ci/softroce/cluster-job.sh
. "$here/cluster-job.sh"
job() {
  local run="$stencil --dims 2 --size 256 --neighbours 4 --iters $iters" cmd="" i
  for i in $(seq "$rounds"); do
    cmd="$cmd$run && $run --reorder && "
  done
  mkdir -p "$1"
  echo reorder >"$1/name"
  printf 'SODE_CLUSTER_RANKS_A=%q\nSODE_CLUSTER_RANKS_B=%q\n' "0 2 5 7" "1 3 4 6" >"$1/env"
  printf '%q ' bash -c "${cmd}true" >"$1/command"
}
check() {
  nodes_finished "$1" reorder || return 1
  python3 - "$1" "$rounds" <<'PY'
import re, sys
log, rounds = sys.argv[1], int(sys.argv[2])
runs = {}  # (rank) -> list of lines in order
for line in open(log):
    m = re.match(r"^\[node [ab] rank (\d)\] (rank \d+: .*)$", line.rstrip())
    if m and "bit for bit" in m.group(2):
        runs.setdefault(int(m.group(1)), []).append(m.group(2))
fail = False
if sorted(runs) != list(range(8)) or any(len(v) != 2 * rounds for v in runs.values()):
    print("reorder: not every rank finished every run bit for bit", file=sys.stderr)
    sys.exit(1)
print("| round | order | bytes between nodes an exchange | RDMA neighbours (all ranks) | slowest rank's us/exchange |")
print("|---|---|---:|---:|---:|")
for k in range(rounds):
    launch, reordered = ([runs[r][2 * k + j] for r in range(8)] for j in (0, 1))
    rdma = [sum(int(re.search(r"rdma (\d+)", l).group(1)) for l in ls) for ls in (launch, reordered)]
    us = [max(float(re.search(r"([\d.]+) us/exchange", l).group(1)) for l in ls) for ls in (launch, reordered)]
    b = re.search(r"reordered \(launched as rank \d+\): (\d+) bytes an exchange between nodes, (\d+) in launch order", reordered[0])
    if b is None or any("reordered" in l for l in launch):
        print(f"reorder: round {k + 1}: the runs are not in the expected order", file=sys.stderr)
        sys.exit(1)
    moved, before = int(b.group(1)), int(b.group(2))
    if not (moved < before and rdma[1] < rdma[0]):
        print(f"reorder: round {k + 1}: {moved} bytes between nodes and {rdma[1]} RDMA neighbours reordered, {before} and {rdma[0]} in launch order", file=sys.stderr)
        fail = True
    print(f"| {k + 1} | launch | {before} | {rdma[0]} | {us[0]:.0f} |")
    print(f"| {k + 1} | reordered | {moved} | {rdma[1]} | {us[1]:.0f} |")
sys.exit(1 if fail else 0)
PY
}
cluster_job_main "$@"
