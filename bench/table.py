#!/usr/bin/env python3
"""The results table of docs/performance.md, in Markdown, from one run's CSV files.

Reads the CSV of `custream bench --csv FILE` (raw driver and custream per row), optionally the
CSV of `bench/peers.py --csv FILE` (CuPy, PyTorch, cuda.core, numba-cuda) and the output of
`custream bench --list` (every row the suite has, in its order), and prints the table to
stdout (or --output). With --list, a row the run lacks is kept, with "—" and the footnote
"not in this run"; a row of the run that --list does not name is added at the end.

    custream bench --list > list.txt
    custream bench --csv custream.csv
    python3 bench/peers.py --csv peers.csv
    python3 bench/table.py --custream custream.csv --peers peers.csv --list list.txt \
        [--output table.md]

Columns: operation († = timed on a parked stream), raw driver, custream, the paired ratio
custream / raw, A/A' (the method's control, as a drift in %), target, result, the same
operation on a running stream (parked rows only: what the peers compare with) and one column
per peer library that the peers CSV has. A row the run skipped or could not run keeps its
result ("skipped", "error") with dashes for its figures.
"""

import argparse
import csv
import re
import sys

PEER_NAMES = {"cupy": "CuPy", "torch": "PyTorch", "cuda.core": "cuda.core",
              "numba-cuda": "numba-cuda"}
PEER_ORDER = ["CuPy", "PyTorch", "cuda.core", "numba-cuda"]
MISSING = "—"


def read_list(path):
    """[(operation, target)] in the suite's order, from `custream bench --list`."""
    rows = []
    # "<name><2+ spaces><rounds><2 spaces><target>[  [k]]"; names may be long (1 space left).
    line_re = re.compile(r"^(.*?)\s+(\d+)\s{2}(<=.*?|overhead.*?)(\s+\[k\])?\s*$")
    with open(path) as f:
        for line in f:
            m = line_re.match(line.rstrip("\n"))
            if m and not line.startswith("case "):
                rows.append((m.group(1).strip(), m.group(3).strip()))
    return rows


def read_custream(path):
    with open(path, newline="") as f:
        return {r["operation"]: r for r in csv.DictReader(f)}


def read_peers(path):
    """{operation: {library: ns or None}}, [libraries in PEER_ORDER], {library: version}."""
    peers, versions = {}, {}
    if not path:
        return peers, [], versions
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            library = PEER_NAMES.get(r["library"], r["library"])
            versions[library] = r.get("version", "")
            peers.setdefault(r["operation"], {})[library] = float(r["ns"]) if r.get("ns") else None
    libraries = [n for n in PEER_ORDER if n in versions]
    libraries += sorted(n for n in versions if n not in PEER_ORDER)
    return peers, libraries, versions


def human(ns):
    if ns is None:
        return "n/a"
    if ns < 1e3:
        return f"{ns:.1f} ns"
    if ns < 1e6:
        return f"{ns / 1e3:.2f} µs"
    return f"{ns / 1e6:.2f} ms"


def number(row, column):
    value = row.get(column) if row else None
    return float(value) if value not in (None, "") else None


def table(order, runs, peers, libraries, versions):
    head = ["operation", "raw driver", "custream", "custream / raw", "A/A′", "target", "result",
            "running stream: raw / custream"]
    head += [f"{lib} {versions[lib]}".strip() for lib in libraries]
    lines = ["| " + " | ".join(head) + " |",
             "| --- | ---: | ---: | ---: | ---: | --- | --- | ---: |" + " ---: |" * len(libraries)]
    missing = False
    for operation, listed_target in order:
        r = runs.get(operation)
        target = (r.get("target") if r else listed_target) or listed_target
        target = target.replace("<=", "≤")
        p = peers.get(operation, {})
        peer_cells = [human(p[lib]) if lib in p else MISSING for lib in libraries]
        if r is None or r.get("result") in (None, ""):
            missing = True
            cells = [f"{operation} ¹", MISSING, MISSING, MISSING, MISSING, target, MISSING,
                     MISSING]
        else:
            raw, ours = number(r, "raw_ns"), number(r, "custream_ns")
            ratio = number(r, "ratio")
            control = number(r, "a_a2")
            run_raw, run_ours = number(r, "running_raw_ns"), number(r, "running_custream_ns")
            parked = run_raw is not None
            cells = [operation + (" †" if parked else ""),
                     human(raw) if raw is not None else MISSING,
                     human(ours) if ours is not None else MISSING,
                     f"{ratio:.3f}" if ratio is not None else MISSING,
                     f"{(control - 1) * 100:+.2f} %" if control is not None else MISSING,
                     target, r["result"],
                     f"{human(run_raw)} / {human(run_ours)}" if parked else MISSING]
        lines.append("| " + " | ".join(cells + peer_cells) + " |")
    notes = ["", "† timed on a parked stream (the judged columns); the running-stream column is "
             "the same operation on a running stream, as the peers are measured."]
    if missing:
        notes.append("¹ not in this run.")
    return "\n".join(lines + notes) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--custream", required=True, help="CSV of custream bench --csv")
    ap.add_argument("--peers", help="CSV of bench/peers.py --csv")
    ap.add_argument("--list", help="output of custream bench --list: every row, in order")
    ap.add_argument("--output", help="write the table here (default: stdout)")
    args = ap.parse_args()

    runs = read_custream(args.custream)
    if not runs:
        sys.exit(f"table.py: no rows in {args.custream}")
    order = read_list(args.list) if args.list else []
    if args.list and not order:
        sys.exit(f"table.py: no rows in {args.list} (the output of custream bench --list?)")
    listed = {name for name, _ in order}
    order += [(name, r.get("target", "")) for name, r in runs.items() if name not in listed]
    peers, libraries, versions = read_peers(args.peers)
    text = table(order, runs, peers, libraries, versions)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
