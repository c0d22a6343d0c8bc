"""verity_client.local (LocalServer, find_server_binary) and the fits that start one.

What is promised (verity_client/local.py, aggregation.py, client/python/README.md): the binary
is `binary`, else $VERITY_SERVER_BINARY, else `verity_server` on PATH, FileNotFoundError naming
all three otherwise; LocalServer is a context manager that serves on "127.0.0.1:PORT" from a
fresh data directory under /tmp and, on exit, stops the server and removes that directory;
a server that does not start raises RuntimeError with its output; an aggregator without a
server starts a private LocalServer for that fit and removes it afterwards, and `serve()` with
no address starts one for the whole block.
"""

import glob
import os
import re
import shutil
import signal
import stat
import tempfile
import time
import unittest

import pandas as pd

import junit
import server_process
import verity_client
from verity_client import aggregation
from verity_client import local

SERVER = server_process.runfile("server/verity_server")


def local_data_dirs():
    """LocalServer's data directories now under /tmp."""
    return set(glob.glob("/tmp/verity-local-*"))


def processes_mentioning(text):
    """Command lines of the running processes whose arguments contain `text`."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                args = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if text in args:
            found.append(args)
    return found


class _Environment:
    """Sets (value) or removes (None) environment variables for a `with` block."""

    def __init__(self, **values):
        self._values = values
        self._saved = {}

    def __enter__(self):
        for name, value in self._values.items():
            self._saved[name] = os.environ.get(name)
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        return self

    def __exit__(self, *exc_info):
        for name, value in self._saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        return False


class FindServerBinaryTest(unittest.TestCase):

    def setUp(self):
        self.directory = tempfile.mkdtemp()
        self.on_path = os.path.join(self.directory, "verity_server")
        with open(self.on_path, "w") as f:
            f.write("#!/bin/sh\n")
        os.chmod(self.on_path, stat.S_IRWXU)

    def test_the_argument_then_the_variable_then_path(self):
        with _Environment(VERITY_SERVER_BINARY=SERVER, PATH=self.directory):
            self.assertEqual(local.find_server_binary("/bin/true"), "/bin/true")
            self.assertEqual(local.find_server_binary(), SERVER)
        with _Environment(VERITY_SERVER_BINARY=None, PATH=self.directory):
            self.assertEqual(local.find_server_binary(), self.on_path)

    def test_none_found_names_all_three_ways(self):
        with _Environment(VERITY_SERVER_BINARY=None, PATH=tempfile.mkdtemp()):
            with self.assertRaises(FileNotFoundError) as raised:
                local.find_server_binary()
        message = str(raised.exception)
        self.assertIn("binary=", message)
        self.assertIn("VERITY_SERVER_BINARY", message)
        self.assertIn("PATH", message)

    def test_a_file_that_cannot_run_is_not_a_binary(self):
        not_executable = os.path.join(self.directory, "not_executable")
        with open(not_executable, "w") as f:
            f.write("")
        with self.assertRaises(FileNotFoundError):
            local.find_server_binary(not_executable)


class LocalServerTest(unittest.TestCase):

    def test_a_with_block_serves_then_stops_and_removes_its_directory(self):
        before = local_data_dirs()
        server = local.LocalServer(binary=SERVER)
        with self.assertRaises(RuntimeError):
            server.address  # not started
        with server:
            # One address family: with "localhost" the server binds ::1 and 127.0.0.1, and where
            # the port is taken on one of them gRPC keeps the other, so a client of
            # "localhost:PORT" could reach another process on the family it tries first.
            self.assertRegex(server.address, r"^127\.0\.0\.1:\d+$")
            self.assertTrue(os.path.isdir(server.data_dir))
            self.assertEqual(oct(stat.S_IMODE(os.stat(server.data_dir).st_mode)), oct(0o755))
            self.assertTrue(server.data_dir.startswith("/tmp/verity-local-"))
            with verity_client.Client(server.address, timeout=60) as client:
                client.create_project("local", ["no", "yes"])
                self.assertEqual([p.name for p in client.list_projects()], ["local"])
            data_dir = server.data_dir
        self.assertFalse(os.path.exists(data_dir))
        self.assertIsNone(server.port)
        self.assertIsNone(server.data_dir)
        with self.assertRaises(RuntimeError):
            server.address
        self.assertEqual(local_data_dirs(), before)
        self.assertIsNone(server.stop())  # stopped already

    def test_stop_ends_the_server_cleanly_and_returns_its_status(self):
        # The data directory is under /tmp whatever the temporary directory is (local.py: so
        # that PostgreSQL, run as another user, can reach it).
        saved = tempfile.tempdir
        tempfile.tempdir = tempfile.mkdtemp()
        try:
            server = local.LocalServer(binary=SERVER).start()
        finally:
            tempfile.tempdir = saved
        self.assertTrue(server.data_dir.startswith("/tmp/verity-local-"), server.data_dir)
        self.assertIsInstance(server.port, int)
        self.assertEqual(server.stop(), 0, server.output())

    def test_a_server_that_exits_at_once_raises_with_its_output(self):
        before = local_data_dirs()
        # "if it exits first": start() returns at the exit, not at the end of start_timeout
        # (an hour here, past the test's own time limit).
        server = local.LocalServer(binary=SERVER, extra_args=["--no_such_flag=1"],
                                   start_timeout=3600)
        with self.assertRaises(RuntimeError) as raised:
            server.start()
        self.assertIn("no_such_flag", str(raised.exception))
        self.assertIsNone(server.port)
        self.assertEqual(local_data_dirs(), before)


    def test_a_server_that_ignores_sigterm_is_killed_after_the_stop_timeout(self):
        # local.py stop(): "SIGTERM ..., SIGKILL after `timeout` seconds; removes the data
        # directory. Returns the exit status". A stand-in binary announces a port as the server
        # does and ignores SIGTERM.
        scratch = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, scratch, True)
        binary = os.path.join(scratch, "stubborn_server")
        with open(binary, "w", encoding="utf-8") as f:
            f.write("#!/usr/bin/python3\n"
                    "import signal, time\n"
                    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                    "print('event=listening port=4242', flush=True)\n"
                    "time.sleep(3600)\n")
        os.chmod(binary, 0o755)
        server = local.LocalServer(binary=binary).start()
        self.assertEqual(server.address, "127.0.0.1:4242")
        data_dir = server.data_dir
        started = time.monotonic()
        self.assertEqual(server.stop(timeout=0.5), -signal.SIGKILL)
        self.assertGreaterEqual(time.monotonic() - started, 0.5)
        self.assertFalse(os.path.exists(data_dir))
        self.assertIsNone(server.port)

    def test_a_binary_that_cannot_be_executed_leaves_no_data_directory(self):
        # local.py: the data directory is "removed on exit with everything in it"; a start
        # that fails raises and removes it (test_a_server_that_exits_at_once...). Here the
        # file passes find_server_binary (it is executable) but exec refuses it.
        scratch = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, scratch, True)
        binary = os.path.join(scratch, "verity_server")
        with open(binary, "w", encoding="utf-8") as f:
            f.write("not a program\n")
        os.chmod(binary, 0o755)
        before = local_data_dirs()

        def remove_empty_leftovers():  # What this test leaked: empty directories.
            for leftover in local_data_dirs() - before:
                if not os.listdir(leftover):
                    os.rmdir(leftover)

        self.addCleanup(remove_empty_leftovers)
        with self.assertRaises(OSError):
            with local.LocalServer(binary=binary):
                self.fail("started a file that is not a program")
        self.assertEqual(local_data_dirs() - before, set())

    def test_an_exception_in_the_block_propagates_and_the_server_is_still_removed(self):
        before = local_data_dirs()
        server = local.LocalServer(binary=SERVER)
        with self.assertRaisesRegex(KeyError, "raised in the block"):
            with server:
                data_dir = server.data_dir
                # The server and its PostgreSQL run with the data directory in their arguments.
                self.assertNotEqual(processes_mentioning(data_dir), [])
                raise KeyError("raised in the block")
        self.assertFalse(os.path.exists(data_dir))
        self.assertEqual(processes_mentioning(data_dir), [])
        self.assertIsNone(server.port)
        self.assertEqual(local_data_dirs(), before)

    def test_a_server_not_listening_within_start_timeout_is_stopped_and_removed(self):
        stopped = []

        class Recording(local.LocalServer):
            """Keeps the data directory that stop() removes."""

            def stop(self, timeout=60.0):
                stopped.append(self.data_dir)
                return super().stop(timeout)

        before = local_data_dirs()
        # Half a second: the first start initialises PostgreSQL, which takes seconds.
        server = Recording(binary=SERVER, start_timeout=0.5)
        with self.assertRaisesRegex(RuntimeError, "did not start listening within 0.5s"):
            server.start()
        self.assertEqual(len(stopped), 1)
        self.assertTrue(stopped[0].startswith("/tmp/verity-local-"), stopped[0])
        self.assertFalse(os.path.exists(stopped[0]))
        self.assertEqual(processes_mentioning(stopped[0]), [])
        self.assertIsNone(server.port)
        self.assertIsNone(server.data_dir)
        self.assertEqual(local_data_dirs(), before)


LABELS = pd.DataFrame({
    "task": ["t1", "t1", "t1", "t2", "t2", "t2"],
    "worker": ["w1", "w2", "w3", "w1", "w2", "w3"],
    "label": ["a", "a", "b", "b", "b", "a"],
})


class FitsWithoutAServerTest(unittest.TestCase):

    def test_a_fit_starts_a_private_server_and_removes_it(self):
        before = local_data_dirs()
        with _Environment(VERITY_SERVER_BINARY=SERVER):
            labels = aggregation.MajorityVote().fit_predict(LABELS)
        self.assertEqual(labels.to_dict(), {"t1": "a", "t2": "b"})
        self.assertEqual(local_data_dirs(), before)

    def test_serve_without_an_address_serves_every_fit_of_the_block_from_one_server(self):
        before = local_data_dirs()
        with aggregation.serve(binary=SERVER) as client:
            during = local_data_dirs() - before
            self.assertEqual(len(during), 1)
            aggregation.MajorityVote().fit(LABELS)
            aggregation.DawidSkene(n_iter=5).fit(LABELS)
            names = sorted(p.name for p in client.list_projects())
            self.assertEqual(len(names), 2, names)
            for name in names:
                self.assertRegex(name, r"^crowdkit-")
            self.assertEqual(local_data_dirs() - before, during)
        self.assertEqual(local_data_dirs(), before)


if __name__ == "__main__":
    junit.main()
