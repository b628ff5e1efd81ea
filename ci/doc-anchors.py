#!/usr/bin/env python3
"""Every link to a heading of a Markdown page ([text](page.md#anchor) or
[text](#anchor)) names a heading that page has, as GitHub makes anchors of
headings: lower case, punctuation but hyphens and underscores dropped,
spaces made hyphens, a repeated heading numbered -1, -2...

    python3 ci/doc-anchors.py README.md docs/*.md
"""
import os
import re
import sys

LINK = re.compile(r"\]\(([^)\s]*#[^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def slug(text):
    text = re.sub(r"`|\*\*|\*|_(?=\W)|(?<=\W)_", "", text)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = "".join(c for c in text.lower() if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(path):
    seen, out, fenced = {}, set(), False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            m = None if fenced else HEADING.match(line)
            if m:
                base = slug(m.group(2))
                n = seen.get(base, 0)
                seen[base] = n + 1
                out.add(base if n == 0 else f"{base}-{n}")
    return out


def main(pages):
    cache, bad = {}, 0
    for page in pages:
        with open(page, encoding="utf-8") as f:
            text = f.read()
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue
            path, anchor = target.split("#", 1)
            dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            if not dest.endswith(".md") or not os.path.exists(dest):
                continue  # a missing file is reported by docs.sh
            if dest not in cache:
                cache[dest] = anchors(dest)
            if anchor not in cache[dest]:
                print(f"docs: {page} links to {target}: {dest} has no heading with that anchor", file=sys.stderr)
                bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
