"""Builds verity-client: the verity_client sources plus the verity.v1 stubs.

The stubs are generated here, at build time, from the repository's proto/verity/v1/*.proto with
the system protoc and grpc_python_plugin (Debian's protobuf-compiler and
protobuf-compiler-grpc, the same tools //client/python:verity_v1_py_codegen uses), into
_generated/ next to this file. The proto directory is $VERITY_PROTO_DIR, else ../../proto
relative to this file (pip builds a local directory in place). A source tree without the protos
but with _generated/ already filled (an sdist) builds from those.
"""

import glob
import os
import shutil
import subprocess
import sys

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
GENERATED = os.path.join(HERE, "_generated")


def _tool(name, env):
    path = os.environ.get(env) or shutil.which(name)
    if not path:
        sys.exit("verity-client: %s not found (Debian: apt-get install protobuf-compiler "
                 "protobuf-compiler-grpc), or set %s" % (name, env))
    return path


def generate_stubs():
    proto_dir = os.environ.get("VERITY_PROTO_DIR") or os.path.join(HERE, "..", "..", "proto")
    protos = sorted(glob.glob(os.path.join(proto_dir, "verity", "v1", "*.proto")))
    if not protos:
        if glob.glob(os.path.join(GENERATED, "verity", "v1", "*_pb2.py")):
            return  # an sdist: the stubs came with it
        sys.exit("verity-client: no verity/v1/*.proto under %s; build from the repository's "
                 "client/python or set VERITY_PROTO_DIR" % os.path.abspath(proto_dir))
    shutil.rmtree(GENERATED, ignore_errors=True)
    os.makedirs(os.path.join(GENERATED, "verity", "v1"))
    command = [
        _tool("protoc", "PROTOC"),
        "--proto_path=" + proto_dir,
        "--proto_path=/usr/include",
        "--python_out=" + GENERATED,
        "--grpc_out=" + GENERATED,
        "--plugin=protoc-gen-grpc=" + _tool("grpc_python_plugin", "GRPC_PYTHON_PLUGIN"),
    ] + [os.path.relpath(p, proto_dir) for p in protos]
    subprocess.run(command, cwd=proto_dir, check=True)
    for package in ("verity", os.path.join("verity", "v1")):
        open(os.path.join(GENERATED, package, "__init__.py"), "w").close()


generate_stubs()
setup(
    packages=["verity_client", "verity", "verity.v1"],
    package_dir={
        "verity_client": "verity_client",
        "verity": os.path.join("_generated", "verity"),
        "verity.v1": os.path.join("_generated", "verity", "v1"),
    },
)
