#!/usr/bin/env python3
"""Tests of tools/feature_reference.py on small synthetic datasets written to a temp folder."""
import os
import pathlib
import sys
import tempfile
import unittest

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import feature_reference as fr  # noqa: E402


def write_dataset(folder, annotator_accuracy, n_train=240, n_valid=60, n_test=120, seed=3):
    """Two classes whose 2-d features are separated by a wide margin along f0.

    Every train item is labelled once by each annotator: annotator a gives the true class with
    probability annotator_accuracy[a], the other class otherwise."""
    rng = np.random.default_rng(seed)
    classes = ["neg", "pos"]
    rows, labels, gold, splits = [], [], [], []
    for split, n in (("train", n_train), ("valid", n_valid), ("test", n_test)):
        for i in range(n):
            item = f"{split}_{i}"
            y = int(rng.integers(0, 2))
            f0 = (2.0 if y else -2.0) + rng.normal(0, 0.3)
            rows.append(f"{item},{f0:.6f},{rng.normal(0, 1):.6f}")
            gold.append(f"{item},{classes[y]}")
            splits.append(f"{item},{split}")
            if split == "train":
                for a, p in enumerate(annotator_accuracy):
                    given = y if rng.random() < p else 1 - y
                    labels.append(f"{item},{a},{classes[given]}")
    files = {
        "classes.txt": "\n".join(classes),
        "features.csv": "item,f0,f1\n" + "\n".join(rows),
        "labels.csv": "item,annotator,label\n" + "\n".join(labels),
        "gold.csv": "item,label\n" + "\n".join(gold),
        "splits.csv": "item,split\n" + "\n".join(splits),
    }
    for name, text in files.items():
        with open(os.path.join(folder, name), "w") as f:
            f.write(text + "\n")


class FeatureReferenceTest(unittest.TestCase):
    def load(self, annotator_accuracy):
        folder = tempfile.mkdtemp()
        write_dataset(folder, annotator_accuracy)
        return fr.load(folder)

    def test_load_keeps_the_splits_and_the_labels(self):
        d = self.load([0.9, 0.8, 0.7])
        self.assertEqual(d["x"].shape, (240, 2))
        self.assertEqual(len(d["label"]), 240 * 3)
        self.assertEqual(d["x_valid"].shape, (60, 2))
        self.assertEqual(d["x_test"].shape, (120, 2))
        self.assertTrue(np.all(d["gold"] >= 0))
        # Standardised over every item.
        stacked = np.vstack([d["x"], d["x_valid"], d["x_test"]])
        np.testing.assert_allclose(stacked.mean(0), 0, atol=1e-9)

    def test_a_logistic_regression_on_gold_separates_the_classes(self):
        d = self.load([0.9, 0.8, 0.7])
        w = fr.fit_logistic(d["x"], np.eye(2)[d["gold"]], lam=0.01)
        self.assertEqual(fr.accuracy(w, d["x_test"], d["y_test"]), 1.0)

    def test_dawid_skene_trusts_the_reliable_annotator_over_two_weak_ones(self):
        # Annotator 0 is always right; 1 and 2 are right 60% of the time. The vote follows 1 and
        # 2 where they agree against 0 (about 16% of the items); Dawid-Skene finds annotator 0.
        d = self.load([1.0, 0.6, 0.6])
        vote_accuracy = np.mean(fr.vote(d).argmax(1) == d["gold"])
        ds_accuracy = np.mean(fr.dawid_skene(d).argmax(1) == d["gold"])
        self.assertLess(vote_accuracy, 0.9)
        self.assertGreaterEqual(ds_accuracy, 0.98)

    def test_the_e_step_multiplies_the_prior_by_each_labels_confusion(self):
        d = {"k": 2, "item": np.array([0, 0]), "annotator": np.array([0, 1]),
             "label": np.array([1, 1])}
        c = np.array([[[0.8, 0.2], [0.3, 0.7]], [[0.6, 0.4], [0.1, 0.9]]])
        prior = np.array([[0.5, 0.5]])
        q = fr.e_step(d, prior, c)
        expected = np.array([0.2 * 0.4, 0.7 * 0.9])
        np.testing.assert_allclose(q[0], expected / expected.sum(), rtol=1e-9)

    def test_dawid_skene_iterates_from_the_vote_with_the_class_prior(self):
        d = self.load([0.9, 0.7, 0.6])
        q0 = fr.vote(d)
        prior = np.tile(q0.mean(0), (len(q0), 1))
        np.testing.assert_allclose(fr.dawid_skene(d, iterations=1),
                                   fr.e_step(d, prior, fr.confusions(d, q0)), rtol=1e-12)

    def test_raykars_e_step_takes_h_of_the_items_as_their_prior(self):
        # Two iterations by hand: the M-step fits h and the confusions to q, the E-step combines
        # h(x_i) with the item's labels, and the second M-step fits h to that (warm-started).
        d = self.load([0.9, 0.7, 0.6])
        start = fr.vote(d)
        w1 = fr.fit_logistic(d["x"], start, 0.1)
        q1 = fr.e_step(d, fr.predict(w1, d["x"]), fr.confusions(d, start))
        w2 = fr.fit_logistic(d["x"], q1, 0.1, w1)
        np.testing.assert_allclose(fr.raykar(d, 0.1, start, iterations=2), w2, rtol=1e-9)

    def test_a_cross_fitted_e_step_takes_each_items_prior_from_the_other_folds(self):
        d = self.load([0.9, 0.7, 0.6])
        start = fr.vote(d)
        fold = np.random.default_rng(0).integers(0, 3, len(d["x"]))
        prior = np.zeros_like(start)
        for f in range(3):
            w = fr.fit_logistic(d["x"][fold != f], start[fold != f], 0.1)
            prior[fold == f] = fr.predict(w, d["x"][fold == f])
        q1 = fr.e_step(d, prior, fr.confusions(d, start))
        np.testing.assert_allclose(fr.raykar_crossfit(d, 0.1, start, folds=3, iterations=1),
                                   fr.fit_logistic(d["x"], q1, 0.1), rtol=1e-9)

    def test_the_em_learners_beat_the_vote_with_one_good_annotator(self):
        d = self.load([0.95, 0.55, 0.55])
        start = fr.dawid_skene(d)
        vote_w = fr.fit_logistic(d["x"], fr.vote(d), 0.1)
        for w in (fr.raykar(d, 0.1, start), fr.raykar_crossfit(d, 0.1, start, folds=3)):
            self.assertGreaterEqual(fr.accuracy(w, d["x_test"], d["y_test"]), 0.98)
            self.assertGreaterEqual(fr.accuracy(w, d["x_test"], d["y_test"]),
                                    fr.accuracy(vote_w, d["x_test"], d["y_test"]))


if __name__ == "__main__":
    unittest.main()
