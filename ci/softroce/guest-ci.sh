#!/usr/bin/env bash
# In the SoftRoCE guest, for CI: perftest's ib_write_bw as a smoke test of
# rxe0, the RDMA test executables given as arguments, the stencil example
# over RDMA, and a quick benchmark.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bash "$here/smoke.sh"
bash "$here/tests.sh" "$@"
echo "== the stencil example over RDMA (rxe0), checked bit for bit"
TRANSPORT=rdma bash "$here/../stencil.sh"
echo "== benchmark (quick; the README's table comes from the full run)"
QUICK=1 bash "$here/bench.sh"
