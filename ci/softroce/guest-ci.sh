#!/usr/bin/env bash
# In the SoftRoCE guest, for CI: perftest's ib_write_bw as a smoke test of
# rxe0, the RDMA test executables given as arguments, the stencil example
# over RDMA, the C stencil over RDMA with faces packed and in place, the C
# Runge-Kutta example over RDMA, the C ring's halos and statistics over
# RDMA, the C++ example over RDMA, the C coupled-components example over
# RDMA (three exchanges in flight, waited for in another order on
# alternate ranks), TCP setup through packet loss, SCALE-LES3 beside MPI,
# and a quick benchmark.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bash "$here/smoke.sh"
bash "$here/tests.sh" "$@"
echo "== [guest ${SECONDS}s] the stencil example over RDMA (rxe0), checked bit for bit"
TRANSPORT=rdma bash "$here/../stencil.sh"
echo "== [guest ${SECONDS}s] the C ABI over RDMA: faces packed, in place, mixed and by run length, bit for bit"
bash "$here/capi-rdma.sh"
echo "== [guest ${SECONDS}s] the C Runge-Kutta example over RDMA: three stage arrays through one exchange, faces in place and mixed, against MPI"
bash "$here/rk-rdma.sh"
echo "== [guest ${SECONDS}s] the C ring and line over RDMA on 2 ranks: every halo cell, and the statistics (one neighbour per rank, both directions together)"
timeout 600 mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -n 2 \
  -x SODE_TRANSPORT=rdma "$here/../../target/capi-examples/ring1d"
echo "== [guest ${SECONDS}s] the C++ example over RDMA on 2 ranks, faces in place: two fields of two types in swapped buffers, the second lent (no start staged)"
timeout 600 mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -n 2 \
  -x SODE_TRANSPORT=rdma -x SODE_ZERO_COPY=always "$here/../../target/capi-examples-cxx/heat2d"
echo "== [guest ${SECONDS}s] the C coupled components over RDMA: a rank's three exchanges in flight together, waited for in another order on alternate ranks"
bash "$here/coupled-rdma.sh"
echo "== [guest ${SECONDS}s] TCP setup through 10 % packet loss"
bash "$here/tcp-loss.sh" 6 10
echo "== [guest ${SECONDS}s] SCALE-LES3 over RDMA beside MPI persistent over UCX rc (quick)"
NO_BUILD=1 ROWS=60 SETS=ew,all8 ALGS=bl:4,auto ITERS=20 ROUNDS=1 bash "$here/../scale-les3.sh"
echo "== [guest ${SECONDS}s] benchmark (quick; the table in docs/results/rdma-rxe.md comes from the full run)"
QUICK=1 bash "$here/bench.sh"
