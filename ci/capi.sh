#!/usr/bin/env bash
# The C ABI end to end, as a user meets it: install sode into a scratch
# prefix (ci/install.sh), build the C and Fortran examples from that prefix
# alone (CMake package and pkg-config), run them under Open MPI with 1, 2
# and 4 ranks (every halo cell compared with MPI's, bit for bit), every misuse answered
# with a status and a message, a rank late for a creation and a commit (under
# AddressSanitizer), a rank killed during an exchange reported to its
# peer within the wait's timeout, a rank in a PID namespace of its own (a
# container per rank), and examples under valgrind's memcheck.
set -euo pipefail
cd "$(dirname "$0")/.."

prefix=${SODE_PREFIX:-$PWD/target/capi-prefix}
build=target/capi-examples
rm -rf "$prefix" "$build"
bash ci/install.sh "$prefix"

echo "-- the C examples, from the installed CMake package"
cmake -S examples/c -B "$build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$build" -j 2 >/dev/null

mpirun=(mpirun --oversubscribe)
[ "$(id -u)" -eq 0 ] && mpirun+=(--allow-run-as-root)
for n in 1 2 4; do
  echo "-- mpirun -n $n stencil2d"
  timeout 300 "${mpirun[@]}" -n "$n" "$build/stencil2d"
done

# The fields sode keeps (the second half of every stencil2d run), with
# every face read from its owner's array (these faces are below the
# default threshold, so the runs above pack them inside sode-shm).
echo "-- mpirun -n 4 stencil2d, every face read in place"
timeout 300 "${mpirun[@]}" -n 4 -x SODE_SHM_READ_MIN=0 -x SODE_SHM_READ_RUN_MIN=0 "$build/stencil2d"

# Every message over TCP, starts on some fields included.
echo "-- mpirun -n 4 stencil2d --grid 2x2 over TCP"
timeout 300 "${mpirun[@]}" -n 4 -x SODE_TRANSPORT=tcp "$build/stencil2d" --grid 2x2

for n in 1 2 4; do
  echo "-- mpirun -n $n rk2d (three Runge-Kutta stage arrays through one exchange)"
  timeout 300 "${mpirun[@]}" -n "$n" "$build/rk2d"
done

for t in auto tcp; do
  echo "-- mpirun -n 4 churn, SODE_TRANSPORT=$t (300 exchanges made, run and freed: nothing accumulates)"
  timeout 300 "${mpirun[@]}" -n 4 -x SODE_TRANSPORT=$t "$build/churn" 300
done
# From the environment, through mpirun's PMIx server: commits cost the
# same late in a run as early (its collective steps go over the job's own
# links, not into the server, which keeps what is put there).
echo "-- mpirun -n 2 churn env (the communicator through PMIx; the last 100 rounds no slower than the first)"
timeout 300 "${mpirun[@]}" -n 2 "$build/churn" 620 env

# A cleanup of the shared-memory directory while the job runs (a site's
# script, `rm -rf /dev/shm/*`): the job's directory is removed every 20 ms
# through 3000 exchanges made, run and freed, and each must be set up
# (a rank lists its segment again when its name went before a peer
# looked) and deliver its halos.
echo "-- mpirun -n 4 churn while the job's shared-memory directory is removed every 20 ms"
shm=${SODE_SHM_DIR:-/dev/shm}
timeout 300 "${mpirun[@]}" -n 4 "$build/churn" 3000 cleanup > "$build/cleanup.log" 2>&1 &
churn=$!
removed=0
while kill -0 "$churn" 2>/dev/null; do
  sleep 0.02
  for d in "$shm"/sode-"$(id -u)"-*; do
    # Files made meanwhile may leave it non-empty: the next pass removes it.
    if [ -d "$d" ]; then rm -rf "$d" 2>/dev/null || true; removed=$((removed + 1)); fi
  done
done
if ! wait "$churn"; then
  cat "$build/cleanup.log"
  echo "error: an exchange failed while a cleanup removed the job's shared-memory directory" >&2
  exit 1
fi
grep -a "^ok " "$build/cleanup.log"
echo "ok: the job's directory was removed $removed times while it ran"

for run in "2 auto" "4 auto" "4 tcp"; do
  read -r n t <<< "$run"
  echo "-- mpirun -n $n many, SODE_TRANSPORT=$t (200 exchanges held at once: descriptors and memory an exchange do not grow)"
  timeout 300 "${mpirun[@]}" -n "$n" -x SODE_TRANSPORT="$t" "$build/many" 200
done

for n in 1 2 3 4; do
  echo "-- mpirun -n $n staggered (cells and nodes; the nodes on block edges never sent)"
  timeout 120 "${mpirun[@]}" -n "$n" "$build/staggered"
done

for n in 1 2 3 4; do
  echo "-- mpirun -n $n coupled (two components on sub-communicators, two exchanges each, and a ring over both, all in flight together)"
  timeout 120 "${mpirun[@]}" -n "$n" "$build/coupled"
done
echo "-- mpirun -n 4 coupled, SODE_TRANSPORT=tcp"
timeout 120 "${mpirun[@]}" -n 4 -x SODE_TRANSPORT=tcp "$build/coupled"

# On the program's arrays, then (--shared) on two sets sode keeps.
for n in 1 2 4; do
  for arrays in "" --shared; do
    echo "-- mpirun -n $n tiles $arrays (a grid of 3 x 4 domains scattered over the ranks, several a rank)"
    timeout 120 "${mpirun[@]}" -n "$n" "$build/tiles" $arrays
  done
done
echo "-- mpirun -n 4 tiles, SODE_TRANSPORT=tcp"
timeout 120 "${mpirun[@]}" -n 4 -x SODE_TRANSPORT=tcp "$build/tiles"
echo "-- mpirun -n 3 ring1d, SODE_TRANSPORT=tcp, SODE_TCP_ADDR=nosuch9,lo (the first interface of the list this host has)"
timeout 120 "${mpirun[@]}" -n 3 -x SODE_TRANSPORT=tcp -x SODE_TCP_ADDR=nosuch9,lo "$build/ring1d"
echo "-- mpirun -n 4 tiles --shared, every face read in place (SODE_SHM_READ_MIN=0)"
timeout 120 "${mpirun[@]}" -n 4 -x SODE_SHM_READ_MIN=0 -x SODE_SHM_READ_RUN_MIN=0 "$build/tiles" --shared

for n in 1 3; do
  echo "-- mpirun -n $n ring1d (a 1-D ring and line)"
  timeout 120 "${mpirun[@]}" -n "$n" "$build/ring1d"
done

# Two ranks that may run on one CPU between them (a job given fewer CPUs
# than ranks on a shared node, or ranks bound to one core): SODE_WAIT=auto
# blocks, whatever the node's CPUs; unbound on a node of 2 CPUs or more,
# they spin.
for cpus in one all; do
  echo "-- mpirun -n 2 ring1d, may run on $cpus CPUs: what the wait policy auto chooses"
  pin=()
  [ "$cpus" = one ] && pin=(taskset -c "$(taskset -pc $$ | sed 's/.*: //; s/[-,].*//')")
  out=$(SODE_LOG=sode_job=debug timeout 120 "${pin[@]}" "${mpirun[@]}" --bind-to none -n 2 -x SODE_LOG "$build/ring1d" 2>&1) \
    || { echo "$out"; exit 1; }
  grep "wait policy" <<<"$out" | head -1
  if [ "$cpus" = one ]; then want="policy=Block local_ranks=2 cores=1"; else want="policy=Spin local_ranks=2"; fi
  if [ "$cpus" = one ] || [ "$(nproc)" -ge 2 ]; then
    [ "$(grep -c "$want" <<<"$out")" = 2 ] || { echo "error: both ranks on $cpus CPU(s) should have chosen \"$want\"" >&2; exit 1; }
  fi
done

# A container started for each rank with a PID namespace of its own: ranks
# of one machine that cannot open each other's segments (through
# /proc/<pid>) exchange over the network, and the machine's lowest rank
# says why, once. (Open MPI's own shared memory is left out: it attaches by
# pid too.)
if unshare --pid --fork --mount-proc true 2>/dev/null; then
  echo "-- mpirun ring1d with rank 1 in a PID namespace of its own: over the network, said once"
  out=$(timeout 120 "${mpirun[@]}" --mca btl tcp,self -n 1 "$build/ring1d" : \
          -n 1 unshare --pid --fork --mount-proc "$build/ring1d" 2>&1) || { echo "$out"; exit 1; }
  grep "^ok" <<<"$out"
  [ "$(grep -c "run in 2 shared-memory domains" <<<"$out")" = 1 ] \
    || { echo "$out"; echo "error: rank 0 should have said once why its machine's ranks use the network" >&2; exit 1; }
  # Shared memory asked for between them: named as such. Asked for on rank
  # 0 alone (Open MPI's -x before the first program of an MPMD launch
  # reaches that program's ranks only): they chose different transports.
  for on in both rank0; do
    echo "-- the same, with SODE_TRANSPORT=shm on $on: the commit fails on both ranks, saying why"
    both=(env); rank0=(-x SODE_TRANSPORT=shm)
    [ "$on" = both ] && { both=(env SODE_TRANSPORT=shm); rank0=(); }
    want="in another PID namespace or shared-memory directory (a container of its own), or one of the two is not dumpable, and the transport is shm"
    [ "$on" = rank0 ] && want="the ranks disagree: rank 1 chose the auto transport, this rank (rank 0) the shm transport"
    if out=$(timeout 120 "${both[@]}" "${mpirun[@]}" --mca btl tcp,self -n 1 "${rank0[@]}" "$build/ring1d" : \
          -n 1 unshare --pid --fork --mount-proc "$build/ring1d" 2>&1); then
      echo "$out"; echo "error: the commit should have failed" >&2; exit 1
    fi
    grep -q "$want" <<<"$out" || { echo "$out"; echo "error: no \"$want\"" >&2; exit 1; }
  done
else
  echo "-- (not run: unshare --pid is not permitted here) ring1d with a rank in a PID namespace of its own"
fi

# A program that is not dumpable (one its user may not read, as a chmod 711
# install makes; here prctl(PR_SET_DUMPABLE, 0) before main) lets no other
# process without CAP_SYS_PTRACE open its files through /proc: its node's
# ranks exchange over the network, rank 0 saying why once, where the
# commit failed with "Permission denied".
if setpriv --bounding-set=-sys_ptrace true 2>/dev/null; then
  echo "-- mpirun -n 2 ring1d not dumpable, without CAP_SYS_PTRACE: over the network, said once"
  printf '#include <sys/prctl.h>\n__attribute__((constructor)) static void closed(void) { prctl(PR_SET_DUMPABLE, 0); }\n' \
    > "$build/not_dumpable.c"
  cc -shared -fPIC "$build/not_dumpable.c" -o "$build/libnot_dumpable.so"
  out=$(timeout 120 "${mpirun[@]}" --mca btl tcp,self -n 2 \
          setpriv --inh-caps=-sys_ptrace --bounding-set=-sys_ptrace \
          env LD_PRELOAD="$build/libnot_dumpable.so" "$build/ring1d" 2>&1) || { echo "$out"; exit 1; }
  grep "^ok" <<<"$out"
  [ "$(grep -c "run in 2 shared-memory domains" <<<"$out")" = 1 ] \
    || { echo "$out"; echo "error: rank 0 should have said once why its machine's ranks use the network" >&2; exit 1; }
else
  echo "-- (not run: setpriv cannot drop CAP_SYS_PTRACE here) ring1d not dumpable"
fi

for n in 1 2 3; do
  echo "-- mpirun -n $n explicit (boxes between named ranks; on 2, both columns to the one peer in one message)"
  timeout 300 "${mpirun[@]}" -n "$n" "$build/explicit"
done

echo "-- the Fortran example (use sode), from the installed CMake package"
fbuild=target/capi-examples-fortran
rm -rf "$fbuild"
cmake -S examples/fortran -B "$fbuild" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$fbuild" -j 2 >/dev/null
for n in 1 2 4; do
  echo "-- mpirun -n $n stencil3d"
  timeout 300 "${mpirun[@]}" -n "$n" "$fbuild/stencil3d"
done
for n in 1 2 4; do
  echo "-- mpirun -n $n rk2d (Fortran: three Runge-Kutta stage arrays through one exchange)"
  timeout 120 "${mpirun[@]}" -n "$n" "$fbuild/rk2d"
done
for n in 1 2 3; do
  echo "-- mpirun -n $n ring1d (Fortran: a 1-D ring and line, int64 and real64)"
  timeout 120 "${mpirun[@]}" -n "$n" "$fbuild/ring1d"
done
for n in 1 2 3 4; do
  echo "-- mpirun -n $n explicit2d (Fortran: boxes between named ranks, in the arrays' own bounds)"
  timeout 120 "${mpirun[@]}" -n "$n" "$fbuild/explicit2d"
done
for n in 1 2 3; do
  echo "-- mpirun -n $n tiles (Fortran: two tiles a rank in one array, by boxes to other ranks and to itself, then by the grid of domains)"
  timeout 120 "${mpirun[@]}" -n "$n" "$fbuild/tiles"
done
echo "-- mpirun -n 3 tiles over TCP"
timeout 120 "${mpirun[@]}" -n 3 -x SODE_TRANSPORT=tcp "$fbuild/tiles"

echo "-- the C++ example, from the installed CMake package in a project of C++ alone"
cxxbuild=target/capi-examples-cxx
rm -rf "$cxxbuild"
cmake -S examples/cxx -B "$cxxbuild" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$cxxbuild" -j 2 >/dev/null
for n in 1 2 4; do
  echo "-- mpirun -n $n heat2d (C++: two fields in swapped std::vector buffers, one exchange)"
  timeout 120 "${mpirun[@]}" -n "$n" "$cxxbuild/heat2d"
done
echo "-- mpirun -n 3 heat2d over TCP"
timeout 120 "${mpirun[@]}" -n 3 -x SODE_TRANSPORT=tcp "$cxxbuild/heat2d"

# Users look for their own memory errors with valgrind, which does not pass
# pidfd_open through (3.19): the shared-memory channel then holds its peers
# through /proc, and memcheck must report nothing whose stack passes
# through sode (the MPI's own reports are left alone).
sode_errors() {
  awk 'function check(p) { if (rec[p] ~ /(at|by) 0x/ && rec[p] ~ /sode/) { printf "%s", rec[p]; bad++ } rec[p] = "" }
       match($0, /^==[0-9]+== /) {
         p = substr($0, 3, RLENGTH - 5)
         if (length($0) == RLENGTH) check(p); else rec[p] = rec[p] $0 "\n"
       }
       END { for (p in rec) check(p); exit bad > 0 }'
}
for prog in "$build/rk2d" "$fbuild/ring1d"; do
  echo "-- mpirun -n 2 valgrind $prog: memcheck reports nothing in sode"
  out=$(timeout 600 "${mpirun[@]}" -n 2 valgrind --num-callers=40 "$prog" 2>&1) || { echo "$out"; exit 1; }
  grep -q "Memcheck" <<<"$out" || { echo "$out"; echo "error: valgrind did not run" >&2; exit 1; }
  sode_errors <<<"$out" || { echo "error: memcheck reported the errors above in sode's frames" >&2; exit 1; }
done

echo "-- a Fortran failure without ierr ends the whole job (MPI_Abort)"
set +e
fatal_out=$(timeout 60 "${mpirun[@]}" -n 2 "$fbuild/fatal" 2>&1)
fatal_status=$?
set -e
# MPI_Abort's code is sode's status (3, SODE_ERR_STATE), which mpirun
# returns; `error stop` would give 1.
if [ "$fatal_status" -ne 3 ] \
   || ! grep -q "sode: error 3: sode_wait: " <<<"$fatal_out" \
   || grep -q "left the barrier\|still running" <<<"$fatal_out"; then
  echo "$fatal_out"
  echo "error: a failure without ierr did not end the job through MPI_Abort (status $fatal_status)" >&2
  exit 1
fi
echo "ok: sode's message, then MPI_Abort with sode's status ($fatal_status); rank 0 did not leave its barrier"

# The README's pkg-config lines, exactly as written there: sode_mpi.pc
# carries the MPI sode was built with (plain cc finds mpi.h) and the
# rpath (the program starts without LD_LIBRARY_PATH).
echo "-- the C, C++ and Fortran programs built with pkg-config (sode_mpi.pc, sode_fortran.pc)"
(
  # In this subshell only: hwloc2's build script (under sode) watches
  # PKG_CONFIG_PATH, so a later cargo build with it set would rebuild the
  # crates, and the next without it rebuild them again.
  export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
  cd "$build"
  cp ../../examples/c/stencil2d.c app.c
  cp ../../examples/fortran/stencil3d.f90 app.f90
  cp ../../examples/cxx/heat2d.cpp app.cpp
  # shellcheck disable=SC2046
  {
    cc app.c -o app-cc $(pkg-config --cflags --libs sode_mpi)
    mpicc app.c -o app-mpicc $(pkg-config --cflags --libs sode_mpi)
    mpicxx app.cpp -o app-cxx $(pkg-config --cflags --libs sode_mpi)
    mpifort app.f90 -o app-fortran $(pkg-config --cflags --libs sode_fortran)
  }
)
for app in app-cc app-mpicc app-cxx app-fortran; do
  env -u LD_LIBRARY_PATH timeout 300 "${mpirun[@]}" -n 2 "$build/$app" | tail -1
done

echo "-- the static library (sode::static): a job of one, no MPI"
if ldd "$build/alone" | grep -q libsode; then
  echo "error: alone links libsode dynamically" >&2
  exit 1
fi
timeout 60 "$build/alone"

# Installed libraries are stripped; the debug info is beside them where
# gdb finds it.
echo "-- installed libraries: stripped, debug info split off"
so=$(readlink -f "$prefix/lib/libsode.so")
debug="$prefix/lib/.debug/$(basename "$so").debug"
so_mb=$(( $(stat -c %s "$so") >> 20 ))
a_mb=$(( $(stat -c %s "$prefix/lib/libsode.a") >> 20 ))
if readelf -S "$so" | grep -q "\.debug_info" || ! readelf -S "$so" | grep -q "\.gnu_debuglink" \
   || ! readelf -S "$debug" | grep -q "\.debug_line" || [ "$so_mb" -gt 16 ] || [ "$a_mb" -gt 64 ]; then
  echo "error: $so ($so_mb MiB) or libsode.a ($a_mb MiB) is not stripped, or $debug lacks the debug info" >&2
  exit 1
fi
echo "ok: libsode.so $so_mb MiB, libsode.a $a_mb MiB, debug info in lib/.debug"

# A project that finds another MPI than sode's is stopped at configure
# time, not by a crash in MPI_Comm_dup (needs MPICH beside Open MPI).
if command -v mpicc.mpich >/dev/null; then
  for project in c:C:mpicc.mpich cxx:CXX:mpicxx.mpich; do
    IFS=: read -r dir lang wrapper <<<"$project"
    echo "-- the CMake package refuses an MPI other than its own (examples/$dir, MPI_${lang}_COMPILER=$wrapper)"
    set +e
    # Not ci/mpich.sh's build directory, whose cache would configure.
    refused=$build-refused
    rm -rf "$refused"
    mismatch=$(cmake -S "examples/$dir" -B "$refused" -DCMAKE_PREFIX_PATH="$prefix" \
      -DMPI_${lang}_COMPILER="$(command -v "$wrapper")" 2>&1)
    mismatch_status=$?
    set -e
    rm -rf "$refused"
    if [ "$mismatch_status" -eq 0 ] || ! grep -q "sode was built with" <<<"$mismatch"; then
      echo "$mismatch" | tail -20
      echo "error: a project of $lang with MPICH configured against a sode built with Open MPI" >&2
      exit 1
    fi
    echo "ok: $(grep -m1 -o "sode was built with [^(]*" <<<"$mismatch")... refused, by name"
  done
fi

echo "-- communicators from the environment beside MPI (Open MPI's PMIx server)"
timeout 120 "${mpirun[@]}" -n 2 "$build/errors" beside | tail -1

echo "-- misuse, on 2 ranks"
timeout 120 "${mpirun[@]}" -n 2 "$build/errors" | tail -1

# A rank late for a communicator's creation: every rank's creation gives up
# at its timeout, and the late rank later completes the MPI step they left
# in flight: MPI then writes into their buffers, which must still be
# theirs. AddressSanitizer (gcc's runtime, preloaded) ends the job at a
# write into freed memory. Then a rank late for a commit (its steps over
# sode's own links): every rank is told it did not take the step.
echo "-- a rank late for a creation and a commit, under AddressSanitizer"
asan=$(gcc -print-file-name=libasan.so)
if [ ! -e "$asan" ]; then
  echo "error: gcc has no AddressSanitizer runtime (libasan.so; Debian's libasan8)" >&2
  exit 1
fi
if ! timeout 120 "${mpirun[@]}" -n 3 -x LD_PRELOAD="$asan" -x ASAN_OPTIONS=detect_leaks=0 \
    "$build/errors" late >"$build/late.log" 2>&1; then
  grep -v "^ WARN" "$build/late.log" | head -40
  echo "error: a rank late for a creation and a commit (errors late, under AddressSanitizer)" >&2
  exit 1
fi
grep "^ok a rank" "$build/late.log"

# A C program installs no tracing subscriber: libsode does, on its first
# call. Each misuse above is logged at debug level, and nothing is printed
# at the default level.
echo "-- SODE_LOG from C and Fortran"
timeout 120 "${mpirun[@]}" -n 2 -x SODE_LOG=debug "$build/errors" 2>"$build/log-debug.txt" >/dev/null
timeout 120 "${mpirun[@]}" -n 2 "$build/errors" 2>"$build/log-default.txt" >/dev/null
timeout 120 "${mpirun[@]}" -n 1 -x SODE_LOG=sode=debug "$fbuild/stencil3d" 2>"$build/log-fortran.txt" >/dev/null
debug_lines=$(grep -c "DEBUG sode_capi::sys: .*op=\"sode_exchange_commit\"" "$build/log-debug.txt" || true)
default_lines=$(grep -c "DEBUG" "$build/log-default.txt" || true)
fortran_lines=$(grep -c "DEBUG sode" "$build/log-fortran.txt" || true)
if [ "$debug_lines" -eq 0 ] || [ "$default_lines" -ne 0 ] || [ "$fortran_lines" -eq 0 ]; then
  head -5 "$build"/log-*.txt
  echo "error: SODE_LOG: $debug_lines debug lines from C's failed commits, $default_lines debug lines without SODE_LOG, $fortran_lines from Fortran" >&2
  exit 1
fi
echo "ok: SODE_LOG=debug: $debug_lines lines on failed commits from C, $fortran_lines from Fortran; none without it"

# A rank killed during an exchange (started by hand: mpirun would stop the
# job), over shared memory and over TCP: its peer must report it within the
# wait's deadline, naming the dead rank and either the channel that saw it
# go or the job's health watcher (whichever noticed first).
# Starts the two ranks of `errors MODE` by hand (SODE_ROOT, no launcher),
# each with the settings given as VAR=VALUE, logging to $build/MODE<r>.log;
# their pids in `pair`.
start_pair() { # mode, settings...
  local mode=$1 secret port
  shift
  secret=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
  port=$(python3 ci/free_port.py)
  pair=()
  for r in 0 1; do
    env "$@" SODE_RANK=$r SODE_SIZE=2 SODE_ROOT=127.0.0.1:$port SODE_JOB_SECRET=$secret \
      timeout 60 "$build/errors" "$mode" > "$build/$mode$r.log" 2>&1 &
    pair+=($!)
  done
}

killed_peer() { # transport, what rank 0's message must name
  echo "-- a rank killed during an exchange, SODE_TRANSPORT=$1"
  local status=0
  start_pair kill SODE_TRANSPORT="$1"
  wait "${pair[0]}" || status=$?
  wait "${pair[1]}" 2>/dev/null || true   # killed by its own hand
  cat "$build/kill0.log"
  [ "$status" -eq 0 ] || { echo "error: rank 0 did not report its dead peer over $1" >&2; exit 1; }
  grep -qE "($2|the job failed:) rank 1 " "$build/kill0.log" || { echo "error: rank 0's report does not name rank 1 and $2 or the job's failure" >&2; exit 1; }
}
killed_peer auto "shared memory with"
killed_peer tcp "TCP with"

# A setting wrong on one rank alone (an environment given to one program
# of an MPMD launch) fails the creation on every rank at once, naming that
# rank and the setting, not on that rank alone while the others wait.
for bad in SODE_WAIT=bogus SODE_HEALTH_TIMEOUT=bogus SODE_TIMEOUT=10min SODE_WAIT_WARN=-1 SODE_TCP_ADDR=nosuch9 SODE_TCP_ADDR=10.1.0.0/33; do
  echo "-- mpirun: $bad on rank 1 alone fails the creation on both ranks"
  timeout 120 "${mpirun[@]}" -n 1 "$build/errors" settings : -n 1 env "$bad" "$build/errors" settings
done

# A rank whose own argument to a creation is wrong (a null out pointer)
# fails it on every rank at once, naming that rank, rather than leave the
# other waiting for it.
echo "-- a creation refused on one rank (sode_comm_create_env, SODE_ROOT)"
start_pair refused
refused_ok=1
for pid in "${pair[@]}"; do wait "$pid" || refused_ok=0; done
cat "$build/refused0.log" "$build/refused1.log"
[ "$refused_ok" -eq 1 ] || { echo "error: a creation refused on rank 1 did not fail on both ranks at once, naming it" >&2; exit 1; }

# A neighbour that ends early over TCP (rank 1 returns after 20 exchanges):
# rank 0's next exchange must fail with a message naming it, not end the
# process by SIGPIPE (a C program keeps the signal's default action).
echo "-- a rank that ends early, SODE_TRANSPORT=tcp"
start_pair early SODE_TRANSPORT=tcp
early_status=0
wait "${pair[0]}" || early_status=$?
wait "${pair[1]}" || { cat "$build/early1.log"; echo "error: rank 1 did not end by itself" >&2; exit 1; }
cat "$build/early0.log"
[ "$early_status" -eq 0 ] || { echo "error: rank 0 ended with status $early_status (141: SIGPIPE) after its neighbour ended" >&2; exit 1; }
grep -q "(the peer closed the connection: it freed the exchange, exited or died) with rank 1" "$build/early0.log" || { echo "error: rank 0's report does not say that rank 1 closed the connection" >&2; exit 1; }

# Ranks that end with their exchange and communicator alive (many C and
# Fortran programs never free them): the job must leave no directory of its
# own in the shared-memory directory, only the kept thresholds.
echo "-- mpirun -n 3 errors unfreed (every rank ends holding its exchange)"
unfreed_dir=$(mktemp -d)
timeout 120 "${mpirun[@]}" -n 3 -x SODE_SHM_DIR="$unfreed_dir" "$build/errors" unfreed
left=$(find "$unfreed_dir" -mindepth 1 ! -name "sode-probes-$(id -u)")
rm -rf "$unfreed_dir"
[ -z "$left" ] || { echo "error: a job whose ranks ended without freeing left: $left" >&2; exit 1; }
echo "ok: nothing left in SODE_SHM_DIR"

# A job ended by SIGTERM while its ranks exchange, as a batch system ends
# one at its time limit or on scancel: every rank is sent SIGTERM at once
# (here by their parent's pid), and though no rank lives on to do it, the
# job's directory must be removed. (Open MPI's mpirun, itself sent
# SIGTERM, follows its SIGTERM to the ranks with SIGKILL within a
# millisecond, which no handler outruns: the next job's sweep removes what
# that leaves. ci/slurm.sh cancels a job under Slurm.) The program ends
# itself after 60 s. Here too mpirun, seeing the first rank end by the
# signal, kills the others: a rank that has not yet run its handler dies
# by SIGKILL holding its share of the directory's lock, and the ranks that
# ran theirs found it held, so no one removes the directory. Such a run
# is tried again, up to 3 times: a handler that never removes fails all 3.
ended_try() { # prints what the job left in its directory
  local dir pid
  dir=$(mktemp -d)
  "${mpirun[@]}" -n 3 -x SODE_SHM_DIR="$dir" "$build/errors" ended > "$build/ended.log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do
    grep -q exchanging "$build/ended.log" && break
    kill -0 "$pid" 2> /dev/null || break
    sleep 0.1
  done
  grep -q exchanging "$build/ended.log" || { cat "$build/ended.log" >&2; echo "error: the job did not start exchanging" >&2; return 1; }
  pkill -TERM -P "$pid"
  wait "$pid" || true
  find "$dir" -mindepth 1 ! -name "sode-probes-$(id -u)"
  rm -rf "$dir"
}
echo "-- mpirun -n 3 errors ended, then SIGTERM to every rank"
for try in 1 2 3; do
  left=$(ended_try) || exit 1
  [ -z "$left" ] && break
  echo "try $try: mpirun's SIGKILL outran the handlers; left: $left"
done
[ -z "$left" ] || { cat "$build/ended.log"; echo "error: a job ended by SIGTERM left its directory in 3 tries: $left" >&2; exit 1; }
echo "ok: nothing left in SODE_SHM_DIR (try $try)"

# A neighbour that frees its exchange and lives on (3 s): rank 0's next
# exchange, waiting without deadline, must fail at once naming it, over
# every channel here (not when rank 1's process ends).
for t in auto tcp; do
  echo "-- a rank that frees its exchange and lives on, SODE_TRANSPORT=$t"
  start_pair freed SODE_TRANSPORT=$t
  freed_status=0
  wait "${pair[0]}" || freed_status=$?
  wait "${pair[1]}" || { cat "$build/freed1.log"; echo "error: rank 1 did not end by itself" >&2; exit 1; }
  cat "$build/freed0.log"
  [ "$freed_status" -eq 0 ] || { echo "error: rank 0 was not told at once that rank 1 freed its exchange ($t)" >&2; exit 1; }
done

# A neighbour 2.5 s late, waited for without deadline, then polled with
# sode_exchange_test: each says, on stderr, that it goes on
# (SODE_WAIT_WARN=1: after 1 s, and again after 2 s), naming the rank it
# waits for, then finishes.
echo "-- a rank 2.5 s late, waited for without deadline and polled with sode_exchange_test, SODE_WAIT_WARN=1"
start_pair slow SODE_WAIT_WARN=1
for r in 0 1; do
  wait "${pair[$r]}" || { cat "$build/slow$r.log"; echo "error: rank $r did not finish its exchanges" >&2; exit 1; }
done
cat "$build/slow0.log"
grep -qE "exchange h0 has waited [0-9]+ s for iteration 6 and goes on waiting; outstanding: .*rank 1" "$build/slow0.log" \
  || { echo "error: rank 0 did not warn that it went on waiting for rank 1" >&2; exit 1; }
grep -qE "exchange h0 has waited [12] s for iteration 7 \(polled by test, incomplete each time\); outstanding: .*rank 1" "$build/slow0.log" \
  || { echo "error: rank 0, polling with sode_exchange_test, was not told that it went on waiting for rank 1" >&2; exit 1; }

# A commit the last of 3 ranks reaches 2.5 s late, on a communicator
# without deadline: the others warn that the collective step goes on
# (SODE_WAIT_WARN=1: after 1 s and 2 s), rank 0 naming rank 2, and all
# finish. Over MPI (met through libsode_mpi's allgather), and from the
# environment (met through mpirun's PMIx server); either way later steps,
# the commit, travel sode's own links.
late_commit() { # how the communicator is made (mpi or env), then the warnings wanted (extended regexes)
  local how=$1 err="$build/latecommit-$1.err" want
  shift
  echo "-- mpirun -n 3 errors latecommit $how, SODE_WAIT_WARN=1"
  timeout 120 "${mpirun[@]}" -n 3 -x SODE_WAIT_WARN=1 "$build/errors" latecommit "$how" 2> "$err" \
    || { cat "$err"; echo "error: a commit reached 2.5 s late did not complete ($how)" >&2; exit 1; }
  cat "$err"
  for want in "$@"; do
    grep -qE "$want" "$err" || { echo "error: no warning \"$want\" ($how)" >&2; exit 1; }
  done
}
late_commit mpi "has waited 2 s and goes on waiting; not taken yet by rank 2:" \
  "has waited 1 s for rank 0's answer and goes on waiting"
late_commit env "has waited 2 s and goes on waiting; not taken yet by rank 2:" \
  "has waited 1 s for rank 0's answer and goes on waiting"

# The whole job stopped for 8 s (SIGSTOP to every rank, as a suspended job)
# while ranks 0 and 1 wait in that commit for rank 2, on a communicator
# from the environment given 5 s: time no rank ran does not count, and
# all finish.
echo "-- mpirun -n 3 errors latecommit env 5, every rank stopped for 8 s in the commit"
stop=$(mktemp -d)
timeout 120 "${mpirun[@]}" -n 3 -x STOP_DIR="$stop" "$build/errors" latecommit env 5 > "$stop/out" 2>&1 &
job=$!
for _ in $(seq 600); do
  [ -s "$stop/rank0.pid" ] && [ -s "$stop/rank1.pid" ] && [ -s "$stop/rank2.pid" ] && break
  sleep 0.05
done
[ -s "$stop/rank2.pid" ] || { cat "$stop/out"; echo "error: the ranks did not reach the commit" >&2; exit 1; }
pids=$(cat "$stop"/rank*.pid)
# shellcheck disable=SC2086 # one process id a word
kill -STOP $pids
sleep 8
# shellcheck disable=SC2086
kill -CONT $pids
if ! wait "$job" || grep -q "^rank" "$stop/out"; then
  cat "$stop/out"; rm -rf "$stop"
  echo "error: a job stopped for 8 s in a commit given 5 s did not finish" >&2; exit 1
fi
rm -rf "$stop"
echo "ok: stopped for 8 s in a commit given 5 s, every rank committed and exchanged"

# The C layer's own cost beside the same calls from Rust (printed, not
# judged: this keeps the two programs of docs/results/c-abi.md running).
echo "-- the C layer's cost: start + wait through sode.h and from Rust"
bash ci/abi-cost.sh
