#!/usr/bin/env bash
# The shared-memory-only build: sode without its `rdma` feature needs
# neither libibverbs nor cmake or clang. Checks that no verbs crate is in
# its dependency graph, lints it, and runs the stencil from it (bit for bit
# against the single-process solve).
#   bash ci/shm-only.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
graph=$(cargo tree --locked -e normal -p sode-examples --no-default-features)
if grep -E 'sideway|rdma-mummy-sys|sode-transport|bindgen|cmake' <<<"$graph"; then
  echo "error: the shared-memory-only build depends on the verbs crates above" >&2
  exit 1
fi
cargo clippy --locked -p sode -p sode-examples --no-default-features --all-targets -- -D warnings
# The workspace's target directory: the crates whose features are the same
# are reused. Later workspace builds put their own stencil where this one
# lands, so run a copy.
cargo build --release --locked -p sode-examples --no-default-features --example stencil
mkdir -p target/shm-only
cp target/release/examples/stencil target/shm-only/stencil
STENCIL=$root/target/shm-only/stencil TRANSPORT=shm bash ci/stencil.sh
