"""verity_client against a real verity_server on its own embedded PostgreSQL.

One server for ClientServerTest (starting PostgreSQL takes seconds). The bluebirds project is
created and its 4,212 labels submitted from a pandas DataFrame once, in setUpClass; tests
that write use projects of their own. ApiKeyTest runs a second server, with authentication on;
TieRuleTest a third, without background refits.

Every public call of verity_client against the real server (client.py; frames.py's functions
run inside them: column, ids, annotations, label_indices and needs_class_names in submit and
add_items, posterior_frame in posteriors):
  create_project, list_projects, submit, add_items, posteriors (ListPosteriors and
  GetPosteriors, details), annotators, model_status, suggest_items, suggest_annotators,
  wait_until_ready, close ............................. ClientServerTest
  create_key, list_keys, revoke_key ................... ApiKeyTest
and, not called against a real server before:
  get_project, Client as a context manager ............ test_get_project_from_a_fresh_client
  model_versions (empty, then after a fit) ............ TieRuleTest
TieRuleTest: truth.proto's tie rule (lowest class index) in posteriors() and its CSV.
ClientPromisesTest: train(), empty projects' frames, progress per ack, "p_" columns, add_items'
calls, errors naming the call and field, submit()'s and wait_until_ready()'s deadlines,
close() during a call, one Client shared by threads.
CliCsvFilesTest: the `verity` CLI on real-world CSV files (byte-order mark, CRLF, quoting,
UTF-8 ids, 200,000 lines) against a fourth server; its export and posteriors read back by
csv and pandas.
"""

import csv
import datetime
import io
import json
import os
import pty
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import grpc
import numpy as np
import pandas as pd

import junit
import server_process
import verity_client
from verity.v1 import models_pb2
from verity.v1 import models_pb2_grpc
from verity.v1 import projects_pb2
from verity.v1 import projects_pb2_grpc

BLUEBIRDS = "bluebirds"
BLUEBIRDS_LABELS = 4212
BLUEBIRDS_ITEMS = 108
BLUEBIRDS_ANNOTATORS = 39
SUBMIT_BATCH_SIZE = 500


def free_loopback_port():
    """A 127.0.0.1 port where nothing listens (bound, then closed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ClientServerTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.server = server_process.ServerProcess(server_process.runfile("server/verity_server"))
        cls.server.start()
        cls.addClassCleanup(cls.server.stop)
        cls.client = verity_client.Client(cls.server.address, timeout=30)
        cls.addClassCleanup(cls.client.close)
        cls.client.wait_until_ready(timeout=60)

        cls.datasets = server_process.find_datasets()
        data = os.path.join(cls.datasets, "bluebirds")
        with open(os.path.join(data, "classes.txt"), encoding="utf-8") as f:
            cls.classes = f.read().split()
        cls.labels = pd.read_csv(os.path.join(data, "labels.csv"), dtype=str)
        cls.gold = pd.read_csv(os.path.join(data, "gold.csv"), dtype=str)

        cls.project = cls.client.create_project(BLUEBIRDS, cls.classes)
        cls.progress = []
        cls.submitted = cls.client.submit(
            BLUEBIRDS, cls.labels, batch_size=SUBMIT_BATCH_SIZE, max_unacked_batches=3,
            progress=lambda acked, total: cls.progress.append((acked, total)))

    # --- projects and ingest ------------------------------------------------------------

    def test_create_project_returns_the_project(self):
        self.assertEqual(self.project.name, BLUEBIRDS)
        self.assertEqual(self.project.classes, ("false", "true"))
        self.assertIsInstance(self.project.created_at, datetime.datetime)
        listed = {p.name: p for p in self.client.list_projects()}
        self.assertEqual(listed[BLUEBIRDS].num_labels, BLUEBIRDS_LABELS)
        self.assertEqual(listed[BLUEBIRDS].num_items, BLUEBIRDS_ITEMS)
        self.assertEqual(listed[BLUEBIRDS].num_annotators, BLUEBIRDS_ANNOTATORS)

    def test_submit_accepts_every_bluebirds_label_once(self):
        self.assertEqual(
            (self.submitted.accepted, self.submitted.duplicate, self.submitted.revised,
             self.submitted.rejected, self.submitted.retries),
            (BLUEBIRDS_LABELS, 0, 0, 0, 0))
        # One progress call per acked batch of 500, the last at the total.
        self.assertEqual(len(self.progress), 9)
        self.assertEqual(self.progress[-1], (BLUEBIRDS_LABELS, BLUEBIRDS_LABELS))

    def test_submit_task_worker_columns_with_indices_duplicates_revisions_rejections(self):
        self.client.create_project("small-indices", ["a", "b", "c"])
        df = pd.DataFrame({"task": ["i1", "i1", "i2"], "worker": ["w1", "w2", "w1"],
                           "label": [0, 2, 1]})
        first = self.client.submit("small-indices", df, batch_size=2)
        self.assertEqual((first.accepted, first.duplicate, first.revised, first.rejected),
                         (3, 0, 0, 0))
        again = df.copy()
        again.loc[2, "label"] = 2           # A revision of (i2, w1).
        again.loc[3] = ["i3", "w2", 7]      # Out of range: rejected alone.
        second = self.client.submit("small-indices", again, batch_size=2)
        self.assertEqual((second.accepted, second.duplicate, second.revised, second.rejected),
                         (0, 2, 1, 1))
        self.assertEqual(len(second.rejections), 1)
        self.assertEqual(second.rejections[0].row, 3)
        self.assertIn("label", second.rejections[0].reason)
        # A negative index is out of range too: the server rejects it alone (README).
        negative = self.client.submit("small-indices", pd.DataFrame(
            {"task": ["i4", "i5"], "worker": ["w1", "w1"], "label": [1, -1]}))
        self.assertEqual((negative.accepted, negative.rejected), (1, 1))
        self.assertEqual(negative.rejections[0].row, 1)
        posteriors = self.client.posteriors("small-indices", items=["i2", "i1"], details=True)
        self.assertEqual(posteriors["item"].tolist(), ["i2", "i1"])
        self.assertEqual(posteriors["label"].iloc[0], "c")
        self.assertEqual(posteriors["num_labels"].tolist(), [1, 2])

    def test_add_items_with_gold_clamps_the_posterior(self):
        self.client.create_project("gold-items", ["cat", "dog"], method="mv")
        added = self.client.add_items("gold-items", pd.DataFrame(
            {"item": ["g1", "g2"], "gold": ["dog", None], "priority": [1.0, None]}))
        self.assertEqual(added, (2, 0))
        labels = pd.DataFrame({"item": ["g1", "g2"], "annotator": ["w1", "w1"],
                               "label": ["cat", "cat"]})
        self.assertEqual(self.client.submit("gold-items", labels).accepted, 2)
        posteriors = self.client.posteriors("gold-items", details=True)
        self.assertEqual(posteriors["item"].tolist(), ["g1", "g2"])
        self.assertEqual(posteriors["is_gold"].tolist(), [True, False])
        self.assertEqual(posteriors["label"].tolist(), ["dog", "cat"])
        self.assertEqual(self.client.model_status("gold-items").method, "mv")

    # add_items (client.py): "One AddItems RPC per 10,000 items". The C++ client's calls of
    # 10,000 items of 512 features passed the server's 16 MiB message limit; add_items sends no
    # features, so its largest call (10,000 ids of 256 bytes, each with gold and priority) is
    # under 3 MB and one such call is accepted whole.
    def test_add_items_of_the_longest_ids_stays_under_the_message_limit(self):
        self.client.create_project("long-ids", ["cat", "dog"], method="mv")
        ids = [("i%d-" % i).ljust(256, "x") for i in range(10000)]
        added = self.client.add_items("long-ids", pd.DataFrame(
            {"item": ids, "gold": ["dog"] * len(ids), "priority": [1.5] * len(ids)}))
        self.assertEqual(added, (10000, 0))

    def test_create_existing_project(self):
        with self.assertRaises(verity_client.VerityError) as raised:
            self.client.create_project(BLUEBIRDS, self.classes)
        self.assertEqual(raised.exception.code, grpc.StatusCode.ALREADY_EXISTS)
        again = self.client.create_project(BLUEBIRDS, self.classes, exist_ok=True)
        self.assertEqual(again.num_labels, BLUEBIRDS_LABELS)
        with self.assertRaises(verity_client.VerityError) as raised:
            self.client.create_project(BLUEBIRDS, ["x", "y"], exist_ok=True)
        self.assertEqual(raised.exception.code, grpc.StatusCode.ALREADY_EXISTS)

    def test_get_project_from_a_fresh_client(self):
        self.client.create_project(
            "described", ["cat", "dog", "bird"], method="mv", annotator_feature_dim=2,
            settings={"assignment": {"min_labels_per_item": 3}})
        # A new client, which has not seen the project: submit() learns its classes through
        # get_project.
        with verity_client.Client(self.server.address, timeout=30) as fresh:
            labels = pd.DataFrame({"item": ["i1", "i1", "i2"], "annotator": ["a", "b", "a"],
                                   "label": ["dog", "bird", "cat"]})
            self.assertEqual(fresh.submit("described", labels).accepted, 3)
            self.assertEqual(fresh.add_items("described", pd.DataFrame({"item": ["i3"]})),
                             (1, 0))
            self.assertEqual(fresh.submit("described", pd.DataFrame(
                {"item": ["i1"], "annotator": ["a"], "label": ["cat"]})).revised, 1)
            project = fresh.get_project("described")
            with self.assertRaises(verity_client.VerityError) as raised:
                fresh.get_project("no-such-project")
        self.assertEqual(raised.exception.code, grpc.StatusCode.NOT_FOUND)
        self.assertEqual((project.name, project.classes, project.method),
                         ("described", ("cat", "dog", "bird"), "mv"))
        self.assertEqual((project.item_feature_dim, project.annotator_feature_dim), (0, 2))
        self.assertEqual((project.num_items, project.num_annotators, project.num_labels),
                         (3, 2, 3))
        self.assertEqual(project.num_revisions, 1)
        self.assertEqual(project.settings.assignment.min_labels_per_item, 3)
        self.assertIsInstance(project.created_at, datetime.datetime)
        # The context manager closed the channel.
        with self.assertRaises(ValueError):
            fresh.get_project("described")

    # --- errors -------------------------------------------------------------------------

    def test_invalid_project_raises_invalid_argument(self):
        for name, classes in (("bad name!", ["a", "b"]), ("one-class", ["only"])):
            with self.subTest(name=name):
                with self.assertRaises(verity_client.VerityError) as raised:
                    self.client.create_project(name, classes)
                self.assertEqual(raised.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
                self.assertTrue(raised.exception.message.startswith("CreateProject: "))

    def test_unknown_project_raises_not_found(self):
        with self.assertRaises(verity_client.VerityError) as raised:
            self.client.model_status("no-such-project")
        self.assertEqual(raised.exception.code, grpc.StatusCode.NOT_FOUND)
        with self.assertRaises(verity_client.VerityError) as raised:
            self.client.posteriors("no-such-project")
        self.assertEqual(raised.exception.code, grpc.StatusCode.NOT_FOUND)

    def test_batch_refused_whole_raises_with_the_ack_code(self):
        df = pd.DataFrame({"item": ["i1"], "annotator": ["w1"], "label": [0]})
        with self.assertRaises(verity_client.VerityError) as raised:
            self.client.submit("no-such-project", df)
        self.assertEqual(raised.exception.code, grpc.StatusCode.NOT_FOUND)
        self.assertIn("batch 1 of 1 (rows 0 to 0)", raised.exception.message)

    def test_unknown_class_name_is_refused_before_sending(self):
        df = pd.DataFrame({"item": ["fresh-item"], "annotator": ["w1"], "label": ["maybe"]})
        with self.assertRaisesRegex(ValueError, "'maybe' is not a class"):
            self.client.submit(BLUEBIRDS, df)
        with self.assertRaises(verity_client.VerityError) as raised:
            self.client.posteriors(BLUEBIRDS, items=["fresh-item"])
        self.assertEqual(raised.exception.code, grpc.StatusCode.NOT_FOUND)

    def test_every_call_has_a_deadline(self):
        # A peer that accepts TCP connections but never speaks HTTP/2: only the client's
        # deadline can end the call. (A microsecond deadline against the real server was
        # flaky: the call sometimes completed first.)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as silent:
            silent.bind(("127.0.0.1", 0))
            silent.listen(8)
            address = "127.0.0.1:%d" % silent.getsockname()[1]
            with verity_client.Client(address, timeout=0.3) as hasty:
                with self.assertRaises(verity_client.VerityError) as raised:
                    hasty.list_projects()
        self.assertEqual(raised.exception.code, grpc.StatusCode.DEADLINE_EXCEEDED)

    # --- truth --------------------------------------------------------------------------

    def test_posteriors_frame_has_one_row_per_item(self):
        posteriors = self.client.posteriors(BLUEBIRDS, page_size=40)  # 3 pages.
        self.assertEqual(list(posteriors.columns),
                         ["item", "label", "confidence", "false", "true"])
        self.assertEqual(posteriors.shape, (BLUEBIRDS_ITEMS, 5))
        self.assertEqual(set(posteriors["item"]), set(self.labels["item"]))
        probabilities = posteriors[self.classes].to_numpy()
        np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-9)
        np.testing.assert_allclose(posteriors["confidence"], probabilities.max(axis=1))
        self.assertEqual(posteriors["label"].tolist(),
                         [self.classes[k] for k in probabilities.argmax(axis=1)])

    def test_posteriors_of_many_classes_split_their_calls_within_the_response_limit(self):
        # 10,000 posteriors of 256 classes take over 20 MB, past the server's 16 MiB response:
        # the server refuses one GetPosteriors of them all (RESOURCE_EXHAUSTED), so the client
        # must ask in smaller calls, and a full-size page must end early with a token.
        classes = ["c%d" % c for c in range(256)]
        self.client.create_project("many-classes", classes, method="mv")
        ids = ["item-%d" % (100000 + i) for i in range(10000)]
        self.client.add_items("many-classes", pd.DataFrame({"item": ids}))
        by_id = self.client.posteriors("many-classes", items=ids)
        self.assertEqual(by_id["item"].tolist(), ids)
        self.assertEqual(by_id.shape, (10000, 2 + 1 + 256))
        listed = self.client.posteriors("many-classes", page_size=10000)
        self.assertEqual(listed["item"].tolist(), ids)
        # 100 full 256-class confusions (512 KiB each) do not fit one response either.
        workers = ["w%d" % a for a in range(100)]
        submitted = self.client.submit("many-classes", pd.DataFrame(
            {"item": ids[:100], "annotator": workers, "label": [0] * 100}))
        self.assertEqual(submitted.accepted, 100)
        profiles = self.client.annotators("many-classes", workers)
        self.assertEqual(profiles["annotator"].tolist(), workers)
        self.assertEqual(profiles["confusion"].iloc[99].shape, (256, 256))

    def test_posteriors_beat_chance_like_majority_vote_on_gold(self):
        posteriors = self.client.posteriors(BLUEBIRDS, details=True)
        self.assertEqual(posteriors["num_labels"].sum(), BLUEBIRDS_LABELS)
        joined = posteriors.merge(self.gold, on="item", suffixes=("", "_gold"))
        self.assertEqual(len(joined), BLUEBIRDS_ITEMS)
        accuracy = (joined["label"] == joined["label_gold"]).mean()
        # Majority vote gets 0.7593, Dawid-Skene 0.8981 (README.md).
        self.assertGreater(accuracy, 0.70)
        # Dawid-Skene learns no item difficulty (lia does): the column is all NaN.
        self.assertIn("difficulty", posteriors.columns)
        self.assertTrue(posteriors["difficulty"].isna().all())

    def test_annotator_profiles(self):
        profiles = self.client.annotators(BLUEBIRDS)
        self.assertEqual(list(profiles.columns),
                         ["annotator", "accuracy", "num_labels", "confusion", "embedding",
                          "predicted_from_features"])
        # Dawid-Skene learns no annotator embedding (lia and conal do).
        self.assertTrue(all(e.shape == (0,) for e in profiles["embedding"]))
        # Nor predicts a confusion from annotator features (lia does, for new annotators).
        self.assertFalse(profiles["predicted_from_features"].any())
        self.assertEqual(len(profiles), BLUEBIRDS_ANNOTATORS)
        self.assertEqual(profiles["num_labels"].sum(), BLUEBIRDS_LABELS)
        self.assertTrue(((profiles["accuracy"] >= 0) & (profiles["accuracy"] <= 1)).all())
        for confusion in profiles["confusion"]:
            self.assertEqual(confusion.shape, (2, 2))
            np.testing.assert_allclose(confusion.sum(axis=1), 1.0, atol=1e-9)
        one = self.client.annotators(BLUEBIRDS, annotators=["39"])
        self.assertEqual(one["annotator"].tolist(), ["39"])
        self.assertEqual(one["num_labels"].iloc[0], BLUEBIRDS_ITEMS)

    def test_every_annotator_comes_back_across_pages(self):
        # Without ids, annotators() follows GetAnnotatorProfiles' pages (1,000 profiles each)
        # to the end.
        self.client.create_project("many-annotators", ["a", "b"], method="mv")
        workers = ["w%04d" % a for a in range(1001)]
        submitted = self.client.submit("many-annotators", pd.DataFrame(
            {"item": ["i%d" % (a % 10) for a in range(1001)], "annotator": workers,
             "label": [a % 2 for a in range(1001)]}))
        self.assertEqual(submitted.accepted, 1001)
        profiles = self.client.annotators("many-annotators")
        self.assertEqual(sorted(profiles["annotator"].tolist()), workers)

    def test_model_status(self):
        status = self.client.model_status(BLUEBIRDS)
        # Created without a method: served by auto, the default of new projects.
        self.assertEqual(status.method, "auto")
        self.assertEqual(status.num_labels, BLUEBIRDS_LABELS)
        if status.current_version is not None:  # The background refit may not have run yet.
            self.assertGreaterEqual(status.current_version.version, 1)
            self.assertEqual(status.current_version.method, "auto")
            self.assertIn(status.chosen_method,
                          ("ds", "one_coin", "glad", "mace", "mv", "wawa", "zero_based_skill",
                           "ebcc"))
            self.assertIn("chose " + status.chosen_method, status.choice_reason)

    # --- assignment ---------------------------------------------------------------------

    def test_suggest_items_for_a_new_annotator(self):
        before = datetime.datetime.now(datetime.timezone.utc)
        suggestions = self.client.suggest_items(BLUEBIRDS, "newcomer", k=5)
        self.assertEqual(list(suggestions.columns),
                         ["item", "score", "p_correct", "lease_expires_at"])
        self.assertEqual(len(suggestions), 5)
        self.assertTrue(set(suggestions["item"]) <= set(self.labels["item"]))
        self.assertEqual(suggestions["item"].nunique(), 5)
        self.assertTrue((np.diff(suggestions["score"].to_numpy()) <= 1e-12).all())
        self.assertTrue((suggestions["lease_expires_at"] > pd.Timestamp(before)).all())

    def test_suggest_annotators_for_an_item(self):
        item = self.labels["item"].iloc[0]
        suggestions = self.client.suggest_annotators(BLUEBIRDS, item, k=3,
                                                     candidates=["39", "40", "41", "42"])
        self.assertEqual(len(suggestions), 3)
        self.assertTrue(set(suggestions["annotator"]) <= {"39", "40", "41", "42"})

    # --- CSV files as users have them ---------------------------------------------------

    def write_temp(self, data):
        with tempfile.NamedTemporaryFile("wb", suffix=".csv", delete=False) as f:
            f.write(data.encode("utf-8"))
        self.addCleanup(os.remove, f.name)
        return f.name

    def test_a_bom_crlf_quoted_csv_read_as_the_readme_says_keeps_its_ids_exact(self):
        # "UTF-8 with BOM", CRLF, no final line end, RFC 4180 quoting, ids with spaces and
        # UTF-8; read as the README's usage does.
        path = self.write_temp("\ufeff" + "\r\n".join([
            "item,annotator,label",
            '"img, 1",Anna Müller,cat',
            '"say ""hi""", w 3 ,dog',
            "猫 ünï,Anna Müller,dog",
            '"img, 1", w 3 ,cat']))
        labels = pd.read_csv(path, dtype=str)
        self.client.create_project("bom-crlf", ["cat", "dog"], method="mv")
        result = self.client.submit("bom-crlf", labels)
        self.assertEqual((result.accepted, result.rejected), (4, 0))
        posteriors = self.client.posteriors("bom-crlf", details=True)
        self.assertEqual(list(zip(posteriors["item"], posteriors["label"],
                                  posteriors["num_labels"])),
                         [("img, 1", "cat", 2), ('say "hi"', "dog", 1), ("猫 ünï", "dog", 1)])
        self.assertEqual(sorted(self.client.annotators("bom-crlf")["annotator"]),
                         [" w 3 ", "Anna Müller"])
        # The frame's CSV, read back by the csv module: the same ids and the same doubles.
        rows = list(csv.DictReader(io.StringIO(posteriors.to_csv(index=False))))
        self.assertEqual([r["item"] for r in rows], posteriors["item"].tolist())
        for row, (_, expected) in zip(rows, posteriors.iterrows()):
            for name in ("confidence", "cat", "dog"):
                self.assertEqual(float(row[name]), expected[name])

    def test_submit_reads_crowd_kit_columns_in_any_order_beside_other_columns(self):
        # README: submit takes columns item/task, annotator/worker and label; frames.py: other
        # columns are ignored (a crowd-kit frame often carries more).
        path = self.write_temp("label,time,worker,task\r\ndog,12:00,w 1,t 1\r\n"
                               "cat,12:01,w 2,t 1\r\ncat,12:02,w 3,t 1\r\n")
        labels = pd.read_csv(path, dtype=str)
        self.client.create_project("crowd-kit-columns", ["cat", "dog"], method="mv")
        result = self.client.submit("crowd-kit-columns", labels)
        self.assertEqual((result.accepted, result.rejected), (3, 0))
        posteriors = self.client.posteriors("crowd-kit-columns", details=True)
        self.assertEqual(list(zip(posteriors["item"], posteriors["label"],
                                  posteriors["num_labels"])), [("t 1", "cat", 3)])

    def test_ids_named_na_or_null_stay_strings_when_read_as_the_readme_says(self):
        # README: "Read CSVs with dtype=str and keep_default_na=False, so ids stay strings";
        # NA is Namibia's country code, and "null" an id like any other. (With dtype=str alone,
        # as the README said before, pandas read them as missing and submit raised ValueError.)
        path = self.write_temp("item,annotator,label\nNA,w1,cat\nnull,w1,dog\nNA,n/a,cat\n")
        labels = pd.read_csv(path, dtype=str, keep_default_na=False)
        self.client.create_project("na-ids", ["cat", "dog"], method="mv")
        result = self.client.submit("na-ids", labels)
        self.assertEqual((result.accepted, result.rejected), (3, 0))
        self.assertEqual(self.client.posteriors("na-ids")["item"].tolist(), ["NA", "null"])

    def test_add_items_of_a_datasets_gold_csv_sets_the_gold_or_refuses_the_column(self):
        # A dataset's gold.csv has columns item,label: the CLI reads it as gold (`item add
        # --gold_csv`; its items CSV takes "gold (or label)"). add_items documents item, gold
        # and priority; it must not silently drop the gold of a frame that names it label.
        gold = self.gold.head(3)
        self.assertEqual(gold.columns.tolist(), ["item", "label"])
        self.client.create_project("gold-csv", self.classes, method="mv")
        try:
            self.client.add_items("gold-csv", gold)
        except ValueError as error:
            self.assertIn("label", str(error))
            return
        posteriors = self.client.posteriors("gold-csv", details=True)
        self.assertEqual(list(zip(posteriors["item"], posteriors["is_gold"],
                                  posteriors["label"])),
                         [(item, True, label) for item, label in zip(gold["item"],
                                                                     gold["label"])])

    # --- the example --------------------------------------------------------------------

    def test_example_script_runs(self):
        env = dict(os.environ, VERITY_TARGET=self.server.address,
                   VERITY_PROJECT="bluebirds-example", VERITY_DATASETS=self.datasets)
        example = server_process.runfile("client/python/examples/aggregate_bluebirds.py")
        run = subprocess.run([sys.executable, example], env=env, capture_output=True,
                             text=True, timeout=120)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertIn("accepted=%d" % BLUEBIRDS_LABELS, run.stdout)
        self.assertRegex(run.stdout, r"accuracy: verity 0\.[789]\d+, majority vote 0\.7593")


class ApiKeyTest(unittest.TestCase):
    """A server with --auth=on (allowed on loopback too): its bootstrap admin key, written to
    DATA_DIR/admin.key on first start, creates a reader key for one project."""

    @classmethod
    def setUpClass(cls):
        cls.server = server_process.ServerProcess(
            server_process.runfile("server/verity_server"), ["--auth=on", "--metrics_port=0"])
        cls.server.start()
        cls.addClassCleanup(cls.server.stop)
        with open(os.path.join(cls.server.data_dir, "var", "admin.key"), encoding="ascii") as f:
            cls.admin_key = f.read().strip()

    def connect(self, api_key):
        client = verity_client.Client(self.server.address, timeout=30, api_key=api_key)
        self.addCleanup(client.close)
        return client

    def test_reader_key_queries_cannot_submit_and_stops_working_once_revoked(self):
        admin = self.connect(self.admin_key)
        admin.create_project("P", ["cat", "dog"])
        labels = pd.DataFrame({"item": ["i1", "i1", "i2"], "annotator": ["a", "b", "a"],
                               "label": ["cat", "cat", "dog"]})
        self.assertEqual(admin.submit("P", labels).accepted, 3)

        created = admin.create_key("reader", projects=["P"], name="dashboard")
        key = created.key
        self.assertEqual((key.role, key.projects, key.name, key.revoked_at),
                         ("reader", ("P",), "dashboard", None))
        self.assertEqual(key.created_by, self.admin_key[3:19])
        self.assertTrue(created.secret_key.startswith("vk_%s_" % key.key_id))
        self.assertNotIn(created.secret_key, repr(created))

        reader = self.connect(created.secret_key)
        self.assertEqual(reader.posteriors("P")["item"].tolist(), ["i1", "i2"])
        with self.assertRaises(verity_client.VerityError) as raised:
            reader.submit("P", labels)
        self.assertEqual(raised.exception.code, grpc.StatusCode.PERMISSION_DENIED)
        self.assertIn("API key %s has role reader" % key.key_id, raised.exception.message)
        with self.assertRaises(verity_client.VerityError) as raised:
            reader.list_keys()
        self.assertEqual(raised.exception.code, grpc.StatusCode.PERMISSION_DENIED)

        with self.assertRaises(verity_client.VerityError) as raised:
            self.connect("").list_projects()
        self.assertEqual(raised.exception.code, grpc.StatusCode.UNAUTHENTICATED)

        self.assertEqual([(k.name, k.role, k.projects) for k in admin.list_keys()],
                         [("bootstrap admin", "admin", ()), ("dashboard", "reader", ("P",))])
        revoked = admin.revoke_key(key.key_id)
        self.assertEqual(revoked.key_id, key.key_id)
        self.assertIsInstance(revoked.revoked_at, datetime.datetime)
        with self.assertRaises(verity_client.VerityError) as raised:
            reader.posteriors("P")
        self.assertEqual(raised.exception.code, grpc.StatusCode.UNAUTHENTICATED)
        self.assertNotIn(key.key_id, [k.key_id for k in admin.list_keys()])
        self.assertIn(key.key_id, [k.key_id for k in admin.list_keys(include_revoked=True)])


    def test_a_writer_key_of_one_project_writes_there_only_until_revoked(self):
        # client.py create_key: a writer also submits labels, adds items, trains and suggests
        # items; creating projects and keys needs admin. list_projects: every project the key
        # may see. revoke_key: a second revoke changes nothing; an unknown id is NOT_FOUND.
        admin = self.connect(self.admin_key)
        admin.create_project("W", ["a", "b"], method="mv")
        admin.create_project("W-other", ["a", "b"], method="mv")
        created = admin.create_key("writer", projects=["W"], name="ingest")
        writer = self.connect(created.secret_key)
        self.assertEqual([p.name for p in writer.list_projects()], ["W"])
        labels = pd.DataFrame({"item": ["i1"], "annotator": ["w1"], "label": ["a"]})
        self.assertEqual(writer.submit("W", labels).accepted, 1)
        self.assertEqual(writer.add_items("W", pd.DataFrame({"item": ["i2"]})), (1, 0))
        self.assertEqual(writer.train("W").version, 1)
        self.assertEqual(len(writer.suggest_items("W", "w2", k=2)), 2)
        for call in (lambda: writer.posteriors("W-other"),
                     lambda: writer.create_project("W-new", ["a", "b"]),
                     lambda: writer.create_key("reader")):
            with self.assertRaises(verity_client.VerityError) as raised:
                call()
            self.assertEqual(raised.exception.code, grpc.StatusCode.PERMISSION_DENIED)
            self.assertIn(created.key.key_id, raised.exception.message)

        with self.assertRaises(verity_client.VerityError) as raised:
            admin.revoke_key("0123456789abcdef")
        self.assertEqual(raised.exception.code, grpc.StatusCode.NOT_FOUND)
        revoked = admin.revoke_key(created.key.key_id)
        self.assertIsInstance(revoked.revoked_at, datetime.datetime)
        self.assertEqual(admin.revoke_key(created.key.key_id), revoked)
        for call in (writer.list_projects, lambda: writer.submit("W", labels)):
            with self.assertRaises(verity_client.VerityError) as raised:
                call()
            self.assertEqual(raised.exception.code, grpc.StatusCode.UNAUTHENTICATED)


class NoBackgroundRefitTestCase(unittest.TestCase):
    """A test class with its own server that fits only when a test asks (no background
    refits), and a Client of it."""

    @classmethod
    def setUpClass(cls):
        cls.server = server_process.ServerProcess(
            server_process.runfile("server/verity_server"),
            ["--background_refit=false", "--metrics_port=0"])
        cls.server.start()
        cls.addClassCleanup(cls.server.stop)
        cls.client = verity_client.Client(cls.server.address, timeout=30)
        cls.addClassCleanup(cls.client.close)


class TieRuleTest(NoBackgroundRefitTestCase):
    """truth.proto: map_label, the label column of posteriors(), is the most probable class,
    the lowest class index on ties. Majority vote (and every method before its first fit) gives
    an item the smoothed vote shares, so equal label counts give exactly equal probabilities
    (asserted first) and only the rule decides. The server runs without background refits, so
    the model versions are the ones the tests fit."""

    def train(self, project):
        """Fits `project` now (TrainModel; the Python client has no call for it)."""
        channel = grpc.insecure_channel(self.server.address)
        self.addCleanup(channel.close)
        return models_pb2_grpc.ModelServiceStub(channel).TrainModel(
            models_pb2.TrainModelRequest(project=project), timeout=60).version

    def assert_ties(self, frame, expected):
        """expected: item -> (label, the classes tied at the top)."""
        self.assertEqual(sorted(frame["item"]), sorted(expected))
        for _, row in frame.iterrows():
            label, tied = expected[row["item"]]
            with self.subTest(item=row["item"]):
                top = row[tied[0]]
                for name in ("x", "y", "z"):
                    if name in tied:
                        self.assertEqual(row[name], top)  # Exactly: the premise.
                    else:
                        self.assertLess(row[name], top)
                self.assertEqual(row["label"], label)
                self.assertEqual(row["confidence"], top)

    def test_majority_vote_ties_take_the_lowest_class_index_in_the_frame_and_its_csv(self):
        self.client.create_project("votes", ["x", "y", "z"], method="mv")
        labels = pd.DataFrame(
            [("zy", "w1", "z"), ("zy", "w2", "y"),
             ("yz", "w1", "y"), ("yz", "w2", "z"),
             ("xyz", "w1", "z"), ("xyz", "w2", "y"), ("xyz", "w3", "x"),
             ("zzy", "w1", "z"), ("zzy", "w2", "z"), ("zzy", "w3", "y")],  # z wins.
            columns=["item", "annotator", "label"])
        self.assertEqual(self.client.submit("votes", labels).accepted, 10)
        expected = {"zy": ("y", ["y", "z"]), "yz": ("y", ["y", "z"]),
                    "xyz": ("x", ["x", "y", "z"]), "zzy": ("z", ["z"])}
        self.assertEqual(self.client.model_versions("votes"), [])

        for version in (0, 1):
            if version == 1:
                fitted = self.train("votes")
                self.assertEqual(fitted.version, 1)
            with self.subTest(model_version=version):
                listed = self.client.posteriors("votes", page_size=3, details=True)
                self.assertEqual(listed["model_version"].tolist(), [version] * 4)
                self.assert_ties(listed, expected)
                self.assert_ties(self.client.posteriors("votes", items=["yz", "zy", "xyz",
                                                                         "zzy"]), expected)
                # The CSV export of the frame: floats are written in their shortest exact
                # form, so the tied columns hold the same text.
                rows = list(csv.DictReader(io.StringIO(listed.to_csv(index=False))))
                self.assertEqual([(r["item"], r["label"]) for r in rows],
                                 [("zy", "y"), ("yz", "y"), ("xyz", "x"), ("zzy", "z")])
                self.assertEqual(rows[0]["y"], rows[0]["z"])
                self.assertEqual(rows[2]["x"], rows[2]["z"])

        versions = self.client.model_versions("votes")
        self.assertEqual([(v.version, v.method, v.num_labels) for v in versions],
                         [(1, "mv", 10)])
        self.assertEqual(self.client.model_status("votes").current_version, versions[0])

    def test_default_method_before_its_first_fit_ties_to_the_lowest_class_index(self):
        self.client.create_project("default-method", ["x", "y", "z"])
        labels = pd.DataFrame({"item": ["zy", "zy", "xy", "xy"],
                               "annotator": ["w1", "w2", "w3", "w4"],
                               "label": [2, 1, 1, 0]})
        self.assertEqual(self.client.submit("default-method", labels).accepted, 4)
        status = self.client.model_status("default-method")
        # The default method of a new project is auto; before its first fit it serves the vote.
        self.assertEqual((status.method, status.current_version), ("auto", None))
        self.assertEqual(self.client.model_versions("default-method"), [])
        self.assert_ties(self.client.posteriors("default-method"),
                         {"zy": ("y", ["y", "z"]), "xy": ("x", ["x", "y"])})



class ClientPromisesTest(NoBackgroundRefitTestCase):
    """Promises of client.py's docstrings and the README that the tests above leave open:
    train(), the frames of an empty project, progress per ack, "p_" columns from the server,
    add_items' chunks, errors that name the call and the field, deadlines of submit() and
    wait_until_ready(), close() during a call, and one Client shared by threads. The server
    runs without background refits, so the only model versions are the ones train() fits."""

    def test_train_fits_now_and_its_version_is_the_current_one(self):
        self.client.create_project("to-train", ["a", "b"], method="mv")
        # models.proto: FAILED_PRECONDITION when the project has no labels.
        with self.assertRaises(verity_client.VerityError) as raised:
            self.client.train("to-train")
        self.assertEqual(raised.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
        self.assertTrue(raised.exception.message.startswith("TrainModel: "))
        labels = pd.DataFrame({"item": ["i1", "i1", "i2", "i3"],
                               "annotator": ["w1", "w2", "w1", "w2"],
                               "label": ["a", "b", "b", "a"]})
        self.assertEqual(self.client.submit("to-train", labels).accepted, 4)
        version = self.client.train("to-train")
        self.assertIsInstance(version, verity_client.ModelVersion)
        self.assertEqual((version.version, version.method, version.num_labels), (1, "mv", 4))
        self.assertIsInstance(version.created_at, datetime.datetime)
        self.assertEqual(version.created_at.tzinfo, datetime.timezone.utc)
        # Nothing changed since that fit: TrainModel returns it and writes nothing.
        self.assertEqual(self.client.train("to-train"), version)
        self.assertEqual(self.client.model_versions("to-train"), [version])
        status = self.client.model_status("to-train")
        self.assertEqual((status.method, status.current_version, status.num_labels,
                          status.labels_since_version, status.training),
                         ("mv", version, 4, 0, False))

    def test_model_versions_are_the_newest_limit_newest_first(self):
        self.client.create_project("versions", ["a", "b"], method="mv")
        for n in range(3):  # A new label before each fit, so that each makes a version.
            self.client.submit("versions", pd.DataFrame(
                {"item": ["i1"], "annotator": ["w%d" % n], "label": ["a"]}))
            self.assertEqual(self.client.train("versions").version, n + 1)
        self.assertEqual([(v.version, v.num_labels)
                          for v in self.client.model_versions("versions", limit=2)],
                         [(3, 3), (2, 2)])
        self.assertEqual([v.version for v in self.client.model_versions("versions")],
                         [3, 2, 1])

    def test_details_and_status_tell_labels_newer_than_the_fit(self):
        # truth.proto: model_version is the fit that produced the posterior (0 before any),
        # includes_newer_labels whether the item has labels newer than that fit; models.proto:
        # labels_since_version counts the labels that arrived since the current version.
        self.client.create_project("newer", ["a", "b"], method="mv")
        self.client.submit("newer", pd.DataFrame(
            {"item": ["i1", "i1", "i2"], "annotator": ["w1", "w2", "w1"],
             "label": ["a", "a", "b"]}))
        before = self.client.posteriors("newer", details=True)
        self.assertEqual(before["model_version"].tolist(), [0, 0])
        self.assertEqual(self.client.train("newer").version, 1)
        fitted = self.client.posteriors("newer", details=True)
        self.assertEqual(fitted["model_version"].tolist(), [1, 1])
        self.assertEqual(fitted["includes_newer_labels"].tolist(), [False, False])
        self.client.submit("newer", pd.DataFrame(
            {"item": ["i1"], "annotator": ["w3"], "label": ["b"]}))
        updated = self.client.posteriors("newer", items=["i1", "i2"], details=True)
        self.assertEqual(updated["model_version"].tolist(), [1, 1])
        self.assertEqual(updated["includes_newer_labels"].tolist(), [True, False])
        self.assertEqual(updated["num_labels"].tolist(), [3, 1])
        status = self.client.model_status("newer")
        self.assertEqual((status.current_version.version, status.num_labels,
                          status.labels_since_version), (1, 4, 1))

    def test_list_projects_follows_the_servers_pages(self):
        # projects.proto: a ListProjects page ends once its projects pass 1 MiB. 40 projects of
        # 256 classes of 120 bytes each hold 30 KiB of class names alone: over 1.1 MiB, so
        # more than one page, and list_projects() returns every one of them.
        classes = [("c%03d-" % k).ljust(120, "x") for k in range(256)]
        names = ["wide-%02d" % n for n in range(40)]
        for name in names:
            self.client.create_project(name, classes, method="mv")
        # The premise: the server's first page is not the last.
        channel = grpc.insecure_channel(self.server.address)
        self.addCleanup(channel.close)
        first_page = projects_pb2_grpc.ProjectServiceStub(channel).ListProjects(
            projects_pb2.ListProjectsRequest(), timeout=30)
        self.assertNotEqual(first_page.next_page_token, "")
        listed = [p for p in self.client.list_projects() if p.name.startswith("wide-")]
        self.assertEqual(sorted(p.name for p in listed), names)
        self.assertTrue(all(p.classes == tuple(classes) for p in listed))

    def test_an_empty_project_gives_empty_frames_with_every_column(self):
        self.client.create_project("nothing-yet", ["a", "b"], method="mv")
        posteriors = self.client.posteriors("nothing-yet", details=True)
        self.assertEqual(posteriors.shape, (0, 10))
        self.assertEqual(posteriors.dtypes.to_dict(), {
            "item": object, "label": object, "confidence": np.float64, "a": np.float64,
            "b": np.float64, "num_labels": np.int64, "model_version": np.int64,
            "includes_newer_labels": bool, "is_gold": bool, "difficulty": np.float64})
        profiles = self.client.annotators("nothing-yet")
        self.assertEqual(list(profiles.columns),
                         ["annotator", "accuracy", "num_labels", "confusion", "embedding",
                          "predicted_from_features"])
        self.assertEqual(len(profiles), 0)
        suggestions = self.client.suggest_items("nothing-yet", "w1", k=3)
        self.assertEqual(list(suggestions.columns),
                         ["item", "score", "p_correct", "lease_expires_at"])
        self.assertEqual(len(suggestions), 0)
        self.assertEqual(str(suggestions["lease_expires_at"].dtype), "datetime64[ns, UTC]")
        status = self.client.model_status("nothing-yet")
        self.assertEqual((status.current_version, status.num_labels), (None, 0))
        self.assertEqual(self.client.model_versions("nothing-yet"), [])

    def test_progress_is_called_after_each_ack_with_the_rows_acked_so_far(self):
        self.client.create_project("progress", ["a", "b"], method="mv")
        calls = []
        labels = pd.DataFrame({"item": ["i%d" % n for n in range(7)], "annotator": ["w"] * 7,
                               "label": [n % 2 for n in range(7)]})
        result = self.client.submit("progress", labels, batch_size=3,
                                    progress=lambda acked, total: calls.append((acked, total)))
        self.assertEqual(result.accepted, 7)
        # Batches of rows 0-2, 3-5 and 6.
        self.assertEqual(calls, [(3, 7), (6, 7), (7, 7)])

    def test_classes_named_like_frame_columns_come_back_prefixed(self):
        self.client.create_project("column-classes", ["label", "item", "x"], method="mv")
        self.client.submit("column-classes", pd.DataFrame(
            {"item": ["i1", "i1"], "annotator": ["w1", "w2"], "label": ["item", "item"]}))
        for frame in (self.client.posteriors("column-classes"),
                      self.client.posteriors("column-classes", items=["i1"])):
            self.assertEqual(list(frame.columns),
                             ["item", "label", "confidence", "p_label", "p_item", "p_x"])
            self.assertEqual((frame["item"].iloc[0], frame["label"].iloc[0]), ("i1", "item"))
            self.assertEqual(frame["confidence"].iloc[0], frame["p_item"].iloc[0])
            self.assertGreater(frame["p_item"].iloc[0], frame["p_label"].iloc[0])
            self.assertAlmostEqual(frame[["p_label", "p_item", "p_x"]].iloc[0].sum(), 1.0)

    def test_add_items_sums_its_calls_and_keeps_the_ones_before_a_failed_call(self):
        self.client.create_project("chunked", ["a", "b"], method="mv")
        ids = ["old-%05d" % i for i in range(10001)]  # Two AddItems calls: 10,000 and 1.
        self.assertEqual(self.client.add_items("chunked", pd.DataFrame({"item": ids})),
                         (10001, 0))
        self.assertEqual(self.client.add_items("chunked", pd.DataFrame({"item": ids})),
                         (0, 10001))
        # The second call's only id is past the 256-byte limit: the first call stays written.
        fresh = ["new-%05d" % i for i in range(10000)] + ["x" * 300]
        with self.assertRaises(verity_client.VerityError) as raised:
            self.client.add_items("chunked", pd.DataFrame({"item": fresh}))
        self.assertEqual(raised.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertTrue(raised.exception.message.startswith("AddItems (rows 10000 to 10000): "),
                        raised.exception.message)
        self.assertIn(".id", raised.exception.message)
        self.assertEqual(self.client.get_project("chunked").num_items, 20001)

    def test_every_page_comes_back_in_the_servers_order(self):
        # truth.proto: ListPosteriors pages are in item creation order, GetAnnotatorProfiles
        # pages in the order annotators were first seen, and ids asked twice are answered
        # once, at their first occurrence. Ids are shuffled so that no sort can pass for it.
        self.client.create_project("paged", ["a", "b"], method="mv")
        rng = random.Random(7)
        items = ["it-%04d" % i for i in range(2500)]  # Three pages of the default 1,000.
        rng.shuffle(items)
        self.assertEqual(self.client.add_items("paged", pd.DataFrame({"item": items})),
                         (2500, 0))
        self.assertEqual(self.client.posteriors("paged")["item"].tolist(), items)
        workers = ["w%04d" % i for i in range(1500)]  # Two pages of 1,000.
        rng.shuffle(workers)
        result = self.client.submit("paged", pd.DataFrame(
            {"item": items[:1500], "annotator": workers, "label": [i % 2 for i in range(1500)]}),
            batch_size=100)
        self.assertEqual(result.accepted, 1500)
        profiles = self.client.annotators("paged")
        self.assertEqual(profiles["annotator"].tolist(), workers)
        self.assertEqual(profiles["num_labels"].tolist(), [1] * 1500)
        asked = self.client.annotators("paged", [workers[3], workers[1], workers[3]])
        self.assertEqual(asked["annotator"].tolist(), [workers[3], workers[1]])

    def test_annotators_of_an_empty_id_list_is_an_empty_frame(self):
        # client.py annotators(): "annotators: ids (...), or None for every annotator"; an
        # empty list is ids, none of them, as posteriors(items=[]) reads it. A caller asking
        # for the profiles of a filtered list that came out empty must not get every
        # annotator of the project.
        self.client.create_project("no-ids", ["a", "b"], method="mv")
        self.client.submit("no-ids", pd.DataFrame(
            {"item": ["i1", "i1"], "annotator": ["w1", "w2"], "label": ["a", "b"]}))
        self.assertEqual(len(self.client.posteriors("no-ids", items=[])), 0)
        self.assertEqual(len(self.client.annotators("no-ids")), 2)
        self.assertEqual(self.client.annotators("no-ids", annotators=[])["annotator"].tolist(),
                         [])

    def test_a_batch_past_a_project_limit_raises_and_the_batches_before_it_stay(self):
        # projects.proto: a batch that would pass max_labels is refused whole with
        # RESOURCE_EXHAUSTED naming the limit. submit(): it is resent up to max_retries times,
        # then raised with the ack's code, naming the batch and its rows; the batches acked
        # before it stay written.
        self.client.create_project("limited", ["a", "b"], method="mv",
                                   settings={"limits": {"max_labels": 5}})
        labels = pd.DataFrame({"item": ["i%d" % n for n in range(8)], "annotator": ["w"] * 8,
                               "label": [0] * 8})
        calls = []
        with self.assertRaises(verity_client.VerityError) as raised:
            self.client.submit("limited", labels, batch_size=2, max_retries=1,
                               progress=lambda acked, total: calls.append((acked, total)))
        error = raised.exception
        self.assertEqual(error.code, grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn("gave up after 2 attempts", error.message)
        self.assertIn("batch 3 of 4 (rows 4 to 5)", error.message)
        self.assertIn("max_labels", error.message)
        self.assertEqual(calls, [(2, 8), (4, 8)])
        self.assertEqual(self.client.get_project("limited").num_labels, 4)

    def test_add_items_names_the_data_frame_row_of_a_bad_gold_label(self):
        # frames.py: "Every check here names the offending column and row, and fails with
        # ValueError before anything is sent". The bad gold label is on row 2 of the frame;
        # the rows before it without gold (missing = no gold) count as rows all the same.
        self.client.create_project("gold-rows", ["cat", "dog"], method="mv")
        for gold, why in (([None, None, "nope"], "'nope' is not a class"),
                          ([None, "dog", 1.5], "1.5 is neither"),
                          ([None, None, 2**40], "does not fit")):
            with self.subTest(gold=gold):
                with self.assertRaisesRegex(ValueError, why) as raised:
                    self.client.add_items("gold-rows", pd.DataFrame(
                        {"item": ["i0", "i1", "i2"], "gold": gold}))
                self.assertIn("column 'gold', row 2:", str(raised.exception))
        self.assertEqual(self.client.get_project("gold-rows").num_items, 0)

    def test_id_lists_may_be_pandas_series_and_numpy_arrays(self):
        # client.py types annotators' ids and suggest_*'s candidates as Optional[Iterable]
        # (the README: "DataFrames in, DataFrames out"), as posteriors' items, which takes a
        # column's unique() or a Series. The same must hold for the other id lists.
        self.client.create_project("pandas-ids", ["a", "b"], method="mv")
        labels = pd.DataFrame({"item": ["i1", "i1", "i2"], "annotator": ["w1", "w2", "w1"],
                               "label": ["a", "b", "a"]})
        self.client.submit("pandas-ids", labels)
        self.assertEqual(self.client.posteriors("pandas-ids",
                                                labels["item"].unique())["item"].tolist(),
                         ["i1", "i2"])
        for ids in (labels["annotator"].unique(), labels["annotator"].drop_duplicates()):
            with self.subTest(annotators=type(ids).__name__):
                self.assertEqual(
                    self.client.annotators("pandas-ids", ids)["annotator"].tolist(),
                    ["w1", "w2"])
        with self.subTest(call="suggest_items"):
            suggested = self.client.suggest_items("pandas-ids", "w9", k=5,
                                                  candidates=labels["item"].unique())
            self.assertEqual(sorted(suggested["item"]), ["i1", "i2"])
        with self.subTest(call="suggest_annotators"):
            suggested = self.client.suggest_annotators("pandas-ids", "i2", k=5,
                                                       candidates=pd.Series(["w2", "w3"]))
            self.assertEqual(sorted(suggested["annotator"]), ["w2", "w3"])

    def test_errors_carry_the_code_and_a_message_naming_the_call_and_the_field(self):
        self.client.create_project("errors", ["a", "b"], method="mv")
        self.client.submit("errors", pd.DataFrame(
            {"item": ["i1"], "annotator": ["w1"], "label": ["a"]}))
        cases = [
            (lambda: self.client.posteriors("errors", items=["i1", ""]),
             grpc.StatusCode.INVALID_ARGUMENT, "GetPosteriors: ", "items[1]"),
            (lambda: self.client.annotators("errors", ["w1", "nobody"]),
             grpc.StatusCode.NOT_FOUND, "GetAnnotatorProfiles: ", "nobody"),
            (lambda: self.client.model_versions("errors", limit=1001),
             grpc.StatusCode.INVALID_ARGUMENT, "ListModelVersions: ", "limit"),
            (lambda: self.client.get_project("no-such-project"),
             grpc.StatusCode.NOT_FOUND, "GetProject: ", "no-such-project"),
            (lambda: self.client.create_project("bad name!", ["a", "b"]),
             grpc.StatusCode.INVALID_ARGUMENT, "CreateProject: ", "name"),
            (lambda: self.client.posteriors("errors", page_size=10001),
             grpc.StatusCode.INVALID_ARGUMENT, "ListPosteriors: ", "page_size"),
            (lambda: self.client.suggest_items("errors", "w1", k=0),
             grpc.StatusCode.INVALID_ARGUMENT, "SuggestItems: ", "k: 0"),
            (lambda: self.client.suggest_items("errors", "", k=1),
             grpc.StatusCode.INVALID_ARGUMENT, "SuggestItems: ", "annotator"),
            (lambda: self.client.suggest_annotators("errors", "no-such-item", k=1),
             grpc.StatusCode.NOT_FOUND, "SuggestAnnotators: ", "no-such-item"),
            (lambda: self.client.add_items("errors", pd.DataFrame({"item": ["g"], "gold": [5]})),
             grpc.StatusCode.INVALID_ARGUMENT, "AddItems (rows 0 to 0): ", "gold_label"),
        ]
        for call, code, prefix, field in cases:
            with self.subTest(prefix=prefix):
                with self.assertRaises(verity_client.VerityError) as raised:
                    call()
                error = raised.exception
                self.assertEqual(error.code, code)
                self.assertTrue(error.message.startswith(prefix), error.message)
                self.assertIn(field, error.message[len(prefix):])
                self.assertEqual(str(error), "%s: %s" % (code.name, error.message))

    def test_method_overrides_the_settings_and_an_unknown_one_sends_nothing(self):
        project = self.client.create_project(
            "override", ["a", "b"], method="mv",
            settings={"model": {"method": "TRUTH_METHOD_GLAD"}})
        self.assertEqual(project.method, "mv")
        self.assertEqual(self.client.get_project("override").method, "mv")
        with self.assertRaisesRegex(ValueError, "unknown method 'nope'"):
            self.client.create_project("never-sent", ["a", "b"], method="nope")
        with self.assertRaises(verity_client.VerityError) as raised:
            self.client.get_project("never-sent")
        self.assertEqual(raised.exception.code, grpc.StatusCode.NOT_FOUND)

    def test_one_client_shared_by_threads(self):
        # client.py: "a Client may be shared by threads"; each submit() blocks its own thread.
        failures = []

        def work(k):
            try:
                name = "thread-%d" % k
                self.client.create_project(name, ["a", "b"], method="mv")
                labels = pd.DataFrame({
                    "item": ["i%d" % (n % 50) for n in range(500)],
                    "annotator": ["w%d" % (n // 50) for n in range(500)],
                    "label": ["b" if (n + k) % 3 == 0 else "a" for n in range(500)]})
                result = self.client.submit(name, labels, batch_size=37)
                posteriors = self.client.posteriors(name, page_size=20)
                profiles = self.client.annotators(name)
                failures.append(None if (result.accepted, len(posteriors), len(profiles),
                                         profiles["num_labels"].sum()) == (500, 50, 10, 500)
                                else (k, result, len(posteriors), len(profiles)))
            except Exception as error:  # Reported by the main thread.
                failures.append((k, repr(error)))

        threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        self.assertEqual(failures, [None] * 8)
        self.assertEqual(sorted(p.name for p in self.client.list_projects()
                                if p.name.startswith("thread-")),
                         ["thread-%d" % k for k in range(8)])

    def test_a_timeout_the_client_accepts_lets_calls_run(self):
        # Client(): "timeout: deadline of every RPC in seconds", refused with ValueError unless
        # "a positive number of seconds". NaN is not one, and infinity, if taken, must mean no
        # deadline: accepted, either gives every call an instant DEADLINE_EXCEEDED.
        for timeout in (float("nan"), float("inf")):
            with self.subTest(timeout=timeout):
                try:
                    client = verity_client.Client(self.server.address, timeout=timeout)
                except ValueError as error:
                    self.assertIn("timeout", str(error))
                    continue
                with client:
                    self.assertIsInstance(client.list_projects(), list)

    def test_submit_with_no_min_throughput_is_refused_or_runs(self):
        # client.py: inputs that cannot be sent raise ValueError before anything is sent;
        # submit() checks batch_size and max_unacked_batches so. min_throughput=0 (no time
        # per annotation) must either be refused so, naming it, or submit the labels; not
        # fail on a division by zero.
        self.client.create_project("throughput", ["a", "b"], method="mv")
        labels = pd.DataFrame({"item": ["i1"], "annotator": ["w1"], "label": ["a"]})
        try:
            result = self.client.submit("throughput", labels, min_throughput=0)
        except ValueError as error:
            self.assertIn("min_throughput", str(error))
            self.assertEqual(self.client.get_project("throughput").num_labels, 0)
        else:
            self.assertEqual(result.accepted, 1)

    def test_wait_until_ready_gives_up_after_its_timeout_as_unavailable(self):
        address = "127.0.0.1:%d" % free_loopback_port()
        with verity_client.Client(address, timeout=30) as lonely:
            started = time.monotonic()
            with self.assertRaises(verity_client.VerityError) as raised:
                lonely.wait_until_ready(timeout=0.5)
            elapsed = time.monotonic() - started
        self.assertEqual(raised.exception.code, grpc.StatusCode.UNAVAILABLE)
        self.assertIn(address, raised.exception.message)
        self.assertGreaterEqual(elapsed, 0.5)
        self.assertLess(elapsed, 20)  # Not the client's timeout of 30 s.
        # Without a timeout it waits the client's.
        with verity_client.Client(address, timeout=0.4) as lonely:
            started = time.monotonic()
            with self.assertRaises(verity_client.VerityError) as raised:
                lonely.wait_until_ready()
            elapsed = time.monotonic() - started
        self.assertEqual(raised.exception.code, grpc.StatusCode.UNAVAILABLE)
        self.assertIn("within 0.4s", raised.exception.message)
        self.assertGreaterEqual(elapsed, 0.4)

    def test_submit_deadline_is_the_timeout_plus_a_second_per_min_throughput_rows(self):
        # A peer that never speaks HTTP/2: only the stream's deadline ends the call. 1,500
        # rows at 1,000 a second: 0.2 + 1.5 s; at 2,000 a second: 0.2 + 0.75 s.
        labels = pd.DataFrame({"item": ["i%d" % n for n in range(1500)],
                               "annotator": ["w"] * 1500, "label": [0] * 1500})
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as silent:
            silent.bind(("127.0.0.1", 0))
            silent.listen(8)
            address = "127.0.0.1:%d" % silent.getsockname()[1]
            with verity_client.Client(address, timeout=0.2) as hasty:
                for throughput, deadline in ((1000, 1.7), (2000, 0.95)):
                    with self.subTest(min_throughput=throughput):
                        started = time.monotonic()
                        with self.assertRaises(verity_client.VerityError) as raised:
                            hasty.submit("p", labels, min_throughput=throughput)
                        elapsed = time.monotonic() - started
                        self.assertEqual(raised.exception.code,
                                         grpc.StatusCode.DEADLINE_EXCEEDED)
                        self.assertGreaterEqual(elapsed, deadline - 0.05)
                        self.assertLess(elapsed, deadline + 5)

    def test_close_cancels_a_call_in_flight(self):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as silent:
            silent.bind(("127.0.0.1", 0))
            silent.listen(8)
            client = verity_client.Client("127.0.0.1:%d" % silent.getsockname()[1], timeout=60)
            errors = []

            def call():
                try:
                    client.list_projects()
                except verity_client.VerityError as error:
                    errors.append(error)

            caller = threading.Thread(target=call)
            caller.start()
            # The channel connects for the call: once accepted, the call is in flight.
            silent.settimeout(20)
            connection, _ = silent.accept()
            client.close()
            connection.close()
            caller.join(20)  # Far less than the call's deadline of 60 s.
            self.assertFalse(caller.is_alive())
        self.assertEqual([e.code for e in errors], [grpc.StatusCode.CANCELLED])
        self.assertTrue(errors[0].message.startswith("ListProjects: "))


class CliCsvFilesTest(unittest.TestCase):
    """The `verity` CLI (client/verity) on files as users write them, against a real server:
    a byte-order mark, CRLF line ends, no final newline, RFC 4180 quoting, ids with spaces and
    UTF-8, labels as class names or indices, headers in another order, blank lines, 200,000
    lines; and what `export` and `posteriors` write, read back by Python's csv module and
    pandas. Projects use majority vote (mv) so that every expected label is a count of votes.
    """

    @classmethod
    def setUpClass(cls):
        cls.server = server_process.ServerProcess(
            server_process.runfile("server/verity_server"), ["--metrics_port=0"])
        cls.server.start()
        cls.addClassCleanup(cls.server.stop)
        cls.client = verity_client.Client(cls.server.address, timeout=30)
        cls.addClassCleanup(cls.client.close)
        cls.binary = server_process.runfile("client/verity")
        cls.tmp = tempfile.mkdtemp(prefix="verity-cli-csv-")
        cls.addClassCleanup(shutil.rmtree, cls.tmp, True)

    def write(self, name, data):
        """Writes `data` (bytes, or str written as UTF-8 exactly) to a file; its path."""
        path = os.path.join(self.tmp, name)
        with open(path, "wb") as f:
            f.write(data if isinstance(data, bytes) else data.encode("utf-8"))
        return path

    def verity(self, *args):
        """Runs the CLI with stdout and stderr piped; the CompletedProcess, output as str."""
        return subprocess.run([self.binary, "--server=" + self.server.address] + list(args),
                              capture_output=True, timeout=300, stdin=subprocess.DEVNULL,
                              encoding="utf-8", errors="replace")

    def create(self, project, classes="cat,dog"):
        run = self.verity("project", "create", project, "--classes=" + classes, "--method=mv")
        self.assertEqual(run.returncode, 0, run.stderr)

    def export_rows(self, project):
        path = os.path.join(self.tmp, project + ".export.csv")
        run = self.verity("export", "--project=" + project, "--out=" + path)
        self.assertEqual(run.returncode, 0, run.stderr)
        with open(path, newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f)), path

    def test_submit_reads_bom_crlf_quoting_and_utf8_ids_without_a_final_newline(self):
        self.create("cli-bom-crlf")
        # Labels by name and by index (classes cat = 0, dog = 1); the last line has no line
        # end. The file as a spreadsheet saves it: "UTF-8 with BOM", CRLF, quotes only where
        # needed.
        labels = self.write("bom_crlf.csv", "\ufeff" + "\r\n".join([
            "item,annotator,label",
            '"img, 1",Anna Müller,cat',
            '"say ""hi""",w 2,1',
            "猫 ünï,Anna Müller,dog",
            '"img, 1",w 2,cat',
            '"img, 1", w 3 ,0',
            "猫 ünï,w 2,1"]))
        run = self.verity("submit", "--project=cli-bom-crlf", "--csv=" + labels)
        self.assertEqual((run.returncode, run.stdout, run.stderr),
                         (0, "accepted=6 duplicate=0 revised=0 stale=0 rejected=0\n", ""))
        annotators = self.client.annotators("cli-bom-crlf")
        self.assertEqual(sorted(annotators["annotator"]), [" w 3 ", "Anna Müller", "w 2"])

        rows, path = self.export_rows("cli-bom-crlf")
        # Creation order is the order of first appearance in the file.
        self.assertEqual([(r["item"], r["label"], r["num_labels"]) for r in rows],
                         [("img, 1", "cat", "3"), ('say "hi"', "dog", "1"),
                          ("猫 ünï", "dog", "2")])
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        self.assertEqual(frame["item"].tolist(), ["img, 1", 'say "hi"', "猫 ünï"])
        for row in rows:
            with self.subTest(item=row["item"]):
                p = [float(row["p_cat"]), float(row["p_dog"])]
                self.assertAlmostEqual(sum(p), 1.0, places=12)
                self.assertEqual(float(row["confidence"]), max(p))
                self.assertEqual(int(row["label_index"]), p.index(max(p)))

    def test_a_header_in_another_order_blank_lines_and_line_breaks_keep_line_numbers(self):
        self.create("cli-order")
        # Line 1 header; 2 and 3 blank (LF, CRLF); 4 a record; 5-6 one record whose quoted id
        # holds a line break (a control character: the server rejects that label alone);
        # 7 blank; 8 a record; 9 an annotator id of 257 bytes (over the limit of 256: rejected
        # alone).
        long_id = "x" * 257
        labels = self.write("order.csv",
                            "label,item,annotator\n\n\r\ndog,a b,w1\n"
                            'cat,"two\nlines",w1\n\ncat,a b,w2\ncat,a b,%s\n' % long_id)
        run = self.verity("submit", "--project=cli-order", "--csv=" + labels,
                          "--output=json")
        self.assertEqual(run.returncode, 0, run.stderr)
        result = json.loads(run.stdout)
        self.assertEqual((result["accepted"], result["rejected"]), (2, 2))
        self.assertEqual([(r["line"], r["item"], r["annotator"]) for r in result["rejections"]],
                         [(5, "two\nlines", "w1"), (9, "a b", long_id)])
        posteriors = self.client.posteriors("cli-order", details=True)
        self.assertEqual(posteriors["item"].tolist(), ["a b"])
        self.assertEqual(posteriors["num_labels"].tolist(), [2])

    def test_an_extra_column_is_refused_before_anything_is_sent(self):
        self.create("cli-extra")
        labels = self.write("extra.csv", "item,annotator,label,time\nx1,a1,cat,2020\n")
        run = self.verity("submit", "--project=cli-extra", "--csv=" + labels)
        self.assertEqual(run.returncode, 1)
        self.assertEqual(run.stdout, "")
        self.assertEqual(run.stderr,
                         "verity: INVALID_ARGUMENT: %s: line 1: unknown column \"time\" "
                         "(expected item, annotator, label)\n" % labels)
        self.assertEqual(self.client.get_project("cli-extra").num_labels, 0)

    def test_export_numbers_are_exact_and_posteriors_round_them_to_six_digits(self):
        self.create("cli-numbers", "a,b,c")
        labels = self.write("numbers.csv",
                            "item,annotator,label\n"
                            "i1,w1,a\ni1,w2,b\ni1,w3,b\ni2,w1,c\ni3,w1,a\ni3,w2,a\ni3,w3,c\n")
        self.assertEqual(self.verity("submit", "--project=cli-numbers",
                                     "--csv=" + labels).returncode, 0)
        frame = self.client.posteriors("cli-numbers", details=True).set_index("item")
        rows, _ = self.export_rows("cli-numbers")
        run = self.verity("export", "--project=cli-numbers", "--format=jsonl")
        self.assertEqual(run.returncode, 0, run.stderr)
        jsonl = [json.loads(line) for line in run.stdout.splitlines()]
        run = self.verity("posteriors", "--project=cli-numbers")
        self.assertEqual(run.returncode, 0, run.stderr)
        rounded = list(csv.DictReader(io.StringIO(run.stdout)))
        self.assertEqual([r["item"] for r in rows], ["i1", "i2", "i3"])
        self.assertEqual([r["item"] for r in jsonl], ["i1", "i2", "i3"])
        self.assertEqual([r["item"] for r in rounded], ["i1", "i2", "i3"])
        for row, line, short in zip(rows, jsonl, rounded):
            item = row["item"]
            with self.subTest(item=item):
                self.assertEqual(row["label"], {"i1": "b", "i2": "c", "i3": "a"}[item])
                self.assertEqual((short["label"], short["num_labels"]),
                                 (row["label"], row["num_labels"]))
                self.assertEqual((row["includes_newer_labels"], row["is_gold"]),
                                 ("true", "false"))
                for name in ("a", "b", "c"):
                    exact = frame.loc[item, name]
                    # Shortest exact form: the same double in the CSV, the JSON and the API.
                    self.assertEqual(float(row["p_" + name]), exact)
                    self.assertEqual(line["probabilities"][name], exact)
                    self.assertEqual(float(short["p_" + name]), float("%.6g" % exact))
                self.assertEqual(float(row["confidence"]), frame.loc[item, "confidence"])

    def test_accuracy_reads_gold_with_bom_crlf_indices_blank_lines_and_columns_swapped(self):
        data = os.path.join(server_process.find_datasets(), "bluebirds")
        run = self.verity("project", "create", "cli-bluebirds",
                          "--classes_file=" + os.path.join(data, "classes.txt"), "--method=mv")
        self.assertEqual(run.returncode, 0, run.stderr)
        run = self.verity("submit", "--project=cli-bluebirds",
                          "--csv=" + os.path.join(data, "labels.csv"))
        self.assertEqual(run.stdout, "accepted=4212 duplicate=0 revised=0 stale=0 rejected=0\n")
        with open(os.path.join(data, "gold.csv"), newline="", encoding="utf-8") as f:
            gold = list(csv.DictReader(f))
        self.assertEqual(len(gold), BLUEBIRDS_ITEMS)
        # label,item; every other label as its class index (false = 0, true = 1); a blank
        # line in the middle; no final line end.
        lines = ["label,item"] + [
            "%s,%s" % (g["label"] if i % 2 else str(["false", "true"].index(g["label"])),
                       g["item"]) for i, g in enumerate(gold)]
        gold_file = self.write("gold_rw.csv", "\ufeff" + "\r\n".join(
            lines[:50] + [""] + lines[50:]))
        # README: majority vote gets 0.7593 on bluebirds; and by hand from the posteriors.
        posteriors = self.client.posteriors("cli-bluebirds").set_index("item")["label"]
        hits = sum(posteriors[g["item"]] == g["label"] for g in gold)
        self.assertEqual(round(hits / len(gold), 4), 0.7593)
        for path in (gold_file, os.path.join(data, "gold.csv")):
            run = self.verity("accuracy", "--project=cli-bluebirds", "--gold_csv=" + path)
            self.assertEqual((run.returncode, run.stdout, run.stderr),
                             (0, "accuracy=0.7593 (108 gold items)\n", ""))

    def test_two_hundred_thousand_lines_with_a_meter_only_on_a_terminal(self):
        # 40,000 items x 5 of 1,000 annotators, CRLF and a BOM, as a spreadsheet export.
        rows = ["\ufeffitem,annotator,label"]
        for i in range(40000):
            for k in range(5):
                rows.append("item %d,worker %d,%s" % (i, (i * 7 + k * 131) % 1000,
                                                      ("cat", "dog")[(i + k) % 2]))
        labels = self.write("big.csv", "\r\n".join(rows) + "\r\n")
        expected = "accepted=200000 duplicate=0 revised=0 stale=0 rejected=0\n"
        for project, terminal in (("cli-big-tty", True), ("cli-big-pipe", False)):
            self.create(project)
            args = [self.binary, "--server=" + self.server.address, "submit",
                    "--project=" + project, "--csv=" + labels]
            with self.subTest(terminal=terminal):
                if terminal:
                    out, meter = run_with_stderr_on_a_terminal(args)
                    # README: submit shows progress (rate, ETA) when stderr is a terminal;
                    # progress.h: a line redrawn after "\r", erased by the last "\r\x1b[K".
                    self.assertTrue(meter.endswith("\r\x1b[K"), repr(meter[-80:]))
                    frames = meter[:-len("\r\x1b[K")].split("\r")
                    self.assertEqual(frames[0], "")
                    done = [0]
                    line = re.compile(r"([\d,]+)/200,000 labels \((\d+)%\)  "
                                      r"([\d,]+|--) labels/s  ETA (\d+[hms]\S*|--)\x1b\[K")
                    for frame in frames[1:]:
                        match = line.fullmatch(frame)
                        self.assertIsNotNone(match, repr(frame))
                        done.append(int(match.group(1).replace(",", "")))
                        self.assertLessEqual(abs(int(match.group(2)) - done[-1] / 2000), 1)
                    self.assertGreater(len(done), 1)
                    self.assertEqual(done, sorted(done))
                else:
                    run = subprocess.run(args, capture_output=True, encoding="utf-8",
                                         timeout=300)
                    out, meter = run.stdout, run.stderr
                    self.assertEqual(meter, "")  # Quiet when piped.
                self.assertEqual(out, expected)
                self.assertEqual(self.client.get_project(project).num_labels, 200000)
                self.assertEqual(self.client.get_project(project).num_items, 40000)

    def test_item_add_merges_a_gold_csv_into_a_bom_crlf_items_csv(self):
        self.create("cli-items")
        # Columns in another order, a BOM, CRLF, no final line end, quoting, UTF-8; gold by
        # index (dog = 1) and by name; "猫 ünï" has an empty priority and no gold.
        items = self.write("items.csv", "\ufeffpriority,item\r\n2.5,\"a, b\"\r\n,猫 ünï\r\n"
                           "1,plain")
        gold = self.write("gold.csv", 'label,item\r\n1,"a, b"\r\ncat,plain')
        run = self.verity("item", "add", "--project=cli-items", "--csv=" + items,
                          "--gold_csv=" + gold)
        self.assertEqual((run.returncode, run.stdout, run.stderr), (0, "added=3 updated=0\n", ""))
        # --items in the order given; gold items are clamped to their gold label.
        run = self.verity("posteriors", "--project=cli-items", "--items=plain,猫 ünï,a b",
                          "--output=json")
        self.assertEqual((run.returncode, run.stdout), (1, ""))
        self.assertIn("NOT_FOUND", run.stderr)  # "a b" is no item: "a, b" is.
        run = self.verity("posteriors", "--project=cli-items", "--items=plain,猫 ünï",
                          "--output=json")
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertEqual([(p["item"], p["is_gold"], p["num_labels"])
                          for p in json.loads(run.stdout)],
                         [("plain", True, 0), ("猫 ünï", False, 0)])
        rows, _ = self.export_rows("cli-items")
        self.assertEqual([(r["item"], r["label"], r["is_gold"]) for r in rows],
                         [("a, b", "dog", "true"), ("猫 ünï", "cat", "false"),
                          ("plain", "cat", "true")])

    def test_a_classes_file_with_a_byte_order_mark_names_the_classes_without_it(self):
        # Notepad's "UTF-8 with BOM". The labels file's mark is ignored (models/csv.h), as is
        # a dataset's classes.txt's (models/csv_dataset.h); the CLI's classes file must agree,
        # or the README's tour (project create --classes_file, then submit) refuses "false".
        classes = self.write("classes_bom.txt", "\ufefffalse\r\ntrue\r\n")
        run = self.verity("project", "create", "cli-classes-bom", "--classes_file=" + classes)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertEqual(self.client.get_project("cli-classes-bom").classes, ("false", "true"))
        labels = self.write("classes_bom_labels.csv",
                            "\ufeffitem,annotator,label\r\ni1,w1,false\r\ni1,w2,true\r\n")
        run = self.verity("submit", "--project=cli-classes-bom", "--csv=" + labels)
        self.assertEqual((run.returncode, run.stdout, run.stderr),
                         (0, "accepted=2 duplicate=0 revised=0 stale=0 rejected=0\n", ""))

    def test_a_labels_file_that_is_not_utf8_is_reported_by_its_line(self):
        # A spreadsheet's "CSV (Windows-1252)": "café" is the bytes caf\xe9, not UTF-8. Ids
        # are UTF-8 text (the server rejects any other id alone, naming it, as it does an id
        # with a control character), csv_input.h's errors name the file and line, and the
        # README keeps errors to one line on stderr. Either outcome names line 3.
        self.create("cli-latin1")
        labels = self.write("latin1.csv", b"item,annotator,label\nok,w1,cat\ncaf\xe9,w1,dog\n")
        run = self.verity("submit", "--project=cli-latin1", "--csv=" + labels)
        rejected_alone = (run.returncode == 0 and "rejected=1" in run.stdout and
                          ("rejected %s line 3 " % labels) in run.stdout)
        refused_by_line = (run.returncode == 1 and run.stdout == "" and
                           run.stderr.startswith("verity: INVALID_ARGUMENT: %s: line 3: " % labels))
        self.assertTrue(rejected_alone or refused_by_line, "exit %d\nstdout: %s\nstderr: %s" %
                        (run.returncode, run.stdout, run.stderr))
        self.assertEqual(run.stderr.count("\n"), 0 if rejected_alone else 1, run.stderr)

    def test_item_and_annotator_files_that_are_not_utf8_are_invalid_arguments(self):
        # As an id with a control character is ("INVALID_ARGUMENT: items[1].id: contains byte
        # 0x9 ...; ids are UTF-8 text without control characters"): one line on stderr with
        # the code that says to fix the request.
        self.create("cli-latin1-items")
        items = self.write("latin1_items.csv", b"item\nok\ncaf\xe9\n")
        annotators = self.write("latin1_annotators.csv", b"annotator\nok\ncaf\xe9\n")
        for args in (["item", "add", "--csv=" + items],
                     ["annotator", "add", "--csv=" + annotators]):
            with self.subTest(command=args[:2]):
                run = self.verity(*(args + ["--project=cli-latin1-items"]))
                self.assertEqual(run.returncode, 1)
                self.assertRegex(run.stderr, r"\Averity: INVALID_ARGUMENT: \S[^\n]*\n\Z")

    def test_export_writes_distinct_items_as_distinct_cells(self):
        # export's help: an item starting with = + - @ is written after a ' so that
        # spreadsheets show it as text. An item that itself starts with ' must then stay
        # distinguishable from it, or a reader of the export cannot tell the two items apart.
        self.create("cli-formula-ids")
        items = ["=1+1", "'=1+1", "-5", "'-5"]
        labels = self.write("formula_ids.csv", "item,annotator,label\n" +
                            "".join("%s,w1,cat\n" % item for item in items))
        run = self.verity("submit", "--project=cli-formula-ids", "--csv=" + labels)
        self.assertEqual(run.stdout, "accepted=4 duplicate=0 revised=0 stale=0 rejected=0\n")
        self.assertEqual(self.client.posteriors("cli-formula-ids")["item"].tolist(), items)
        rows, _ = self.export_rows("cli-formula-ids")
        self.assertEqual(rows[0]["item"], "'=1+1")  # As export's help says.
        cells = [r["item"] for r in rows]
        self.assertEqual(len(set(cells)), len(items), cells)

    def test_posteriors_label_is_the_class_name(self):
        # posteriors' help: "label is the most probable class name"; sentiment classes are
        # often -1, 0, 1. (Only export's help announces a ' before a formula-like cell.)
        self.create("cli-sentiment", "-1,0,1")
        labels = self.write("sentiment.csv", "item,annotator,label\nt1,w1,-1\nt1,w2,-1\n"
                            "t2,w1,1\n")
        self.assertEqual(self.verity("submit", "--project=cli-sentiment",
                                     "--csv=" + labels).returncode, 0)
        run = self.verity("posteriors", "--project=cli-sentiment")
        self.assertEqual(run.returncode, 0, run.stderr)
        rows = list(csv.DictReader(io.StringIO(run.stdout)))
        self.assertEqual([(r["item"], r["label"]) for r in rows], [("t1", "-1"), ("t2", "1")])

    def test_tables_align_columns_of_utf8_ids(self):
        # cli.cc's tables are "columns separated by two spaces, left-aligned". The ids here
        # have only characters one terminal column wide (ü, ö, ß, ë: two bytes each in UTF-8).
        self.create("cli-table")
        labels = self.write("table.csv", "item,annotator,label\n"
                            "i1,Jürgen Größ,cat\ni1,ab,dog\ni2,Zoë,cat\n")
        self.assertEqual(self.verity("submit", "--project=cli-table",
                                     "--csv=" + labels).returncode, 0)
        run = self.verity("annotator", "list", "--project=cli-table")
        self.assertEqual(run.returncode, 0, run.stderr)
        lines = run.stdout.splitlines()
        self.assertEqual(lines[0].split("  ")[0], "ANNOTATOR")
        self.assertEqual(sorted(line.split("  ")[0] for line in lines[1:]),
                         ["Jürgen Größ", "Zoë", "ab"])
        # Every row's second column starts where the header's LABELS does.
        starts = [re.search(r"  +(?=\S)", line).end() for line in lines]
        self.assertEqual(starts, [len("Jürgen Größ  ")] * 4, run.stdout)


def run_with_stderr_on_a_terminal(args):
    """Runs `args` with stdout piped and stderr on a pseudo-terminal; (stdout, the terminal's
    text). The terminal is read by a thread, so a chatty meter never blocks the command."""
    master, slave = pty.openpty()
    chunks = []

    def read_terminal():
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer has closed the terminal.
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=read_terminal, daemon=True)
    reader.start()
    try:
        process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=slave)
        os.close(slave)
        out, _ = process.communicate(timeout=300)
        reader.join(30)
    finally:
        os.close(master)
    # The terminal turns "\n" into "\r\n"; the meter writes no "\n" of its own.
    return out.decode("utf-8"), b"".join(chunks).decode("utf-8", "replace")


if __name__ == "__main__":
    junit.main()
