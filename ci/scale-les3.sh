#!/usr/bin/env bash
# SCALE-LES3 (the RSched paper's benchmark) over sode beside an MPI
# persistent exchange of the same puts: ROUNDS rounds, each running both
# (alternating which goes first), merged into one markdown table of the
# rounds' medians, the minimum, and MPI's median over each sode row's.
#
#   bash ci/scale-les3.sh                      # RDMA over rxe0 (boots the SoftRoCE VM)
#   TRANSPORT=shm bash ci/scale-les3.sh        # shared memory, here
#
# Settings: ROWS (k values, default all of Table 1), SETS, ALGS (sode's
# scheduling algorithms), ITERS (exchanges per point and round), ROUNDS
# (default 3), GRID (default 2,2), MODEL (what the algorithms plan for and
# the simulator predicts with: calibrated, measured on the device at
# start-up, or k, the K computer).
# MPI is Debian's Open MPI; over RDMA through UCX's rc transport on rxe0
# (UCX_TLS=rc,self, so it too goes through the device), over shared memory
# with its default (vader). The example and the MPI program are built here
# first (unless NO_BUILD=1); over RDMA on a machine without an RDMA device
# the script then runs itself again in the SoftRoCE VM, with the same
# settings, since emulated code builds 10-50x slower.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
transport=${TRANSPORT:-rdma}
rows=${ROWS:-60,70,80,109,218,327,436,545,654,763,872}
sets=${SETS:-ew,ns,ewns,diag,all8}
algs=${ALGS:-round-robin:1,round-robin:2,round-robin:4,bl:1,bl:2,bl:4,auto}
iters=${ITERS:-200}
rounds=${ROUNDS:-3}
grid=${GRID:-2,2}
model=${MODEL:-calibrated}
px=${grid%,*}; py=${grid#*,}
n=$((px * py))
if [ "${NO_BUILD:-0}" != 1 ]; then
  cargo build --release --locked --workspace --example scale_les3 >&2
  mkdir -p "$root/target/mpi"
  mpicc -O2 -o "$root/target/mpi/scale_les3_mpi" "$root/ci/mpi/scale_les3_mpi.c"
fi
if [ "$transport" = rdma ] && [ -z "$(ls -A /sys/class/infiniband 2>/dev/null)" ]; then
  exec bash "$root/ci/softroce/run.sh" env NO_BUILD=1 TRANSPORT=rdma ROWS="$rows" SETS="$sets" \
    ALGS="$algs" ITERS="$iters" ROUNDS="$rounds" GRID="$grid" MODEL="$model" bash "$root/ci/scale-les3.sh"
fi
mkdir -p "$root/target/vm-out"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
sode() { # round
  "$root/target/release/examples/scale_les3" -n "$n" --grid "$grid" --transport "$transport" \
    --rows "$rows" --sets "$sets" --model "$model" --algorithms "$algs" --iters "$iters" \
    --csv "$root/target/vm-out/scale_les3-$transport-round$1.csv" \
    | sed 's/^\[0\] //' | tee "$out/sode-$1" >&2
}
mpi=(mpirun --allow-run-as-root --oversubscribe -np "$n")
if [ "$transport" = rdma ]; then
  mpi+=(--mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any
        -x UCX_TLS=rc,self -x UCX_NET_DEVICES=rxe0:1 -x UCX_UD_VERBS_ETH_DGID_CHECK=n)
fi
mpi() { # round
  "${mpi[@]}" "$root/target/mpi/scale_les3_mpi" "$px" "$py" "$iters" "$rows" "$sets" | tee "$out/mpi-$1" >&2
}
for r in $(seq 1 "$rounds"); do
  echo "== round $r of $rounds" >&2
  if [ $((r % 2)) = 1 ]; then sode "$r"; mpi "$r"; else mpi "$r"; sode "$r"; fi
done
echo
echo "SCALE-LES3, $px x $py periodic grid, over $transport, pseudo-collective; us per exchange on rank 0,"
echo "$rounds rounds of $iters exchanges a point, sode and MPI alternating which goes first"
grep -h '^model' "$out"/sode-* | sed 's/^/round: /' || true
echo
python3 "$root/ci/scale-les3-merge.py" "$out" "$model"
