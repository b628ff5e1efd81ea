#!/usr/bin/env bash
# Fields kept by sode against the caller's own arrays, over shared memory:
# the stencil example on 2 ranks (--overlap false, so each iteration is an
# exchange then a sweep), per shape, alternating three modes ROUNDS times:
#   copy    the caller's arrays: pack, window put or eager ring, unpack;
#   shared  --shared-fields: neighbours read faces from the owner's array;
#   packed  --shared-fields with SODE_SHM_READ_MIN huge: the same arrays,
#           gathered and scattered around the packed path.
# Prints per shape the medians (and minima) of rank 0's time per exchange
# and per iteration, and shared / copy.
#
#   bash ci/shared-fields.sh              # ROUNDS=5, the shapes below
#   SHAPES="3:16 3:64" ROUNDS=3 bash ci/shared-fields.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=${ROUNDS:-5}
shapes=${SHAPES:-"3:8 3:16 3:32 3:64 2:256 2:1024"}
iters=${ITERS:-500}
cargo build --release --locked -p sode-examples --example stencil >&2
exe="$root/target/release/examples/stencil"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# One run of a mode: prints "exchange_us iteration_us" for rank 0.
run() {
  local dims=$1 size=$2 mode=$3 args=() env=()
  case $mode in
    shared) args=(--shared-fields) ;;
    packed) args=(--shared-fields); env=(SODE_SHM_READ_MIN=18446744073709551615) ;;
  esac
  env "${env[@]}" "$exe" -n 2 --dims "$dims" --size "$size" --iters "$iters" \
    --overlap false --transport shm "${args[@]}" 2>&1 |
    grep -o 'rank 0: .*us/exchange' |
    sed -E 's/.* ([0-9.]+) us\/iteration, ([0-9.]+) us\/exchange/\2 \1/'
}

stats() { # median and minimum of a column of numbers
  sort -n | awk '{ v[NR] = $1 } END { printf "%.1f (%.1f)", v[int((NR + 1) / 2)], v[1] }'
}

echo "| shape | face bytes | copy exchange us | shared exchange us | packed exchange us | shared / copy | copy iteration us | shared iteration us |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for shape in $shapes; do
  dims=${shape%%:*} size=${shape##*:}
  for r in $(seq "$rounds"); do
    for mode in copy shared packed; do
      run "$dims" "$size" "$mode" >> "$out/$shape.$mode"
    done
  done
  if [ "$dims" = 2 ]; then face=$((size * 8)); else face=$((size * size * 8)); fi
  ex() { awk '{ print $1 }' "$out/$shape.$1" | stats; }
  it() { awk '{ print $2 }' "$out/$shape.$1" | stats; }
  ratio=$(paste <(awk '{ print $1 }' "$out/$shape.shared" | sort -n) \
                <(awk '{ print $1 }' "$out/$shape.copy" | sort -n) |
          awk '{ v[NR] = $1 / $2 } END { printf "%.2f", v[int((NR + 1) / 2)] }')
  echo "| ${dims}-D ${size} | $face | $(ex copy) | $(ex shared) | $(ex packed) | $ratio | $(it copy) | $(it shared) |"
done
