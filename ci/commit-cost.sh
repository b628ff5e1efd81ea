#!/usr/bin/env bash
# The commit benchmark: 12 exchanges committed one after another on 4 ranks
# of this machine (neighbours over shared memory); prints the table and
# fails unless the later commits' median (slowest rank) is under LIMIT_MS
# (default 50: only the first commit on a job measures the shared-memory
# thresholds). Runs the same by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
limit=${LIMIT_MS:-50}
cargo build --release --locked --workspace --example commit_cost
out=$(target/release/examples/commit_cost -n "${RANKS:-4}" --commits "${COMMITS:-12}" 2>&1) || { echo "$out"; exit 1; }
echo "$out"
median=$(echo "$out" | sed -n 's/.*later commits (slowest rank): median \([0-9.]*\) ms.*/\1/p')
[ -n "$median" ] || { echo "error: no later-commit median in the output" >&2; exit 1; }
awk -v m="$median" -v l="$limit" 'BEGIN { exit !(m < l) }' || {
  echo "error: later commits took a median of $median ms, the limit is $limit ms" >&2; exit 1; }
echo "later commits: median $median ms (limit $limit ms)"
