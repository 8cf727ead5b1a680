#!/usr/bin/env python3
"""Plots the dashboard panels' series that tests/e2e/monitoring.rs queried (LOCALPV_METRICS_PANELS) into one PNG.

Usage: metrics-picture.py PANELS.json OUT.png. Needs matplotlib (Debian: python3-matplotlib).
"""
import json
import math
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

BYTES = ("capacity", "memory", "throughput")


def label(metric):
    parts = [f"{k}={v}" for k, v in sorted(metric.items()) if k not in ("__name__", "job", "instance")]
    return ", ".join(parts) or "total"


def scale(title, values):
    if any(word in title.lower() for word in BYTES):
        top = max((abs(v) for v in values if not math.isnan(v)), default=0)
        for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if top >= size:
                return unit, size
        return "B", 1
    return "", 1


def main(panels_path, out_path):
    with open(panels_path) as f:
        panels = json.load(f)
    titles = list(panels)
    cols = 3
    rows = math.ceil(len(titles) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(cols * 5.2, rows * 2.9), squeeze=False)
    for ax in axes.flat[len(titles):]:
        ax.set_visible(False)
    for ax, title in zip(axes.flat, titles):
        series = panels[title]
        start = min((float(s["values"][0][0]) for s in series if s["values"]), default=0)
        values = [float(v) for s in series for _, v in s["values"]]
        unit, size = scale(title, values)
        for s in series:
            xs = [float(t) - start for t, _ in s["values"]]
            ys = [float(v) / size for _, v in s["values"]]
            ax.plot(xs, ys, label=label(s["metric"]), linewidth=1.4)
        ax.set_title(title + (f" ({unit})" if unit else ""), fontsize=9)
        ax.tick_params(labelsize=7)
        ax.set_xlabel("seconds into the run", fontsize=7)
        ax.grid(alpha=0.3)
        if 0 < len(series) <= 8:
            ax.legend(fontsize=6, loc="upper left")
    fig.suptitle("localpv dashboard panels, Prometheus over a test run (tests/e2e/monitoring.rs)", fontsize=11)
    fig.tight_layout()
    fig.savefig(out_path, dpi=80)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
