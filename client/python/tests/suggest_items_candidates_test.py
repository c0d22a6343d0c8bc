"""SuggestItems' candidate list at its documented bound, through verity_client, against a real
verity_server on its own embedded PostgreSQL."""

import unittest

import pandas as pd

import junit
import server_process
import verity_client


class SuggestItemsCandidatesTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.server = server_process.ServerProcess(server_process.runfile("server/verity_server"))
        cls.server.start()
        cls.addClassCleanup(cls.server.stop)
        cls.client = verity_client.Client(cls.server.address, timeout=120)
        cls.addClassCleanup(cls.client.close)
        cls.client.wait_until_ready(timeout=60)

    # proto/verity/v1/assignment.proto, SuggestItemsRequest.candidate_items: "at most 100,000
    # ... and the request within the 16 MiB message limit: 100,000 ids of up to 160 bytes".
    # (Found by a probe: 100,000 ids of 200 bytes, which the proto then allowed, were refused
    # RESOURCE_EXHAUSTED "Received message larger than max (20299829 vs. 16777216)".)
    def test_one_hundred_thousand_candidate_ids_of_160_bytes_are_accepted(self):
        self.client.create_project("cand", ["a", "b"])
        self.client.add_items("cand", pd.DataFrame({"item": ["open-item"]}))
        candidates = [("unknown-%d-" % i).ljust(160, "z") for i in range(99999)] + ["open-item"]
        suggested = self.client.suggest_items("cand", "annotator-1", k=3, candidates=candidates)
        self.assertEqual(list(suggested["item"]), ["open-item"])


if __name__ == "__main__":
    junit.main()
