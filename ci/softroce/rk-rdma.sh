#!/usr/bin/env bash
# In the SoftRoCE guest: examples/c/rk2d (three Runge-Kutta stage arrays
# through one exchange committed on the first) as 4 ranks under mpirun,
# every sode neighbour over RDMA (rxe0), compared bit for bit with MPI's
# exchanges, with faces read and written in place (always) and mixed
# (ranks 0 and 3 in place, 1 and 2 packed), the two other stages' arrays
# lent (every start in place: none through sode's buffers) and not (the
# starts on those stages go through the channel's buffers, each side of a
# message staged on its own). Packed faces (never; and auto, whose rows of at most 25
# doubles are too short to go in place) are what ci/capi.sh runs already.
#   bash ci/softroce/run.sh bash ci/softroce/rk-rdma.sh     (from the host)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
rk=${RK2D:-$root/target/capi-examples/rk2d}
[ -x "$rk" ] || { echo "rk-rdma: $rk is missing: run ci/capi.sh first" >&2; exit 1; }
mpirun=(mpirun --oversubscribe --mca btl self,vader)
[ "$(id -u)" -eq 0 ] && mpirun+=(--allow-run-as-root)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for lend in 1 0; do
  for mode in always mixed; do
    echo "== rk2d on 4 ranks over RDMA, SODE_ZERO_COPY=$mode, stage arrays lent: $lend"
    # Ranks 0 and 3 in place, 1 and 2 packed, when mixed.
    pick='case $OMPI_COMM_WORLD_RANK in 0|3) m=always ;; *) m=never ;; esac'
    [ "$mode" = mixed ] || pick="m=$mode"
    timeout 900 "${mpirun[@]}" -n 4 -x SODE_TRANSPORT=rdma \
      bash -c "$pick; SODE_ZERO_COPY=\$m exec \"\$0\" 4 $lend" "$rk" > "$log" 2>&1 || {
      cat "$log"; echo "rk-rdma: $mode, lent $lend: the job failed" >&2; exit 1; }
    cat "$log"
    grep -qE " 0 of [0-9]+ cells differ from MPI" "$log" || { echo "rk-rdma: $mode, lent $lend: cells differ from MPI" >&2; exit 1; }
    # Lent stages travel in place; without lending, their starts are staged.
    if [ "$lend" = 1 ]; then
      grep -q "; 0 starts through sode's buffers" "$log" || { echo "rk-rdma: $mode: starts on lent stage arrays went through sode's buffers" >&2; exit 1; }
    else
      grep -qE "; [1-9][0-9]* starts through sode's buffers" "$log" || { echo "rk-rdma: $mode: no start was staged, though the stage arrays were not lent" >&2; exit 1; }
    fi
  done
done
echo "rk-rdma: three stage arrays through one exchange over RDMA, faces in place and mixed, stages lent or not: equal to MPI, bit for bit; lent stages never staged"
