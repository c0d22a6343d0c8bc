"""Probe tests: documented promises of verity_client that the code does not keep.

Black-box: each expectation is quoted from the documentation (proto/verity/v1/*.proto,
client.py's docstrings) above the test that checks it, against a real verity_server on its own
embedded PostgreSQL. Every test here failed when it was written; a test moves to the module
where such tests belong once its promise is kept.
"""

import unittest

import pandas as pd

import junit
import server_process
import verity_client


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


if __name__ == "__main__":
    junit.main()
