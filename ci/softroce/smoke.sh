#!/usr/bin/env bash
# In the guest: ib_write_bw over rxe0, server and client on the same device,
# as the reference the transport's benchmarks are compared against.
set -euo pipefail
ib_write_bw -d rxe0 -x 1 -s 65536 -n 200 -F --report_gbits >/tmp/sode-bw-server.log 2>&1 &
server=$!
sleep 1
ib_write_bw -d rxe0 -x 1 -s 65536 -n 200 -F --report_gbits 10.77.0.1
wait "$server"
