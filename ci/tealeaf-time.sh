#!/usr/bin/env bash
# TeaLeaf's own profile of its halo exchange, MPI original against the sode
# port, in one run: Benchmarks/tea_bm_3.in's problem (500 x 500 cells, CG,
# 10 steps) with profiler_on, on 2 and 4 ranks, alternating which goes
# first; medians and minima of the rounds, in seconds on rank 0.
#
#   bash ci/tealeaf.sh && bash ci/tealeaf-time.sh [rounds]     # default 5
#
# Uses the builds ci/tealeaf.sh leaves in target/clients/. Prints a
# markdown table (docs/results/clients.md).
set -euo pipefail
# shellcheck source=ci/clients/common.sh
source "$(dirname "$0")/clients/common.sh"
rounds=${1:-5}
have_client tealeaf || exit 0
for b in mpi sode; do
  [ -x "$work/tealeaf-$b/tea_leaf" ] || { echo "tealeaf-time: run ci/tealeaf.sh first" >&2; exit 1; }
done
deck=$work/time.in
tealeaf_deck "$deck" tea_bm_3 end_step=10 tl_max_iters=10000 tl_use_cg "tl_eps 1.0e-15" profiler_on

run() { # build, ranks: "halo total" seconds from TeaLeaf's profile
  local dir=$work/tealeaf-$1
  cp "$deck" "$dir/tea.in"
  (cd "$dir" && timeout 600 "${mpirun[@]}" -n "$2" ./tea_leaf > /dev/null 2>&1)
  awk -F: '/^MPI Halo Exchange/ { split($2, h, " ") } /^Total / { split($2, t, " ") } END { print h[1], t[1] }' "$dir/tea.out"
}
stats() { # values...: "median min"
  printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.4f %.4f\n", m, v[1] }'
}

echo "| ranks | MPI halo median | MPI halo min | sode halo median | sode halo min | MPI / sode (halo) | MPI total median | sode total median |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
for n in 2 4; do
  mh=(); mt=(); sh=(); st=()
  for r in $(seq 1 "$rounds"); do
    if [ $((r % 2)) -eq 1 ]; then a=mpi; b=sode; else a=sode; b=mpi; fi
    for who in $a $b; do
      read -r h t < <(run "$who" "$n")
      if [ "$who" = mpi ]; then mh+=("$h"); mt+=("$t"); else sh+=("$h"); st+=("$t"); fi
    done
  done
  read -r mhm mhn < <(stats "${mh[@]}")
  read -r shm shn < <(stats "${sh[@]}")
  read -r mtm _ < <(stats "${mt[@]}")
  read -r stm _ < <(stats "${st[@]}")
  ratio=$(awk -v a="$mhm" -v b="$shm" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')
  echo "| $n | $mhm | $mhn | $shm | $shn | $ratio | $mtm | $stm |"
done
