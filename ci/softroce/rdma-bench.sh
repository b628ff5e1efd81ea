#!/usr/bin/env bash
# The criterion benches of the RDMA write path (benches/benches/rdma_writes.rs)
# in the SoftRoCE guest, beside ib_write_lat and ib_write_bw on the same rxe0
# in the same boot. On the host it builds the bench, then boots the guest:
#
#   bash ci/softroce/rdma-bench.sh            # full (about 3 minutes of guest time)
#   QUICK=1 bash ci/softroce/rdma-bench.sh    # criterion's --test mode: each bench once
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
if [ "${1:-}" != --guest ]; then
  exe=$(bash "$root/ci/built-exe.sh" bench sode-benches rdma_writes 2>/dev/null)
  [ -n "$exe" ] || { echo "rdma-bench: the bench did not build" >&2; exit 1; }
  exec bash "$here/run.sh" env QUICK="${QUICK:-0}" bash "$here/rdma-bench.sh" --guest "$exe"
fi
exe=$2
dev=rxe0; ip=10.77.0.1
perf_pair() { # server and client of one perftest run; prints the client's output
  local tool=$1; shift
  "$tool" -d $dev -x 1 "$@" >/tmp/rdma-bench-server.log 2>&1 &
  local server=$!
  sleep 0.5
  "$tool" -d $dev -x 1 "$@" $ip
  wait $server
}
if [ "${QUICK:-0}" = 1 ]; then
  SODE_REQUIRE_RDMA=1 "$exe" --bench --test
  exit
fi
echo "== perftest on $dev, this boot"
# Columns: bytes iterations t_min t_max t_typical t_avg ...
read -r lat_min lat_typ < <(perf_pair ib_write_lat -s 8 -n 1000 -F 2>/dev/null | awk '$1 == 8 && NF >= 6 { print $3, $5 }')
echo "ib_write_lat 8 B one-way: min $lat_min us, typical $lat_typ us"
for s in 4096 65536 1048576; do
  bw=$(perf_pair ib_write_bw -s $s -n 200 -F 2>/dev/null | awk '$1 ~ /^[0-9]+$/ && NF >= 5 { v = $4 } END { print v }')
  echo "ib_write_bw $s B, 1 QP: $bw MB/s"
done
echo "== criterion: rdma_exchange/<queue pairs>/<bytes each way>"
"$exe" --bench 2>&1 | grep -E "^rdma_exchange|time:|thrpt:"
