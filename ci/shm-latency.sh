#!/usr/bin/env bash
# 8-byte one-way latency over shared memory: sode's window and eager paths
# (examples/shm_paths, half a ping-pong round trip) beside Open MPI's
# ping-pong (ci/mpi/pingpong.c, vader), alternating, ROUNDS times; prints
# one row per round and the medians.
#
#   bash ci/shm-latency.sh            # ROUNDS=5 by default
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=${ROUNDS:-5}
cargo build --release --locked --workspace --example shm_paths >&2
mkdir -p "$root/target/mpi"
mpicc -O2 -o "$root/target/mpi/pingpong" "$root/ci/mpi/pingpong.c"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "| round | Open MPI (vader) us, median of 7 | sode window us | sode eager us | window / MPI | eager / MPI |"
echo "|---:|---:|---:|---:|---:|---:|"
for r in $(seq "$rounds"); do
  mpi=$(mpirun --allow-run-as-root --oversubscribe -n 2 "$root/target/mpi/pingpong" 8 20000 7 | awk '/^mpi/ {print $4}')
  "$root/target/release/examples/shm_paths" > "$out" 2>/dev/null
  row=$(grep '^| 8 B ' "$out")
  eager=$(awk -F'|' '{gsub(/ /, "", $8); print $8}' <<<"$row")
  window=$(awk -F'|' '{gsub(/ /, "", $9); print $9}' <<<"$row")
  awk -v r="$r" -v m="$mpi" -v w="$window" -v e="$eager" \
    'BEGIN { printf "| %d | %.3f | %.2f | %.2f | %.2f | %.2f |\n", r, m, w, e, w / m, e / m }'
done | tee "$out.rows"
sort -t'|' -k6 -n "$out.rows" | awk -F'|' -v n="$rounds" 'NR == int((n + 1) / 2) { printf "median window / MPI: %s\n", $6 }'
sort -t'|' -k7 -n "$out.rows" | awk -F'|' -v n="$rounds" 'NR == int((n + 1) / 2) { printf "median eager / MPI: %s\n", $7 }'
rm -f "$out.rows"
