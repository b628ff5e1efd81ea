#!/usr/bin/env bash
# sode built with MPICH beside Open MPI (Debian's mpich: mpicc.mpich,
# mpirun.mpich; the default mpicc stays Open MPI's): installed into its own
# prefix, the C, C++ and Fortran examples built from it with -Werror, run under
# MPICH's mpirun (Hydra) with every halo cell compared with MPICH's, bit for
# bit, the Rust stencil (no MPI: sode's PMI-1 bootstrap), and the README's
# pkg-config line.
#   bash ci/mpich.sh
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in mpicc.mpich mpif90.mpich mpirun.mpich; do
  command -v "$tool" >/dev/null || { echo "mpich: $tool is missing: apt-get install mpich libmpich-dev (ci/softroce/install.sh does)" >&2; exit 1; }
done
prefix=$PWD/target/capi-prefix-mpich
build=target/capi-examples-mpich
fbuild=target/capi-examples-fortran-mpich
cxxbuild=target/capi-examples-cxx-mpich
rm -rf "$prefix" "$build" "$fbuild" "$cxxbuild"
mpi_c=(-DMPI_C_COMPILER="$(command -v mpicc.mpich)")
mpi=("${mpi_c[@]}" -DMPI_Fortran_COMPILER="$(command -v mpif90.mpich)")
SODE_CMAKE_BUILD=target/cmake-capi-mpich bash ci/install.sh "$prefix" "${mpi[@]}" >/dev/null
grep -q "MPICH" "$prefix/lib/pkgconfig/sode_mpi.pc" || { echo "mpich: sode_mpi.pc does not name MPICH" >&2; exit 1; }

echo "-- the C, C++ and Fortran examples with MPICH, -Werror"
cmake -S examples/c -B "$build" -DCMAKE_PREFIX_PATH="$prefix" "${mpi_c[@]}" >/dev/null
cmake --build "$build" -j 2 >/dev/null
cmake -S examples/fortran -B "$fbuild" -DCMAKE_PREFIX_PATH="$prefix" "${mpi[@]}" >/dev/null
cmake --build "$fbuild" -j 2 >/dev/null
# A project of C++ alone: sode::mpi brings MPICH's C++ target.
cmake -S examples/cxx -B "$cxxbuild" -DCMAKE_PREFIX_PATH="$prefix" \
  -DMPI_CXX_COMPILER="$(command -v mpicxx.mpich)" >/dev/null
cmake --build "$cxxbuild" -j 2 >/dev/null
for exe in "$build/stencil2d" "$fbuild/stencil3d" "$cxxbuild/heat2d"; do
  if ldd "$exe" | grep -q "libmpi\.so"; then
    echo "mpich: $exe links Open MPI's libmpi" >&2
    exit 1
  fi
done

run() { # ranks, program, its arguments
  local n=$1
  shift
  echo "-- mpirun.mpich -n $n $(basename "$1") ${*:2}"
  timeout 300 mpirun.mpich -n "$n" "$@" | tail -1
}
for n in 1 2 4; do run "$n" "$build/stencil2d"; done
run 2 "$build/rk2d"
run 3 "$build/ring1d"
run 3 "$build/explicit"
run 2 "$build/errors"
# A rank late to the communicator's creation and to a commit: each gives up
# at its timeout on every rank, under MPICH's collectives too.
run 3 "$build/errors" late
# Communicators from the environment beside MPI: sode meets through the
# PMI socket MPICH's own client speaks on, three times, and MPI_Finalize
# still finds it open.
run 2 "$build/errors" beside
# From the environment through Hydra's PMI server: commits cost the same
# late in a run as early.
run 2 "$build/churn" 620 env
for n in 2 4; do run "$n" "$fbuild/stencil3d"; done
run 3 "$fbuild/ring1d"
run 3 "$fbuild/explicit2d"
run 3 "$fbuild/tiles"
for n in 2 4; do run "$n" "$cxxbuild/heat2d"; done

# A program without MPI meets its peers through Hydra's PMI-1 server.
echo "-- mpirun.mpich -n 4 target/release/examples/stencil (sode's PMI bootstrap, no MPI)"
cargo build --release --locked --workspace --example stencil 2>/dev/null
out=$(timeout 300 mpirun.mpich -n 4 target/release/examples/stencil 2>&1)
[ "$(grep -c "bit for bit" <<<"$out")" -eq 4 ] || { echo "$out" | tail; echo "mpich: not every rank of the Rust stencil matched the single-process solve" >&2; exit 1; }
grep -m1 "bit for bit" <<<"$out"

echo "-- the README's pkg-config line, with MPICH's compiler"
cp examples/c/stencil2d.c "$build/app.c"
# shellcheck disable=SC2046
(cd "$build" && PKG_CONFIG_PATH="$prefix/lib/pkgconfig" mpicc.mpich app.c -o app $(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs sode_mpi))
run 2 "$build/app"
echo "mpich: the C, C++ and Fortran examples built with -Werror and run under MPICH's mpirun, equal to MPICH's, bit for bit; the Rust stencil through its PMI server"
