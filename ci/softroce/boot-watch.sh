# Sourced by the scripts that boot several VMs (cluster.sh, three-nodes.sh):
# a boot under emulation hangs now and then before the guest's command
# runs. boots_up waits until each node named has left its mark
# $out/NODE.ready (its network and rxe up), or until their VMs have all
# ended; past SODE_VM_BOOT_TIMEOUT (240 s; a boot takes 15-30 s) it stops
# every VM named (the pid in $out/pid-NODE: the timeout that runs it) and
# returns 1, so that the caller may boot them all again.
boots_up() {
  local waited=0 n pid all alive
  while :; do
    all=1 alive=0
    for n in "$@"; do
      [ -f "$out/$n.ready" ] || all=0
      # No pid yet: its boot is just starting.
      pid=$(cat "$out/pid-$n" 2>/dev/null) || { alive=1; continue; }
      kill -0 "$pid" 2>/dev/null && alive=1
    done
    { [ $all = 1 ] || [ $alive = 0 ]; } && return 0
    if [ "$waited" -ge "${SODE_VM_BOOT_TIMEOUT:-240}" ]; then
      echo "boot: a node of '$*' was not up ${waited} s after its boot: stopping the VMs" >&2
      for n in "$@"; do kill "$(cat "$out/pid-$n" 2>/dev/null)" 2>/dev/null || true; done
      return 1
    fi
    sleep 1
    waited=$((waited + 1))
  done
}
