#!/usr/bin/env bash
# The PMIx bootstrap: the structure layouts sode assumes match the installed
# headers; the Rust stencil runs under plain `mpirun -n 4` (no SODE_ROOT),
# bit for bit; a rank variable without SODE_ROOT or a PMIx server is a named
# error.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "-- pmix_proc_t and pmix_value_t as job/src/sys/pmix.rs lays them out"
inc=$(pkg-config --cflags pmix 2>/dev/null || echo "-I/usr/lib/x86_64-linux-gnu/pmix2/include")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/layout.c" <<'C'
#include <pmix.h>
#include <stddef.h>
#include <stdio.h>
int main(void) {
    printf("%zu %zu %zu %zu %zu %d %d %d %d\n", sizeof(pmix_proc_t), offsetof(pmix_proc_t, rank),
           sizeof(pmix_value_t), offsetof(pmix_value_t, data), sizeof(pmix_byte_object_t),
           PMIX_UINT16, PMIX_UINT32, PMIX_BYTE_OBJECT, PMIX_GLOBAL);
    return 0;
}
C
# shellcheck disable=SC2086
cc $inc "$tmp/layout.c" -o "$tmp/layout"
got=$("$tmp/layout")
want="260 256 32 8 16 13 14 27 3"
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
