#!/usr/bin/env python3
"""Sums test cases over Bazel's test.xml files and prints 'N passed, N failed' last.

Usage: test_summary.py BAZEL_TESTLOGS_DIR [TARGETS_FILE]. Exits 1 when any test case failed (or
a test target produced no test cases but failed as a whole), 0 otherwise.

TARGETS_FILE lists the workspace's test targets, one label a line (`bazel query 'tests(//...)'`).
With it, only those targets' test.xml count (a sharded target's, one per shard), and a listed
target without one counts as failed:
bazel-testlogs keeps the logs of targets that were renamed or moved, and they must not be
counted again (or fail `make test` forever). Without it, every test.xml under the folder counts.
"""
import pathlib
import sys
import xml.etree.ElementTree as ET


def count(xml_path):
    """Returns (passed, failed, failed_names) for one test target's test.xml."""
    root = ET.parse(xml_path).getroot()
    cases = list(root.iter("testcase"))
    passed, failed, names = 0, 0, []
    for case in cases:
        if case.get("status") == "notrun" or case.find("skipped") is not None:
            continue
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
            names.append("%s.%s" % (case.get("classname"), case.get("name")))
        else:
            passed += 1
    # A target that crashed or timed out may report no cases of its own; Bazel then writes a
    # test.xml whose suite carries the failure.
    if not cases or (failed == 0 and any(
            s.get("failures", "0") not in ("0", "") or s.get("errors", "0") not in ("0", "")
            for s in root.iter("testsuite"))):
        failed += 1
        names.append(str(xml_path.parent))
    return passed, failed, names


def test_logs(logs, targets_file):
    """[(test.xml path, whether it exists)] of the targets in targets_file, or of every
    test.xml under logs without one."""
    if targets_file is None:
        return [(path, True) for path in sorted(logs.glob("**/test.xml"))]
    paths = []
    for line in pathlib.Path(targets_file).read_text().split():
        package, _, name = line.lstrip("/").partition(":")
        target = logs / package / name
        path = target / "test.xml"
        shards = shard_logs(target)
        # A target sharded before or after its last unsharded run keeps both kinds of logs:
        # the newer run counts.
        if shards and path.is_file() and path.stat().st_mtime >= max(
                (p.stat().st_mtime for p, exists in shards if exists), default=0):
            shards = []
        paths.extend(shards or [(path, path.is_file())])
    return paths


def shard_logs(target):
    """[(test.xml path, whether it exists)] of each shard of a sharded target
    (TARGET/shard_I_of_N/test.xml, every I of the newest run's N), or [] if it has none."""
    runs = {}
    for shard in target.glob("shard_*_of_*"):
        _, _, of = shard.name.rpartition("_of_")
        if of.isdigit():
            runs.setdefault(int(of), []).append(shard.stat().st_mtime)
    if not runs:
        return []
    newest = max(runs, key=lambda n: max(runs[n]))
    paths = []
    for i in range(1, newest + 1):
        path = target / ("shard_%d_of_%d" % (i, newest)) / "test.xml"
        paths.append((path, path.is_file()))
    return paths


def main():
    logs = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "bazel-testlogs")
    targets_file = sys.argv[2] if len(sys.argv) > 2 else None
    passed = failed = 0
    for xml_path, exists in test_logs(logs, targets_file):
        if not exists:
            failed += 1
            print("FAILED (no test.xml): " + str(xml_path.parent))
            continue
        p, f, names = count(xml_path)
        passed += p
        failed += f
        for name in names:
            print("FAILED: " + name)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
