#!/usr/bin/env python3
"""Reference learners on a features dataset, outside Verity (docs/EVALUATION.md, issue 17).

Multinomial logistic regression h(x) = softmax(W x + b) on the standardised features of
DATASET/features.csv, with an L2 penalty lam/2 |W|^2 on the mean cross-entropy, fitted by
L-BFGS (deterministic: no seeds), trained on the train split's items and scored on the test
split's gold:

  lr_gold    the train items' gold labels (a ceiling: no crowd learner sees them);
  lr_mv      the soft majority vote of the crowd labels;
  lr_ds      Dawid-Skene posteriors (50 EM iterations from the vote, confusion counts + 0.01);
  lr_raykar  Raykar et al. (2010), "Learning from crowds": EM from the Dawid-Skene posteriors,
             alternating the M-step (h by L-BFGS on the posteriors q, warm-started; confusions
             from q) and the E-step q_i ∝ h(x_i) · Π_(a, y) π_a[·, y], 20 iterations.

  lr_crossfit (with --folds F) the same EM, but each item's E-step prior comes from the h
             fitted on the other F - 1 folds of the train items (fixed random folds, seed 0),
             so that no item's prior is fitted to that item's own posterior; h is fitted on
             every item after the last E-step.

For each learner, every lam of --lams is run; with a `valid` split of gold items the lam with
the best accuracy there is marked, never chosen on test gold. Runs on Debian's python3-numpy,
python3-scipy and python3-pandas:

  python3 tools/feature_reference.py ../shared/datasets/labelme
"""
import argparse

import numpy as np
import pandas as pd
from scipy.optimize import minimize


def load(folder):
    labels = pd.read_csv(f"{folder}/labels.csv")
    gold = pd.read_csv(f"{folder}/gold.csv")
    splits = pd.read_csv(f"{folder}/splits.csv")
    features = pd.read_csv(f"{folder}/features.csv").set_index("item")
    with open(f"{folder}/classes.txt") as f:
        classes = [c.strip() for c in f if c.strip()]
    class_index = {c: i for i, c in enumerate(classes)}
    split = dict(zip(splits.item, splits.split))
    gold_class = dict(zip(gold.item, gold.label.map(class_index)))
    train_items = sorted(i for i in features.index if split.get(i) == "train")
    labels = labels[labels.item.isin(set(train_items))]
    labelled = sorted(set(labels.item))
    row = {item: r for r, item in enumerate(labelled)}
    annotators = {a: r for r, a in enumerate(sorted(set(labels.annotator)))}
    x = features.values.astype(np.float64)
    x = (x - x.mean(0)) / np.maximum(x.std(0), 1e-6)
    position = {item: r for r, item in enumerate(features.index)}

    def split_of(name):
        items = [i for i in features.index if split.get(i) == name and i in gold_class]
        if not items:
            return None, None
        return x[[position[i] for i in items]], np.array([gold_class[i] for i in items])

    data = {
        "k": len(classes),
        "annotators": len(annotators),
        "item": labels.item.map(row).values,
        "annotator": labels.annotator.map(annotators).values,
        "label": labels.label.map(class_index).values,
        "x": x[[position[i] for i in labelled]],
        "gold": np.array([gold_class.get(i, -1) for i in labelled]),
    }
    data["x_valid"], data["y_valid"] = split_of("valid")
    data["x_test"], data["y_test"] = split_of("test")
    return data


def softmax(z):
    z = z - z.max(1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(1, keepdims=True)


def fit_logistic(x, targets, lam, start=None):
    n, p = x.shape
    k = targets.shape[1]
    xb = np.hstack([x, np.ones((n, 1))])

    def loss_and_gradient(w):
        w = w.reshape(p + 1, k)
        prob = softmax(xb @ w)
        loss = -(targets * np.log(prob + 1e-12)).sum() / n + 0.5 * lam * (w[:-1] ** 2).sum()
        grad = xb.T @ (prob - targets) / n
        grad[:-1] += lam * w[:-1]
        return loss, grad.ravel()

    w0 = np.zeros((p + 1) * k) if start is None else start.ravel()
    result = minimize(loss_and_gradient, w0, jac=True, method="L-BFGS-B",
                      options={"maxiter": 500})
    return result.x.reshape(p + 1, k)


def predict(w, x):
    return softmax(np.hstack([x, np.ones((len(x), 1))]) @ w)


def vote(d):
    q = np.zeros((len(d["x"]), d["k"]))
    np.add.at(q, (d["item"], d["label"]), 1)
    return q / q.sum(1, keepdims=True)


def confusions(d, q, smoothing=0.01):
    c = np.full((d["annotators"], d["k"], d["k"]), smoothing)
    for true_class in range(d["k"]):
        np.add.at(c[:, true_class, :], (d["annotator"], d["label"]), q[d["item"], true_class])
    return c / c.sum(2, keepdims=True)


def e_step(d, prior, c):
    log_q = np.log(prior + 1e-12)
    for true_class in range(d["k"]):
        np.add.at(log_q[:, true_class], d["item"],
                  np.log(c[d["annotator"], true_class, d["label"]]))
    return softmax(log_q)


def dawid_skene(d, iterations=50):
    q = vote(d)
    for _ in range(iterations):
        q = e_step(d, np.tile(q.mean(0), (len(q), 1)), confusions(d, q))
    return q


def raykar(d, lam, start, iterations=20):
    q, w = start, None
    for _ in range(iterations):
        c = confusions(d, q)
        w = fit_logistic(d["x"], q, lam, w)
        q = e_step(d, predict(w, d["x"]), c)
    return w


def raykar_crossfit(d, lam, start, folds, iterations=20):
    fold = np.random.default_rng(0).integers(0, folds, len(d["x"]))
    q, weights = start, [None] * folds
    for _ in range(iterations):
        c = confusions(d, q)
        prior = np.zeros_like(q)
        for f in range(folds):
            fitted = fold != f
            weights[f] = fit_logistic(d["x"][fitted], q[fitted], lam, weights[f])
            prior[~fitted] = predict(weights[f], d["x"][~fitted])
        q = e_step(d, prior, c)
    return fit_logistic(d["x"], q, lam)


def accuracy(w, x, y):
    return float("nan") if x is None else float((predict(w, x).argmax(1) == y).mean())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dataset", help="a shared/datasets folder with features.csv, splits.csv")
    parser.add_argument("--lams", default="0.01,0.03,0.1,0.3,1",
                        help="L2 penalties to run (comma-separated)")
    parser.add_argument("--folds", type=int, default=0,
                        help="also run lr_crossfit with this many folds (0: not run)")
    args = parser.parse_args()
    d = load(args.dataset)
    ds = dawid_skene(d)
    vote_accuracy = np.mean(vote(d).argmax(1) == d["gold"])
    ds_accuracy = np.mean(ds.argmax(1) == d["gold"])
    print(f"{args.dataset}: {len(d['x'])} labelled train items, {len(d['label'])} labels; "
          f"crowd posterior accuracy on train gold: vote {vote_accuracy:.3f}, "
          f"Dawid-Skene {ds_accuracy:.3f}")
    print("| learner | lam | valid accuracy | test accuracy |\n|---|---:|---:|---:|")
    learners = {
        "lr_gold": lambda lam: fit_logistic(d["x"][d["gold"] >= 0],
                                            np.eye(d["k"])[d["gold"][d["gold"] >= 0]], lam),
        "lr_mv": lambda lam: fit_logistic(d["x"], vote(d), lam),
        "lr_ds": lambda lam: fit_logistic(d["x"], ds, lam),
        "lr_raykar": lambda lam: raykar(d, lam, ds),
    }
    if args.folds > 1:
        learners["lr_crossfit"] = lambda lam: raykar_crossfit(d, lam, ds, args.folds)
    for name, fit in learners.items():
        rows = []
        for lam in [float(v) for v in args.lams.split(",")]:
            w = fit(lam)
            rows.append((lam, accuracy(w, d["x_valid"], d["y_valid"]),
                         accuracy(w, d["x_test"], d["y_test"])))
        chosen = None if d["x_valid"] is None else max(rows, key=lambda r: r[1])[0]
        for lam, valid, test in rows:
            mark = " (chosen on valid)" if lam == chosen else ""
            print(f"| {name} | {lam:g}{mark} | {valid:.3f} | {test:.3f} |", flush=True)


if __name__ == "__main__":
    main()
