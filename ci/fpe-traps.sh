#!/usr/bin/env bash
# sode in programs that trap floating-point exceptions, as weather and CFD
# codes are often run while they are debugged (gfortran's
# -ffpe-trap=invalid,zero,overflow, Intel's -fpe0, C's feenableexcept):
# every thread sode starts inherits the traps, so a division by zero or an
# invalid operation anywhere in sode (a rate over a time of zero, a NaN
# compared, a cast out of range) would kill the program with SIGFPE.
#
#   bash ci/fpe-traps.sh          # after ci/capi.sh: shared memory and TCP
#
# Not over RDMA: the SoftRoCE guest's emulated CPU (QEMU's TCG) does not
# raise SSE floating-point exceptions: traps never fire there (the
# canary below, run in the guest, ends well). The RDMA planner, the
# arithmetic-heaviest part of an RDMA commit, is pure and runs here
# (sode-sched): every algorithm on the papers' patterns, simulated.
#
# The Fortran examples are built with -ffpe-trap; the C examples run with
# a preloaded library that enables the same traps at start-up. A canary
# that divides by zero must die of SIGFPE under it, so that a trap that
# does not fire cannot pass for sode's clean bill.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
prefix=$root/target/capi-prefix
build=$root/target/capi-examples
out=$root/target/fpe
mpirun=(mpirun --oversubscribe --mca btl self,vader)
[ "$(id -u)" -eq 0 ] && mpirun+=(--allow-run-as-root)
[ -x "$build/rk2d" ] && [ -d "$prefix/lib/pkgconfig" ] \
  || { echo "fpe-traps: run ci/capi.sh first (it installs $prefix and builds $build)" >&2; exit 1; }

mkdir -p "$out"
cat > "$out/traps.c" <<'EOF'
#define _GNU_SOURCE
#include <fenv.h>
/* What -ffpe-trap=invalid,zero,overflow does at a Fortran program's start. */
__attribute__((constructor)) static void trap_fpe(void) {
  feenableexcept(FE_DIVBYZERO | FE_INVALID | FE_OVERFLOW);
}
EOF
printf '#include <stdio.h>\nint main(int argc, char **argv) { volatile double z = argc - 1; (void)argv; printf("%%f\\n", 1.0 / z); return 0; }\n' \
  > "$out/canary.c"
cc -shared -fPIC "$out/traps.c" -o "$out/libtraps.so" -lm
cc "$out/canary.c" -o "$out/canary"
for f in stencil3d rk2d; do
  # shellcheck disable=SC2046
  mpifort -ffpe-trap=invalid,zero,overflow -J "$out" "examples/fortran/$f.f90" -o "$out/$f" \
    $(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs sode_fortran)
done
# In a shell of its own, whose report of the signal is not wanted.
status=0
bash -c 'LD_PRELOAD="$1" "$2"; exit $?' traps "$out/libtraps.so" "$out/canary" >/dev/null 2>&1 || status=$?
[ "$status" -eq 136 ] \
  || { echo "fpe-traps: the canary's division by zero ended with status $status, not SIGFPE (136): the traps are not on" >&2; exit 1; }
echo "ok: the canary's division by zero dies of SIGFPE under the preloaded traps"

log=$(mktemp)
trap 'rm -f "$log"' EXIT
# Runs one job; it must end well and print a line matching `want`.
run() {
  local what=$1 want=$2
  shift 2
  if ! timeout 600 "${mpirun[@]}" "$@" >"$log" 2>&1; then
    cat "$log"
    grep -q "Floating point\|signal 8\|SIGFPE" "$log" && echo "fpe-traps: $what: a floating-point exception in sode" >&2
    echo "fpe-traps: $what failed" >&2
    exit 1
  fi
  grep -q "$want" "$log" || { cat "$log"; echo "fpe-traps: $what did not print \"$want\"" >&2; exit 1; }
  echo "ok: $what: $(grep -m1 "$want" "$log" | cut -c1-110)"
}
traps=(-x LD_PRELOAD="$out/libtraps.so")

run "stencil3d (Fortran, -ffpe-trap) on 4 ranks" "^ok" -n 4 "$out/stencil3d"
run "rk2d (Fortran, -ffpe-trap) on 4 ranks over TCP" "^ok" -n 4 -x SODE_TRANSPORT=tcp "$out/rk2d"
# A first job on a node measures the shared-memory thresholds (rates over
# short times), and SODE_WAIT_WARN=1 has every long wait formatted.
run "bench2d on 2 ranks, the thresholds measured afresh, waits warned of" "^| 64 x 64 |" -n 2 "${traps[@]}" \
  -x SODE_SHM_PROBE_CACHE=off -x SODE_WAIT_WARN=1 \
  "$build/bench2d" 1 20 64
run "ring1d on 3 ranks (statistics: times and rates)" "^ok" -n 3 "${traps[@]}" "$build/ring1d"
# Every misuse of the C ABI: timeouts of NaN, zero and infinity, sizes
# out of range, failed commits.
run "errors on 3 ranks (every misuse named)" "^ok every misuse named" -n 3 "${traps[@]}" "$build/errors"
run "tiles on 4 ranks" "^ok" -n 4 "${traps[@]}" "$build/tiles"

cargo build --release --locked -q --workspace --bin sode-sched
sched=$root/target/release/sode-sched
# Runs sode-sched under the traps; it must end well.
plans() {
  LD_PRELOAD="$out/libtraps.so" "$sched" "$@" || { echo "fpe-traps: sode-sched $* failed (status $?)" >&2; exit 1; }
}
plans table >/dev/null
patterns=(
  "random --n 5 --seed 1" "random --n 12 --seed 2" "random --n 40 --seed 7"
  "halo2d --nx 4 --ny 4 --neighbours 8" "halo3d --nx 8 --ny 8 --nz 8 --halo 2 --neighbours 26"
  "scale-les3 --k 60 --directions ew" "scale-les3 --k 872 --directions all8 --machine tofud"
)
count=0
for p in "${patterns[@]}"; do
  # shellcheck disable=SC2086 # the pattern's arguments split on purpose
  plans pattern $p >"$out/pattern.json"
  for alg in auto split greedy bl-overhead bl-share round-robin:1 round-robin:4 bl:4; do
    plans plan --algorithm "$alg" "$out/pattern.json" >"$out/plan.json"
    plans simulate "$out/pattern.json" "$out/plan.json" >/dev/null
    count=$((count + 1))
  done
done
python3 - "$out" <<'PY'
import json, random, sys
random.seed(1)
n = 12
traffic = [[0 if i == j else random.randint(0, 100) for j in range(n)] for i in range(n)]
distance = [[0 if i == j else (1 if i // 4 == j // 4 else 5) for j in range(n)] for i in range(n)]
zeros = [[0] * n for _ in range(n)]
for name, m in (("traffic", traffic), ("distance", distance), ("zeros", zeros)):
    json.dump(m, open(f"{sys.argv[1]}/{name}.json", "w"))
PY
plans place --traffic "$out/traffic.json" --distance "$out/distance.json" >/dev/null
plans place --traffic "$out/zeros.json" --distance "$out/zeros.json" >/dev/null
echo "ok: sode-sched: Table 1 simulated, $count plans of ${#patterns[@]} patterns simulated, two placements (one of no traffic)"
echo "fpe-traps: over shared memory and TCP, and in the RDMA planner, sode raised no trapped floating-point exception"
