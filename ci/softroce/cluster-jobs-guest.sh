#!/usr/bin/env bash
# On each node of ci/softroce/cluster.sh: brings up the wire and rxe0 over
# it, waits for the other node, then runs the run's jobs in turn (the
# directories listed in $SODE_VM_OUT/jobs), each through its guest
# (cluster-guest.sh unless the job's env names another) with the job's own
# directory, job id and port. Each guest waits for the other node's guest
# of the same job before its ranks start, so a job starts once both nodes
# have ended the one before.
set -uo pipefail
out=${SODE_VM_OUT:?}
node=${SODE_NODE:?}
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=ci/softroce/cluster-net.sh
. "$here/cluster-net.sh"
bring_up_node
root_ip=${SODE_CLUSTER_ROOT%:*}
root_port=${SODE_CLUSTER_ROOT##*:}
i=0
# The list on its own descriptor: a guest (mpirun) may read its stdin.
while read -r dir <&3; do
  (
    SODE_CLUSTER_GUEST=$here/cluster-guest.sh
    # Exported for the guest (cluster-guest.sh has the ranks' defaults).
    set -a
    # shellcheck disable=SC1091
    [ -f "$dir/env" ] && . "$dir/env"
    set +a
    eval "set -- $(cat "$dir/command")"
    SODE_VM_OUT=$dir SODE_CLUSTER_JOB=${SODE_CLUSTER_JOB}-$i SODE_CLUSTER_ROOT=$root_ip:$((root_port + i)) \
      bash "$SODE_CLUSTER_GUEST" "$@"
  )
  i=$((i + 1))
done 3<"$out/jobs"
