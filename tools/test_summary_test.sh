#!/bin/sh
# //tools:test_summary_test: the count `make test` prints last (see test_summary_test.py).
exec python3 tools/test_summary_test.py "$@"
