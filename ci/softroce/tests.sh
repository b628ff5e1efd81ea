#!/usr/bin/env bash
# In the SoftRoCE guest: runs the given test executables (built on the host)
# against rxe0, and the RDMA criterion bench once in test mode. SODE_REQUIRE_RDMA makes a missing device a failure rather
# than a skip.
set -euo pipefail
export SODE_REQUIRE_RDMA=1
status=0
# Each executable time-boxed, so that a hang is named here rather than
# ending the whole guest at its timeout.
limit=${SODE_GUEST_TEST_TIMEOUT:-600}
run() {
  local rc=0
  timeout -k 10 "$limit" "$@" || rc=$?
  [ "$rc" = 124 ] && echo "tests: $(basename "$1") did not finish in $limit s" >&2
  return "$rc"
}
for exe in "$@"; do
  echo "== $(basename "$exe") (on rxe0)"
  case "$(basename "$exe")" in
    # A criterion bench: each benchmark once (its table: ci/softroce/rdma-bench.sh).
    rdma_writes-*) run "$exe" --bench --test || status=1 ;;
    # Only the RDMA wait: the shared-memory and TCP waits are timed on the
    # host, where a sleeping CPU's wake-up is not emulated.
    blocking-*) run "$exe" --test-threads=1 rdma || status=1 ;;
    # Only the RDMA cases: the others force shared memory or TCP and run on
    # the host already (emulated, they were only slower: the halo checks
    # alone took 140 s), the dead forwarder among them.
    halo-* | alltoall-* | bounded-* | pattern-* | progress-* | tiles-* | gave_up-* | died_in_setup-*) run "$exe" --test-threads=1 rdma || status=1 ;;
    # The library's unit tests: the channel conformance suite, RDMA among
    # the channels it runs against here.
    sode-*) run "$exe" --test-threads=1 conformance || status=1 ;;
    *) run "$exe" --test-threads=1 || status=1 ;;
  esac
done
exit $status
