#!/usr/bin/python3
"""Runs crowd-kit's classification aggregators, for comparison with Verity (issue 18).

Not part of the build: the reference that Verity's wawa, zero_based_skill, kos, mace and
mmsr (MMSR) are checked against, on the same files. Class names are mapped to their index in
classes.txt before crowd-kit sees them, so that its ties (the first of its sorted label
columns) fall on the lowest class index, as in Verity.

Accuracy on a dataset folder of ../shared/datasets (gold items that have labels):

    PYTHONPATH=../shared/peers/crowd-kit /usr/bin/python3 tools/crowdkit_reference.py \
        --data=../shared/datasets/bluebirds --methods=Wawa,ZeroBasedSkill,KOS

Labels and probabilities of a small case given as item,annotator,label integer triples (the
expected values of the fixed cases in models/*_test.cc):

    PYTHONPATH=../shared/peers/crowd-kit /usr/bin/python3 tools/crowdkit_reference.py \
        --methods=Wawa --triples='0,0,0 0,1,0 0,2,1 1,0,1 1,1,1 1,2,0'
"""

import argparse
import csv
import os
import sys
import time

import pandas as pd

from crowdkit import aggregation


def read_dataset(folder):
    with open(os.path.join(folder, "classes.txt"), encoding="utf-8") as f:
        classes = [line.rstrip("\n") for line in f if line.rstrip("\n")]
    index = {name: i for i, name in enumerate(classes)}
    rows = []
    with open(os.path.join(folder, "labels.csv"), encoding="utf-8", newline="") as f:
        for r in csv.DictReader(f):
            rows.append((r["item"], r["annotator"], index[r["label"]]))
    gold = {}
    gold_path = os.path.join(folder, "gold.csv")
    if os.path.exists(gold_path):
        with open(gold_path, encoding="utf-8", newline="") as f:
            for r in csv.DictReader(f):
                gold[r["item"]] = index[r["label"]]
    return pd.DataFrame(rows, columns=["task", "worker", "label"]), gold


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", help="a dataset folder (classes.txt, labels.csv, gold.csv)")
    parser.add_argument("--triples", help="space-separated item,annotator,label integers")
    parser.add_argument("--methods", required=True,
                        help="comma-separated crowd-kit class names, e.g. Wawa,KOS")
    args = parser.parse_args()

    if args.triples:
        rows = [tuple(int(v) for v in t.split(",")) for t in args.triples.split()]
        df = pd.DataFrame(rows, columns=["task", "worker", "label"])
        for name in args.methods.split(","):
            agg = getattr(aggregation, name)()
            labels = agg.fit_predict(df)
            print(f"{name} labels:", " ".join(f"{t}:{l}" for t, l in labels.sort_index().items()))
            if hasattr(agg, "probas_") and getattr(agg, "probas_", None) is not None:
                with pd.option_context("display.precision", 17, "display.width", 200):
                    print(f"{name} probas:\n{agg.probas_.sort_index()}")
            if getattr(agg, "skills_", None) is not None:
                print(f"{name} skills:", " ".join(
                    f"{w}:{s!r}" for w, s in agg.skills_.sort_index().items()))
        return

    df, gold = read_dataset(args.data)
    name_of_data = os.path.basename(os.path.normpath(args.data))
    for name in args.methods.split(","):
        start = time.perf_counter()
        try:
            labels = getattr(aggregation, name)().fit_predict(df)
        except Exception as e:  # crowd-kit refuses some inputs (KOS: K != 2)
            print(f"{name_of_data}\t{name}\terror: {type(e).__name__}: {e}")
            continue
        seconds = time.perf_counter() - start
        scored = [t for t in labels.index if t in gold]
        correct = sum(labels[t] == gold[t] for t in scored)
        print(f"{name_of_data}\t{name}\t{correct / len(scored):.4f}\t{len(scored)} items"
              f"\t{seconds:.1f} s")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
