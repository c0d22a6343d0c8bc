"""//deploy:configurations_start_test: every shipped server configuration starts a real server.

The flags are parsed out of each file exactly as deploy_test.py reads them: the Dockerfile's
ENTRYPOINT + CMD, compose.yaml's `server` (a plain `up` and the worker mode) and `server-local`
(the `local` profile), k8s/server.yaml's container args, and the systemd flag file (passed
through --flagfile, as the unit does). The Bazel-built verity_server runs with them on this
machine. Only what must differ here is substituted, each for a stated reason:

- the database: --postgres_url (a host this machine does not have) becomes --data_dir in a
  fresh temporary directory, the server's embedded PostgreSQL 15;
- the port of --listen: a free port, so that tests can run side by side; the host (0.0.0.0,
  every interface) is kept, since that is what the plaintext rule is about;
- file paths inside the image or host (--admin_key_file, --tls_cert, --tls_key,
  --tls_client_ca): the same files in the temporary directory, with a certificate for
  localhost made here by openssl;
- --metrics_port=0 is added (no metrics listener), so that a parallel test's port 9464 cannot
  clash.

Each configuration must start (the server logs event=listening), answer the standard gRPC
health check over the transport it configures (TLS with the test CA, or plaintext for
--insecure), and exit 0 on SIGTERM.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import grpc
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploy_test  # noqa: E402  (the parsers of the deployment files)

START_TIMEOUT_S = 120
STOP_TIMEOUT_S = 60
HEALTH_SERVING = b"\x08\x01"  # grpc.health.v1.HealthCheckResponse{status: SERVING}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_certificate(directory):
    """A self-signed certificate for localhost (its own CA) and its key; returns their paths."""
    cert, key = os.path.join(directory, "server.crt"), os.path.join(directory, "server.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
                    "-keyout", key, "-out", cert], check=True, capture_output=True)
    return cert, key


def dockerfile_args(text):
    """ENTRYPOINT + CMD of the Dockerfile's last stage, minus the binary itself."""
    runtime = deploy_test.dockerfile_stages(text)[-1][1]
    entrypoint = [json.loads(a) for i, a in runtime if i == "ENTRYPOINT"][-1]
    command = [json.loads(a) for i, a in runtime if i == "CMD"][-1]
    assert entrypoint == ["/usr/local/bin/verity_server"], entrypoint
    return command


def substitute(args, tmp, port, cert, key):
    """`args` with only the machine-specific values replaced (see the module comment)."""
    out = []
    for arg in args:
        match = re.match(r"--([A-Za-z0-9_]+)(?:=(.*))?$", arg)
        name, value = (match.group(1), match.group(2)) if match else (None, None)
        if name == "listen":
            out.append("--listen=%s:%d" % (value.rsplit(":", 1)[0], port))
        elif name in ("postgres_url", "data_dir", "metrics_port"):
            continue
        elif name == "admin_key_file":
            out.append("--admin_key_file=" + os.path.join(tmp, "admin.key"))
        elif name == "tls_cert":
            out.append("--tls_cert=" + cert)
        elif name in ("tls_key",):
            out.append("--tls_key=" + key)
        elif name == "tls_client_ca":
            out.append("--tls_client_ca=" + cert)
        else:
            out.append(arg)
    return out + ["--data_dir=" + os.path.join(tmp, "var"), "--metrics_port=0"]


def health_check(port, ca_file):
    """The grpc.health.v1 answer of the server on `port` (TLS with `ca_file`, or plaintext)."""
    target = "localhost:%d" % port
    if ca_file:
        with open(ca_file, "rb") as f:
            channel = grpc.secure_channel(target, grpc.ssl_channel_credentials(f.read()))
    else:
        channel = grpc.insecure_channel(target)
    with channel:
        check = channel.unary_unary("/grpc.health.v1.Health/Check",
                                    request_serializer=lambda r: r,
                                    response_deserializer=lambda r: r)
        return check(b"", timeout=30)


class ConfigurationsStartTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.dockerfile = deploy_test.read(deploy_test.deploy_path("docker", "Dockerfile"))
        with open(deploy_test.deploy_path("compose.yaml")) as f:
            cls.compose = yaml.safe_load(f)
        cls.k8s = deploy_test.manifests([deploy_test.deploy_path("k8s", "server.yaml")])
        cls.flag_file = deploy_test.read(
            deploy_test.deploy_path("systemd", "verity-server.flags.example"))

    def start_and_stop(self, args, tls, flag_file=False):
        """Runs verity_server with the configuration's `args`; checks start, health, SIGTERM."""
        tmp = tempfile.mkdtemp(prefix="verity-deploy-", dir="/tmp")
        os.chmod(tmp, 0o755)  # The embedded PostgreSQL runs as `postgres` when we are root.
        cert, key = make_certificate(tmp)
        port = free_port()
        argv = substitute(args, tmp, port, cert, key)
        if flag_file:  # As the systemd unit: ExecStart=verity_server --flagfile=FILE.
            path = os.path.join(tmp, "verity-server.flags")
            with open(path, "w") as f:
                f.write("\n".join(argv) + "\n")
            argv = ["--flagfile=" + path]
        log_path = os.path.join(tmp, "server.log")
        listening = threading.Event()
        with open(log_path, "w") as log:
            process = subprocess.Popen([deploy_test.SERVER_BINARY] + argv, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True)

            def pump():
                for line in process.stdout:
                    log.write(line)
                    log.flush()
                    if "event=listening" in line:
                        listening.set()
            reader = threading.Thread(target=pump, daemon=True)
            reader.start()
            try:
                deadline = time.monotonic() + START_TIMEOUT_S
                while not listening.wait(0.2):
                    if process.poll() is not None or time.monotonic() > deadline:
                        break
                self.assertTrue(listening.is_set(), "did not start: %s\n%s" % (
                    " ".join(argv), open(log_path).read()))
                self.assertEqual(health_check(port, cert if tls else None), HEALTH_SERVING)
            finally:
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
                try:
                    code = process.wait(timeout=STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    process.kill()
                    code = process.wait()
                reader.join(timeout=10)
        self.assertEqual(code, 0, open(log_path).read())
        subprocess.run(["rm", "-rf", tmp], check=False)

    def test_the_dockerfile_command(self):
        self.start_and_stop(dockerfile_args(self.dockerfile), tls=True)

    def test_the_compose_server_in_both_training_modes(self):
        for env in (deploy_test.COMPOSE_PLAIN_ENV, deploy_test.COMPOSE_WORKER_ENV):
            with self.subTest(env=env):
                args = deploy_test.compose_args(self.compose["services"]["server"], env)
                self.assertNotIn("--insecure", args)
                self.start_and_stop(args, tls=True)

    def test_the_compose_local_profile_is_the_only_plaintext_one(self):
        local = self.compose["services"]["server-local"]
        self.assertEqual(local.get("profiles"), ["local"])
        args = deploy_test.compose_args(local, deploy_test.COMPOSE_PLAIN_ENV)
        self.assertIn("--insecure", args)
        self.assertEqual(local.get("ports"), ["127.0.0.1:50051:50051"])
        self.start_and_stop(args, tls=False)

    def test_the_kubernetes_server(self):
        container = self.k8s[("Deployment", "verity-server")]["spec"]["template"]["spec"][
            "containers"][0]
        self.start_and_stop(container["args"], tls=True)

    def test_the_systemd_flag_file(self):
        args = deploy_test.flag_file_args(self.flag_file)
        self.start_and_stop(args, tls=True, flag_file=True)


def main():
    if not os.path.isdir(deploy_test.DEPLOY):
        sys.exit("run from the workspace root (or through bazel test)")
    if "TEST_SRCDIR" not in os.environ:
        deploy_test.SERVER_BINARY = "bazel-bin/" + deploy_test.SERVER_BINARY
    suite = unittest.defaultTestLoader.loadTestsFromModule(sys.modules[__name__])
    runner = unittest.TextTestRunner(resultclass=deploy_test.JUnitResult, verbosity=2,
                                     stream=sys.stdout)
    result = runner.run(suite)
    if os.environ.get("XML_OUTPUT_FILE"):
        deploy_test.write_junit(result, os.environ["XML_OUTPUT_FILE"])
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
