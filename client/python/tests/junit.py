"""Runs a unittest module and writes a JUnit XML report for Bazel.

Bazel keeps the file a test writes to $XML_OUTPUT_FILE as its test.xml (instead of one it
makes up with a single case for the whole target); tools/test_summary.py counts its
<testcase> elements. A setUpClass/setUpModule failure is reported as a failed case of its own.
The --test_filter of `bazel test` (TESTBRIDGE_TEST_ONLY) selects test names, e.g.
"ClientServerTest.test_posteriors_match_gold".
"""

import os
import re
import sys
import time
import unittest
import xml.etree.ElementTree as ET

# The description unittest gives a failed class or module fixture.
_FIXTURE_FAILURE = re.compile(r"^(setUpClass|tearDownClass|setUpModule|tearDownModule) "
                              r"\((.+)\)$")


class _RecordingResult(unittest.TextTestResult):
    """A TextTestResult that also keeps (classname, name, seconds, outcome, details) rows."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cases = []
        self._started = {}

    def startTest(self, test):
        self._started[test.id()] = time.monotonic()
        super().startTest(test)

    def _record(self, test, outcome, details=""):
        whole = test.test_case if isinstance(test, unittest.case._SubTest) else test
        now = time.monotonic()
        seconds = max(0.0, now - self._started.get(whole.id(), now))
        holder = _FIXTURE_FAILURE.match(test.id())
        if holder:  # A failed fixture: "setUpClass (module.Class)" is case setUpClass.
            name, classname = holder.group(1), holder.group(2)
        else:
            classname, _, name = whole.id().rpartition(".")
            if whole is not test:
                name += " " + test._subDescription()
        self.cases.append((classname, name, seconds, outcome, details))

    def addSuccess(self, test):
        super().addSuccess(test)
        self._record(test, "passed")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._record(test, "failure", self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        self._record(test, "error", self._exc_info_to_string(err, test))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._record(test, "skipped", reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._record(test, "passed")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._record(test, "failure", "unexpected success")

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            failed = issubclass(err[0], test.failureException)
            self._record(subtest, "failure" if failed else "error",
                         self._exc_info_to_string(err, test))


def _write_xml(path, suite_name, cases, seconds):
    failures = sum(1 for c in cases if c[3] == "failure")
    errors = sum(1 for c in cases if c[3] == "error")
    skipped = sum(1 for c in cases if c[3] == "skipped")
    attrs = {"name": suite_name, "tests": str(len(cases)), "failures": str(failures),
             "errors": str(errors), "skipped": str(skipped), "time": "%.3f" % seconds}
    root = ET.Element("testsuites", attrs)
    suite = ET.SubElement(root, "testsuite", attrs)
    for classname, name, case_seconds, outcome, details in cases:
        if classname == "__main__" or classname.startswith("__main__."):
            classname = suite_name + classname[len("__main__"):]
        case = ET.SubElement(suite, "testcase", {"classname": classname, "name": name,
                                                 "time": "%.3f" % case_seconds,
                                                 "status": "run"})
        if outcome == "skipped":
            case.set("status", "notrun")
            ET.SubElement(case, "skipped", {"message": details})
        elif outcome in ("failure", "error"):
            element = ET.SubElement(case, outcome,
                                    {"message": details.strip().splitlines()[-1]
                                     if details.strip() else outcome})
            element.text = details
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def main(module="__main__"):
    """Runs the tests of `module`, writes the report, exits 0 iff every test passed."""
    loader = unittest.defaultTestLoader
    only = os.environ.get("TESTBRIDGE_TEST_ONLY")
    target = sys.modules[module]
    if only:
        suite = loader.loadTestsFromNames(only.split(","), target)
    else:
        suite = loader.loadTestsFromModule(target)
    runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=2,
                                     resultclass=_RecordingResult)
    started = time.monotonic()
    result = runner.run(suite)
    path = os.environ.get("XML_OUTPUT_FILE")
    if path:
        name = os.path.splitext(os.path.basename(sys.argv[0]))[0]
        _write_xml(path, name, result.cases, time.monotonic() - started)
    sys.exit(0 if result.wasSuccessful() and result.testsRun > 0 else 1)
