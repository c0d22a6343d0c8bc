"""verity-client installs as a package: pip install ./client/python into a fresh
`python3 -m venv --system-site-packages` over Debian's python3-grpcio, python3-protobuf and
python3-pandas, offline (--no-index --no-build-isolation). Then, from another directory and
with no PYTHONPATH, `import verity_client` and the generated `verity.v1` stubs come from the
venv, and the example script aggregates bluebirds against a real verity_server.

The package sources and proto/ are copied out of the runfiles first, as a user's checkout.
"""

import glob
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import junit
import server_process

BLUEBIRDS_LABELS = 4212


def _copy_sources(destination):
    """client/python (sources only) and proto/verity/v1 under `destination`, as in a checkout."""
    package = os.path.join(destination, "client", "python")
    os.makedirs(os.path.join(package, "verity_client"))
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(server_process.runfile("client/python/" + name), package)
    for source in glob.glob(server_process.runfile("client/python/verity_client/*.py")):
        shutil.copy(source, os.path.join(package, "verity_client"))
    protos = os.path.join(destination, "proto", "verity", "v1")
    os.makedirs(protos)
    for source in glob.glob(server_process.runfile("proto/verity/v1/*.proto")):
        shutil.copy(source, protos)
    return package


class PipInstallTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="verity-pip-")
        cls.package = _copy_sources(os.path.join(cls.work, "checkout"))
        cls.venv = os.path.join(cls.work, "venv")
        subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", cls.venv],
                       check=True)
        cls.python = os.path.join(cls.venv, "bin", "python")
        # Outside the runfiles' PYTHONPATH, as a user's shell would be.
        cls.env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        cls.install = subprocess.run(
            [cls.python, "-m", "pip", "install", "--no-index", "--no-build-isolation",
             cls.package], env=cls.env, capture_output=True, text=True, timeout=300)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work, ignore_errors=True)

    def run_in_venv(self, code, **kwargs):
        return subprocess.run([self.python, "-c", code], cwd="/", env=self.env,
                              capture_output=True, text=True, timeout=120, **kwargs)

    def test_pip_install_succeeds_offline(self):
        self.assertEqual(self.install.returncode, 0, self.install.stdout + self.install.stderr)
        self.assertIn("Successfully installed verity-client", self.install.stdout)

    def test_package_and_stubs_import_from_the_venv(self):
        self.assertEqual(self.install.returncode, 0, self.install.stderr)
        run = self.run_in_venv(
            "import verity_client, verity.v1.truth_pb2 as t, verity.v1.models_pb2_grpc as g\n"
            "print(verity_client.__file__); print(t.__file__); print(g.__file__)\n"
            "print(sorted(verity_client.METHODS))")
        self.assertEqual(run.returncode, 0, run.stderr)
        site = os.path.join(self.venv, "lib")
        paths = run.stdout.splitlines()[:3]
        for path in paths:
            self.assertTrue(path.startswith(site), "%s is not in the venv %s" % (path, site))
        self.assertIn("'ds'", run.stdout)

    def test_pip_reports_the_installed_distribution(self):
        self.assertEqual(self.install.returncode, 0, self.install.stderr)
        show = subprocess.run([self.python, "-m", "pip", "show", "verity-client"],
                              env=self.env, capture_output=True, text=True, timeout=60)
        self.assertEqual(show.returncode, 0, show.stderr)
        self.assertIn("Version: 0.1.0", show.stdout)
        self.assertRegex(show.stdout, r"Requires: .*grpcio")

    def test_example_runs_from_the_installed_package(self):
        self.assertEqual(self.install.returncode, 0, self.install.stderr)
        server = server_process.ServerProcess(server_process.runfile("server/verity_server"))
        server.start()
        try:
            example = os.path.join(self.work, "aggregate_bluebirds.py")
            shutil.copy(server_process.runfile("client/python/examples/aggregate_bluebirds.py"),
                        example)
            env = dict(self.env, VERITY_TARGET=server.address, VERITY_PROJECT="pip-example",
                       VERITY_DATASETS=server_process.find_datasets())
            run = subprocess.run([self.python, example], cwd="/", env=env,
                                 capture_output=True, text=True, timeout=180)
            self.assertEqual(run.returncode, 0, run.stdout + run.stderr + server.log())
            self.assertIn("accepted=%d" % BLUEBIRDS_LABELS, run.stdout)
            self.assertRegex(run.stdout, r"accuracy: verity 0\.[789]\d+, majority vote 0\.7593")
        finally:
            server.stop()


if __name__ == "__main__":
    junit.main()
