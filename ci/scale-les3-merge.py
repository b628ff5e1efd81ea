#!/usr/bin/env python3
"""Merges the rounds of ci/scale-les3.sh into one markdown table.

    python3 ci/scale-les3-merge.py DIR MODEL

DIR holds each round's output: sode-R (the scale_les3 example's table) and
mpi-R (scale_les3_mpi's rows), rows of the form
| k | set | algorithm | median us | min us | mean us | simulated us |.
Each point's median is the median of its rounds' medians; its minimum the
least over every exchange of every round; "MPI / this" is MPI's median over
the row's (above 1: sode is faster). Exits 1 if a round lacks a point
another round has.
"""
import statistics
import sys
from pathlib import Path


def rows(path):
    """The data rows of one round's table: {(k, set, algorithm): fields}."""
    found = {}
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and cells[0].isdigit():
            k, set_, alg, median, least, _mean, simulated = cells
            found[(int(k), set_, alg)] = (float(median), float(least), simulated)
    return found


def main():
    out, model = Path(sys.argv[1]), sys.argv[2]
    rounds = sorted(out.iterdir())
    tables = [rows(p) for p in rounds]
    points = {}
    order = []
    for path, table in zip(rounds, tables):
        if not table:
            print(f"scale-les3: {path.name} has no rows", file=sys.stderr)
            return 1
        for key, value in table.items():
            if key not in points:
                points[key] = []
                order.append(key)
            points[key].append(value)
    for path, table in zip(rounds, tables):
        side_is_mpi = path.name.startswith("mpi")
        for key in order:
            if (key[2] == "mpi-persistent") == side_is_mpi and key not in table:
                print(f"scale-les3: k = {key[0]} {key[1]} {key[2]} is missing from {path.name}", file=sys.stderr)
                return 1
    median = {key: statistics.median(v[0] for v in vals) for key, vals in points.items()}
    print(f"| k | set | algorithm | median us | rounds' medians | min us | simulated us ({model} model) | MPI / this |")
    print("|---:|---|---|---:|---|---:|---:|---:|")
    # Per (k, set): sode's rows in the example's order, then MPI's.
    groups = {}
    for key in order:
        groups.setdefault(key[:2], []).append(key)
    auto = []
    for (k, set_), keys in groups.items():
        keys.sort(key=lambda key: key[2] == "mpi-persistent")
        mpi = median.get((k, set_, "mpi-persistent"))
        for key in keys:
            vals = points[key]
            spread = "-".join(f"{x:.1f}" for x in (min(v[0] for v in vals), max(v[0] for v in vals)))
            least = min(v[1] for v in vals)
            simulated = vals[0][2]
            ratio = "-" if key[2] == "mpi-persistent" or mpi is None else f"{mpi / median[key]:.2f}"
            if key[2] in ("auto", "-") and mpi is not None:
                auto.append((mpi / median[key], k, set_, key[2]))
            print(f"| {k} | {set_} | {key[2]} | {median[key]:.1f} | {spread} | {least:.1f} | {simulated} | {ratio} |")
    if auto:
        ahead = sum(1 for r, *_ in auto if r >= 1)
        worst = min(auto)
        who = "sode's auto plan" if worst[3] == "auto" else "sode"
        print()
        print(f"{who}: MPI's median at least sode's at {ahead} of {len(auto)} points; "
              f"lowest MPI / sode {worst[0]:.2f} (k = {worst[1]}, {worst[2]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
