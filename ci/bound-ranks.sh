#!/usr/bin/env bash
# Shared fields with the ranks bound one to a core, as `mpirun --bind-to
# core` does by default for two ranks: `stencil --exchange-only
# --shared-fields` on 2 ranks under Open MPI, per shape, ROUNDS times.
# Prints per shape the face, how many halos each build reads in place,
# and the median and minimum of rank 0's microseconds per exchange.
#
# With OLD=path/to/an/older/stencil, that build runs too, alternating with
# this tree's, and the table gains the ratio of the minima (this / old):
#
#   bash ci/bound-ranks.sh
#   OLD=/tmp/old-target/release/examples/stencil ROUNDS=7 bash ci/bound-ranks.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=${ROUNDS:-5}
shapes=${SHAPES:-"3:32:1,1,2 3:64:1,1,2 3:128:1,1,2 2:2048:1,2 2:8192:1,2"}
iters=${ITERS:-2000}
bind=${BIND:-core}
command -v mpirun >/dev/null || {
  echo "bound-ranks: needs Open MPI's mpirun (apt-get install openmpi-bin)" >&2
  exit 2
}
cargo build --release --locked --workspace --example stencil >&2
new="$root/target/release/examples/stencil"
old=${OLD:-}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# One run: "<halos read in place> <us per exchange>" of rank 0.
run() {
  local exe=$1 dims=$2 size=$3 grid=$4 line
  line=$(mpirun --allow-run-as-root --oversubscribe -n 2 --bind-to "$bind" \
    "$exe" --dims "$dims" --size "$size" --grid "$grid" --iters "$iters" \
    --exchange-only --transport shm --shared-fields 2>&1 | grep '^rank 0: ')
  echo "$(grep -o '[0-9]* halos read in place' <<<"$line" | cut -d' ' -f1) \
$(sed -E 's/.* ([0-9.]+) us\/exchange.*/\1/' <<<"$line")"
}

stats() { sort -n "$1" | awk '{ v[NR] = $1 } END { printf "%.2f (%.2f)", v[int((NR + 1) / 2)], v[1] }'; }
least() { sort -n "$1" | head -1; }

builds="new"
[ -n "$old" ] && builds="old new"
if [ -n "$old" ]; then
  echo "| shape | grid | face bytes | old: in place | old us | new: in place | new us | new / old |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|"
else
  echo "| shape | grid | face bytes | in place | us |"
  echo "|---|---|---:|---:|---:|"
fi
for shape in $shapes; do
  IFS=: read -r dims size grid <<<"$shape"
  # The face across the last axis: size^(dims-1) cells of 8 bytes.
  face=$((8 * size ** (dims - 1)))
  for b in $builds; do : >"$out/$b.us"; : >"$out/$b.read"; done
  for _ in $(seq "$rounds"); do
    for b in $builds; do
      exe=$new
      [ "$b" = old ] && exe=$old
      read -r r us <<<"$(run "$exe" "$dims" "$size" "$grid")"
      echo "$us" >>"$out/$b.us"
      echo "$r" >>"$out/$b.read"
    done
  done
  reads() { sort -u "$out/$1.read" | paste -sd/; }
  if [ -n "$old" ]; then
    ratio=$(awk -v a="$(least "$out/new.us")" -v b="$(least "$out/old.us")" 'BEGIN { printf "%.2f", a / b }')
    echo "| ${dims}-D $size | $grid | $face | $(reads old) | $(stats "$out/old.us") | $(reads new) | $(stats "$out/new.us") | $ratio |"
  else
    echo "| ${dims}-D $size | $grid | $face | $(reads new) | $(stats "$out/new.us") |"
  fi
done
