# Sourced by the real-client scripts (ci/tealeaf.sh, ci/minighost.sh):
# where the clients' sources are, an installed sode to build against, and
# mpirun.
#
# The clients are public mini-apps kept outside the project (SODE_CLIENTS,
# else ../shared/clients beside the checkout); the project holds only its
# patches (ci/clients/*.patch). Each script copies a client's sources into
# target/clients/, builds the MPI original and the patched port there with
# the same flags, and compares every number they print.

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
clients=${SODE_CLIENTS:-$root/../shared/clients}
work=$root/target/clients
prefix=${SODE_PREFIX:-$root/target/capi-prefix}

mpirun=(mpirun --oversubscribe)
[ "$(id -u)" -eq 0 ] && mpirun+=(--allow-run-as-root)

# Whether a client's sources are there; if not, says so loudly (the
# caller then skips: the clients are test data kept outside the project).
have_client() { # folder under $clients
  [ -d "$clients/$1" ] && return 0
  echo "SKIPPED: $clients/$1 not found (set SODE_CLIENTS to the folder holding the real clients)"
  return 1
}

# An installed sode with its Fortran module (ci/install.sh when absent).
installed_sode() {
  if [ ! -f "$prefix/lib/pkgconfig/sode_fortran.pc" ]; then
    bash "$root/ci/install.sh" "$prefix" >/dev/null
  fi
  export PKG_CONFIG_PATH="$prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
}

# Fresh copies of a client's sources: $work/NAME-mpi (the original) and
# $work/NAME-sode (with ci/clients/NAME.patch applied).
fresh_copies() { # name, sources
  rm -rf "$work/$1-mpi" "$work/$1-sode"
  mkdir -p "$work"
  cp -r "$2" "$work/$1-mpi"
  cp -r "$2" "$work/$1-sode"
  patch -s -d "$work/$1-sode" -p1 < "$root/ci/clients/$1.patch"
}

# Lines added and removed by a port's patch.
patch_size() { # name
  awk '/^(\+\+\+|---) /{next} /^\+/{a++} /^-/{r++} END{printf "%d lines added, %d removed\n", a, r}' \
    "$root/ci/clients/$1.patch"
}

# A TeaLeaf input deck at OUT: the states, mesh and first time step of
# Benchmarks/BENCH.in, then the given settings (solver, steps, checks).
tealeaf_deck() { # out, bench, settings...
  local out=$1 bench=$2
  shift 2
  {
    echo "*tea"
    sed -n '/^state/p; /_cells=/p; /^[xy]m[ai][nx]=/p; /initial_timestep/p' "$clients/tealeaf/Benchmarks/$bench.in"
    printf '%s\n' "$@"
    echo "*endtea"
  } > "$out"
}
