"""ServerProcess: a verity_server child process for tests, on its own embedded PostgreSQL.

The server is started with --listen=127.0.0.1:0 (one address family, as LocalServer) and a
fresh data directory under /tmp (made 0755 so that PostgreSQL, run as the `postgres` OS user
when the test runs as root, can reach it). Its output goes to server.log in that directory
through a reader thread, which learns the port from the `event=listening ... port=N` line;
start() waits for that line and for `event=projects_loaded` (the server listens before the
projects stored by an earlier run, or by another replica, have loaded: --load_threads), or for
the process's exit, without polling.
"""

import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading

_LISTENING = re.compile(r"event=listening\b.*\bport=(\d+)")
# Logged once every stored project has loaded (or failed to); before event=listening with
# --load_threads=0.
_LOADED = re.compile(r"event=projects_loaded\b")


def runfile(path_in_workspace):
    """Path of a runfile of this workspace (e.g. "server/verity_server") under bazel test."""
    srcdir = os.environ.get("TEST_SRCDIR")
    if not srcdir:
        return path_in_workspace
    return os.path.join(srcdir, os.environ.get("TEST_WORKSPACE", "verity"), path_in_workspace)


def find_datasets():
    """The shared/datasets directory: $VERITY_DATASETS, else the first shared/datasets (with
    its README.md) found walking up from this file's real location or the working directory.
    Same rules as models/testing/dataset_path.cc."""
    env = os.environ.get("VERITY_DATASETS")
    if env:
        if not os.path.isdir(env):
            raise FileNotFoundError("VERITY_DATASETS=%s is not a directory" % env)
        return env
    starts = [os.path.dirname(os.path.realpath(__file__)), os.getcwd(),
              os.path.realpath(os.getcwd())]
    for start in starts:
        directory = start
        while True:
            candidate = os.path.join(directory, "shared", "datasets")
            if os.path.isfile(os.path.join(candidate, "README.md")):
                return candidate
            parent = os.path.dirname(directory)
            if parent == directory:
                break
            directory = parent
    raise FileNotFoundError("no shared/datasets above %s; set VERITY_DATASETS" % starts)


class ServerProcess:

    def __init__(self, binary, extra_args=()):
        self._binary = binary
        self._extra_args = list(extra_args)
        self._process = None
        self._reader = None
        self._listening = threading.Event()
        self._loaded = False
        self.port = None
        self.data_dir = None
        self._last_log = ""

    @property
    def address(self):
        return "127.0.0.1:%d" % self.port

    @property
    def log_path(self):
        return os.path.join(self.data_dir, "server.log")

    def start(self, timeout=120):
        """Starts the server; returns once it listens and has loaded every stored project.
        RuntimeError (with the log) if it exits first or does not get there within `timeout`
        seconds."""
        self.data_dir = tempfile.mkdtemp(prefix="verity-pyclient-", dir="/tmp")
        os.chmod(self.data_dir, 0o755)
        self._process = subprocess.Popen(
            [self._binary, "--listen=127.0.0.1:0",
             "--data_dir=" + os.path.join(self.data_dir, "var")] + self._extra_args,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self._reader = threading.Thread(target=self._copy_output, daemon=True)
        self._reader.start()
        if not self._listening.wait(timeout) or self.port is None:
            self.stop()
            raise RuntimeError("verity_server did not listen and load within %ds:\n%s" %
                               (timeout, self._last_log))

    def _copy_output(self):
        with open(self.log_path, "wb") as log:
            for line in self._process.stdout:
                log.write(line)
                log.flush()
                if not self._listening.is_set():
                    text = line.decode("utf-8", "replace")
                    self._loaded = self._loaded or bool(_LOADED.search(text))
                    match = _LISTENING.search(text)
                    if match:
                        self.port = int(match.group(1))
                    if self.port is not None and self._loaded:
                        self._listening.set()
        # The server exited (or closed its output): wake start() if it still waits.
        self._listening.set()

    def log(self):
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError as error:
            return "(no log: %s)" % error

    def stop(self, timeout=60):
        """SIGTERM (the server then stops its PostgreSQL), SIGKILL after `timeout` seconds;
        removes the data directory. Returns the exit status."""
        status = None
        if self._process is not None:
            if self._process.poll() is None:
                self._process.send_signal(signal.SIGTERM)
            try:
                status = self._process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._process.kill()
                status = self._process.wait()
            if self._reader is not None:
                self._reader.join(10)
            self._process.stdout.close()
            self._process = None
        if self.data_dir is not None:
            self._last_log = self.log()
            # Kept with the test's outputs (bazel-testlogs/.../test.outputs) for debugging.
            outputs = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR")
            if outputs and os.path.isfile(self.log_path):
                shutil.copy(self.log_path, os.path.join(outputs, "verity_server.log"))
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None
        return status

    def kill(self):
        """SIGKILL: no shutdown work at all. A server's own embedded PostgreSQL keeps running
        after it, so kill only servers started with --postgres_url; stop() cleans up after."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()

    @property
    def postgres_url(self):
        """libpq connection string of this server's embedded PostgreSQL (as
        storage/embedded_postgres.cc makes it: socket directory DATA_DIR/run, port 5432,
        database and user verity), for other servers' --postgres_url."""
        return "host='%s' port=5432 dbname='verity' user='verity'" % os.path.join(
            self.data_dir, "var", "run")
