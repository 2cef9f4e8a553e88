#!/usr/bin/env python3
"""Chart (and table) of the benchmark numbers, for docs/performance.md.

Reads the CSV of `custream bench --csv` (raw driver and custream per operation) and the CSV
of `bench/peers.py --csv` (CuPy and PyTorch), and writes a grouped bar chart, log scale, of
the four per operation (for rows timed on a parked stream, their running-stream figures,
which is how the peers are measured). With --markdown it also writes the Markdown table of the same
numbers. Operations with no number for a library (n/a, skipped) get no bar.

    python3 bench/plot.py --custream custream.csv --peers peers.csv -o perf.png \
        [--markdown table.md] [--title TEXT]
"""

import argparse
import csv
import math
import sys

SERIES = [("raw driver", "#7f7f7f"), ("custream", "#1f77b4"), ("CuPy", "#ff7f0e"),
          ("PyTorch", "#d62728"), ("cuda.core", "#2ca02c"), ("numba-cuda", "#9467bd")]


def read_custream(path):
    """[(operation, {"raw driver": ns, "custream": ns}, target, result, note, extra)] in file
    order; extra holds the paired ratio and A/A' where the CSV has them."""
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            values = {}
            for series, column in (("raw driver", "raw_ns"), ("custream", "custream_ns")):
                if r.get(column):
                    values[series] = float(r[column])
            extra = {k: float(r[k]) for k in ("ratio", "a_a2", "running_raw_ns",
                                                "running_custream_ns") if r.get(k)}
            rows.append((r["operation"], values, r.get("target", ""), r.get("result", ""),
                         r.get("note", ""), extra))
    return rows


def read_peers(path):
    """{operation: {"CuPy"|"PyTorch"|"cuda.core"|"numba-cuda": (ns or None, note)}}."""
    names = {"cupy": "CuPy", "torch": "PyTorch"}
    peers = {}
    if not path:
        return peers
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            library = names.get(r["library"], r["library"])
            ns = float(r["ns"]) if r.get("ns") else None
            peers.setdefault(r["operation"], {})[library] = (ns, r.get("note", ""))
    return peers


def human(ns):
    if ns is None:
        return "n/a"
    if ns < 1e3:
        return f"{ns:.1f} ns"
    if ns < 1e6:
        return f"{ns / 1e3:.2f} µs"
    return f"{ns / 1e6:.2f} ms"


def markdown(custream_rows, peers):
    lines = ["| operation | raw driver | custream | custream / raw | A/A' | target | result "
             "| running stream: raw / custream | CuPy | PyTorch |",
             "| --- | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: |"]
    for operation, values, target, result, _, extra in custream_rows:
        raw, ours = values.get("raw driver"), values.get("custream")
        if "ratio" in extra:
            ratio = f"{extra['ratio']:.3f}"
        else:
            ratio = f"{ours / raw:.3f}" if raw and ours is not None else "-"
        control = f"{(extra['a_a2'] - 1) * 100:+.2f} %" if "a_a2" in extra else "-"
        p = peers.get(operation, {})
        cupy = human(p.get("CuPy", (None, ""))[0])
        torch = human(p.get("PyTorch", (None, ""))[0])
        running = "-"
        if "running_raw_ns" in extra:
            running = (f"{human(extra['running_raw_ns'])} / "
                       f"{human(extra.get('running_custream_ns'))}")
        parked = " †" if "running_raw_ns" in extra else ""
        lines.append(f"| {operation}{parked} | {human(raw)} | {human(ours)} | {ratio} | "
                     f"{control} | {target.replace('<=', '≤')} | {result} | {running} | "
                     f"{cupy} | {torch} |")
    return "\n".join(lines) + "\n"


def plot(custream_rows, peers, out, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    operations = [r[0] for r in custream_rows]
    values = {r[0]: dict(r[1]) for r in custream_rows}
    # Rows timed on a parked stream: chart their running-stream figures, which are what the
    # peers (measured on running streams) compare with.
    for r in custream_rows:
        extra = r[5]
        if "running_raw_ns" in extra and "running_custream_ns" in extra:
            values[r[0]] = {"raw driver": extra["running_raw_ns"],
                            "custream": extra["running_custream_ns"]}
    for operation in operations:
        for library, (ns, _) in peers.get(operation, {}).items():
            if ns is not None:
                values[operation][library] = ns

    # Only the series that have a number somewhere, each a bar of its own per operation.
    series_drawn = [(n, c) for n, c in SERIES if any(n in v for v in values.values())]
    height = 0.8 / max(1, len(series_drawn))
    fig, ax = plt.subplots(figsize=(11, 0.62 * len(operations) + 1.6))
    for k, (series, color) in enumerate(series_drawn):
        ys, xs = [], []
        for i, operation in enumerate(operations):
            ns = values[operation].get(series)
            if ns is not None and ns > 0:
                ys.append(i + (k - (len(series_drawn) - 1) / 2) * height)
                xs.append(ns)
        ax.barh(ys, xs, height=height, color=color, label=series)
    ax.set_xscale("log")
    ax.set_yticks(range(len(operations)))
    ax.set_yticklabels(operations, fontsize=9)
    ax.invert_yaxis()
    all_ns = [ns for v in values.values() for ns in v.values() if ns and ns > 0]
    if all_ns:
        ax.set_xlim(10 ** math.floor(math.log10(min(all_ns))),
                    10 ** math.ceil(math.log10(max(all_ns))))
    ax.set_xlabel("nanoseconds per operation (log scale; lower is better)")
    ax.grid(axis="x", which="both", alpha=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.07), ncol=len(series_drawn), fontsize=9)
    ax.set_title(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(out, dpi=120, bbox_inches="tight")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--custream", required=True, help="CSV of custream bench --csv")
    ap.add_argument("--peers", help="CSV of bench/peers.py --csv")
    ap.add_argument("-o", "--output", required=True, help="PNG to write")
    ap.add_argument("--markdown", help="also write the Markdown table here")
    ap.add_argument("--title", default="custream vs the raw driver, CuPy and PyTorch")
    args = ap.parse_args()

    custream_rows = read_custream(args.custream)
    if not custream_rows:
        sys.exit(f"plot.py: no rows in {args.custream}")
    peers = read_peers(args.peers)
    plot(custream_rows, peers, args.output, args.title)
    print(f"chart written to {args.output}")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(custream_rows, peers))
        print(f"table written to {args.markdown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
