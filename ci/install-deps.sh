#!/usr/bin/env bash
# Installs what building and testing sode needs on a fresh Debian 12 machine
# with a Rust toolchain (rustup). Safe to run again: it only installs what is
# missing.
set -euo pipefail

# Debian packages the workspace needs to build (C compiler for -sys crates).
# libhwloc-dev: sode-shm reports the topology and binds ranks through hwloc.
# cmake, clang, libclang-dev: sode-transport's verbs crate (rdma-mummy-sys)
# builds its libibverbs loader with cmake and its bindings with bindgen.
# libibverbs1: loaded at run time (without it the transport says so).
# openmpi-bin, libopenmpi-dev, gfortran: the C and Fortran examples, built
# against an installed sode and run under mpirun (ci/capi.sh); libpmix-dev:
# the PMIx headers sode's layouts are checked against (ci/pmix.sh; sode
# itself loads libpmix.so.2 at run time); valgrind: ci/capi.sh runs
# examples under memcheck, as users look for their own memory errors.
# g++: the C++ example (ci/capi.sh, ci/mpich.sh).
apt_packages=(gcc g++ pkg-config libhwloc-dev cmake clang libclang-dev libibverbs1
              openmpi-bin libopenmpi-dev gfortran libpmix-dev valgrind)

missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing Debian packages: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}"
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "error: cargo not found. Install Rust with rustup (https://rustup.rs) and run this again." >&2
  exit 1
fi
for component in rustfmt clippy; do
  if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1; then
    echo "installing the Rust component $component"
    rustup component add "$component"
  fi
done
