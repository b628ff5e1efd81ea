#!/usr/bin/env bash
# The PMIx bootstrap: the structure layouts sode assumes match the installed
# headers; the Rust stencil runs under plain `mpirun -n 4` (no SODE_ROOT),
# bit for bit; a rank variable without SODE_ROOT or a PMIx server is a named
# error; a rank that never joins fails the others' fence in time; a job
# stopped while it meets, for longer than its timeout, meets.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "-- pmix_proc_t, pmix_value_t and the constants as job/src/sys/pmix.rs has them"
inc=$(pkg-config --cflags pmix 2>/dev/null || echo "-I/usr/lib/x86_64-linux-gnu/pmix2/include")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/layout.c" <<'C'
#include <pmix.h>
#include <stddef.h>
#include <stdio.h>
int main(void) {
    printf("%zu %zu %zu %zu %zu %d %d %d %d %d\n", sizeof(pmix_proc_t), offsetof(pmix_proc_t, rank),
           sizeof(pmix_value_t), offsetof(pmix_value_t, data), sizeof(pmix_byte_object_t), PMIX_UINT16,
           PMIX_UINT32, PMIX_BYTE_OBJECT, PMIX_GLOBAL, PMIX_OPERATION_SUCCEEDED);
    return 0;
}
C
# shellcheck disable=SC2086
cc $inc "$tmp/layout.c" -o "$tmp/layout"
got=$("$tmp/layout")
want="260 256 32 8 16 13 14 27 3 -157"
[ "$got" = "$want" ] || { echo "error: PMIx layout '$got', sode assumes '$want'" >&2; exit 1; }
echo "ok $got"

echo "-- mpirun -n 4 target/release/examples/stencil (through PMIx, no SODE_ROOT)"
cargo build --release --locked --workspace --example stencil
mpirun=(mpirun --oversubscribe)
[ "$(id -u)" -eq 0 ] && mpirun+=(--allow-run-as-root)
out=$(timeout 300 "${mpirun[@]}" -n 4 target/release/examples/stencil 2>&1)
echo "$out"
[ "$(grep -c "bit for bit" <<<"$out")" -eq 4 ] || { echo "error: not every rank matched the single-process solve" >&2; exit 1; }

echo "-- a rank variable, and neither SODE_ROOT nor PMIx"
if err=$(env -u SODE_ROOT OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2 timeout 20 target/release/examples/stencil 2>&1); then
  echo "error: the stencil ran without a way to meet its peers" >&2; exit 1
fi
grep -q "PMIX_NAMESPACE" <<<"$err" && grep -q "SODE_ROOT" <<<"$err" || { echo "error: unhelpful message: $err" >&2; exit 1; }
echo "ok: $err"

echo "-- a rank that never joins: the others give up the PMIx fence after --timeout"
late=$(mktemp -d)
cat >"$late/late.sh" <<'SH'
#!/bin/sh
# Rank 1 is stuck before sode starts; the others run the stencil.
if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then sleep 60; exit 0; fi
exec "$@"
SH
chmod +x "$late/late.sh"
t0=$(date +%s)
err=$(timeout 120 "${mpirun[@]}" -n 2 "$late/late.sh" "$PWD/target/release/examples/stencil" --timeout 3 2>&1 || true)
took=$(( $(date +%s) - t0 ))
rm -rf "$late"
grep -q "PMIx_Fence: not every rank reached it within [23]\.[0-9] s" <<<"$err" \
  || { echo "error: no fence timeout reported: $err" >&2; exit 1; }
[ "$took" -lt 30 ] || { echo "error: the job took $took s to fail (bound 30)" >&2; exit 1; }
echo "ok in $took s: $(grep -m1 "PMIx_Fence" <<<"$err")"

echo "-- a job stopped while it meets, for longer than its timeout: it meets"
# Rank 1 stops itself before it starts, so rank 0 waits for it in a PMIx
# fence given up after 4 s; 1 s later rank 0 is stopped too, for 8 s (as
# a suspended job: the launcher's server runs on), then both continue.
stop=$(mktemp -d)
cat >"$stop/stop.sh" <<'SH'
#!/bin/sh
echo $$ > "$STOP_DIR/rank$OMPI_COMM_WORLD_RANK.pid"
if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then kill -STOP $$; fi
exec "$@"
SH
chmod +x "$stop/stop.sh"
STOP_DIR=$stop timeout 120 "${mpirun[@]}" -x STOP_DIR -n 2 "$stop/stop.sh" \
  "$PWD/target/release/examples/stencil" --size 64 --iters 10 --timeout 4 > "$stop/out" 2>&1 &
job=$!
for _ in $(seq 200); do
  [ -s "$stop/rank0.pid" ] && [ -s "$stop/rank1.pid" ] && break
  sleep 0.05
done
sleep 1
kill -STOP "$(cat "$stop/rank0.pid")"
sleep 8
kill -CONT "$(cat "$stop/rank0.pid")" "$(cat "$stop/rank1.pid")"
if ! wait "$job" || [ "$(grep -c "bit for bit" "$stop/out")" -ne 2 ]; then
  tail -5 "$stop/out"; rm -rf "$stop"
  echo "error: the job stopped for 8 s while it met did not finish bit for bit" >&2; exit 1
fi
rm -rf "$stop"
echo "ok: stopped for 8 s in a fence given up after 4 s, both ranks bit for bit"
