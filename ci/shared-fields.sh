#!/usr/bin/env bash
# Fields kept by sode against the caller's own arrays, over shared memory:
# `stencil --exchange-only` on 2 ranks (exchanges back to back, the ranks in
# step), per shape, alternating four modes ROUNDS times:
#   copy     the caller's arrays: pack, window put or eager ring, unpack;
#   shared   --shared-fields, sode-shm's default choice (ReadMin::DEFAULT);
#   in-place --shared-fields, every face read from the owner's array;
#   packed   --shared-fields, every face gathered and scattered around the
#            packed path (as copy, without the caller's pack and unpack).
# Prints per shape the face (bytes, runs of bytes), the median and minimum
# of rank 0's microseconds per exchange in each mode, and the ratios of
# the minima to copy's.
#
#   bash ci/shared-fields.sh                     # ROUNDS=5, the shapes below
#   SHAPES="3:64:1,1,2 2:1024:2,1" ROUNDS=3 bash ci/shared-fields.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=${ROUNDS:-5}
# dims:size:grid; the split axis decides the face: across axis 0 (the
# fastest) a run per cell, across the others runs of a row.
shapes=${SHAPES:-"3:8:1,1,2 3:16:1,1,2 3:32:1,1,2 3:64:1,1,2 3:128:1,1,2 2:2048:1,2 3:32:2,1,1 3:64:2,1,1 2:1024:2,1"}
iters=${ITERS:-2000}
cargo build --release --locked --workspace --example stencil >&2
exe="$root/target/release/examples/stencil"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# One run of a mode: prints rank 0's microseconds per exchange.
run() {
  local dims=$1 size=$2 grid=$3 mode=$4 args=() env=()
  case $mode in
    shared) args=(--shared-fields) ;;
    in-place) args=(--shared-fields); env=(SODE_SHM_READ_MIN=0 SODE_SHM_READ_RUN_MIN=0) ;;
    packed) args=(--shared-fields); env=(SODE_SHM_READ_MIN=18446744073709551615) ;;
  esac
  env "${env[@]}" "$exe" -n 2 --dims "$dims" --size "$size" --grid "$grid" \
    --iters "$iters" --exchange-only --transport shm "${args[@]}" 2>&1 |
    grep -o 'rank 0: .*us/exchange' |
    sed -E 's/.* ([0-9.]+) us\/exchange/\1/'
}

# "median (minimum)" of a file of numbers.
stats() { sort -n "$1" | awk '{ v[NR] = $1 } END { printf "%.2f (%.2f)", v[int((NR + 1) / 2)], v[1] }'; }
least() { sort -n "$1" | head -1; }

modes="copy shared in-place packed"
echo "| shape | grid | face bytes | runs | copy us | shared us | in place us | packed us | shared / copy | in place / copy | packed / copy |"
echo "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"
for shape in $shapes; do
  IFS=: read -r dims size grid <<<"$shape"
  for _ in $(seq "$rounds"); do
    for mode in $modes; do
      run "$dims" "$size" "$grid" "$mode" >> "$out/$shape.$mode"
    done
  done
  if [ "$dims" = 2 ]; then face=$((size * 8)); else face=$((size * size * 8)); fi
  if [ "${grid%%,*}" = 2 ]; then runs="$((face / 8)) x 8"; elif [ "$dims" = 2 ]; then runs="1 x $face"; else runs="$size x $((size * 8))"; fi
  base=$(least "$out/$shape.copy")
  ratio() { awk -v a="$(least "$out/$shape.$1")" -v b="$base" 'BEGIN { printf "%.2f", a / b }'; }
  echo "| ${dims}-D ${size} | $grid | $face | $runs | $(stats "$out/$shape.copy") | $(stats "$out/$shape.shared") | $(stats "$out/$shape.in-place") | $(stats "$out/$shape.packed") | $(ratio shared) | $(ratio in-place) | $(ratio packed) |"
done
