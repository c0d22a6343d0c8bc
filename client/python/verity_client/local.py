"""LocalServer: a private verity_server on its own embedded PostgreSQL, for a `with` block.

    with verity_client.local.LocalServer() as server:
        with verity_client.Client(server.address) as client:
            ...

The binary is `binary`, else $VERITY_SERVER_BINARY, else `verity_server` on PATH (from the
repository: `bazel build //server:verity_server`, then bazel-bin/server/verity_server). It
listens on a free loopback port with a fresh data directory under /tmp (made 0755 so that
PostgreSQL, run as the `postgres` OS user when the caller is root, can reach it), removed on
exit with everything in it.
"""

import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from typing import Optional, Sequence

BINARY_VARIABLE = "VERITY_SERVER_BINARY"
_LISTENING = re.compile(r"event=listening\b.*\bport=(\d+)")


def find_server_binary(binary: Optional[str] = None) -> str:
    """The verity_server to run: `binary`, $VERITY_SERVER_BINARY, or `verity_server` on PATH.
    FileNotFoundError naming all three when none is found."""
    candidate = binary or os.environ.get(BINARY_VARIABLE) or shutil.which("verity_server")
    if not candidate or not os.access(candidate, os.X_OK):
        raise FileNotFoundError(
            "no verity_server to start: pass binary=, set %s, or put verity_server on PATH "
            "(bazel build //server:verity_server builds bazel-bin/server/verity_server)"
            % BINARY_VARIABLE)
    return candidate


class LocalServer:
    """A verity_server child process; a context manager (start on enter, stop on exit).

    Args:
      binary: path of verity_server (see find_server_binary).
      extra_args: more server flags.
      start_timeout: seconds to wait for it to listen (the first start initialises PostgreSQL).
    """

    def __init__(self, binary: Optional[str] = None, extra_args: Sequence[str] = (),
                 start_timeout: float = 120.0):
        self._binary = find_server_binary(binary)
        self._extra_args = list(extra_args)
        self._start_timeout = start_timeout
        self._process = None
        self._reader = None
        self._listening = threading.Event()
        self._log = []
        self.port: Optional[int] = None
        self.data_dir: Optional[str] = None

    @property
    def address(self) -> str:
        """"127.0.0.1:PORT" of the running server (the one address family it listens on)."""
        if self.port is None:
            raise RuntimeError("the LocalServer is not running")
        return "127.0.0.1:%d" % self.port

    def start(self) -> "LocalServer":
        """Starts the server and returns once it listens; RuntimeError with its output if it
        exits first or does not listen within start_timeout seconds."""
        self.data_dir = tempfile.mkdtemp(prefix="verity-local-", dir="/tmp")
        os.chmod(self.data_dir, 0o755)
        try:
            self._process = subprocess.Popen(
                # 127.0.0.1, not localhost: with localhost the server binds ::1 and 127.0.0.1
                # on one port, keeping either where the port is taken on the other, and a
                # client of "localhost:PORT" could then reach another process on the family it
                # tries first.
                [self._binary, "--listen=127.0.0.1:0",
                 "--data_dir=" + os.path.join(self.data_dir, "var")] + self._extra_args,
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        except OSError:
            # Not started (not a program, a directory): nothing to stop, the directory goes.
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None
            raise
        self._reader = threading.Thread(target=self._read_output, daemon=True)
        self._reader.start()
        if not self._listening.wait(self._start_timeout) or self.port is None:
            output = self.output()
            self.stop()
            raise RuntimeError("verity_server did not start listening within %gs:\n%s"
                               % (self._start_timeout, output))
        return self

    def _read_output(self):
        for line in self._process.stdout:
            text = line.decode("utf-8", "replace")
            self._log.append(text)
            del self._log[:-200]  # the last 200 lines, for error messages
            if self.port is None:
                match = _LISTENING.search(text)
                if match:
                    self.port = int(match.group(1))
                    self._listening.set()
        self._listening.set()  # exited: wake start()

    def output(self) -> str:
        """The server's last lines of output."""
        return "".join(self._log)

    def stop(self, timeout: float = 60.0) -> Optional[int]:
        """SIGTERM (the server stops its PostgreSQL), SIGKILL after `timeout` seconds; removes
        the data directory. Returns the exit status (None if it was not started)."""
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
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None
        self.port = None
        return status

    def __enter__(self) -> "LocalServer":
        return self.start()

    def __exit__(self, *exc_info) -> bool:
        self.stop()
        return False
