#!/usr/bin/env bash
# In the SoftRoCE guest (or on any machine with an RDMA device): the
# zero-copy table, examples/c/zerocopy as 2 ranks over rxe0: faces packed,
# in place, and in place but started on another array (staged), same run,
# rotating which goes first.
#   bash ci/softroce/run.sh bash ci/softroce/zerocopy.sh [rounds [iterations]]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
exe=${ZEROCOPY:-$root/target/capi-examples/zerocopy}
[ -x "$exe" ] || { echo "zerocopy: $exe is missing: run ci/capi.sh first" >&2; exit 1; }
secret=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
port=$(python3 "$root/ci/free_port.py")
log=$(mktemp)
trap 'rm -f "$log"' EXIT
SODE_RANK=1 SODE_SIZE=2 SODE_ROOT=127.0.0.1:$port SODE_JOB_SECRET=$secret \
  timeout 1200 "$exe" "$@" > "$log" 2>&1 &
peer=$!
status=0
SODE_RANK=0 SODE_SIZE=2 SODE_ROOT=127.0.0.1:$port SODE_JOB_SECRET=$secret \
  timeout 1200 "$exe" "$@" || status=$?
wait "$peer" || status=1
cat "$log"
exit $status
