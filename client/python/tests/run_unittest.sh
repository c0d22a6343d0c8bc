#!/bin/sh
# Runs one Python unittest module (argument: its path in the workspace) with Debian's
# /usr/bin/python3, which has python3-grpcio, python3-protobuf and python3-pandas; the
# `python3` first on PATH may be another interpreter without them.
set -eu
root="${TEST_SRCDIR:?run me under bazel test}/${TEST_WORKSPACE:-verity}"
# verity_client/ (sources) and verity/v1/ (generated stubs) both sit in client/python of the
# runfiles tree.
export PYTHONPATH="$root/client/python:$root/client/python/tests"
export PYTHONDONTWRITEBYTECODE=1
exec /usr/bin/python3 "$root/$1"
