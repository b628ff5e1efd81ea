#!/usr/bin/env bash
# The comparison benchmark: examples/c/bench2d (8 neighbours, periodic)
# through sode, MPI persistent point-to-point and the MPI-4 persistent
# neighbourhood collective, in one run per MPI, rank count and shape,
# rounds rotating which goes first; every contender's halo is checked
# before it is timed. Under Open MPI and MPICH, 2 and 4 ranks, three
# shapes: one double field of one level, halo 1 (a 2-D code); a weather or
# ocean model's, 4 fields of 60 levels (contiguous, not split), halo 2;
# and a model's many tracers, 24 fields of 10 levels, halo 2 (the last two
# with blocks up to 256^2).
#
#   bash ci/compare.sh [rounds [divisor [largest block]]]
#
# Needs the examples that ci/capi.sh (Open MPI) and ci/mpich.sh (MPICH)
# build. CI runs one quick round (data checked, times not judged); the
# results page runs 5 rounds (`bash ci/compare.sh 5`), blocks 16^2 to 1024^2.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-7}
divisor=${2:-1}
largest=${3:-1024}
openmpi=${OPENMPI_BENCH:-target/capi-examples/bench2d}
mpich=${MPICH_BENCH:-target/capi-examples-mpich/bench2d}
for exe in "$openmpi" "$mpich"; do
  [ -x "$exe" ] || { echo "compare: $exe is missing: run ci/capi.sh and ci/mpich.sh first" >&2; exit 1; }
done
fail=0
table() { # shape (levels fields halo), launcher..., then the program
  local out shape=$1 most=$largest
  shift
  # The weather shape's 1024^2 blocks would take 2 GB a contender.
  [ "$shape" = "1 1 1" ] || [ "$most" -le 256 ] || most=256
  # shellcheck disable=SC2086 # the shape is three words
  if ! out=$(timeout 600 "$@" "$rounds" "$divisor" "$most" $shape 2>&1); then
    printf '%s\n' "$out" >&2
    echo "compare: $* (levels, fields, halo: $shape) failed" >&2
    fail=1
    return
  fi
  printf '%s\n\n' "$out"
  # Every row has all three contenders: a missing neighbourhood collective
  # would say n/a.
  if printf '%s\n' "$out" | grep -E '^\| [0-9]+ x' | grep -q "n/a"; then
    echo "compare: $* (levels, fields, halo: $shape) ran without the neighbourhood collective" >&2
    fail=1
  fi
}
for shape in "1 1 1" "60 4 2" "10 24 2"; do
  for n in 2 4; do
    table "$shape" mpirun --allow-run-as-root --oversubscribe -n "$n" "$openmpi"
    table "$shape" mpirun.mpich -n "$n" "$mpich"
  done
done
exit $fail
