#!/usr/bin/env python3
"""Tests of tools/test_summary.py: the count `make test` prints last."""
import pathlib
import subprocess
import sys
import tempfile
import unittest

SUMMARY = str(pathlib.Path(__file__).resolve().parent / "test_summary.py")

PASS_TWO = """<?xml version="1.0" encoding="UTF-8"?>
<testsuites><testsuite name="A" tests="2" failures="0" errors="0">
<testcase name="One" classname="A"/><testcase name="Two" classname="A"/>
</testsuite></testsuites>"""

FAIL_ONE = """<?xml version="1.0" encoding="UTF-8"?>
<testsuites><testsuite name="B" tests="1" failures="1" errors="0">
<testcase name="Broken" classname="B"><failure message="no"/></testcase>
</testsuite></testsuites>"""


def write(root, target_dir, text):
    path = pathlib.Path(root) / target_dir / "test.xml"
    path.parent.mkdir(parents=True)
    path.write_text(text)


def run(*args):
    done = subprocess.run([sys.executable, SUMMARY, *args], capture_output=True, text=True)
    return done.returncode, done.stdout.strip().splitlines()[-1]


class TestSummaryTest(unittest.TestCase):
    def test_counts_every_test_xml_without_a_target_list(self):
        with tempfile.TemporaryDirectory() as logs:
            write(logs, "pkg/a_test", PASS_TWO)
            write(logs, "pkg/b_test", FAIL_ONE)
            self.assertEqual(run(logs), (1, "2 passed, 1 failed"))

    def test_a_stale_log_of_a_removed_target_is_not_counted(self):
        # A test that moved to another package leaves its old test.xml in bazel-testlogs.
        with tempfile.TemporaryDirectory() as logs, tempfile.TemporaryDirectory() as tmp:
            write(logs, "server/a_test", PASS_TWO)
            write(logs, "server/old_test", FAIL_ONE)
            targets = pathlib.Path(tmp) / "targets"
            targets.write_text("//server:a_test\n")
            self.assertEqual(run(logs, str(targets)), (0, "2 passed, 0 failed"))

    def test_a_listed_target_without_a_log_fails(self):
        with tempfile.TemporaryDirectory() as logs, tempfile.TemporaryDirectory() as tmp:
            write(logs, "server/state/a_test", PASS_TWO)
            targets = pathlib.Path(tmp) / "targets"
            targets.write_text("//server/state:a_test\n//server/state:never_ran_test\n")
            self.assertEqual(run(logs, str(targets)), (1, "2 passed, 1 failed"))

    def test_a_sharded_target_counts_each_shard_and_fails_without_one(self):
        # Bazel writes a sharded target's logs per shard: NAME/shard_I_of_N/test.xml.
        with tempfile.TemporaryDirectory() as logs, tempfile.TemporaryDirectory() as tmp:
            write(logs, "tests/sharded_test/shard_1_of_2", PASS_TWO)
            write(logs, "tests/sharded_test/shard_2_of_2", FAIL_ONE)
            write(logs, "tests/half_test/shard_1_of_2", PASS_TWO)
            targets = pathlib.Path(tmp) / "targets"
            targets.write_text("//tests:sharded_test\n")
            self.assertEqual(run(logs, str(targets)), (1, "2 passed, 1 failed"))
            targets.write_text("//tests:half_test\n")
            self.assertEqual(run(logs, str(targets)), (1, "2 passed, 1 failed"))


if __name__ == "__main__":
    unittest.main()
