"""Probe tests: documented promises of verity_client that the code does not keep.

Black-box: each expectation is quoted from the documentation (client/python/README.md, the
docstring of verity_client.aggregation, README.md) above the test that checks it, against a
real verity_server on its own embedded PostgreSQL (one server for the whole module).
Every test here failed when it was written.
"""

import inspect
import unittest
import warnings

import pandas as pd

import junit
import server_process
import verity_client
from verity_client import aggregation


class SuggestItemsCandidatesProbeTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.server = server_process.ServerProcess(server_process.runfile("server/verity_server"))
        cls.server.start()
        cls.addClassCleanup(cls.server.stop)
        cls.client = verity_client.Client(cls.server.address, timeout=120)
        cls.addClassCleanup(cls.client.close)
        cls.client.wait_until_ready(timeout=60)

    # proto/verity/v1/assignment.proto, SuggestItemsRequest.candidate_items: "Restrict the
    # suggestions to these item ids (at most 100,000); empty = every open item of the project.
    # Unknown ids are ignored." projects.proto: "Ids are 1-256 bytes of printable ASCII without
    # spaces." client.py's suggest_items: "candidates: item ids to choose from; None = every
    # open item." 100,000 ids of 200 bytes are within both rules (about 20 MB).
    # Observed: VerityError RESOURCE_EXHAUSTED "SuggestItems: Received message larger than max
    # (20299829 vs. 16777216)".
    def test_one_hundred_thousand_candidate_ids_of_200_bytes_are_accepted(self):
        self.client.create_project("cand", ["a", "b"])
        self.client.add_items("cand", pd.DataFrame({"item": ["open-item"]}))
        candidates = [("unknown-%d-" % i).ljust(200, "z") for i in range(99999)] + ["open-item"]
        suggested = self.client.suggest_items("cand", "annotator-1", k=3, candidates=candidates)
        self.assertEqual(list(suggested["item"]), ["open-item"])

class ReadmeSignaturesProbeTest(unittest.TestCase):
    """No server: only whether the calls the README's table writes out bind."""

    # client/python/README.md's table of methods writes these signatures, in which every
    # parameter may be passed by position:
    #   `Client(target, timeout=30.0, credentials=None, api_key=None, allow_plaintext_key=False)`
    #   `create_project(name, classes, method=None, settings=None, exist_ok=False)`
    #   `submit(project, df, batch_size=1000, ...)`
    #   `posteriors(project, items=None, details=False)`
    #   `create_key(role, projects=None, name="")`
    # Observed: credentials, method, batch_size, details and name are keyword-only (a `*`
    # before them), so e.g. client.create_project("p", ["a", "b"], "ds") raises
    # TypeError("... takes 3 positional arguments but 4 were given").
    def test_the_readme_signatures_accept_their_parameters_by_position(self):
        client = verity_client.Client
        calls = {
            "Client": (client.__init__, (None, "localhost:50051", 30.0, None, None, False)),
            "create_project": (client.create_project,
                               (None, "p", ["a", "b"], "ds", None, False)),
            "submit": (client.submit, (None, "p", pd.DataFrame(), 1000)),
            "posteriors": (client.posteriors, (None, "p", None, False)),
            "create_key": (client.create_key, (None, "reader", None, "")),
        }
        for name, (method, arguments) in calls.items():
            with self.subTest(method=name):
                try:
                    inspect.signature(method).bind(*arguments)
                except TypeError as error:
                    self.fail("%s%s: %s" % (name, inspect.signature(method), error))

if __name__ == "__main__":
    junit.main()
