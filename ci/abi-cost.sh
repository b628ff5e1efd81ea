#!/usr/bin/env bash
# The cost of the C layer: start + wait of an exchange with nothing to
# move (one rank, no neighbours, a field sode keeps) through sode.h
# (examples/c/abi_cost.c) and from Rust (capi/examples/abi_cost.rs),
# alternating, three runs each; prints a table with the medians' ratio. Needs the C examples built by ci/capi.sh.
#   bash ci/abi-cost.sh
set -euo pipefail
cd "$(dirname "$0")/.."
c_prog=${C_ABI_COST:-target/capi-examples/abi_cost}
[ -x "$c_prog" ] || { echo "abi-cost: $c_prog is missing: run ci/capi.sh first" >&2; exit 1; }
cargo build --release --locked --workspace --example abi_cost >/dev/null 2>&1
rust_prog=target/release/examples/abi_cost
c_runs=() rust_runs=()
for _ in 1 2 3; do
  c_runs+=("$("$c_prog" | sed 's/.*median \([0-9.]*\).*/\1/')")
  rust_runs+=("$("$rust_prog" | sed 's/.*median \([0-9.]*\).*/\1/')")
done
python3 - "${c_runs[*]}" "${rust_runs[*]}" <<'PY'
import statistics, sys
c = [float(x) for x in sys.argv[1].split()]
r = [float(x) for x in sys.argv[2].split()]
print("| start + wait, nothing to move | median of 3 runs, ns | min, ns |")
print("|---|---:|---:|")
print(f"| through the C ABI | {statistics.median(c):.1f} | {min(c):.1f} |")
print(f"| from Rust | {statistics.median(r):.1f} | {min(r):.1f} |")
print(f"| C / Rust | {statistics.median(c) / statistics.median(r):.2f} | |")
PY
