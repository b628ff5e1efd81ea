#!/usr/bin/env bash
# Builds and installs sode for C, C++ and Fortran programs into PREFIX:
#   lib/libsode.so, lib/libsode.a, lib/libsode_mpi.so, include/sode.h,
#   include/sode_mpi.h, lib/cmake/sode (find_package(sode)),
#   lib/pkgconfig/sode.pc.
# Usage: bash ci/install.sh PREFIX [extra cmake -D options]
# (-DSODE_WITH_MPI=OFF without an MPI; -DSODE_WITH_RDMA=OFF without cmake
# and clang for the verbs crate.)
set -euo pipefail
prefix=${1:?usage: bash ci/install.sh PREFIX [cmake -D options]}
shift
cd "$(dirname "$0")/.."
build=${SODE_CMAKE_BUILD:-target/cmake-capi}
cmake -S capi -B "$build" -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build" -j 2
cmake --install "$build" >/dev/null
echo "sode installed into $prefix"
