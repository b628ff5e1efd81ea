#!/usr/bin/env bash
# A one-node Slurm cluster on localhost (munged, slurmctld, slurmd, all in
# a scratch directory, started here and stopped by PID at exit), and the
# examples started by srun:
#   srun --mpi=pmix   the C and Fortran examples (Open MPI) and the Rust
#                     stencil, every halo cell checked;
#   srun --mpi=pmi2   the C and Fortran examples (MPICH) and the Rust
#                     stencil (sode's PMI-1 wire bootstrap);
#   sbatch            Open MPI's and MPICH's mpirun at once in a batch
#                     script, the Rust stencil bit for bit;
#   scontrol suspend  the Rust stencil stopped for longer than its
#                     deadlines resumes, bit for bit: in its time loop, and
#                     while a rank waits in the launcher's collective;
#   scancel           a C program cancelled while it exchanges leaves
#                     nothing in the shared-memory directory;
#   srun --mpi=none   the Rust stencil fails by name.
# Needs root (slurmd starts the tasks), Debian's slurm-wlm and munge
# (installed here), the examples built by ci/capi.sh and ci/mpich.sh, and
# the Rust stencil.
#   bash ci/slurm.sh                 the checks above
#   bash ci/slurm.sh srun -n 2 ...   a command of one's own on the cluster
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ "$(id -u)" -ne 0 ]; then
  # CI runs as root; by hand without root, say so and skip.
  echo "slurm: needs root (slurmd starts the tasks as their user): skipped" >&2
  [ -z "${CI:-}" ] || exit 1
  exit 0
fi
apt_packages=(slurm-wlm munge slurm-wlm-basic-plugins)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "installing Debian packages: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

dir=$(mktemp -d /tmp/sode-slurm.XXXXXX)
pids=()
stop() {
  # The jobs first, while slurmd can still end their steps: a step whose
  # slurmd is gone leaves its tasks running.
  if [ "${#pids[@]}" -gt 2 ]; then
    scancel --full --user="$(id -un)" 2>/dev/null || true
    for _ in $(seq 50); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.2; done
  fi
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
  rm -rf "$dir"
}
trap stop EXIT
free_port() { python3 "$root/ci/free_port.py"; }

host=$(hostname -s)
mkdir -p "$dir/state" "$dir/spool" "$dir/munge" "$dir/tmp"
chmod 700 "$dir/munge"
dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$dir/munge/munge.key"
munged --force --socket="$dir/munge/socket" --key-file="$dir/munge/munge.key" \
  --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/seed"
for _ in $(seq 50); do [ -s "$dir/munge/munged.pid" ] && break; sleep 0.1; done
pids+=("$(cat "$dir/munge/munged.pid")")

# Four CPUs declared on a smaller machine (config_overrides), so 4-rank
# jobs fit; the partition oversubscribes.
export SLURM_CONF=$dir/slurm.conf
cat > "$SLURM_CONF" <<CONF
ClusterName=sode
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/socket
CredType=cred/munge
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
StateSaveLocation=$dir/state
TmpFS=$dir/tmp
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=$host CPUs=4 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
CONF
# The PMIx plugin's client directories, in the scratch directory too.
echo "PMIxCliTmpDirBase=$dir/tmp" > "$dir/mpi.conf"
# Disowned: stopped by PID at exit, without the shell's job reports.
slurmctld -D -i > "$dir/slurmctld.out" 2>&1 &
pids+=($!)
disown $!
slurmd -D > "$dir/slurmd.out" 2>&1 &
pids+=($!)
disown $!
ready=no
for _ in $(seq 100); do
  if sinfo -h -o %T 2>/dev/null | grep -qx "idle"; then ready=yes; break; fi
  sleep 0.2
done
if [ "$ready" != yes ]; then
  tail -20 "$dir"/slurmctld.log "$dir"/slurmd.log "$dir"/*.out 2>/dev/null
  echo "slurm: the node did not come up" >&2
  exit 1
fi
echo "slurm: one node up ($(sinfo -h -o '%N %c CPUs %T'))"
if [ $# -gt 0 ]; then  # a command of one's own on the cluster
  "$@"
  exit
fi

# MPI programs run 2 ranks a job here: srun tells MPI each rank has a CPU
# of its own, so MPI polls without yielding, and 4 polling ranks on this
# machine's 2 cores crawl (sode's own waits back off; the Rust stencil
# runs 4).
c=$root/target/capi-examples
f=$root/target/capi-examples-fortran
c_mpich=$root/target/capi-examples-mpich
f_mpich=$root/target/capi-examples-fortran-mpich
stencil=$root/target/release/examples/stencil
for p in "$c/stencil2d" "$f/stencil3d" "$c_mpich/stencil2d" "$f_mpich/stencil3d" "$stencil"; do
  [ -x "$p" ] || { echo "slurm: $p is missing: run ci/capi.sh, ci/mpich.sh and build the stencil example first" >&2; exit 1; }
done
checked() { # what to count, how many, srun arguments...
  local want=$1 count=$2 out
  shift 2
  echo "-- srun $*"
  out=$(timeout 300 srun "$@" 2>&1) || { echo "$out" | tail -20; echo "slurm: srun $* failed" >&2; exit 1; }
  if [ "$(grep -c "$want" <<<"$out")" -ne "$count" ]; then
    echo "$out" | tail -20
    echo "slurm: srun $*: $(grep -c "$want" <<<"$out") lines with '$want', not $count" >&2
    exit 1
  fi
  grep -m1 "$want" <<<"$out"
}
# stencil2d: 24 configurations a job (12 on the program's arrays, 12 on
# fields sode keeps); stencil3d: 24 likewise.
checked "bit for bit" 24 --mpi=pmix -n 2 "$c/stencil2d"
checked "bit for bit" 24 --mpi=pmix -n 2 "$f/stencil3d"
checked "bit for bit" 4 --mpi=pmix -n 4 "$stencil"
checked "bit for bit" 24 --mpi=pmi2 -n 2 "$c_mpich/stencil2d"
checked "bit for bit" 24 --mpi=pmi2 -n 2 "$f_mpich/stencil3d"
checked "bit for bit" 4 --mpi=pmi2 -n 4 "$stencil"
# Communicators from the environment beside MPI (three in turn, then
# MPI_Finalize): through Slurm's PMIx server. Under --mpi=pmi2, where
# MPICH's own client took the launcher's socket with PMI-2, each rank's
# creation fails at once, saying what to do, and MPI still finalizes.
checked "^ok three communicators" 1 --mpi=pmix -n 2 "$c/errors" beside
echo "-- srun --mpi=pmi2 -n 2 $c_mpich/errors beside"
t0=$(date +%s)
if out=$(timeout 120 srun --mpi=pmi2 -n 2 "$c_mpich/errors" beside 2>&1); then
  echo "$out" | tail -5; echo "slurm: communicators from the environment beside MPICH under pmi2 cannot meet" >&2; exit 1
fi
took=$(( $(date +%s) - t0 ))
if [ "$(grep -c "communicator 0 from the environment: .*create the communicator from MPI (sode_comm_create_mpi" <<<"$out")" -ne 2 ] \
   || [ "$took" -gt 20 ] || grep -q "Broken pipe" <<<"$out"; then
  echo "$out" | tail -8; echo "slurm: beside MPICH under pmi2: not a prompt, named refusal on both ranks (${took} s)" >&2; exit 1
fi
echo "ok: both ranks refused in ${took} s, saying what to do"

# mpirun in a batch script, the usual way to run MPI under Slurm: its
# ranks inherit the script's SLURM_PROCID=0 beside their launcher's own
# rank. Open MPI's and MPICH's at once (one script often runs several
# jobs), each bit for bit; the script's own process is told it is none.
echo "-- sbatch: mpirun (Open MPI) and mpirun.mpich at once in a batch script"
mpirun_openmpi="mpirun --oversubscribe"
[ "$(id -u)" -eq 0 ] && mpirun_openmpi+=" --allow-run-as-root"
cat > "$dir/batch.sh" <<SH
#!/bin/bash
cd "$dir"
$mpirun_openmpi -n 2 "$stencil" --size 64 --iters 200 > batch-openmpi.out 2>&1 &
mpirun.mpich -n 2 "$stencil" --size 64 --iters 200 > batch-mpich.out 2>&1 &
wait
"$stencil" --size 64 --iters 2 > batch-itself.out 2>&1 || true
SH
timeout 300 sbatch --wait -n 2 -o "$dir/batch.out" "$dir/batch.sh" > /dev/null
for mpi in openmpi mpich; do
  if [ "$(grep -c "bit for bit" "$dir/batch-$mpi.out")" -ne 2 ]; then
    tail -n 20 "$dir/batch-$mpi.out" "$dir/batch.out"
    echo "slurm: mpirun ($mpi) in a batch script did not finish bit for bit on both ranks" >&2
    exit 1
  fi
done
grep -q "batch script's own process" "$dir/batch-itself.out" \
  || { cat "$dir/batch-itself.out"; echo "slurm: the batch script's own process was not told" >&2; exit 1; }
echo "ok: both mpiruns bit for bit; $(grep -o "SLURM_PROCID=0 of 2 is.\{0,40\}" "$dir/batch-itself.out")..."

# Preemption by suspension and gang scheduling stop every task of a job
# (SIGSTOP) for as long as they like. Time in which a rank did not run is
# not counted against it or its peers: a job suspended for 8 s with
# deadlines of 3 or 4 s must finish bit for bit.
suspended() { # name, ranks that print "bit for bit", seconds before the suspension, srun arguments...
  local name=$1 want=$2 after=$3 job= pid
  shift 3
  echo "-- scontrol suspend ($name): srun $*"
  timeout 300 srun --job-name="sode-$name" "$@" > "$dir/$name.out" 2>&1 &
  pid=$!
  for _ in $(seq 300); do
    job=$(squeue -h -n "sode-$name" -t R -o %i)
    [ -n "$job" ] && break
    sleep 0.1
  done
  [ -n "$job" ] || { echo "slurm: the job to suspend ($name) did not start" >&2; exit 1; }
  sleep "$after"
  scontrol suspend "$job"
  sleep 8
  scontrol resume "$job"
  if ! wait "$pid" || [ "$(grep -c "bit for bit" "$dir/$name.out")" -ne "$want" ]; then
    tail -20 "$dir/$name.out"
    echo "slurm: the job suspended for 8 s ($name) did not finish bit for bit on every rank" >&2
    exit 1
  fi
  echo "ok: suspended for 8 s ($name), every rank bit for bit"
}
# In its time loop (about 1 to 1.5 ms an iteration): the waits may take
# 3 s, and silence is fatal after 3 s.
suspended time-loop 4 4 --mpi=pmix -n 4 --export=ALL,SODE_HEALTH_TIMEOUT=3 \
  "$stencil" --size 512 --iters 12000 --timeout 3
# In the launcher's collective: rank 1 stops itself before it starts, so
# that rank 0 waits for it in a PMIx fence (a PMI-1 barrier), given up
# after 4 s; the job is suspended 1 s after it runs. The launcher's clock
# runs on while the job is suspended: a collective timed there fails.
late_rank1='if [ "$SLURM_PROCID" = 1 ]; then kill -STOP $$; fi; exec "$0" "$@"'
for mpi in pmix pmi2; do
  suspended "$mpi-collective" 2 1 --mpi="$mpi" -n 2 \
    bash -c "$late_rank1" "$stencil" --size 64 --iters 10 --timeout 4
done

# A job cancelled while it exchanges (as at its time limit): Slurm sends
# SIGTERM to every task at once, and the job must still leave nothing in
# the shared-memory directory.
echo "-- scancel: srun --mpi=pmix -n 2 errors ended"
shm_dir=$(mktemp -d)
timeout 120 srun --job-name=sode-cancelled --mpi=pmix -n 2 --export=ALL,SODE_SHM_DIR="$shm_dir" \
  "$c/errors" ended > "$dir/cancelled.out" 2>&1 &
pid=$!
for _ in $(seq 600); do
  grep -q exchanging "$dir/cancelled.out" && break
  sleep 0.1
done
grep -q exchanging "$dir/cancelled.out" || { tail -20 "$dir/cancelled.out"; echo "slurm: the job to cancel did not start exchanging" >&2; exit 1; }
scancel --name=sode-cancelled
wait "$pid" || true
left=$(find "$shm_dir" -mindepth 1 ! -name "sode-probes-$(id -u)")
rm -rf "$shm_dir"
[ -z "$left" ] || { tail -20 "$dir/cancelled.out"; echo "slurm: a cancelled job left $left" >&2; exit 1; }
echo "ok: cancelled, nothing left in SODE_SHM_DIR"

echo "-- srun -n 2 (no PMI): a named error, not a hang"
if out=$(timeout 60 srun --mpi=none -n 2 "$stencil" 2>&1); then
  echo "slurm: the stencil ran with no way to meet its peers" >&2; exit 1
fi
grep -q "srun --mpi=pmi2" <<<"$out" || { echo "$out" | tail -5; echo "slurm: unhelpful message" >&2; exit 1; }
echo "ok: $(grep -m1 -o "neither SODE_ROOT.\{0,60\}" <<<"$out")..."
echo "slurm: srun --mpi=pmix and --mpi=pmi2: the C, Fortran and Rust examples, bit for bit"
