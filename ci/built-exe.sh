#!/usr/bin/env bash
# Builds one test or bench target (optimised, locked) and prints the path of
# its executable, for scripts that run it elsewhere (in a VM) or by hand:
#   bash ci/built-exe.sh test PACKAGE TARGET
#   bash ci/built-exe.sh bench PACKAGE TARGET
#   bash ci/built-exe.sh lib PACKAGE LIBNAME     # the library's unit tests
set -euo pipefail
kind=$1 package=$2 target=$3
case $kind in test | bench | lib) ;; *) echo "built-exe: the kind is test, bench or lib, not '$kind'" >&2; exit 2 ;; esac
select=("--$kind" "$target")
if [ "$kind" = lib ]; then kind=test select=(--lib); fi
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# `cargo bench` builds in release already (and takes no --release).
profile=()
[ "$kind" = test ] && profile=(--release)
cargo "$kind" "${profile[@]}" --locked -p "$package" "${select[@]}" --no-run --message-format=json \
  | python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == sys.argv[1]:
        print(m["executable"])' "$target"
