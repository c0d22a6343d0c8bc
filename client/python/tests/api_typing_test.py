"""The public API carries type hints and docstrings (issue 20): every public method of Client
and every aggregator's crowd-kit method has a docstring, and annotations for all of its
parameters and its return value that typing.get_type_hints resolves. And the signatures that
client/python/README.md's table of Client methods writes out are the code's."""

import ast
import inspect
import os
import re
import typing
import unittest

import junit
import verity_client
from verity_client import aggregation


def _public_methods(cls):
    for name, member in inspect.getmembers(cls, inspect.isfunction):
        if not name.startswith("_") or name == "__init__":
            yield name, member


class ApiTypingTest(unittest.TestCase):

    def check(self, cls):
        for name, method in _public_methods(cls):
            with self.subTest(cls=cls.__name__, method=name):
                hints = typing.get_type_hints(method)
                parameters = [p for p in inspect.signature(method).parameters if p != "self"]
                self.assertEqual([p for p in parameters if p not in hints], [],
                                 "parameters without a type hint")
                self.assertIn("return", hints)
                if name != "__init__":
                    self.assertTrue(inspect.getdoc(method), "no docstring")

    def test_client(self):
        self.check(verity_client.Client)

    def test_aggregators(self):
        for name in aggregation.__all__:
            member = getattr(aggregation, name)
            if inspect.isclass(member):
                self.check(member)


def _readme_signatures():
    """(name, [(parameter, default text or None, keyword-only)]) for each `name(...)` in the
    first column of client/python/README.md's table of methods; "..." is skipped."""
    root = os.path.join(os.environ["TEST_SRCDIR"], os.environ.get("TEST_WORKSPACE", "verity"))
    with open(os.path.join(root, "client", "python", "README.md"), encoding="utf-8") as f:
        lines = [line for line in f if line.startswith("| `")]
    for line in lines:
        first_column = line.split(" | ")[0]
        for name, text in re.findall(r"`(\w+)\(([^`]*)\)`", first_column):
            parameters, keyword_only = [], False
            for part in (p.strip() for p in text.split(",") if p.strip()):
                if part == "*":
                    keyword_only = True
                elif part != "...":
                    parameter, _, default = part.partition("=")
                    parameters.append((parameter, default or None, keyword_only))
            yield name, parameters


class ReadmeSignaturesTest(unittest.TestCase):

    # client/python/README.md: "Parameters after `*` are keyword-only." Its table wrote
    # credentials, method, batch_size, details and name as positional (e.g.
    # `create_project(name, classes, method=None, ...)`), where the code has them keyword-only
    # and the positional forms raise TypeError. Each signature written there must be the
    # code's: its parameters exist, of the kind written (positional ones in the code's order),
    # with the default written.
    def test_the_readme_signatures_are_the_codes(self):
        signatures = list(_readme_signatures())
        self.assertGreaterEqual(len(signatures), 15)
        for name, written in signatures:
            with self.subTest(method=name):
                method = verity_client.Client.__init__ if name == "Client" else getattr(
                    verity_client.Client, name)
                actual = inspect.signature(method).parameters
                positional = [p for p in actual.values() if p.name != "self"
                              and p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD]
                written_positional = [p for p, _, keyword_only in written if not keyword_only]
                self.assertEqual(written_positional,
                                 [p.name for p in positional][:len(written_positional)])
                for parameter, default, keyword_only in written:
                    self.assertIn(parameter, actual)
                    self.assertEqual(actual[parameter].kind == inspect.Parameter.KEYWORD_ONLY,
                                     keyword_only, parameter)
                    if default is not None:
                        self.assertEqual(actual[parameter].default, ast.literal_eval(default),
                                         parameter)


if __name__ == "__main__":
    junit.main()
