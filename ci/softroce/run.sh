#!/usr/bin/env bash
# Boots Debian's stock kernel under software emulation with virtme-ng (the
# host's root filesystem shared), sets up SoftRoCE (rxe0) in the guest, runs
# the given command there and exits with its status.
#
#   bash ci/softroce/run.sh ib_write_bw ...     # any command, paths as on the host
#
# The guest may write to target/vm-out (results to keep).
#
# SODE_VM_TIMEOUT (900 s) bounds one guest's whole run. A boot under
# emulation hangs now and then before the command starts: a guest not up
# (rxe0 ready) within SODE_VM_BOOT_TIMEOUT (240 s; a boot takes 15-30 s) is
# stopped and booted once more, and the console says so.
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
boot_limit=${SODE_VM_BOOT_TIMEOUT:-240}
# KVM here cannot boot this kernel: software emulation (--disable-kvm).
# SODE_VM_SHAPE: the guest's CPUs, memory and NUMA nodes (vng's options).
read -ra shape <<<"${SODE_VM_SHAPE:---cpus 2 --memory 2G}"

# One boot: returns 1 if the guest did not come up within boot_limit.
boot() {
  rm -f "$out/up" "$out/status"
  # timeout runs vng in a process group of its own and passes a TERM on to
  # all of it, QEMU included.
  timeout "${SODE_VM_TIMEOUT:-900}" vng --run "$kernel" --disable-kvm "${shape[@]}" \
    --rwdir "$out" --rwdir "$results" --cwd "$PWD" \
    --exec "SODE_VM_OUT=$out bash $here/guest.sh $cmd" &
  local vm=$! waited=0
  while [ ! -f "$out/up" ] && kill -0 "$vm" 2>/dev/null; do
    if [ "$waited" -ge "$boot_limit" ]; then
      echo "softroce: the guest was not up (rxe0 ready) ${boot_limit} s after it was started: stopping it" >&2
      kill "$vm" 2>/dev/null || true
      wait "$vm" || true
      return 1
    fi
    sleep 1
    waited=$((waited + 1))
  done
  wait "$vm" || true
}

start=$(date +%s)
if ! boot; then
  echo "softroce: booting the guest again" >&2
  boot || true
fi
status=$(cat "$out/status" 2>/dev/null || echo 99)
echo "softroce: guest finished in $(( $(date +%s) - start )) s with status $status" >&2
[ "$status" = 90 ] && echo "softroce: setting up rxe0 in the guest failed" >&2
[ "$status" = 99 ] && echo "softroce: the guest did not report a status (boot failure or timeout)" >&2
exit "$status"
