#!/usr/bin/env bash
# How steady the shared-memory threshold probe is beside a busy process:
# runs `sode-shm-check probe` PROBES times (default 10) while a shell loop
# keeps one core busy (QUIET=1: no busy loop), and prints how often each
# set of thresholds came out. With OLD set to another build's
# sode-shm-check, the two alternate and each line names its build.
#
#   bash ci/probe-load.sh
#   OLD=/tmp/old/sode-shm-check PROBES=10 bash ci/probe-load.sh
#   QUIET=1 bash ci/probe-load.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
probes=${PROBES:-10}
cargo build --release --locked -p sode-shm --bin sode-shm-check >&2
new="$root/target/release/sode-shm-check"
builds=(new)
[ -n "${OLD:-}" ] && builds=(old new)
exe() { if [ "$1" = old ]; then echo "$OLD"; else echo "$new"; fi; }
busy=
if [ -z "${QUIET:-}" ]; then
  sh -c 'while :; do :; done' &
  busy=$!
  trap 'kill $busy 2>/dev/null' EXIT
fi
for _ in $(seq "$probes"); do
  for b in "${builds[@]}"; do
    # The probe file would hand back the first probe's thresholds.
    line=$(SODE_SHM_PROBE_CACHE=off "$(exe "$b")" probe | grep '^thresholds:') || {
      echo "probe-load: $b build's probe failed" >&2
      exit 1
    }
    echo "$b: ${line#thresholds: }"
  done
done | sed -E 's/ +/ /g; s/ \((private receive buffers|shared fields)\)//g' | sort | uniq -c
