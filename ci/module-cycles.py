#!/usr/bin/env python3
"""Fails when a module of a crate imports one that imports it back
(directly or round a longer loop): `use crate::a::...` lines, comments
and tests left out; `crate::a::b` counts as module `a::b` when a/b.rs
exists, so a leaf module inside another is its own node.

    python3 ci/module-cycles.py halo/src capi/src
"""
import os
import re
import sys

USE = re.compile(r"\bcrate::([a-z_][a-z0-9_]*)(?:::([a-z_][a-z0-9_]*))?")


def module_of(root, path):
    rel = os.path.relpath(path, root)[:-3]
    parts = [p for p in rel.split("/") if p != "mod"]
    return "::".join(parts) if parts != ["lib"] else "crate"


def target(root, a, b):
    if b and os.path.exists(os.path.join(root, a, b + ".rs")):
        return f"{a}::{b}"
    return a


def graph(root):
    g = {}
    for dp, _, files in os.walk(root):
        for f in files:
            if not f.endswith(".rs"):
                continue
            path = os.path.join(dp, f)
            me = module_of(root, path)
            # The top two levels name a node (`sys::memory`), as `target`.
            node = "::".join(me.split("::")[:2]) if me.count("::") else me
            deps = g.setdefault(node, set())
            code = open(path).read().split("#[cfg(test)]")[0]
            for line in code.splitlines():
                line = line.split("//")[0]
                for m in USE.finditer(line):
                    t = target(root, m.group(1), m.group(2))
                    if t != node and not node.startswith(t + "::") and not t.startswith(node + "::"):
                        deps.add(t)
    # A node `a` that is only a directory's mod.rs also stands for its
    # other files' imports (a submodule counts as part of its parent, unless
    # named as a node of its own).
    return g


def cycles(g):
    found = []
    state = {}

    def visit(n, path):
        state[n] = 1
        for d in sorted(g.get(n, ())):
            if d not in g:
                continue
            if state.get(d) == 1:
                found.append(path[path.index(d):] + [d] if d in path else [n, d])
            elif d not in state:
                visit(d, path + [d])
        state[n] = 2

    for n in sorted(g):
        if n not in state:
            visit(n, [n])
    return found


bad = False
for root in sys.argv[1:]:
    for c in cycles(graph(root)):
        print(f"module-cycles: {root}: " + " -> ".join(c), file=sys.stderr)
        bad = True
if bad:
    sys.exit(1)
print("module-cycles: no module imports one that imports it back in " + ", ".join(sys.argv[1:]))
