#!/usr/bin/env python3
"""Latency-distribution chart of the completion notifications, for docs/performance.md.

Reads one or more CSVs of latency samples ("way,us": one row per sample, as written by
`custream-completion-latency SAMPLES CSV` and `bench/peers_completion.py --csv`) and draws the
distribution of each way as a cumulative curve (log-scale microseconds), its p50 and p99 in
the legend. With --markdown it also writes the table of the same figures.

    python3 bench/plot_latency.py samples.csv [peers.csv ...] -o latency.png \
        [--markdown table.md] [--title TEXT]
"""

import argparse
import csv
import sys


def percentile(values, p):
    """The sample at rank p of the sorted values (nearest rank, as the C++ bench)."""
    v = sorted(values)
    if not v:
        return float("nan")
    return v[min(len(v) - 1, int(p * (len(v) - 1) + 0.5))]


def read(paths):
    """{way: [us, ...]} in first-seen order."""
    ways = {}
    for path in paths:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                ways.setdefault(row["way"], []).append(float(row["us"]))
    return ways


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", nargs="+", help="latency samples (way,us)")
    parser.add_argument("-o", "--output", required=True, help="the PNG to write")
    parser.add_argument("--markdown", help="also write the table here")
    parser.add_argument("--title", default="Completion notification latency (H200)")
    args = parser.parse_args()
    ways = read(args.csv)
    if not ways:
        sys.exit("plot_latency.py: no samples")
    if args.markdown:
        with open(args.markdown, "w") as md:
            md.write("| Way | p50 | p99 | max | samples |\n|---|---:|---:|---:|---:|\n")
            for way, us in ways.items():
                md.write(f"| {way} | {percentile(us, 0.5):.2f} µs | {percentile(us, 0.99):.2f} µs"
                         f" | {max(us):.2f} µs | {len(us)} |\n")
    import matplotlib  # only for the chart: the table needs nothing beyond Python

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 5.5))
    for way, us in ways.items():
        v = sorted(us)
        y = [(i + 1) / len(v) for i in range(len(v))]
        label = f"{way}: p50 {percentile(us, 0.5):.1f}, p99 {percentile(us, 0.99):.1f} µs"
        ax.step(v, y, where="post", label=label)
    ax.set_xscale("log")
    ax.set_xlabel("µs from the kernel's last store to the notification (log scale)")
    ax.set_ylabel("share of samples")
    ax.set_ylim(0, 1.01)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(args.title)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)


if __name__ == "__main__":
    main()
