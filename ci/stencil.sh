#!/usr/bin/env bash
# The stencil example (the README's main job) in several shapes; each run
# checks every cell against a single-process solve, bit for bit, and fails
# otherwise. TRANSPORT=rdma runs it over RDMA (in the SoftRoCE guest).
#   bash ci/stencil.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
stencil=${STENCIL:-$root/target/release/examples/stencil}
t=${TRANSPORT:-auto}
run() { echo "== stencil $*"; "$stencil" --transport "$t" "$@"; }
run -n 4 --dims 2 --size 130 --neighbours 4 --iters 30
run -n 4 --dims 2 --size 97 --neighbours 8 --periodic --iters 30
run -n 2 --dims 3 --size 21 --neighbours 6 --iters 10
run -n 4 --dims 3 --size 19 --neighbours 26 --periodic --iters 10
run -n 4 --dims 3 --size 20 --neighbours 18 --iters 10
# The fields in sode's shared memory: large faces read from the owner's
# array, the others packed by sode.
run -n 2 --dims 3 --size 48 --grid 1,1,2 --neighbours 26 --periodic --shared-fields --iters 10
run -n 4 --dims 2 --size 97 --neighbours 8 --periodic --shared-fields --iters 30
