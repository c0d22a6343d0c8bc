#!/usr/bin/env python3
"""Accuracy of the items a dynamic-overlap run left at or above its confidence target.

After tools/dynamic_overlap/run.sh OUT, starts OUT/bin/verity_server on OUT/var again, reads
every dynamic-overlap project's posteriors with the CLI (`verity posteriors --project P`), and
for the scored items (gold items with at least one label in the dataset) prints, per dataset,
target and calibration: how many items ended with served confidence >= the target (the items
the target resolved; the others stopped at the label cap or when the crowd ran out), their
mean served confidence and their accuracy, mean ± standard error over seeds. A calibrated
confidence means an accuracy near the mean confidence, at least the target.

The posteriors read are those the restarted server serves: the last stored version with the
labels committed after it applied online, so they can differ slightly from those at the moment
each item stopped being offered.

With GOLD_EVERY=n (the run's own, see run.sh) the project gold items of each seed, every n-th
scored item counted from position seed mod n (client/replay_simulation.h, SplitProjectGold),
are left out: they are served one-hot and were never resolved by the target.

Usage (repository root, after `bazel build -c opt //client:verity`):
  [GOLD_EVERY=n] tools/dynamic_overlap/resolved.py OUT
"""
import csv
import glob
import io
import math
import os
import re
import subprocess
import sys
import time

PORT = os.environ.get('PORT', '50196')


def mean_se(xs):
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, float('nan')
    return m, math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1) / len(xs))


GOLD_EVERY = int(os.environ.get('GOLD_EVERY', '0'))


def gold_of(dataset):
    """Classes, the scored items' gold ({item: class}) and their ids in the order of
    models/csv_dataset.h's dense indices (first appearance in labels.csv)."""
    d = os.path.join('..', 'shared', 'datasets', dataset)
    classes = [c.strip() for c in open(os.path.join(d, 'classes.txt')) if c.strip()]
    order = {}
    for r in csv.DictReader(open(os.path.join(d, 'labels.csv'))):
        order.setdefault(r['item'], len(order))
    gold = {}
    for r in csv.DictReader(open(os.path.join(d, 'gold.csv'))):
        if r['item'] in order:
            gold[r['item']] = r[list(r.keys())[1]]
    return classes, gold, sorted(gold, key=order.get)


def project_gold(scored_ids, seed):
    """The items a replay with `seed` gave the server as gold (SplitProjectGold)."""
    if GOLD_EVERY <= 0:
        return set()
    return {item for p, item in enumerate(scored_ids) if p % GOLD_EVERY == seed % GOLD_EVERY}


def main(out):
    server = subprocess.Popen(
        [os.path.join(out, 'bin', 'verity_server'), f'--listen=127.0.0.1:{PORT}',
         f'--data_dir={os.path.join(out, "var")}'],
        stdout=subprocess.DEVNULL, stderr=open(os.path.join(out, 'resolved-server.log'), 'w'))
    try:
        time.sleep(15)
        print('| dataset | target | calibration | seeds | items at or above the target | '
              'their mean confidence | their accuracy |')
        print('|---|---:|---|---:|---:|---:|---:|')
        for path in sorted(glob.glob(os.path.join(out, 'dynamic-*.csv'))):
            m = re.match(r'dynamic-(.+)-([0-9.]+)-(auto|none)\.csv$', os.path.basename(path))
            dataset, target, calibration = m.group(1), float(m.group(2)), m.group(3)
            classes, gold, scored_ids = gold_of(dataset)
            counts, confidences, accuracies = [], [], []
            for row in csv.DictReader(open(path)):
                project = (f'dyn-{calibration}-{m.group(2).replace(".", "")}-{dataset}-'
                           f'uniform-s{row["seed"]}')
                text = subprocess.run(
                    ['bazel-bin/client/verity', 'posteriors', f'--project={project}',
                     f'--server=127.0.0.1:{PORT}'],
                    check=True, capture_output=True, text=True).stdout
                given = project_gold(scored_ids, int(row['seed']))
                resolved = [r for r in csv.DictReader(io.StringIO(text))
                            if r['item'] in gold and r['item'] not in given
                            and float(r['confidence']) >= target]
                counts.append(len(resolved))
                if resolved:
                    confidences.append(sum(float(r['confidence']) for r in resolved) / len(resolved))
                    accuracies.append(sum(r['label'] == gold[r['item']] for r in resolved)
                                      / len(resolved))
            cm, cs = mean_se(counts)
            fm, fs = mean_se(confidences)
            am, as_ = mean_se(accuracies)
            print(f'| {dataset} | {target} | {calibration} | {len(counts)} | '
                  f'{cm:.0f} ± {cs:.0f} of {len(gold) - len(project_gold(scored_ids, 1))} | {fm:.4f} ± {fs:.4f} | {am:.4f} ± {as_:.4f} |')
    finally:
        server.terminate()
        server.wait()


if __name__ == '__main__':
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
