# Sourced by the scripts of one job across the two VMs of
# ci/softroce/cluster.sh (two-nodes.sh, reorder.sh, two-nodes-mpi.sh,
# node-death.sh). Each defines `job DIR`, which writes its job into DIR for
# `cluster.sh --jobs`, and `check LOG`, which judges the job's output, and
# ends with `cluster_job_main "$@"`:
#   SCRIPT               boots the two VMs for this job alone and judges it
#   SCRIPT --job DIR     writes the job into DIR, to run with others on one
#                        boot (ci/softroce/two-nodes-all.sh)
#   SCRIPT --check LOG   judges the job's part of such a run's output
# Host variables for cluster.sh when alone go in the array cluster_env.
cluster_env=()
cluster_job_main() {
  case ${1:-} in
    --job) job "${2:?--job needs a directory}"; return ;;
    # In a condition: a check's grep that finds nothing must not end it.
    --check) check "${2:?--check needs a log}" || return $?; return ;;
  esac
  local dir status=0
  dir=$(mktemp -d /tmp/sode-job.XXXXXX)
  job "$dir/job"
  env "${cluster_env[@]}" bash "$(dirname "${BASH_SOURCE[0]}")/cluster.sh" --jobs "$dir/job" 2>&1 \
    | tee "$dir/log" || true
  check "$dir/log" || status=$?
  rm -rf "$dir"
  return "$status"
}

# nodes_finished LOG WHO: whether both nodes' ranks of the job ended well;
# says so under WHO when not.
nodes_finished() {
  local node ok=0
  for node in a b; do
    if ! grep -q "^cluster: node $node finished with status 0$" "$1"; then
      echo "$2: the ranks on node $node did not all end well" >&2
      ok=1
    fi
  done
  return "$ok"
}
