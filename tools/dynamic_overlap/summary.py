#!/usr/bin/env python3
"""Table of a tools/dynamic_overlap/run.sh output folder.

For each dataset, confidence target and calibration mode: the labels the dynamic-overlap
replays bought (mean ± standard error over seeds, and per item), their accuracy, the accuracy
of fixed overlap (UNIFORM, no target, same cap) at the same number of labels in the same
seed, and the paired difference dynamic − fixed in points (mean ± standard error).

Usage: tools/dynamic_overlap/summary.py OUT_DIR
"""
import csv
import glob
import math
import os
import re
import sys


def mean_se(xs):
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, float('nan')
    var = sum((x - m) ** 2 for x in xs) / (len(xs) - 1)
    return m, math.sqrt(var / len(xs))


def rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def main(out):
    fixed = {}  # (dataset, seed, labels) -> accuracy
    for path in glob.glob(os.path.join(out, 'fixed-*.csv')):
        for r in rows(path):
            fixed[(r['dataset'], int(r['seed']), int(r['labels']))] = float(r['accuracy'])
    items = {}
    table = []
    for path in sorted(glob.glob(os.path.join(out, 'dynamic-*.csv'))):
        m = re.match(r'dynamic-(.+)-([0-9.]+)-(auto|none)\.csv$', os.path.basename(path))
        dataset, target, calibration = m.group(1), m.group(2), m.group(3)
        if dataset not in items:
            with open(os.path.join('..', 'shared', 'datasets', dataset, 'labels.csv')) as f:
                items[dataset] = len({line.split(',')[0] for line in list(f)[1:]})
        labels, acc, diff = [], [], []
        for r in rows(path):
            n, seed = int(r['labels']), int(r['seed'])
            labels.append(n)
            acc.append(float(r['accuracy']))
            if (dataset, seed, n) in fixed:
                diff.append(100 * (float(r['accuracy']) - fixed[(dataset, seed, n)]))
        fixed_acc = [float(r['accuracy']) - d / 100 for r, d in zip(rows(path), diff)]
        table.append((dataset, target, calibration, labels, acc, fixed_acc, diff, items[dataset]))
    print('| dataset | target | calibration | seeds | labels bought | labels per item | '
          'accuracy (dynamic) | accuracy (fixed, same labels) | dynamic − fixed (points) |')
    print('|---|---:|---|---:|---:|---:|---:|---:|---:|')
    for dataset, target, calibration, labels, acc, fixed_acc, diff, n_items in table:
        lm, ls = mean_se(labels)
        am, as_ = mean_se(acc)
        cells = [dataset, target, calibration, str(len(labels)), f'{lm:,.0f} ± {ls:,.0f}',
                 f'{lm / n_items:.2f}', f'{am:.4f} ± {as_:.4f}']
        if len(diff) == len(labels):
            fm, fs = mean_se(fixed_acc)
            dm, ds = mean_se(diff)
            cells += [f'{fm:.4f} ± {fs:.4f}', f'{dm:+.1f} ± {ds:.1f}']
        else:
            cells += ['–', '–']
        print('| ' + ' | '.join(cells) + ' |')


if __name__ == '__main__':
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
