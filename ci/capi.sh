#!/usr/bin/env bash
# The C ABI end to end, as a user meets it: install sode into a scratch
# prefix (ci/install.sh), build the C and Fortran examples from that prefix
# alone (CMake package and pkg-config), run them under Open MPI with 1, 2
# and 4 ranks (every halo cell compared with MPI's, bit for bit), every misuse answered
# with a status and a message, and a rank killed during an exchange reported
# to its peer within the wait's timeout.
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

for n in 1 2 4; do
  echo "-- mpirun -n $n rk2d (three Runge-Kutta stage arrays through one exchange)"
  timeout 300 "${mpirun[@]}" -n "$n" "$build/rk2d"
done

for n in 1 3; do
  echo "-- mpirun -n $n ring1d (a 1-D ring and line)"
  timeout 120 "${mpirun[@]}" -n "$n" "$build/ring1d"
done

for n in 1 3; do
  echo "-- mpirun -n $n explicit (boxes between named ranks)"
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

echo "-- a Fortran failure without ierr ends the whole job (MPI_Abort)"
set +e
fatal_out=$(timeout 60 "${mpirun[@]}" -n 2 "$fbuild/fatal" 2>&1)
fatal_status=$?
set -e
# MPI_Abort's code is sode's status (3, SODE_ERR_STATE), which mpirun
# returns; `error stop` would give 1.
if [ "$fatal_status" -ne 3 ] \
   || ! grep -q "sode: error 3: sode_exchange_wait" <<<"$fatal_out" \
   || grep -q "left the barrier\|still running" <<<"$fatal_out"; then
  echo "$fatal_out"
  echo "error: a failure without ierr did not end the job through MPI_Abort (status $fatal_status)" >&2
  exit 1
fi
echo "ok: sode's message, then MPI_Abort with sode's status ($fatal_status); rank 0 did not leave its barrier"

echo "-- the C program built with pkg-config (sode.pc)"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
# shellcheck disable=SC2046
mpicc -std=c99 -Wall -Wextra -Werror examples/c/stencil2d.c $(pkg-config --cflags --libs sode) \
  -lsode_mpi -Wl,-rpath,"$prefix/lib" -o "$build/stencil2d-pc"
timeout 300 "${mpirun[@]}" -n 2 "$build/stencil2d-pc" | tail -1

echo "-- misuse, on 2 ranks"
timeout 120 "${mpirun[@]}" -n 2 "$build/errors" | tail -1

# A rank killed during an exchange (started by hand: mpirun would stop the
# job), over shared memory and over TCP: its peer must report it, naming
# the channel, within the wait's deadline.
killed_peer() { # transport, what rank 0's message must name
  echo "-- a rank killed during an exchange, SODE_TRANSPORT=$1"
  local secret port status=0 pids=()
  secret=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  for r in 0 1; do
    SODE_TRANSPORT=$1 SODE_RANK=$r SODE_SIZE=2 SODE_ROOT=127.0.0.1:$port SODE_JOB_SECRET=$secret \
      timeout 60 "$build/errors" kill > "$build/kill$r.log" 2>&1 &
    pids+=($!)
  done
  wait "${pids[0]}" || status=$?
  wait "${pids[1]}" 2>/dev/null || true   # killed by its own hand
  cat "$build/kill0.log"
  [ "$status" -eq 0 ] || { echo "error: rank 0 did not report its dead peer over $1" >&2; exit 1; }
  grep -q "$2" "$build/kill0.log" || { echo "error: rank 0's report does not name $2" >&2; exit 1; }
}
killed_peer auto "shared memory with"
killed_peer tcp "TCP with"
