#!/usr/bin/env bash
# Boots Debian's stock kernel under software emulation with virtme-ng (the
# host's root filesystem shared), sets up SoftRoCE (rxe0) in the guest, runs
# the given command there and exits with its status.
#
#   bash ci/softroce/run.sh ib_write_bw ...     # any command, paths as on the host
#
# The guest may write to target/vm-out (results to keep).
#
# SODE_VM_TIMEOUT (900 s) bounds one guest's whole run. A guest not up
# (rxe0 ready) in time is stopped, with the host's state and the guest's
# last console lines printed, and booted once more: boot-watch.sh says
# when (SODE_VM_BOOT_STALL, SODE_VM_BOOT_TIMEOUT). The guest's console
# (kernel and init) is printed too when its command fails.
#
# Build on the host first: emulated code is 10-50x slower.
set -euo pipefail
# pip puts console scripts (vng) here; pyenv shims may not know them yet.
PATH="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"
export PATH
here=$(cd "$(dirname "$0")" && pwd)
kernel=$(bash "$here/install.sh" | tail -n 1)
out=$(mktemp -d /tmp/sode-vm.XXXXXX)
# Results the guest keeps (the rest of the host's filesystem is read-only there).
results=$(cd "$here/../.." && pwd)/target/vm-out
mkdir -p "$results"
trap 'rm -rf "$out"' EXIT
cmd=$(printf '%q ' "$@")
# KVM here cannot boot this kernel: software emulation (--disable-kvm).
# SODE_VM_SHAPE: the guest's CPUs, memory and NUMA nodes (vng's options).
read -ra shape <<<"${SODE_VM_SHAPE:---cpus 2 --memory 2G}"
# shellcheck source=ci/softroce/boot-watch.sh
. "$here/boot-watch.sh"

# One boot, to the command's end: returns 1 if the guest did not come up,
# 2 if it could not be started (no retry helps).
# The guest's stdout is this script's; its console goes to
# $out/vm-guest.log (guest.sh sends the command's stderr to its stdout).
boot() {
  rm -f "$out/guest.ready" "$out/status" "$out/pid-guest"
  # --force-9p: vng would first try virtiofsd for each shared directory,
  # seconds lost each time Debian 12's (QEMU's own) refuses its options.
  vm_start guest console vng --run "$kernel" --disable-kvm --force-9p "${shape[@]}" -v \
    --rwdir "$out" --rwdir "$results" --cwd "$PWD" \
    -- "SODE_VM_OUT=$out bash $here/guest.sh $cmd" || return 2
  local pid
  pid=$(cat "$out/pid-guest")
  if ! boots_up guest; then
    wait "$pid" || true
    return 1
  fi
  wait "$pid" || true
}

start=$(date +%s)
booted=0
boot || booted=$?
if [ "$booted" = 1 ]; then
  echo "softroce: booting the guest again" >&2
  boot || true
fi
status=$(cat "$out/status" 2>/dev/null || echo 99)
# The console's copy ends when QEMU has closed the pipe.
wait
if [ "$status" != 0 ] && [ -f "$out/guest.ready" ]; then
  echo "softroce: the guest's console, its last 30 lines:" >&2
  tail -n 30 "$out/vm-guest.log" | cut -c1-240 >&2
  if [ -s "$out/command.log" ]; then
    echo "softroce: what the command said, its last 60 lines:" >&2
    tail -n 60 "$out/command.log" | cut -c1-400 >&2
  fi
fi
echo "softroce: guest finished in $(( $(date +%s) - start )) s with status $status" >&2
[ "$status" = 90 ] && echo "softroce: setting up rxe0 in the guest failed" >&2
[ "$status" = 99 ] && echo "softroce: the guest did not report a status (boot failure or timeout)" >&2
exit "$status"
