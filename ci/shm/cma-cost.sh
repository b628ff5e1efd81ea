#!/usr/bin/env bash
# Why sode's shared-memory channel copies a program's arrays twice in user
# space (into the receiver's window, then out) rather than once through
# cross-memory attach (process_vm_readv): both measured on this machine,
# for messages of 16 KiB to 1 MiB, with the sender writing its data before
# each message (as a code does) and without. ROUNDS rounds (default 5),
# alternating which way goes first; prints the medians and minima in
# microseconds per message, and cma / window (above 1: the two copies are
# faster).
#
#   bash ci/shm/cma-cost.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
rounds=${ROUNDS:-5}
exe="$root/target/cma-cost"
mkdir -p "$root/target"
cc -O2 -Wall -Wextra -o "$exe" "$root/ci/shm/cma-cost.c"
if [ "$(nproc)" -lt 2 ]; then
  echo "cma-cost: the two processes spin on two CPUs; this machine has $(nproc)" >&2
  exit 0
fi
if [ "$("$exe" 4096 cma unchanged 8 2>/dev/null || true)" = "" ]; then
  echo "cma-cost: process_vm_readv is not permitted here (ptrace scope or seccomp); nothing to compare" >&2
  exit 0
fi
stats() { sort -n | awk '{ v[NR] = $1 } END { printf "%.2f %.2f\n", v[int((NR + 1) / 2)], v[1] }'; }
echo "| message | sender | window median (min) us | cma median (min) us | cma / window |"
echo "|---:|---|---:|---:|---:|"
for size in 16384 65536 262144 1048576; do
  iters=$((50000000 / size > 50 ? 50000000 / size : 50))
  for data in written unchanged; do
    w=() m=()
    for r in $(seq "$rounds"); do
      if [ $((r % 2)) -eq 1 ]; then
        w+=("$("$exe" "$size" window "$data" "$iters")") m+=("$("$exe" "$size" cma "$data" "$iters")")
      else
        m+=("$("$exe" "$size" cma "$data" "$iters")") w+=("$("$exe" "$size" window "$data" "$iters")")
      fi
    done
    read -r wmed wmin < <(printf '%s\n' "${w[@]}" | stats)
    read -r mmed mmin < <(printf '%s\n' "${m[@]}" | stats)
    awk -v s="$size" -v d="$data" -v wm="$wmed" -v wn="$wmin" -v mm="$mmed" -v mn="$mmin" \
      'BEGIN { printf "| %d KiB | %s | %s (%s) | %s (%s) | %.2f |\n", s / 1024, d, wm, wn, mm, mn, mm / wm }'
  done
done
