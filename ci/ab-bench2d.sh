#!/usr/bin/env bash
# Two builds of sode's C library under one bench2d, alternating which goes
# first, ROUNDS times: per block size, the median of each build's sode
# medians (least exchange) and old / new (above 1: the new build is
# faster), for the program's arrays and for fields sode keeps.
#
#   OLD_LIB=/tmp/old-prefix/lib bash ci/ab-bench2d.sh            # shared memory, here
#   OLD_LIB=... TRANSPORT=rdma N=4 bash ci/ab-bench2d.sh          # over rxe0 (boots the SoftRoCE VM)
#
# OLD_LIB: the lib directory of the other build's install
# (`bash ci/install.sh PREFIX` in its tree). NEW_LIB: this tree's
# (target/capi-prefix/lib, from ci/capi.sh or ci/install.sh). EXE: the
# bench2d to run (target/capi-examples/bench2d), which loads whichever
# library LD_LIBRARY_PATH names first. N: ranks (2). ROUNDS: 5. ARGS:
# bench2d's own (its rounds, divisor, largest block, then levels, fields
# and halo: "3 4 256"). TRANSPORT: SODE_TRANSPORT for the ranks (shm,
# tcp, rdma; unset: sode's choice).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
old=${OLD_LIB:?set OLD_LIB to the lib directory of the other build}
new=${NEW_LIB:-$root/target/capi-prefix/lib}
exe=${EXE:-$root/target/capi-examples/bench2d}
n=${N:-2}
rounds=${ROUNDS:-5}
args=${ARGS:-3 4 256}
transport=${TRANSPORT:-}
for lib in "$old" "$new"; do
  ls "$lib"/libsode_mpi.so* >/dev/null 2>&1 || { echo "ab-bench2d: no libsode_mpi.so in $lib" >&2; exit 1; }
done
[ -x "$exe" ] || { echo "ab-bench2d: $exe is missing: run ci/capi.sh first" >&2; exit 1; }
for lib in "$old" "$new"; do
  LD_LIBRARY_PATH=$lib ldd "$exe" | grep -q "libsode_mpi.so.* => $lib/" || {
    echo "ab-bench2d: $exe does not load libsode_mpi from $lib given first in LD_LIBRARY_PATH (built with an RPATH rather than a RUNPATH?)" >&2
    exit 1
  }
done
if [ "$transport" = rdma ] && [ -z "$(ls -A /sys/class/infiniband 2>/dev/null)" ]; then
  exec bash "$root/ci/softroce/run.sh" env OLD_LIB="$old" NEW_LIB="$new" EXE="$exe" N="$n" \
    ROUNDS="$rounds" ARGS="$args" TRANSPORT=rdma bash "$root/ci/ab-bench2d.sh"
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mpirun=(mpirun --oversubscribe --mca btl self,vader -n "$n")
[ "$(id -u)" -eq 0 ] && mpirun+=(--allow-run-as-root)
[ -n "$transport" ] && mpirun+=(-x "SODE_TRANSPORT=$transport")
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) = 1 ]; then order="old new"; else order="new old"; fi
  for which in $order; do
    if [ "$which" = old ]; then lib=$old; else lib=$new; fi
    # shellcheck disable=SC2086 # bench2d's arguments are words
    if ! timeout 600 "${mpirun[@]}" -x "LD_LIBRARY_PATH=$lib" "$exe" $args > "$out/$which-$r" 2>&1; then
      cat "$out/$which-$r" >&2
      echo "ab-bench2d: round $r, the $which build failed" >&2
      exit 1
    fi
    echo "round $r: $which done" >&2
  done
done
head -n 1 "$out/new-1"
echo "old: $old; new: $new; $rounds rounds, alternating"
echo
python3 - "$out" <<'EOF'
import collections, statistics, sys
from pathlib import Path
runs = collections.defaultdict(list)
for path in sorted(Path(sys.argv[1]).iterdir()):
    which = path.name.split("-")[0]
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 6 and " x " in cells[0]:
            runs[(cells[0], which)].append([float(c) for c in cells[2:6]])
blocks = list(dict.fromkeys(block for block, _ in runs))
if not blocks:
    sys.exit("ab-bench2d: no table rows in bench2d's output")
print("| block per rank | sode old | sode new | old / new | sode shared old | sode shared new | old / new |")
print("|---|---:|---:|---:|---:|---:|---:|")
for block in blocks:
    old, new = runs[(block, "old")], runs[(block, "new")]
    cells = []
    for median, least in ((0, 1), (2, 3)):
        mo = statistics.median(r[median] for r in old)
        mn = statistics.median(r[median] for r in new)
        cells += [f"{mo:.1f} ({min(r[least] for r in old):.1f})",
                  f"{mn:.1f} ({min(r[least] for r in new):.1f})", f"{mo / mn:.2f}"]
    print(f"| {block} | " + " | ".join(cells) + " |")
EOF
