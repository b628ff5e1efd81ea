#!/usr/bin/env bash
# SCALE-LES3 (the RSched paper's benchmark) over sode beside an MPI
# persistent exchange of the same puts, in one run, as one markdown table.
#
#   bash ci/softroce/run.sh bash ci/scale-les3.sh      # RDMA over rxe0 (in the VM)
#   TRANSPORT=shm bash ci/scale-les3.sh                # shared memory, here
#
# Settings: ROWS (k values, default all of Table 1), SETS, ALGS (sode's
# scheduling algorithms), ITERS (exchanges per point), GRID (default 2,2),
# MODEL (what the algorithms plan for and the simulator predicts with:
# calibrated, measured on the device at start-up, or k, the K computer).
# MPI is Debian's Open MPI; over RDMA through UCX's rc transport on rxe0
# (UCX_TLS=rc,self, so it too goes through the device), over shared memory
# with its default (vader). Build the example and the MPI program on the
# host first (this script does, unless NO_BUILD=1).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
transport=${TRANSPORT:-rdma}
rows=${ROWS:-60,70,80,109,218,327,436,545,654,763,872}
sets=${SETS:-ew,ns,ewns,diag,all8}
algs=${ALGS:-round-robin:1,round-robin:2,round-robin:4,bl:1,bl:2,bl:4,auto}
iters=${ITERS:-200}
grid=${GRID:-2,2}
model=${MODEL:-calibrated}
px=${grid%,*}; py=${grid#*,}
n=$((px * py))
if [ "${NO_BUILD:-0}" != 1 ]; then
  cargo build --release --locked --workspace --example scale_les3 >&2
  mkdir -p "$root/target/mpi"
  mpicc -O2 -o "$root/target/mpi/scale_les3_mpi" "$root/ci/mpi/scale_les3_mpi.c"
fi
mkdir -p "$root/target/vm-out"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$root/target/release/examples/scale_les3" -n "$n" --grid "$grid" --transport "$transport" \
  --rows "$rows" --sets "$sets" --model "$model" --algorithms "$algs" --iters "$iters" --csv "$root/target/vm-out/scale_les3-$transport.csv" \
  | sed 's/^\[0\] //' | tee "$out" >&2
mpi=(mpirun --allow-run-as-root --oversubscribe -np "$n")
if [ "$transport" = rdma ]; then
  mpi+=(--mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any
        -x UCX_TLS=rc,self -x UCX_NET_DEVICES=rxe0:1 -x UCX_UD_VERBS_ETH_DGID_CHECK=n)
fi
"${mpi[@]}" "$root/target/mpi/scale_les3_mpi" "$px" "$py" "$iters" "$rows" "$sets" | tee -a "$out" >&2
echo
echo "SCALE-LES3, $px x $py periodic grid, $iters exchanges per point, pseudo-collective, over $transport; us per exchange on rank 0"
grep '^model' "$out" || true
echo
echo "| k | set | algorithm | median us | min us | mean us | simulated us ($model model) |"
echo "|---:|---|---|---:|---:|---:|---:|"
# Per (k, set): sode's rows, then MPI's.
awk -F'|' '/^\| [0-9]/ { key = $2 "|" $3; rows[key] = rows[key] $0 "\n"; if (!(key in seen)) { seen[key] = 1; order[++n] = key } }
  END { for (i = 1; i <= n; i++) printf "%s", rows[order[i]] }' "$out"
