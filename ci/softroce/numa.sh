#!/usr/bin/env bash
# A guest with two NUMA nodes of two CPUs each: sode-shm's threshold probe,
# measuring towards a peer bound to the other node, must place its
# responder on that node's CPUs (this machine has one node, so only a
# guest can show it). Runs the given `processes` test executable of
# sode-shm (`bash ci/built-exe.sh test sode-shm processes`), or builds it.
#
#   bash ci/softroce/numa.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exe=${1:-$(bash "$here/../built-exe.sh" test sode-shm processes)}
[ -x "$exe" ] || { echo "numa: no test executable at '$exe'" >&2; exit 2; }
SODE_VM_SHAPE="--cpus 4 --memory 2G --numa 1G,cpus=0-1 --numa 1G,cpus=2-3" \
  bash "$here/run.sh" env SODE_EXPECT_NUMA=2 "$exe" --exact \
  across_numa_nodes_the_probe_stands_on_the_peers_whole_node --nocapture
