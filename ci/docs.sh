#!/usr/bin/env bash
# The documentation as users meet it: the README is a front page (at most
# 300 lines); the docs describe sode, not how it was built (no issue
# numbers, sessions, "this machine" or earlier builds); every relative link
# in them leads to a file that exists, and every link to a heading to a
# heading that page has; no table is broken by text between its rows;
# every results page names a date; the Spack package parses.
#   bash ci/docs.sh
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
lines=$(wc -l < README.md)
if [ "$lines" -gt 300 ]; then
  echo "docs: README.md has $lines lines, at most 300" >&2
  status=1
fi
docs=(README.md ARCHITECTURE.md CHANGELOG.md docs/*.md docs/results/*.md)
narration='this machine|this session|same session|previous (build|session)|the last build|issue [0-9]+|the commit before'
if grep -n -i -E "$narration" "${docs[@]}" || grep -n -E 'host [AB]\b' "${docs[@]}"; then
  echo "docs: the lines above narrate how sode was built, not what it is" >&2
  status=1
fi
for f in "${docs[@]}"; do
  dir=$(dirname "$f")
  # [text](target) links that are not URLs or in-page anchors.
  while IFS= read -r target; do
    path=${target%%#*}
    [ -z "$path" ] && continue
    if [ ! -e "$dir/$path" ]; then
      echo "docs: $f links to $target, which does not exist" >&2
      status=1
    fi
  done < <(grep -o -E '\]\([^)#][^)]*\)' "$f" | sed -E 's/^\]\(//; s/\)$//' | grep -v -E '^[a-z]+:' || true)
done
python3 ci/doc-anchors.py "${docs[@]}" || status=1
# A row right after a line of text (no blank line) belongs to no table:
# text put between a table's rows cuts the table there.
awk 'FNR == 1 { prev = ""; code = 0 }
  /^```/ { code = !code; prev = $0; next }
  !code && /^\|/ && prev != "" && prev !~ /^\|/ {
    print "docs: " FILENAME ":" FNR ": a table row right after text (a blank line or a header before it?)" > "/dev/stderr"; bad = 1 }
  { prev = $0 }
  END { exit bad }' "${docs[@]}" || status=1
for f in docs/results/*.md; do
  [ "$(basename "$f")" = README.md ] && continue
  grep -q -E '20[0-9]{2}-[0-9]{2}-[0-9]{2}' "$f" || { echo "docs: $f names no date" >&2; status=1; }
done
python3 -c 'import ast, sys; ast.parse(open(sys.argv[1]).read())' packaging/spack/packages/sode/package.py \
  || { echo "docs: the Spack package does not parse" >&2; status=1; }
[ "$status" -eq 0 ] && echo "docs: README.md $lines lines; no narration; every link and heading link resolves; tables whole; every results page dated"
exit "$status"
