#!/usr/bin/python3
"""Log-log plot of fit cost against data size, from bench/fit_benchmark's markdown output.

A tool run by hand (docs/PERFORMANCE.md, "How cost grows with data"), not part of the tests:

  /usr/bin/python3 bench/plot_fit_scaling.py --labels=labels.md --items=items.md \
      --annotators=annotators.md --classes=classes.md --out=docs/fit_scaling.png

Each input is the stdout of `fit_benchmark --format=markdown` runs (comma-separated files;
comment lines and other text are skipped; only the table rows are read). --labels is the series in which the labels
grow (items in proportion); the others vary one quantity at a fixed number of labels. The top
row plots fit time, time per EM iteration and process peak memory against labels; the bottom
row time per EM iteration against items, annotators and classes. For every method and series
it prints the least-squares slope of log(y) on log(x) (1 = linear) as a markdown table, over
all points and over the points of 500,000 labels or more. --fixed_mib (the peak of a run on
almost no data) is subtracted from the peak memory, which otherwise the process's fixed
footprint (libraries, allocator) dominates at small sizes.
"""

import argparse
import math
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_rows(paths):
    """The table rows of fit_benchmark markdown outputs (comma-separated paths), as dicts
    keyed by column name."""
    rows = []
    for path in paths.split(","):
        header = None
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line.startswith("|"):
                    continue
                cells = [c.strip() for c in line.strip("|").split("|")]
                if header is None:
                    header = cells
                    continue
                if set(cells[0]) <= set("-: ") or cells == header:
                    continue
                rows.append(dict(zip(header, cells)))
        if header is None:
            sys.exit(f"{path}: no table")
    return rows


def number(text):
    return float(text.rstrip("*%"))


def slope(xs, ys):
    """Least-squares slope of log y on log x; None with fewer than two distinct points."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y > 0]
    if len({p[0] for p in pts}) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    sxy = sum((p[0] - mx) * (p[1] - my) for p in pts)
    return sxy / sxx


def series(rows, x_col, y_col):
    """{method: ([x], [y])}, sorted by x, one point per (method, x)."""
    out = {}
    for r in rows:
        xs, ys = out.setdefault(r["method"], ([], []))
        xs.append(number(r[x_col]))
        if y_col == "ms/iter":
            ys.append(ms_per_iter(r))
        elif y_col == "peak MiB":
            ys.append(number(r[y_col]) - FIXED_MIB)
        else:
            ys.append(number(r[y_col]))
    for m, (xs, ys) in out.items():
        order = sorted(range(len(xs)), key=xs.__getitem__)
        out[m] = ([xs[i] for i in order], [ys[i] for i in order])
    return out


FIXED_MIB = 0.0


def ms_per_iter(row):
    # The printed ms/iter has two decimals, too coarse for mv at 50k labels; recompute it.
    return 1000.0 * number(row["fit s"]) / max(1.0, number(row["iters"]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--labels", required=True)
    parser.add_argument("--items")
    parser.add_argument("--annotators")
    parser.add_argument("--classes")
    parser.add_argument("--fixed_mib", type=float, default=0.0,
                        help="subtracted from peak MiB: the peak of a run on almost no data "
                             "(the process's libraries and allocator), so that the plot and "
                             "the slope show what the data costs")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    global FIXED_MIB
    FIXED_MIB = args.fixed_mib

    panels = [
        ("labels", args.labels, "labels", "fit s", "fit time (s)"),
        ("labels", args.labels, "labels", "ms/iter", "time per EM iteration (ms)"),
        ("labels", args.labels, "labels", "peak MiB",
         f"process peak - {args.fixed_mib:g} MiB (MiB)" if args.fixed_mib else "process peak (MiB)"),
        ("items", args.items, "items", "ms/iter", "ms per EM iteration"),
        ("annotators", args.annotators, "annotators", "ms/iter", "ms per EM iteration"),
        ("classes", args.classes, "K", "ms/iter", "ms per EM iteration"),
    ]
    fig, axes = plt.subplots(2, 3, figsize=(15, 9))
    print("| series | x | y | method | points | slope of log y on log x | slope, >= 500k labels |")
    print("|---|---|---|---|---:|---:|---:|")
    for ax, (name, path, x_col, y_col, y_label) in zip(axes.flat, panels):
        if path is None:
            ax.set_visible(False)
            continue
        rows = read_rows(path)
        fixed = ""
        if name != "labels":
            labels = sorted({int(number(r["labels"])) for r in rows})
            fixed = f" ({labels[0]:,} labels)" if len(labels) == 1 else ""
        for method, (xs, ys) in sorted(series(rows, x_col, y_col).items()):
            s = slope(xs, ys)
            large = [(x, y) for x, y in zip(xs, ys) if name != "labels" or x >= 500000]
            s_large = slope([p[0] for p in large], [p[1] for p in large])
            ax.loglog(xs, ys, marker="o", label=f"{method} (slope {s:.2f})" if s else method)
            print(f"| {name} | {x_col} | {y_col} | {method} | {len(xs)} | "
                  f"{'' if s is None else f'{s:.2f}'} | "
                  f"{'' if s_large is None or name != 'labels' else f'{s_large:.2f}'} |")
        ax.set_xlabel(x_col + fixed)
        ax.set_ylabel(y_label)
        ax.set_title(f"{y_label} vs {x_col}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Classical truth inference, 1 thread: cost against data size "
                 "(bench/fit_benchmark, RandomCrowd)")
    fig.tight_layout()
    fig.savefig(args.out, dpi=90)


if __name__ == "__main__":
    main()
