#!/usr/bin/env bash
# The README's test command: installs what the tests need, then checks
# formatting, lints with warnings as errors, and runs every test of the
# workspace (unit, integration, property and doc tests) and the benchmarks
# in test mode. Idempotent; runs the same by hand and in CI.
set -euo pipefail
cd "$(dirname "$0")/.."

bash ci/install-deps.sh

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== benchmarks, once each (criterion test mode)"
cargo bench -p sode-benches --bench planning --locked -- --test
cargo bench -p sode-benches --bench shm_paths --locked -- --test

echo "== SoftRoCE: ib_write_bw over rxe0 in a VM (Debian kernel, software emulation)"
bash ci/softroce/run.sh bash ci/softroce/smoke.sh

echo "== cargo test"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace --release --locked 2>&1 | tee "$log"
# One closing line for the whole run: the sum over every test binary.
awk '/^test result:/ { p += $4; f += $6 } END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
