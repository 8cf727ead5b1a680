#!/usr/bin/env python3
"""Renders the fleet figures one `bench/fleet.sh` run recorded (its figures.jsonl) as markdown, one table per kind.

For a run whose printed tables were lost (benches/fleet.rs prints them once every kind has finished, so a kind that
crashes takes the others' tables with it): the figures are written as each kind finishes, and this shows them.
Usage: bench/fleet_figures.py FIGURES.jsonl >> fleet.md
"""

import json
import sys


def num(v):
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.3g}"


def main(path):
    kinds = {}
    for line in open(path):
        if not line.strip():
            continue
        f = json.loads(line)
        parts = f["key"].split(".")
        if parts[0] != "fleet" or len(parts) < 3:
            continue
        kinds.setdefault(parts[1], []).append(f)
    for kind, figures in kinds.items():
        print(f"\n#### Recorded figures: {kind}\n")
        print("| figure | median (min-max) |")
        print("| --- | --- |")
        for f in figures:
            spread = f" ({num(f['min'])}-{num(f['max'])})" if f["n"] > 1 and f["min"] != f["max"] else ""
            print(f"| {f['label']} | {num(f['median'])} {f['unit']}{spread} |")


if __name__ == "__main__":
    main(sys.argv[1])
