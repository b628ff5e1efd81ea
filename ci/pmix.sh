#!/usr/bin/env bash
# The PMIx bootstrap: the structure layouts sode assumes match the installed
# headers; the Rust stencil runs under plain `mpirun -n 4` (no SODE_ROOT),
# bit for bit; a rank variable without SODE_ROOT or a PMIx server is a named
# error.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "-- pmix_proc_t, pmix_value_t and pmix_info_t as job/src/sys/pmix.rs lays them out"
inc=$(pkg-config --cflags pmix 2>/dev/null || echo "-I/usr/lib/x86_64-linux-gnu/pmix2/include")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/layout.c" <<'C'
#include <pmix.h>
#include <stddef.h>
#include <stdio.h>
int main(void) {
    printf("%zu %zu %zu %zu %zu %d %d %d %d %zu %zu %zu %d %d %d\n", sizeof(pmix_proc_t),
           offsetof(pmix_proc_t, rank), sizeof(pmix_value_t), offsetof(pmix_value_t, data),
           sizeof(pmix_byte_object_t), PMIX_UINT16, PMIX_UINT32, PMIX_BYTE_OBJECT, PMIX_GLOBAL,
           sizeof(pmix_info_t), offsetof(pmix_info_t, flags), offsetof(pmix_info_t, value), PMIX_INT,
           PMIX_ERR_TIMEOUT, PMIX_MAX_KEYLEN);
    return 0;
}
C
# shellcheck disable=SC2086
cc $inc "$tmp/layout.c" -o "$tmp/layout"
got=$("$tmp/layout")
want="260 256 32 8 16 13 14 27 3 552 512 520 6 -24 511"
[ "$got" = "$want" ] || { echo "error: PMIx layout '$got', sode assumes '$want'" >&2; exit 1; }
echo "ok $got"

echo "-- mpirun -n 4 target/release/examples/stencil (through PMIx, no SODE_ROOT)"
cargo build --release --locked -p sode-examples --example stencil
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
