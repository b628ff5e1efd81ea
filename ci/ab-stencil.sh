#!/usr/bin/env bash
# Two builds of the stencil example, alternating, on the same arguments:
# `stencil -n 2 ARGS --exchange-only --transport TRANSPORT` (default shm)
# per shape, ROUNDS times each, and per shape the median (minimum) of rank
# 0's microseconds per exchange for each build and the ratio of the minima
# (new / old). NEW defaults to this tree's build.
#
#   OLD=/tmp/old-target/release/examples/stencil bash ci/ab-stencil.sh
#   OLD=... SHAPES="3:32:2,1,1" EXTRA=--shared-fields ROUNDS=7 bash ci/ab-stencil.sh
#   OLD=... TRANSPORT=tcp EXTRA=--periodic bash ci/ab-stencil.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
old=${OLD:?set OLD to the stencil executable of the other build}
rounds=${ROUNDS:-5}
iters=${ITERS:-3000}
transport=${TRANSPORT:-shm}
shapes=${SHAPES:-"3:32:2,1,1 3:64:2,1,1 2:1024:2,1 3:32:1,1,2 3:64:1,1,2"}
read -ra extra <<<"${EXTRA:-}"
if [ -z "${NEW:-}" ]; then
  cargo build --release --locked --workspace --example stencil >&2
  new="$root/target/release/examples/stencil"
else
  new=$NEW
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

run() {
  local exe=$1 dims=$2 size=$3 grid=$4
  "$exe" -n 2 --dims "$dims" --size "$size" --grid "$grid" --iters "$iters" \
    --exchange-only --transport "$transport" "${extra[@]}" 2>&1 |
    grep -o 'rank 0: .*us/exchange' | sed -E 's/.* ([0-9.]+) us\/exchange/\1/'
}
stats() { sort -n "$1" | awk '{ v[NR] = $1 } END { printf "%.2f (%.2f)", v[int((NR + 1) / 2)], v[1] }'; }
least() { sort -n "$1" | head -1; }

extra_args="(none)"
[ -n "${EXTRA:-}" ] && extra_args=$EXTRA
echo "| shape | grid | transport | extra arguments | old us | new us | new / old |"
echo "|---|---|---|---|---:|---:|---:|"
for shape in $shapes; do
  IFS=: read -r dims size grid <<<"$shape"
  : >"$out/old"
  : >"$out/new"
  for _ in $(seq "$rounds"); do
    run "$old" "$dims" "$size" "$grid" >>"$out/old"
    run "$new" "$dims" "$size" "$grid" >>"$out/new"
  done
  ratio=$(awk -v a="$(least "$out/new")" -v b="$(least "$out/old")" 'BEGIN { printf "%.2f", a / b }')
  echo "| ${dims}-D $size | $grid | $transport | $extra_args | $(stats "$out/old") | $(stats "$out/new") | $ratio |"
done
