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

Usage (repository root, after `bazel build -c opt //client:verity`):
  tools/dynamic_overlap/resolved.py OUT
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


def gold_of(dataset):
    d = os.path.join('..', 'shared', 'datasets', dataset)
    classes = [c.strip() for c in open(os.path.join(d, 'classes.txt')) if c.strip()]
    labelled = {r['item'] for r in csv.DictReader(open(os.path.join(d, 'labels.csv')))}
    gold = {}
    for r in csv.DictReader(open(os.path.join(d, 'gold.csv'))):
        if r['item'] in labelled:
            gold[r['item']] = r[list(r.keys())[1]]
    return classes, gold


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
            classes, gold = gold_of(dataset)
            counts, confidences, accuracies = [], [], []
            for row in csv.DictReader(open(path)):
                project = (f'dyn-{calibration}-{m.group(2).replace(".", "")}-{dataset}-'
                           f'uniform-s{row["seed"]}')
                text = subprocess.run(
                    ['bazel-bin/client/verity', 'posteriors', f'--project={project}',
                     f'--server=127.0.0.1:{PORT}'],
                    check=True, capture_output=True, text=True).stdout
                resolved = [r for r in csv.DictReader(io.StringIO(text))
                            if r['item'] in gold and float(r['confidence']) >= target]
                counts.append(len(resolved))
                if resolved:
                    confidences.append(sum(float(r['confidence']) for r in resolved) / len(resolved))
                    accuracies.append(sum(r['label'] == gold[r['item']] for r in resolved)
                                      / len(resolved))
            cm, cs = mean_se(counts)
            fm, fs = mean_se(confidences)
            am, as_ = mean_se(accuracies)
            print(f'| {dataset} | {target} | {calibration} | {len(counts)} | '
                  f'{cm:.0f} ± {cs:.0f} of {len(gold)} | {fm:.4f} ± {fs:.4f} | {am:.4f} ± {as_:.4f} |')
    finally:
        server.terminate()
        server.wait()


if __name__ == '__main__':
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
