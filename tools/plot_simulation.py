#!/usr/bin/env python3
"""Plots verity_simulate results: accuracy on gold vs labels bought.

Reads one or more CSV files written by `verity_simulate --out_csv` (columns
dataset,policy,seed,labels,fraction,accuracy) and writes one PNG per dataset,
<out_dir>/assignment_<dataset>.png: one line per replay policy (mean over
seeds at each budget fraction, with a band of +-1 standard error when there
are several seeds), the "<policy>/cold" rows of --cold_fit_at_checkpoints as
a second panel, and a dashed horizontal line per full-data reference (all_ds,
all_mv).

With --markdown it also prints, per dataset, the tables of mean accuracy
(policies x budget fractions) and the acceptance checks: the smallest budget
at which information_gain's mean reaches all_mv, and whether it is above
random and uniform at every budget from 30% up.

Needs Debian's python3-matplotlib (apt-get install -y python3-matplotlib).

  python3 tools/plot_simulation.py --out_dir=docs results/*.csv
"""

import argparse
import csv
import math
import os
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

POLICY_STYLE = {
    "information_gain": ("information gain", "tab:red", "o"),
    "uncertainty": ("uncertainty", "tab:orange", "s"),
    "uniform": ("uniform", "tab:blue", "^"),
    "random": ("random", "tab:gray", "v"),
}
REFERENCE_STYLE = {
    "all_ds": ("all labels, Dawid-Skene", "black"),
    "all_mv": ("all labels, majority vote", "tab:green"),
}


def read_rows(paths):
    rows = []
    for path in paths:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                rows.append({
                    "dataset": row["dataset"],
                    "policy": row["policy"],
                    "seed": int(row["seed"]),
                    "labels": int(row["labels"]),
                    "fraction": float(row["fraction"]),
                    "accuracy": float(row["accuracy"]),
                })
    return rows


def mean_and_se(values):
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, 0.0
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var / n)


def cells_of(rows):
    """{policy: {fraction: (mean labels, mean accuracy, se, runs)}}."""
    grouped = defaultdict(lambda: defaultdict(list))
    for r in rows:
        grouped[r["policy"]][r["fraction"]].append(r)
    cells = {}
    for policy, by_fraction in grouped.items():
        cells[policy] = {}
        for fraction, cell in by_fraction.items():
            mean, se = mean_and_se([r["accuracy"] for r in cell])
            labels = sum(r["labels"] for r in cell) / len(cell)
            cells[policy][fraction] = (labels, mean, se, len(cell))
    return cells


def ordered_policies(policies):
    base = [p for p in POLICY_STYLE if p in policies]
    base += sorted(p for p in policies
                   if p not in POLICY_STYLE and p not in REFERENCE_STYLE
                   and not p.endswith("/cold"))
    return base


def draw_panel(ax, rows, cells, policies, references, total, title, seeds,
               per_seed):
    for policy in policies:
        base = policy.split("/")[0]
        label, color, marker = POLICY_STYLE.get(base, (base, None, "x"))
        fractions = sorted(cells[policy])
        xs = [cells[policy][f][0] for f in fractions]
        ys = [cells[policy][f][1] for f in fractions]
        se = [cells[policy][f][2] for f in fractions]
        ax.plot(xs, ys, marker=marker, color=color, label=label, linewidth=1.8,
                markersize=5)
        if per_seed:
            # Thin lines, one per seed: a run whose model flipped its classes
            # stands out instead of widening a band.
            for seed in sorted({r["seed"] for r in rows
                                if r["policy"] == policy}):
                run = sorted((r["labels"], r["accuracy"]) for r in rows
                             if r["policy"] == policy and r["seed"] == seed)
                ax.plot([x for x, _ in run], [y for _, y in run], color=color,
                        linewidth=0.7, alpha=0.45)
        elif seeds > 1:
            ax.fill_between(xs, [y - e for y, e in zip(ys, se)],
                            [y + e for y, e in zip(ys, se)], color=color,
                            alpha=0.15, linewidth=0)
    for policy, (label, color) in REFERENCE_STYLE.items():
        if policy in references:
            acc = references[policy]
            ax.axhline(acc, color=color, linestyle="--", linewidth=1.2,
                       label=f"{label} ({acc:.3f})")
    if total:
        ax.axvline(total / 2, color="0.6", linestyle=":", linewidth=1)
        ax.set_xlim(0, total * 1.02)
    ax.set_xlabel("labels bought" + (f" (of {total:,})" if total else ""))
    ax.set_ylabel("accuracy on gold")
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize=7)


def plot_dataset(dataset, rows, out_path):
    cells = cells_of(rows)
    references = {p: list(cells[p].values())[0][1] for p in REFERENCE_STYLE
                  if p in cells}
    seeds = len({r["seed"] for r in rows if r["policy"] not in REFERENCE_STYLE})
    total = max((r["labels"] for r in rows if r["fraction"] == 1.0),
                default=None)
    live = ordered_policies(cells)
    cold = [p + "/cold" for p in live if p + "/cold" in cells]
    if cold:
        panels = [(live, "live posteriors of the replay's project "
                         "(thin lines: single seeds)", True),
                  (cold, "cold Dawid-Skene fit of the same labels "
                         "(band: ±1 standard error)", False)]
    else:
        panels = [(live, "live posteriors of the replay's project", False)]
    fig, axes = plt.subplots(1, len(panels), figsize=(8 * len(panels), 5),
                             dpi=110, squeeze=False)
    for ax, (policies, title, per_seed) in zip(axes[0], panels):
        draw_panel(ax, rows, cells, policies, references, total, title, seeds,
                   per_seed)
    fig.suptitle(f"{dataset}: accuracy on gold vs labels bought "
                 f"(mean over {seeds} seed{'s' if seeds != 1 else ''}; "
                 f"dotted line: 50% of the labels)")
    fig.tight_layout()
    fig.savefig(out_path)
    plt.close(fig)


def percent(fraction):
    return f"{round(fraction * 100, 4):g}%"


def markdown(dataset, rows):
    cells = cells_of(rows)
    seeds = len({r["seed"] for r in rows if r["policy"] not in REFERENCE_STYLE})
    live = ordered_policies(cells)
    out = [f"#### {dataset} (mean over {seeds} seeds)", ""]
    fractions = sorted({f for p in live for f in cells[p]})
    header = "| policy | " + " | ".join(
        f"{percent(f)} ({round(cells[live[0]][f][0]):,})" for f in fractions) + " |"
    out += [header, "|---|" + "---|" * len(fractions)]
    for kind in ("", "/cold"):
        for p in live:
            if p + kind not in cells:
                continue
            row = [f"{cells[p + kind][f][1]:.4f}" if f in cells[p + kind] else ""
                   for f in fractions]
            out.append(f"| {p + kind} | " + " | ".join(row) + " |")
    for p in REFERENCE_STYLE:
        if p in cells:
            acc = list(cells[p].values())[0][1]
            out.append(f"| {p} (all labels) | " + " | ".join(
                [""] * (len(fractions) - 1) + [f"{acc:.4f}"]) + " |")
    out.append("")
    if "all_mv" in cells:
        # Accuracies are stored with 6 decimals; means within 1e-6 are equal
        # (one gold item is >= 1e-4 on these datasets).
        mv = list(cells["all_mv"].values())[0][1]
        for kind in ("", "/cold"):
            ig = "information_gain" + kind
            if ig not in cells:
                continue
            reached = [f for f in fractions if f in cells[ig]
                       and cells[ig][f][1] >= mv - 1e-6]
            first = percent(reached[0]) if reached else "never"
            fails = []
            # At 100% every policy has bought the same labels: not compared.
            for f in fractions:
                if f < 0.3 - 1e-9 or f > 1 - 1e-9 or f not in cells[ig]:
                    continue
                for other in ("random", "uniform"):
                    if other + kind in cells and f in cells[other + kind] and \
                            cells[ig][f][1] <= cells[other + kind][f][1] + 1e-6:
                        fails.append(f"{percent(f)} vs {other}")
            out.append(
                f"- {ig}: first reaches all_mv ({mv:.4f}) at {first}; "
                + ("above random and uniform at every budget from 30% to 90%"
                   if not fails else "not above at " + ", ".join(fails)))
        out.append("")
    return "\n".join(out)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("csv", nargs="+", help="verity_simulate --out_csv files")
    parser.add_argument("--out_dir", default=".", help="folder of the PNGs")
    parser.add_argument("--markdown", action="store_true",
                        help="also print the mean tables and acceptance checks")
    args = parser.parse_args(argv)
    rows = read_rows(args.csv)
    if not rows:
        print("no rows", file=sys.stderr)
        return 1
    datasets = []
    for r in rows:
        if r["dataset"] not in datasets:
            datasets.append(r["dataset"])
    os.makedirs(args.out_dir, exist_ok=True)
    for dataset in datasets:
        out = os.path.join(args.out_dir, f"assignment_{dataset}.png")
        subset = [r for r in rows if r["dataset"] == dataset]
        plot_dataset(dataset, subset, out)
        print(out, file=sys.stderr)
        if args.markdown:
            print(markdown(dataset, subset))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
