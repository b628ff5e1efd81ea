#!/usr/bin/env bash
# Installs what the SoftRoCE VM needs on a Debian 12 host and prepares the
# guest kernel: Debian's stock kernel (the package linux-image-amd64 points
# at), which ships rdma_rxe. Idempotent: installs only what is missing and
# keeps the kernel in a cache.
#
# Prints the path of the kernel image on its last line.
set -euo pipefail
# pip puts console scripts (vng) here; pyenv shims may not know them yet.
PATH="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"
export PATH

sudo_cmd=""
[ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"

# openmpi-bin, libopenmpi-dev: the MPI persistent exchange sode is compared
# with (its UCX runs over rxe0 in the guest). mpich, libmpich-dev: the
# second MPI (mpicc.mpich, mpirun.mpich; the default mpicc stays Open
# MPI's).
apt_packages=(qemu-system-x86 rdma-core ibverbs-providers ibverbs-utils perftest
              iproute2 kmod busybox-static cmake clang openmpi-bin libopenmpi-dev
              mpich libmpich-dev)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing Debian packages: ${missing[*]}" >&2
  $sudo_cmd apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >&2
fi

if ! command -v vng >/dev/null 2>&1; then
  echo "installing virtme-ng (pip)" >&2
  python3 -m pip install -q virtme-ng >&2
  hash -r
fi
command -v vng >/dev/null 2>&1 || { echo "error: vng not on PATH after pip install virtme-ng" >&2; exit 1; }

# The current kernel package behind the linux-image-amd64 metapackage.
pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
[ -n "$pkg" ] || { echo "error: cannot resolve the kernel package of linux-image-amd64 (apt-get update?)" >&2; exit 1; }
kver=${pkg#linux-image-}
cache=${SODE_KERNEL_CACHE:-$HOME/.cache/sode/kernel}/$kver
if [ ! -f "$cache/root/boot/vmlinuz-$kver" ]; then
  echo "downloading $pkg" >&2
  rm -rf "$cache" && mkdir -p "$cache"
  (cd "$cache" && apt-get download "$pkg" >&2 2>/dev/null || apt-get download "$pkg" >&2)
  dpkg -x "$cache"/"$pkg"_*.deb "$cache/root"
  rm -f "$cache"/"$pkg"_*.deb
fi
# The guest shares the host's root filesystem, so modprobe in the guest looks
# in the host's /lib/modules/<version>.
if [ ! -e "/lib/modules/$kver/kernel" ]; then
  $sudo_cmd mkdir -p /lib/modules
  $sudo_cmd ln -sfn "$cache/root/lib/modules/$kver" "/lib/modules/$kver"
fi
echo "$cache/root/boot/vmlinuz-$kver"
