#!/usr/bin/env bash
# In the guest: ib_write_bw over rxe0, server and client on the same device,
# as the reference the transport's benchmarks are compared against.
set -euo pipefail
args=(-d rxe0 -x 1 -s 65536 -n 200 -F --report_gbits)
server_log=/tmp/sode-bw-server.log
# Both sides time-boxed: the guest's stdout is no terminal, so a hung
# ib_write_bw would otherwise print nothing until the VM's own timeout.
timeout 120 ib_write_bw "${args[@]}" >"$server_log" 2>&1 &
server=$!
# The client gives up at once if the server does not listen yet (perftest's
# port 18515); under emulation its start may take more than a second.
for _ in $(seq 300); do
  ss -ltn 'sport = :18515' | grep -q LISTEN && break
  sleep 0.1
done
client=0
timeout 120 stdbuf -oL ib_write_bw "${args[@]}" 10.77.0.1 || client=$?
served=0
wait "$server" || served=$?
if [ "$client" != 0 ] || [ "$served" != 0 ]; then
  [ "$client" = 124 ] && echo "smoke: the ib_write_bw client did not finish in 120 s" >&2
  [ "$served" = 124 ] && echo "smoke: the ib_write_bw server did not finish in 120 s" >&2
  echo "smoke: ib_write_bw over rxe0 failed (client status $client, server status $served); the server's output:" >&2
  cat "$server_log" >&2
  exit 1
fi
