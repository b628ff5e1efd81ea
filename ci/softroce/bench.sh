#!/usr/bin/env bash
# In the SoftRoCE guest: sode's RDMA writes beside perftest on the same rxe0
# in the same boot. Prints one table (markdown) with the ratios.
#
#   bash ci/softroce/run.sh bash ci/softroce/bench.sh            # full
#   QUICK=1 bash ci/softroce/run.sh bash ci/softroce/bench.sh    # CI-sized
#
# Bandwidth: rank 0 writes TOTAL bytes per exchange to rank 1 as writes of
# SIZE spread over E queue pairs (one chain per QP); baseline ib_write_bw -s
# SIZE -q E. Latency: sode's bidirectional 8-byte exchange (credit + write
# with immediate, both ways) beside ib_write_lat's round trip (2 x its
# one-way time).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${SODE_BIN:-$root/target/release}
if [ "${QUICK:-0}" = 1 ]; then
  engines=(1 2); sizes=(65536 1048576); total=4M; iters=5; lat_iters=100; bw_bytes=$((4 << 20))
else
  engines=(1 2 4); sizes=(4096 65536 1048576); total=4M; iters=20; lat_iters=500; bw_bytes=$((16 << 20))
fi
dev=rxe0; ip=10.77.0.1
out=$(mktemp -d)

perf_pair() { # server and client of one perftest run; prints the client's output
  local tool=$1; shift
  "$tool" -d $dev -x 1 "$@" >"$out/server.log" 2>&1 &
  local server=$!
  sleep 0.5
  "$tool" -d $dev -x 1 "$@" $ip
  wait $server
}

declare -A ref_bw
for e in "${engines[@]}"; do
  for s in "${sizes[@]}"; do
    n=$(( bw_bytes / s / e )); [ $n -lt 8 ] && n=8
    # Columns: bytes iterations peak average(MB/s) msgrate.
    ref_bw[$e,$s]=$(perf_pair ib_write_bw -s "$s" -q "$e" -n "$n" -F 2>/dev/null | awk '$1 ~ /^[0-9]+$/ && NF >= 5 { v = $4 } END { print v }')
  done
done
# Columns: bytes iterations t_min t_max t_typical t_avg ...
read -r lat_min lat_typ lat_avg < <(perf_pair ib_write_lat -s 8 -n "$lat_iters" -F 2>/dev/null | awk '$1 == 8 && NF >= 6 { print $3, $5, $6 }')

"$bin/sode-rdma-check" -n 2 --job-timeout 900 bench \
  --engines "$(IFS=,; echo "${engines[*]}")" --sizes "$(IFS=,; echo "${sizes[*]}")" \
  --total $total --iters $iters --lat-iters $lat_iters | sed 's/^\[0\] //' | tee "$out/sode.log" >&2

echo
echo "| measure | E | write size | sode | perftest | sode / perftest |"
echo "|---|---:|---:|---:|---:|---:|"
while read -r kind rest; do
  case $kind in
    bw)
      e=$(sed -n 's/.*engines=\([0-9]*\).*/\1/p' <<<"$rest"); s=$(sed -n 's/.*size=\([0-9]*\).*/\1/p' <<<"$rest")
      v=$(sed -n 's/.*MBps=\([0-9.]*\).*/\1/p' <<<"$rest"); r=${ref_bw[$e,$s]:-}
      awk -v e="$e" -v s="$s" -v v="$v" -v r="$r" 'BEGIN { printf "| write bandwidth, MB/s | %d | %d | %.1f | %s | %s |\n", e, s, v, (r == "" ? "n/a" : sprintf("%.1f", r)), (r == "" || r == 0 ? "n/a" : sprintf("%.2f", v / r)) }'
      ;;
    cq)
      e=$(sed -n 's/.*engines=\([0-9]*\).*/\1/p' <<<"$rest"); s=$(sed -n 's/.*size=\([0-9]*\).*/\1/p' <<<"$rest")
      c=$(sed -n 's/.*cq=\([a-z-]*\).*/\1/p' <<<"$rest"); v=$(sed -n 's/.*MBps=\([0-9.]*\).*/\1/p' <<<"$rest"); r=${ref_bw[$e,$s]:-}
      awk -v e="$e" -v s="$s" -v c="$c" -v v="$v" -v r="$r" 'BEGIN { printf "| bandwidth, %s send CQ, MB/s | %d | %d | %.1f | %s | %s |\n", c, e, s, v, (r == "" ? "n/a" : sprintf("%.1f", r)), (r == "" || r == 0 ? "n/a" : sprintf("%.2f", v / r)) }'
      ;;
    post)
      m=$(sed -n 's/.*mode=\([a-z]*\).*/\1/p' <<<"$rest"); ns=$(sed -n 's/.*ns_per_request=\([0-9.]*\).*/\1/p' <<<"$rest")
      echo "post_$m $ns" >>"$out/post"
      ;;
    lat)
      med=$(sed -n 's/.*median=\([0-9.]*\).*/\1/p' <<<"$rest"); mn=$(sed -n 's/.*min=\([0-9.]*\).*/\1/p' <<<"$rest"); mean=$(sed -n 's/.*mean=\([0-9.]*\).*/\1/p' <<<"$rest")
      awk -v a="$med" -v b="$lat_typ" 'BEGIN { printf "| 8 B exchange vs round trip, median us | 1 | 8 | %.1f | %.1f | %.2f |\n", a, 2 * b, a / (2 * b) }'
      awk -v a="$mn" -v b="$lat_min" 'BEGIN { printf "| 8 B exchange vs round trip, min us | 1 | 8 | %.1f | %.1f | %.2f |\n", a, 2 * b, a / (2 * b) }'
      awk -v a="$mean" -v b="$lat_avg" 'BEGIN { printf "| 8 B exchange vs round trip, mean us | 1 | 8 | %.1f | %.1f | %.2f |\n", a, 2 * b, a / (2 * b) }'
      ;;
  esac
done <"$out/sode.log"
"$bin/sode-rdma-check" -n 2 --job-timeout 900 gather --iters "$iters" | sed 's/^\[0\] //' >"$out/gather.log"
while read -r kind rest; do
  [ "$kind" = gather ] || continue
  rows=$(sed -n 's/.*rows=\([0-9]*\).*/\1/p' <<<"$rest"); bytes=$(sed -n 's/.*bytes=\([0-9]*\).*/\1/p' <<<"$rest")
  p=$(sed -n 's/.*pack_us=\([0-9.]*\).*/\1/p' <<<"$rest"); g=$(sed -n 's/.*gather_us=\([0-9.]*\).*/\1/p' <<<"$rest")
  awk -v r="$rows" -v b="$bytes" -v p="$p" -v g="$g" 'BEGIN { printf "| strided face of %d rows, gathered by the device vs packed, median us (sode: gather, baseline: pack) | 1 | %d | %.1f | %.1f | %.2f |\n", r, b, g, p, g / p }'
done <"$out/gather.log"
if [ -f "$out/post" ]; then
  chain=$(awk '$1 == "post_chain" { print $2 }' "$out/post"); each=$(awk '$1 == "post_each" { print $2 }' "$out/post")
  awk -v c="$chain" -v e="$each" 'BEGIN { printf "| posting cost, ns per request: one post per chain of 64 vs one per request | 1 | 64 | %.0f | %.0f | %.2f |\n", c, e, c / e }'
fi
rm -rf "$out"
