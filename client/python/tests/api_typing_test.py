"""The public API carries type hints and docstrings (issue 20): every public method of Client
and every aggregator's crowd-kit method has a docstring, and annotations for all of its
parameters and its return value that typing.get_type_hints resolves."""

import inspect
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


if __name__ == "__main__":
    junit.main()
