#!/usr/bin/env bash
# Builds one test or bench target (optimised, locked) and prints the path of
# its executable, for scripts that run it elsewhere (in a VM) or by hand:
#   bash ci/built-exe.sh test PACKAGE TARGET
#   bash ci/built-exe.sh bench PACKAGE TARGET
#   bash ci/built-exe.sh lib PACKAGE LIBNAME     # the library's unit tests
# It builds as `cargo test --workspace --release` does (the features of the
# whole workspace), so a run that has built the workspace's tests builds
# nothing here, and `cargo test --workspace --release` reuses what this builds.
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
cargo "$kind" "${profile[@]}" --locked --workspace "${select[@]}" --no-run --message-format=json \
  | python3 -c 'import json, sys
package, target = sys.argv[1], sys.argv[2]
def package_of(m):
    # "path+file:///dir/halo#sode@0.1.0", or "path+file:///dir/job#0.1.0"
    # when the directory is named as the package.
    where, _, spec = m["package_id"].rpartition("#")
    return spec.rpartition("@")[0] or where.rstrip("/").rsplit("/", 1)[-1]
found = [m["executable"] for m in map(json.loads, sys.stdin)
         if m.get("reason") == "compiler-artifact" and m.get("executable")
         and m["target"]["name"] == target and package_of(m) == package]
if not found:
    sys.exit("built-exe: no executable of target %s in package %s" % (target, package))
print(found[0])' "$package" "$target"
