#!/usr/bin/env bash
# Checks that two builds of sode-sched plan alike: every SCALE-LES3 row and
# direction set on both machines, 2-D and 3-D halos, random patterns of
# 5-40 puts, each planned by ALGS (default: auto split greedy bl-overhead
# bl-share) with both binaries and compared byte for byte. For changes to
# the scheduler that must not change a plan (speed-ups).
#
#   bash ci/compare-plans.sh OLD/sode-sched NEW/sode-sched
set -euo pipefail
old=${1:?usage: compare-plans.sh OLD_SODE_SCHED NEW_SODE_SCHED}
new=${2:?usage: compare-plans.sh OLD_SODE_SCHED NEW_SODE_SCHED}
algs=${ALGS:-auto split greedy bl-overhead bl-share}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
patterns() {
  for k in 60 70 80 109 218 327 436 545 654 763 872; do
    for d in ew ns ewns diag all8; do
      echo "scale-les3 --k $k --directions $d"
      echo "scale-les3 --k $k --directions $d --machine tofud"
    done
  done
  for s in 4 8 16 32 64; do
    for nb in 4 8; do echo "halo2d --nx $s --ny $s --neighbours $nb"; done
    for nb in 6 18 26; do echo "halo3d --nx $s --ny $s --nz $s --halo 2 --neighbours $nb"; done
  done
  for n in 5 8 12 20 30 40; do
    for seed in 1 2 3 4 5 6 7 8; do echo "random --n $n --seed $seed"; done
  done
}
count=0 differ=0
while read -r line; do
  # shellcheck disable=SC2086 # the pattern's arguments split on purpose
  "$old" pattern $line > "$dir/p.json"
  for alg in $algs; do
    "$old" plan --algorithm "$alg" "$dir/p.json" > "$dir/old.json"
    "$new" plan --algorithm "$alg" "$dir/p.json" > "$dir/new.json"
    count=$((count + 1))
    if ! cmp -s "$dir/old.json" "$dir/new.json"; then
      differ=$((differ + 1))
      echo "differs: $alg on $line"
    fi
  done
done < <(patterns)
echo "$count plans compared, $differ differ"
[ "$differ" = 0 ]
