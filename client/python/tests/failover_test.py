"""verity_client given several servers (issue 19): the target list's rules; a real
verity_server next to an address where nothing listens (a replica that died before the client
started), where every call, submit()'s stream included, must succeed through the live server;
and two real replicas on one database, the one holding a submit() stream killed mid-stream.
"""

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import unittest
import urllib.request

import grpc
import pandas as pd

import junit
import server_process
import verity_client
from verity_client.client import resolve_target


def free_loopback_port():
    """A localhost port where nothing listens (bound, then closed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ResolveTargetTest(unittest.TestCase):

    def test_one_address_or_own_scheme_is_kept(self):
        for given in ("localhost:50051", "verity.example:443", "dns:///verity:1",
                      "ipv4:127.0.0.1:1,127.0.0.1:2", "unix:/tmp/verity.sock"):
            self.assertEqual(resolve_target(given), (given, "", ""))

    def test_a_lone_address_with_a_port_past_65535_is_refused_as_in_a_list(self):
        # gRPC reads such a port modulo 65536 and would connect to another port.
        for given in ("localhost:115697", "127.0.0.1:70000", "[::1]:0"):
            with self.assertRaisesRegex(ValueError, 'port must be 1 to 65535'):
                resolve_target(given)

    def test_several_addresses_become_one_ip_target(self):
        self.assertEqual(resolve_target("127.0.0.1:7001, 127.0.0.2:7002"),
                         ("ipv4:127.0.0.1:7001,127.0.0.2:7002", "127.0.0.1:7001", "127.0.0.1"))
        self.assertEqual(resolve_target("[::1]:7001,[::1]:7002"),
                         ("ipv6:[::1]:7001,[::1]:7002", "[::1]:7001", "::1"))
        self.assertEqual(resolve_target("localhost:7001,127.0.0.1:7002,localhost:7001"),
                         ("ipv4:127.0.0.1:7001,127.0.0.1:7002", "localhost:7001", "localhost"))

    def test_bad_lists_raise_naming_the_argument(self):
        with self.assertRaisesRegex(ValueError, r'^target: empty address in "a:1,,b:2"$'):
            verity_client.Client("a:1,,b:2")
        with self.assertRaisesRegex(ValueError, 'has no port'):
            resolve_target("127.0.0.1:1,127.0.0.1")
        with self.assertRaisesRegex(ValueError, 'port must be 1 to 65535'):
            resolve_target("127.0.0.1:1,127.0.0.1:0")
        with self.assertRaisesRegex(ValueError, r'\[IPV6\]:PORT'):
            resolve_target("127.0.0.1:1,::1:2")
        with self.assertRaisesRegex(ValueError, 'mixes hosts'):
            resolve_target("127.0.0.1:1,[::1]:2")
        with self.assertRaises(verity_client.VerityError) as raised:
            resolve_target("127.0.0.1:1,no-such-host.invalid:2")
        self.assertEqual(raised.exception.code, grpc.StatusCode.UNAVAILABLE)

    def test_a_key_travels_in_plaintext_only_to_a_list_of_loopback_addresses(self):
        verity_client.Client("localhost:1,127.0.0.1:2", api_key="k").close()
        with self.assertRaisesRegex(ValueError, "plaintext"):
            verity_client.Client("localhost:1,10.0.0.7:2", api_key="k")


class DeadReplicaTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.server = server_process.ServerProcess(server_process.runfile("server/verity_server"))
        cls.server.start()
        cls.addClassCleanup(cls.server.stop)

    def test_calls_succeed_with_one_replica_dead_from_the_start(self):
        for order in ("dead-first", "live-first"):
            dead = "localhost:%d" % free_loopback_port()
            servers = [dead, self.server.address]
            if order == "live-first":
                servers.reverse()
            with verity_client.Client(",".join(servers), timeout=20) as client:
                project = "failover-" + order
                client.create_project(project, ["no", "yes"])
                labels = pd.DataFrame({
                    "item": ["i%d" % (n % 40) for n in range(200)],
                    "annotator": ["w%d" % (n // 40) for n in range(200)],
                    "label": ["yes" if n % 3 else "no" for n in range(200)],
                })
                result = client.submit(project, labels, batch_size=25)
                self.assertEqual((result.accepted, result.duplicate, result.rejected),
                                 (200, 0, 0))
                for _ in range(10):
                    names = [p.name for p in client.list_projects()]
                    self.assertIn(project, names)
                    self.assertEqual(client.get_project(project).name, project)
                posteriors = client.posteriors(project)
                self.assertEqual(len(posteriors), 40)


class KilledReplicaTest(unittest.TestCase):
    """Two replicas on the database of a third server, which owns the embedded PostgreSQL and
    gets no calls (killing a server that owns its PostgreSQL would leave that running)."""

    @classmethod
    def setUpClass(cls):
        cls.binary = server_process.runfile("server/verity_server")
        cls.database = server_process.ServerProcess(cls.binary)
        cls.database.start()
        cls.addClassCleanup(cls.database.stop)

    def start_replica(self):
        metrics_port = free_loopback_port()
        replica = server_process.ServerProcess(
            self.binary, ["--postgres_url=" + self.database.postgres_url,
                          "--metrics_port=%d" % metrics_port])
        replica.metrics_port = metrics_port
        replica.start()
        self.addCleanup(replica.stop)
        return replica

    @staticmethod
    def holds_the_stream(replica):
        """Whether `replica` committed ingest batches: the one the stream went to. (Every
        replica serves the labels, since they follow each other; only the holder counts
        batches.)"""
        url = "http://127.0.0.1:%d/metrics" % replica.metrics_port
        with urllib.request.urlopen(url, timeout=5) as response:
            for line in response.read().decode("utf-8").splitlines():
                if line.startswith("verity_ingest_batches_total "):
                    return float(line.split()[1]) > 0
        return False

    def test_submit_finishes_on_the_survivor(self):
        project = "py-failover"
        first = self.start_replica()
        with verity_client.Client(first.address) as client:
            client.create_project(project, ["a", "b", "c"])
        # Started after the project exists: it reads it at start.
        second = self.start_replica()
        labels = pd.DataFrame({
            "item": ["i%d" % (n // 6) for n in range(12000)],
            "annotator": ["w%d" % (n % 6) for n in range(12000)],
            "label": ["abc"[n % 3] for n in range(12000)],
        })
        holder = []
        killed = threading.Event()

        def progress(acked, total):
            if not holder:
                holder.extend(r for r in (first, second) if self.holds_the_stream(r))
            elif not killed.is_set() and acked >= total // 3:
                holder[0].kill()
                killed.set()

        with verity_client.Client("%s,%s" % (first.address, second.address),
                                  timeout=20) as client:
            result = client.submit(project, labels, batch_size=200, progress=progress)
            self.assertTrue(killed.is_set())
            self.assertGreaterEqual(result.retries, 1)
            self.assertEqual(result.accepted + result.duplicate, len(labels))
            self.assertEqual((result.revised, result.rejected), (0, 0))
            for _ in range(5):
                self.assertIn(project, [p.name for p in client.list_projects()])
            # Every label is in PostgreSQL: resent to the survivor, all are duplicates.
            again = client.submit(project, labels, batch_size=1000)
            self.assertEqual((again.accepted, again.duplicate), (0, len(labels)))


    def rpc_count(self, replica, method):
        """verity_rpc_total of `method` on `replica`, all codes."""
        url = "http://127.0.0.1:%d/metrics" % replica.metrics_port
        total = 0.0
        with urllib.request.urlopen(url, timeout=5) as response:
            for line in response.read().decode("utf-8").splitlines():
                if line.startswith("verity_rpc_total{") and method in line:
                    total += float(line.split()[-1])
        return total

    def test_unary_calls_are_spread_and_move_on_when_a_connected_replica_dies(self):
        # README: calls go round robin over the connected replicas; a unary call that fails
        # UNAVAILABLE on a replica that died is retried on another.
        project = "py-round-robin"
        first = self.start_replica()
        with verity_client.Client(first.address) as client:
            client.create_project(project, ["a", "b"])
        second = self.start_replica()
        replicas = (first, second)
        with verity_client.Client("%s,%s" % (first.address, second.address),
                                  timeout=20) as client:
            client.wait_until_ready()
            # The channel is ready once one replica is connected; round robin reaches the
            # other once it connects too.
            for _ in range(200):
                client.list_projects()
                if all(self.rpc_count(r, "ListProjects") > 0 for r in replicas):
                    break
            before = [self.rpc_count(r, "ListProjects") for r in replicas]
            for _ in range(40):
                self.assertIn(project, [p.name for p in client.list_projects()])
            served = [self.rpc_count(r, "ListProjects") - b for r, b in zip(replicas, before)]
            self.assertEqual(sum(served), 40)
            self.assertGreaterEqual(min(served), 10, served)
            first.kill()
            for _ in range(20):
                self.assertEqual(client.get_project(project).classes, ("a", "b"))
            result = client.submit(project, pd.DataFrame(
                {"item": ["i1"] * 3, "annotator": ["w1", "w2", "w3"], "label": ["a"] * 3}))
            self.assertEqual(result.accepted, 3)


class TlsReplicaListTest(unittest.TestCase):
    """README: "With `credentials`, every replica's certificate must carry the first host's
    name." One TLS server whose certificate (signed by a test CA, made with openssl) names
    DNS:localhost only, listed with an address where nothing listens."""

    @classmethod
    def setUpClass(cls):
        cls.scratch = tempfile.mkdtemp()
        cls.addClassCleanup(shutil.rmtree, cls.scratch, True)
        script = (
            "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 "
            "-subj /CN=test-ca && "
            "openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr "
            "-subj /CN=localhost && "
            "printf 'subjectAltName=DNS:localhost' > san.ext && "
            "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
            "-out server.pem -days 2 -extfile san.ext")
        subprocess.run(["sh", "-c", script], cwd=cls.scratch, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        cls.server = server_process.ServerProcess(
            server_process.runfile("server/verity_server"),
            ["--metrics_port=0", "--tls_cert=" + os.path.join(cls.scratch, "server.pem"),
             "--tls_key=" + os.path.join(cls.scratch, "server.key")])
        cls.server.start()
        cls.addClassCleanup(cls.server.stop)
        with open(os.path.join(cls.scratch, "ca.pem"), "rb") as f:
            cls.credentials = grpc.ssl_channel_credentials(root_certificates=f.read())

    def test_the_first_hosts_name_is_checked_on_every_replica(self):
        port, dead = self.server.port, free_loopback_port()
        # localhost first: its name is on the certificate, wherever in the list the live
        # replica is (reached as 127.0.0.1).
        for name, target in (("tls-live-first", "localhost:%d,127.0.0.1:%d" % (port, dead)),
                             ("tls-live-second", "localhost:%d,127.0.0.1:%d" % (dead, port))):
            with self.subTest(target=target):
                with verity_client.Client(target, timeout=10, credentials=self.credentials,
                                          api_key="vk_unchecked") as client:
                    client.create_project(name, ["a", "b"])
                    result = client.submit(name, pd.DataFrame(
                        {"item": ["i1"], "annotator": ["w1"], "label": ["a"]}))
                    self.assertEqual(result.accepted, 1)
        # 127.0.0.1 first: the certificate does not name it, so no replica is accepted.
        with verity_client.Client("127.0.0.1:%d,localhost:%d" % (port, dead), timeout=10,
                                  credentials=self.credentials) as client:
            with self.assertRaises(verity_client.VerityError) as raised:
                client.list_projects()
        self.assertEqual(raised.exception.code, grpc.StatusCode.UNAVAILABLE)
        self.assertIn("127.0.0.1", raised.exception.message)


if __name__ == "__main__":
    junit.main()
