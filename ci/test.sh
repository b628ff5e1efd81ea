#!/usr/bin/env bash
# The README's test command: installs what the tests need, then checks
# formatting, lints with warnings as errors, and runs every test of the
# workspace (unit, integration, property and doc tests) and the benchmarks
# in test mode. Idempotent; runs the same by hand and in CI.
set -euo pipefail
cd "$(dirname "$0")/.."

bash ci/install-deps.sh

# A fresh run builds about 5 GiB under target/ (test executables of three
# profiles, the C prefixes, the clients). Say so up front rather than fail
# half-way with "No space left on device". Incremental caches only cost disk
# on a clone that builds once.
if [ "${CI:-}" = "true" ]; then export CARGO_INCREMENTAL=0; fi
mkdir -p target
free_kib=$(df -Pk target | awk 'NR == 2 { print $4 }')
echo "disk: $((free_kib / 1024 / 1024)) GiB free where target/ is built"
if [ "$free_kib" -lt $((7 * 1024 * 1024)) ]; then
  echo "warning: under 7 GiB free where target/ is built; a full run builds about 5 GiB. Free space (cargo clean in other clones) if the build fails with 'No space left on device'." >&2
fi

echo "== [${SECONDS}s] the documentation: a README of at most 300 lines, no narration, links that resolve"
bash ci/docs.sh

echo "== [${SECONDS}s] no import circles in job, halo and capi"
python3 ci/module-cycles.py job/src halo/src capi/src
echo "== [${SECONDS}s] cargo fmt --check"
cargo fmt --all -- --check
echo "== [${SECONDS}s] cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== [${SECONDS}s] cargo doc (broken intra-doc links are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked

# Every later step builds as `cargo test --workspace --release` does (the
# workspace's features: `--workspace`, never `-p`), so the crates are built
# once here and reused by `cargo test`, the examples and the guests' test
# executables.
echo "== [${SECONDS}s] the workspace's tests, examples and benchmarks, built once"
cargo test --workspace --release --locked --no-run
cargo bench --workspace --locked --no-run
# Built here, run in the VMs (emulated code is 10-50x slower), and taken
# now, while they are the workspace build's: a later step's build may
# rebuild their crates.
# The test executables that need RDMA: the transport's, the halo exchange's,
# the allocation count's, the two-slot windows', the shortened writes', the
# blocking waits', the all-to-all's and the bounded connections', two
# exchanges waited for in opposite orders (progress), several domains a
# rank (tiles), a peer that gave up its setup (gave_up) or died in it
# (died_in_setup), the
# channel conformance suite (the library's unit tests), the field and
# pattern model's stage arrays, staggered fields and subsets, the C ABI's
# starts on other arrays with faces in place; and the RDMA criterion
# bench, run once.
test_exe() { bash ci/built-exe.sh test "$1" "$2"; }  # package, test target
rdma_tests=$(test_exe sode rdma)
halo_tests=$(test_exe sode halo)
alloc_tests=$(test_exe sode alloc)
slots_tests=$(test_exe sode rdma_slots)
carry_tests=$(test_exe sode rdma_carry)
blocking_tests=$(test_exe sode blocking)
alltoall_tests=$(test_exe sode alltoall)
bounded_tests=$(test_exe sode bounded)
conformance_tests=$(bash ci/built-exe.sh lib sode sode)
pattern_tests=$(test_exe sode pattern)
progress_tests=$(test_exe sode progress)
tiles_tests=$(test_exe sode tiles)
gave_up_tests=$(test_exe sode gave_up)
died_tests=$(test_exe sode died_in_setup)
arrays_tests=$(test_exe sode-capi rdma_arrays)
rdma_bench=$(bash ci/built-exe.sh bench sode-benches rdma_writes)
# The shared-memory processes (a guest with two NUMA nodes) and job health
# (the VMs of several nodes).
processes_tests=$(test_exe sode-shm processes)
health_tests=$(test_exe sode health)
[ -n "$rdma_tests" ] && [ -n "$halo_tests" ] && [ -n "$alloc_tests" ] && [ -n "$slots_tests" ] && [ -n "$carry_tests" ] && [ -n "$blocking_tests" ] && [ -n "$alltoall_tests" ] && [ -n "$bounded_tests" ] && [ -n "$conformance_tests" ] && [ -n "$pattern_tests" ] && [ -n "$progress_tests" ] && [ -n "$tiles_tests" ] && [ -n "$gave_up_tests" ] && [ -n "$died_tests" ] && [ -n "$arrays_tests" ] && [ -n "$rdma_bench" ] && [ -n "$processes_tests" ] && [ -n "$health_tests" ] || { echo "error: the test executables for the VMs were not built" >&2; exit 1; }

# Every test binary's "test result" lines, here and in the guests, for the
# closing count.
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# Right after the build, whose executables it runs: a later step's build
# (another feature set, a script's own cargo call) could make them stale
# and cost a rebuild here.
echo "== [${SECONDS}s] cargo test"
cargo test --workspace --release --locked 2>&1 | tee -a "$log"

echo "== [${SECONDS}s] the shared-memory-only build (no libibverbs, cmake or clang), and the stencil from it"
bash ci/shm-only.sh

echo "== [${SECONDS}s] benchmarks, once each (criterion test mode)"
cargo bench --workspace --bench planning --locked -- --test
cargo bench --workspace --bench shm_paths --locked -- --test

echo "== [${SECONDS}s] the stencil example (the main job) over shared memory, checked bit for bit"
cargo build --release --locked --workspace --example stencil
bash ci/stencil.sh

echo "== [${SECONDS}s] the Runge-Kutta example: u and two stage arrays through one exchange, checked bit for bit"
cargo build --release --locked --workspace --example rk
for n in 3 4; do target/release/examples/rk -n "$n"; done

echo "== [${SECONDS}s] the staggered example: a cell and a node field on the code's own arrays (FieldExchange), shared nodes never sent, checked cell by cell"
cargo build --release --locked --workspace --example staggered
for n in 1 2 3 4; do target/release/examples/staggered -n "$n"; done

echo "== [${SECONDS}s] the commit benchmark: later commits on a job reuse its measurements (median under 50 ms)"
bash ci/commit-cost.sh

echo "== [${SECONDS}s] SCALE-LES3 over shared memory beside MPI persistent (quick; builds the example and the MPI program)"
bash ci/softroce/install.sh >/dev/null   # Open MPI, and what the VM needs
TRANSPORT=shm ROWS=60,872 SETS=ew,all8 ITERS=50 ROUNDS=2 bash ci/scale-les3.sh

echo "== [${SECONDS}s] the C ABI: installed, C examples built against it, run under mpirun and compared with MPI"
bash ci/capi.sh

echo "== [${SECONDS}s] floating-point traps: the Fortran examples built with -ffpe-trap=invalid,zero,overflow, the C examples with the same traps enabled, over shared memory and TCP"
bash ci/fpe-traps.sh

echo "== [${SECONDS}s] real clients: TeaLeaf and miniGhost, ported to sode, against their MPI originals on 1, 2 and 4 ranks"
bash ci/tealeaf.sh
bash ci/minighost.sh

echo "== [${SECONDS}s] start-up: a job that commits one exchange against one that only starts MPI; later jobs read the thresholds the first kept (commit median under 50 ms)"
bash ci/startup.sh 3

echo "== [${SECONDS}s] MPICH beside Open MPI: sode built with it, the C and Fortran examples with -Werror under its mpirun"
bash ci/mpich.sh

echo "== [${SECONDS}s] the comparison benchmark, one quick round of its three shapes: sode (on the program's arrays and on fields it keeps), MPI persistent and the MPI-4 neighbourhood collective, each one's halo checked"
bash ci/compare.sh 1 20 64
echo "== [${SECONDS}s] the A/B of two library builds under bench2d, one quick round (this build against itself: the script's own check)"
OLD_LIB=target/capi-prefix/lib ROUNDS=1 ARGS="1 20 64" bash ci/ab-bench2d.sh

echo "== [${SECONDS}s] cross-memory attach against two copies, one round (each message's last byte checked against what was sent; times not judged)"
ROUNDS=1 bash ci/shm/cma-cost.sh

echo "== [${SECONDS}s] PMIx: the Rust stencil under plain mpirun, no SODE_ROOT"
bash ci/pmix.sh

echo "== [${SECONDS}s] Slurm on one node: srun --mpi=pmix and --mpi=pmi2 with the C, Fortran and Rust examples"
bash ci/slurm.sh

echo "== [${SECONDS}s] SoftRoCE VM: ib_write_bw, the RDMA tests and a quick benchmark on rxe0"
bash ci/softroce/run.sh bash ci/softroce/guest-ci.sh "$rdma_tests" "$halo_tests" "$alloc_tests" "$slots_tests" "$carry_tests" "$blocking_tests" "$alltoall_tests" "$bounded_tests" "$conformance_tests" "$pattern_tests" "$progress_tests" "$tiles_tests" "$gave_up_tests" "$died_tests" "$arrays_tests" "$rdma_bench" 2>&1 | tee -a "$log"

echo "== [${SECONDS}s] a guest with two NUMA nodes: sode-shm measures its thresholds towards a peer from the peer's node"
bash ci/softroce/numa.sh "$processes_tests" 2>&1 | tee -a "$log"

echo "== [${SECONDS}s] two nodes, one boot of two VMs joined by a wire: the stencil (shared memory inside a node, RDMA between); a scrambled 8-rank job moving fewer bytes between them with --reorder; the Fortran example under mpirun against MPI (UCX over rxe), bit for bit; then node b vanishes mid-run and node a's ranks report its silent rank (job health)"
ROUNDS=1 ITERS=50 bash ci/softroce/two-nodes-all.sh "$health_tests"

echo "== [${SECONDS}s] three nodes on two networks: a-c traffic forwarded by node b's gateway; a rank killed and the gateway stopped (job health across the networks)"
bash ci/softroce/three-nodes.sh "$health_tests"

# One closing line for the whole run: the sum over every test binary, the
# guest's included.
awk '/^test result:/ { p += $4; f += $6 } END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
echo "== [${SECONDS}s] done (each line above gives its section's start, in seconds since this script started)"
