#!/usr/bin/env bash
# In the SoftRoCE guest: examples/c/rk2d (three Runge-Kutta stage arrays
# through one exchange committed on the first) as 4 ranks under mpirun,
# every sode neighbour over RDMA (rxe0), compared bit for bit with MPI's
# exchanges, with faces read and written in place (always: the starts on
# the other two stages go through the channel's buffers) and mixed (ranks
# 0 and 3 in place, 1 and 2 packed, so each side of a message is staged on
# its own). Packed faces (never; and auto, whose rows of at most 25
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
for mode in always mixed; do
  echo "== rk2d on 4 ranks over RDMA, SODE_ZERO_COPY=$mode"
  # Ranks 0 and 3 in place, 1 and 2 packed, when mixed.
  pick='case $OMPI_COMM_WORLD_RANK in 0|3) m=always ;; *) m=never ;; esac'
  [ "$mode" = mixed ] || pick="m=$mode"
  timeout 900 "${mpirun[@]}" -n 4 -x SODE_TRANSPORT=rdma \
    bash -c "$pick; SODE_ZERO_COPY=\$m exec \"\$0\" 4" "$rk" > "$log" 2>&1 || {
    cat "$log"; echo "rk-rdma: $mode: the job failed" >&2; exit 1; }
  cat "$log"
  grep -qE " 0 of [0-9]+ cells differ from MPI" "$log" || { echo "rk-rdma: $mode: cells differ from MPI" >&2; exit 1; }
done
echo "rk-rdma: three stage arrays through one exchange over RDMA, faces in place and mixed: equal to MPI, bit for bit"
