#!/usr/bin/env bash
# In the SoftRoCE guest: examples/c/coupled (two components on MPI
# sub-communicators, two exchanges each, and a ring over the whole job:
# three sode communicators, a rank's three exchanges in flight together,
# started and waited for in another order on alternate ranks) as 4 ranks
# under mpirun, every sode neighbour over RDMA (rxe0) with faces read and
# written in place; every halo cell its owner's. A writer posts its faces
# once the receiver's credit has come, so this needs a rank waiting for
# one exchange to progress its others (halo/tests/progress.rs on the host).
#   bash ci/softroce/run.sh bash ci/softroce/coupled-rdma.sh     (from the host)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
coupled=${COUPLED:-$root/target/capi-examples/coupled}
[ -x "$coupled" ] || { echo "coupled-rdma: $coupled is missing: run ci/capi.sh first" >&2; exit 1; }
mpirun=(mpirun --oversubscribe --mca btl self,vader)
[ "$(id -u)" -eq 0 ] && mpirun+=(--allow-run-as-root)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
timeout 180 "${mpirun[@]}" -n 4 -x SODE_TRANSPORT=rdma -x SODE_ZERO_COPY=always "$coupled" > "$log" 2>&1 || {
  cat "$log"; echo "coupled-rdma: the job failed" >&2; exit 1; }
cat "$log"
grep -q "^ok coupled: .* 0 halo cells wrong" "$log" || { echo "coupled-rdma: halo cells wrong" >&2; exit 1; }
echo "coupled-rdma: three sode communicators over RDMA, faces in place, a rank's three exchanges in flight together: every halo cell its owner's"
