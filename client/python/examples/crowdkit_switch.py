#!/usr/bin/python3
"""A crowd-kit user's script, switched to Verity by one import line.

The script is crowd-kit code: it reads a dataset folder of ../shared/datasets (labels.csv with
item, annotator, label; gold.csv), renames the columns to crowd-kit's task, worker, label, runs
aggregators with fit_predict, and reports each method's accuracy on gold and its fitted
attributes' shapes. Only the import differs:

    --impl=crowdkit:  from crowdkit.aggregation import ...        (PYTHONPATH=../shared/peers/crowd-kit)
    --impl=verity:    from verity_client.aggregation import ...   (pip install ./client/python;
                      VERITY_SERVER_BINARY=bazel-bin/server/verity_server, or --server=HOST:PORT)

    /usr/bin/python3 client/python/examples/crowdkit_switch.py --impl=verity \\
        --data=../shared/datasets/bluebirds --methods=DawidSkene,MajorityVote --json=out.json

--json writes, per method: accuracy, seconds, labels_ (task -> label) and the shape and index
names of every fitted attribute, for comparing the two imports (client/python/tests).
"""

import argparse
import contextlib
import json
import os
import sys
import time

import pandas as pd

parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
parser.add_argument("--impl", choices=["crowdkit", "verity"], required=True)
parser.add_argument("--data", required=True, help="a dataset folder (labels.csv, gold.csv)")
parser.add_argument("--methods", default="MajorityVote,DawidSkene,OneCoinDawidSkene,GLAD")
parser.add_argument("--n_iter", type=int, default=100)
parser.add_argument("--server", default=None, help="Verity only: host:port (default: a "
                    "private local server for the run)")
parser.add_argument("--json", default=None, help="write the results here")
args = parser.parse_args()

if args.impl == "crowdkit":
    from crowdkit import aggregation
    serving = contextlib.nullcontext()
else:
    from verity_client import aggregation
    serving = aggregation.serve(args.server)

data = pd.read_csv(os.path.join(args.data, "labels.csv"), dtype=str, keep_default_na=False)
data = data.rename(columns={"item": "task", "annotator": "worker"})
gold = pd.read_csv(os.path.join(args.data, "gold.csv"), dtype=str,
                   keep_default_na=False).set_index("item")["label"]

ATTRIBUTES = ("labels_", "probas_", "errors_", "priors_", "skills_", "alphas_")
results = {}
with serving:
    for name in args.methods.split(","):
        cls = getattr(aggregation, name)
        kwargs = {} if name in ("MajorityVote", "Wawa", "ZeroBasedSkill") else {"n_iter": args.n_iter}
        model = cls(**kwargs)
        start = time.perf_counter()
        labels = model.fit_predict(data)
        seconds = time.perf_counter() - start
        scored = gold[gold.index.isin(labels.index)]
        accuracy = float((labels.loc[scored.index] == scored).mean())
        shapes = {}
        for attribute in ATTRIBUTES:
            value = getattr(model, attribute, None)
            if isinstance(value, (pd.Series, pd.DataFrame)) and not value.empty:
                shapes[attribute] = {"shape": list(value.shape),
                                     "index": [str(n) for n in value.index.names]}
        results[name] = {"accuracy": accuracy, "seconds": seconds, "attributes": shapes,
                         "labels": {str(k): str(v) for k, v in labels.items()}}
        print("%-18s accuracy %.4f  %.2f s  %s" % (name, accuracy, seconds,
              " ".join("%s%s" % (a, tuple(s["shape"])) for a, s in shapes.items())))

if args.json:
    with open(args.json, "w") as f:
        json.dump(results, f)
