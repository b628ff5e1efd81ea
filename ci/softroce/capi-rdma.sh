#!/usr/bin/env bash
# The C ABI over RDMA on one node (rxe0): examples/c/stencil2d as 4 ranks
# on a 2 x 2 grid with every neighbour over RDMA, every periodicity and
# shape, checked bit for bit against the owners' values, with faces packed
# (SODE_ZERO_COPY=never), read and written in place (always), mixed (ranks
# 0 and 3 in place, 1 and 2 packed: each message's two sides disagree), and
# chosen by run length (auto, on rows long enough to go in place). Fails
# unless every rank finishes every configuration, the in-place sides
# are where the mode puts them, and faces packed at both ends travel in
# the one message to their rank. Starts on some fields are checked too,
# packed, in place (staged through sode's buffers) and mixed.
#   bash ci/softroce/run.sh bash ci/softroce/capi-rdma.sh     (from the host)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
c_stencil=${C_STENCIL:-$root/target/capi-examples/stencil2d}
[ -x "$c_stencil" ] || { echo "capi-rdma: $c_stencil is missing: run ci/capi.sh first" >&2; exit 1; }
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT

# run NAME MODE0 MODE1 MODE2 MODE3 [stencil2d arguments after --env 2 2]
run() {
  local name=$1; shift
  local modes=("$1" "$2" "$3" "$4"); shift 4
  local secret port pids=() status=0
  secret=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
  port=$(python3 "$root/ci/free_port.py")
  for r in 0 1 2 3; do
    SODE_RANK=$r SODE_SIZE=4 SODE_ROOT=127.0.0.1:$port SODE_JOB_SECRET=$secret \
      SODE_ZERO_COPY=${modes[$r]} \
      timeout 600 "$c_stencil" --env 2 2 --rdma "$@" > "$log/$name.$r" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || status=1; done
  for r in 0 1 2 3; do
    sed "s/^/[$name rank $r] /" "$log/$name.$r"
  done
  [ $status = 0 ] || { echo "capi-rdma: $name: a rank failed" >&2; exit 1; }
}

# check NAME RANK WANT: WANT is none (no side in place) or both (sends and
# receives in place in every configuration) or some (in at least one).
check() {
  local name=$1 r=$2 want=$3 file="$log/$1.$2"
  local ok zero both
  ok=$(grep -c "^ok rank $r grid 2x2 .*bit for bit" "$file" || true)
  zero=$(grep -c "in place: 0 sends, 0 receives" "$file" || true)
  both=$(grep -cE "in place: [1-9][0-9]* sends, [1-9][0-9]* receives" "$file" || true)
  [ "$ok" = 6 ] || { echo "capi-rdma: $name: rank $r finished $ok of 6 configurations bit for bit" >&2; exit 1; }
  case $want in
    none) [ "$zero" = 6 ] ;;
    both) [ "$both" = 6 ] ;;
    some) [ "$both" -ge 1 ] ;;
  esac || { echo "capi-rdma: $name: rank $r: expected $want in place, got:" >&2; grep "^ok" "$file" >&2; exit 1; }
}

# links NAME SHAPE WANT: on the periodic grid, where each rank reaches one
# rank across each axis (both faces) and a third across the corners, every
# rank's exchange of SHAPE (box or star) has WANT links (one line each of
# sode_exchange_describe, a message each way).
links() {
  local name=$1 shape=$2 want=$3 r got
  for r in 0 1 2 3; do
    got=$(sed -n "s/^ok rank $r grid 2x2 periodic 11 $shape:.*; \([0-9]*\) links\$/\1/p" "$log/$name.$r")
    [ "$got" = "$want" ] || { echo "capi-rdma: $name: rank $r's periodic $shape exchange has '$got' links, expected $want" >&2; exit 1; }
  done
}

echo "== the C stencil over RDMA on rxe0: faces packed"
run never never never never never --subsets
for r in 0 1 2 3; do check never $r none; done
# Faces packed at both ends travel with the corners: one message a rank.
links never box 3
links never star 2
echo "== faces in place (the device reads the fields and writes the halos)"
run always always always always always --subsets
for r in 0 1 2 3; do check always $r both; done
# Each face alone, the four corners (to one rank) together.
links always box 5
links always star 4
echo "== mixed: ranks 0 and 3 in place, 1 and 2 packed (each message's sides disagree)"
run mixed always never never always --subsets
for r in 0 3; do check mixed $r both; done
for r in 1 2; do check mixed $r none; done
# Every face has an end in place: each alone.
links mixed box 5
links mixed star 4
echo "== auto on rows of 512 doubles: rows in place, columns packed"
run auto auto auto auto auto --global 16 1024
for r in 0 1 2 3; do check auto $r some; done
# Each face of rows has a side in place and travels alone; the columns,
# packed at both ends, travel together.
links auto box 4
links auto star 3
echo "capi-rdma: the C stencil over RDMA, packed, in place, mixed and auto: every rank bit for bit"
