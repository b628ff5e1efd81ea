# Sourced by every script that boots SoftRoCE VMs (run.sh, cluster.sh,
# three-nodes.sh). Needs $out, the run's directory.
#
# A boot under emulation hangs now and then before the guest's command runs,
# and a busy host may take minutes over a boot that takes 15-50 s on an
# idle one. To tell the two apart, each VM boots with vng -v: its kernel
# and init write their progress to the VM's console, kept in
# $out/vm-NODE.log (vm_output makes the pipe to send it to).
#
# boots_up NODE... waits until each node named has left its mark
# $out/NODE.ready (its network and rxe up), or until their VMs have all
# ended. A node whose console has not grown for SODE_VM_BOOT_STALL (120 s),
# or that is not up within SODE_VM_BOOT_TIMEOUT (600 s), counts as hung:
# the host's state and each such node's last console lines are printed,
# every VM named is stopped (the pid in $out/pid-NODE: the timeout that
# runs it), and boots_up returns 1 so that the caller may boot them all
# again. A node whose kernel panicked counts as hung at once.
#
# vm_start boots a VM: its command goes in a script in $out (vm_command),
# after a check of the kernel command line vng would build
# (vm_cmdline_fits).

# vm_output NODE: makes $out/vm-NODE.pipe, a pipe whose every byte lands in
# $out/vm-NODE.log (copied by a child of the caller's shell). QEMU
# opens its stdout and stderr once per port (console, the guest's stdout,
# stderr); on a regular file each open would truncate it and write over the
# others' lines, on a pipe they interleave.
vm_output() {
  rm -f "$out/vm-$1.pipe" "$out/vm-$1.log"
  mkfifo "$out/vm-$1.pipe"
  cat "$out/vm-$1.pipe" >"$out/vm-$1.log" &
}

# vm_command NODE VNG-ARGS... -- COMMAND: the vng command line (one
# argument a line, for readarray) that boots NODE with VNG-ARGS and runs
# COMMAND, a shell command, there. vng would pass an --exec command
# base64-encoded on the kernel's command line, which holds 2047 bytes;
# Debian's kernel panics at its first instruction on a longer one, and a
# command that names every RDMA test executable by its path is longer
# wherever the checkout's path is. So the command goes to a script in $out
# (shared with the guest) and the kernel is told only the script's path.
vm_command() {
  local node=$1 arg
  shift
  local -a args=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do args+=("$1"); shift; done
  [ $# -gt 0 ] || { echo "boot: vm_command: no -- before the guest's command" >&2; return 1; }
  shift
  printf '%s\n' "$*" >"$out/exec-$node.sh"
  args+=(--exec "bash $out/exec-$node.sh")
  vm_cmdline_fits "${args[@]}" || return 1
  for arg in "${args[@]}"; do printf '%s\n' "$arg"; done
}

# vm_start NODE WHAT VNG-ARGS... -- COMMAND: boots NODE in the background
# (vm_command), under a timeout of SODE_VM_TIMEOUT (900 s) whose pid goes
# to $out/pid-NODE. Its console goes to $out/vm-NODE.log (vm_output): QEMU's
# stderr when WHAT is "console" (the guest's stdout stays the caller's),
# all it prints when WHAT is "all". Returns 1 when the VM cannot be
# started; $out/pid-NODE then names a process that has ended, so that
# boots_up sees the node gone.
vm_start() {
  local node=$1 what=$2
  shift 2
  local -a vm
  if ! vm_command "$node" "$@" >"$out/vm-$node.args"; then
    echo "$BASHPID" >"$out/pid-$node"
    return 1
  fi
  readarray -t vm <"$out/vm-$node.args"
  vm_output "$node"
  # timeout runs vng in a process group of its own and passes a TERM on to
  # all of it, QEMU included.
  if [ "$what" = all ]; then
    timeout "${SODE_VM_TIMEOUT:-900}" "${vm[@]}" >"$out/vm-$node.pipe" 2>&1 &
  else
    timeout "${SODE_VM_TIMEOUT:-900}" "${vm[@]}" 2>"$out/vm-$node.pipe" &
  fi
  echo $! >"$out/pid-$node"
}

# vm_cmdline_fits VNG-ARGS...: whether the kernel command line vng builds
# for these options fits the kernel's 2047 bytes; says so when it does not.
vm_cmdline_fits() {
  local len
  len=$("$@" --dry-run 2>/dev/null | python3 -c '
import shlex, sys
for line in sys.stdin:
    if " -append " in line:
        words = shlex.split(line)
        print(len(words[words.index("-append") + 1]))
') || len=
  if [ -z "$len" ]; then
    echo "boot: warning: vng --dry-run showed no kernel command line to check" >&2
    return 0
  fi
  if [ "$len" -gt 2047 ]; then
    echo "error: the guest kernel's command line would be $len bytes; the kernel takes 2047" \
      "(shorten the paths of the checkout or of the directories shared with the guest)" >&2
    return 1
  fi
}

# boot_report NODE...: what a hung boot leaves to go on.
boot_report() {
  local n
  echo "boot: the host: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)," \
    "$(awk '/MemAvailable/ { print int($2 / 1024) }' /proc/meminfo) MiB available;" \
    "$(qemu-system-x86_64 --version | head -n 1)" >&2
  echo "boot: the host's busiest processes (% CPU, running for, name):" >&2
  ps -eo pcpu=,etime=,comm= --sort=-pcpu | head -n 5 | sed 's/^/boot:   /' >&2
  for n in "$@"; do
    echo "boot: node $n's console, its last 25 lines of $(wc -l <"$out/vm-$n.log" 2>/dev/null || echo 0):" >&2
    tail -n 25 "$out/vm-$n.log" 2>/dev/null | cut -c1-240 | sed "s/^/boot:   [$n] /" >&2
  done
}

boots_up() {
  local waited=0 n pid all alive size
  local -a hung
  local stall_limit=${SODE_VM_BOOT_STALL:-120} limit=${SODE_VM_BOOT_TIMEOUT:-600}
  local -A seen=() still=()
  while :; do
    all=1 alive=0 hung=()
    for n in "$@"; do
      # No pid yet: its boot is just starting.
      if ! pid=$(cat "$out/pid-$n" 2>/dev/null) || kill -0 "$pid" 2>/dev/null; then
        alive=1
      fi
      [ -f "$out/$n.ready" ] && continue
      all=0
      size=$(stat -c %s "$out/vm-$n.log" 2>/dev/null || echo 0)
      if [ "$size" != "${seen[$n]:-}" ]; then
        seen[$n]=$size still[$n]=0
      else
        still[$n]=$((still[$n] + 1))
      fi
      if grep -q -e 'Kernel panic' -e 'PANIC: early exception' "$out/vm-$n.log" 2>/dev/null; then
        echo "boot: node $n's kernel panicked" >&2
        hung+=("$n")
      elif [ "${still[$n]}" -ge "$stall_limit" ]; then
        echo "boot: node $n's console has been silent for ${stall_limit} s" >&2
        hung+=("$n")
      fi
    done
    { [ $all = 1 ] || [ $alive = 0 ]; } && return 0
    if [ ${#hung[@]} -gt 0 ] || [ "$waited" -ge "$limit" ]; then
      if [ ${#hung[@]} -gt 0 ]; then
        echo "boot: node(s) ${hung[*]} of '$*' not up after ${waited} s: stopping the VMs" >&2
      else
        echo "boot: a node of '$*' not up after ${waited} s: stopping the VMs" >&2
        for n in "$@"; do [ -f "$out/$n.ready" ] || hung+=("$n"); done
      fi
      boot_report "${hung[@]}"
      for n in "$@"; do kill "$(cat "$out/pid-$n" 2>/dev/null)" 2>/dev/null || true; done
      return 1
    fi
    sleep 1
    waited=$((waited + 1))
  done
}
