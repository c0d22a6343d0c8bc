"""//deploy:dashboard_metrics_test: every metric the dashboard and the alert rules query exists.

Reads deploy/grafana/verity-dashboard.json (every panel target's `expr` and the template
variables' queries) and deploy/prometheus/verity-alerts.yaml (every rule's `expr`), and collects
the verity_* metric names they use. Then starts the real verity_server (embedded PostgreSQL 15
in a fresh --data_dir, metrics on a free port), sends a little traffic with the verity CLI
(project, labels, an in-process fit, posteriors, a suggestion, and a call that fails with
NOT_FOUND) and scrapes /metrics. Each name must be a family the server exports (its `# TYPE`
line); a name queried as NAME_bucket, NAME_count or NAME_sum must be a histogram, and every
family the dashboard plots must also have at least one sample after the traffic. The rule file
must be well-formed: each rule has an alert name, an expr, a severity and a summary.

Usage: dashboard_metrics_test.py VERITY_SERVER VERITY_CLI DASHBOARD_JSON ALERTS_YAML
(run by dashboard_metrics_test.sh with Debian's python3, which has python3-yaml).
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

import yaml

METRIC = re.compile(r"\bverity_[a-z0-9_]+\b")
LATE_LABELS = 7  # Labels submitted after the project's fit.
HISTOGRAM_SUFFIXES = ("_bucket", "_count", "_sum")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dashboard_queries(dashboard):
    """Every PromQL expression of the dashboard: panel targets (rows included) and variables."""
    queries = []

    def walk(panels):
        for panel in panels:
            for target in panel.get("targets", []):
                queries.append(target["expr"])
            walk(panel.get("panels", []))

    walk(dashboard["panels"])
    for variable in dashboard.get("templating", {}).get("list", []):
        query = variable.get("query")
        if variable.get("type") == "query":
            queries.append(query["query"] if isinstance(query, dict) else query)
    return queries


def alert_rules(rules):
    return [rule for group in rules["groups"] for rule in group["rules"]]


def metric_names(queries):
    return {name for query in queries for name in METRIC.findall(query)}


def family_of(name, types):
    """The exported family `name` refers to, or None."""
    if name in types:
        return name
    for suffix in HISTOGRAM_SUFFIXES:
        if name.endswith(suffix) and types.get(name[:-len(suffix)]) == "histogram":
            return name[:-len(suffix)]
    return None


def parse_exposition(text):
    """(family -> type, sample names, series -> value) of Prometheus' text format."""
    types, samples, values = {}, set(), {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(None, 3)
            types[name] = kind.strip()
        elif line and not line.startswith("#"):
            samples.add(re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0))
            series, value = line.rsplit(" ", 1)
            values[series] = float(value)
    return types, samples, values


class Server:
    def __init__(self, binary, workdir):
        self.log_path = os.path.join(workdir, "server.log")
        self.metrics_port = free_port()
        self.log = open(self.log_path, "w")
        self.process = subprocess.Popen(
            [binary, "--listen=localhost:0", "--metrics_port=%d" % self.metrics_port,
             "--data_dir=" + os.path.join(workdir, "var"), "--background_refit=false"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while True:
            if self.process.poll() is not None:
                raise AssertionError("server exited with %s:\n%s" % (
                    self.process.returncode, open(self.log_path).read()))
            with open(self.log_path) as log:
                lines = [l for l in log if "event=listening" in l]
            if lines:
                self.port = int(re.search(r"\bport=(\d+)", lines[0]).group(1))
                return
            if time.monotonic() > deadline:
                raise AssertionError("the server did not listen within 120 s")
            time.sleep(0.1)

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.log.close()


class DashboardMetricsTest(unittest.TestCase):
    server_binary = cli = dashboard_path = alerts_path = None

    @classmethod
    def setUpClass(cls):
        with open(cls.dashboard_path) as f:
            cls.dashboard = json.load(f)
        with open(cls.alerts_path) as f:
            cls.rules = yaml.safe_load(f)
        # Under /tmp and world-readable: the embedded PostgreSQL runs as an unprivileged user
        # when the test runs as root.
        cls.workdir = tempfile.mkdtemp(prefix="verity-dashboard-", dir="/tmp")
        os.chmod(cls.workdir, 0o755)
        cls.server = Server(cls.server_binary, cls.workdir)
        try:
            cls.send_traffic()
            with urllib.request.urlopen(
                    "http://127.0.0.1:%d/metrics" % cls.server.metrics_port, timeout=10) as r:
                cls.types, cls.samples, cls.values = parse_exposition(r.read().decode("utf-8"))
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.workdir, ignore_errors=True)

    @classmethod
    def verity(cls, *args, expect_ok=True):
        result = subprocess.run([cls.cli, "--server=localhost:%d" % cls.server.port] + list(args),
                                capture_output=True, text=True, timeout=120)
        if expect_ok and result.returncode != 0:
            raise AssertionError("verity %s failed (%d): %s%s" % (
                " ".join(args), result.returncode, result.stdout, result.stderr))
        return result

    @classmethod
    def send_traffic(cls):
        labels_csv = os.path.join(cls.workdir, "labels.csv")
        with open(labels_csv, "w") as f:
            f.write("item,annotator,label\n")
            for item in range(20):
                for annotator in range(3):
                    label = "a" if (item + (annotator == 2)) % 2 == 0 else "b"
                    f.write("item-%d,ann-%d,%s\n" % (item, annotator, label))
        cls.verity("project", "create", "ops", "--classes=a,b", "--method=ds")
        cls.verity("submit", "--project=ops", "--csv=" + labels_csv)
        cls.verity("model", "train", "--project=ops")
        # Refit lag: labels committed after the fit (background refits are off).
        late_csv = os.path.join(cls.workdir, "late.csv")
        with open(late_csv, "w") as f:
            f.write("item,annotator,label\n")
            for item in range(LATE_LABELS):
                f.write("item-%d,ann-late,a\n" % item)
        cls.verity("submit", "--project=ops", "--csv=" + late_csv)
        cls.verity("posteriors", "--project=ops")
        cls.verity("suggest", "items", "--project=ops", "--annotator=ann-new", "--k=2")
        # An error code other than OK for the errors-by-code panel.
        result = cls.verity("posteriors", "--project=no-such-project", expect_ok=False)
        if result.returncode == 0:
            raise AssertionError("posteriors of an unknown project succeeded")

    def test_every_dashboard_metric_is_exported_and_has_samples(self):
        names = metric_names(dashboard_queries(self.dashboard))
        self.assertGreaterEqual(len(names), 10, names)
        for name in sorted(names):
            with self.subTest(metric=name):
                family = family_of(name, self.types)
                self.assertIsNotNone(family, "%s is not exported; families: %s" %
                                     (name, sorted(self.types)))
                if family != name:
                    self.assertEqual(self.types[family], "histogram")
                # Unlabelled families are exported from the start; labelled ones once the
                # traffic above touched them: a panel must not stay empty on a working server.
                self.assertIn(name, self.samples, "%s has no sample after the traffic" % name)

    def test_every_alert_metric_is_exported(self):
        rules = alert_rules(self.rules)
        names = metric_names(rule["expr"] for rule in rules)
        self.assertGreaterEqual(len(names), 6, names)
        for name in sorted(names):
            with self.subTest(metric=name):
                family = family_of(name, self.types)
                self.assertIsNotNone(family, "%s is not exported" % name)
                if family != name:
                    self.assertEqual(self.types[family], "histogram")

    def test_alert_rules_are_well_formed(self):
        rules = alert_rules(self.rules)
        alerts = [rule["alert"] for rule in rules]
        self.assertEqual(len(alerts), len(set(alerts)), "duplicate alert names: %s" % alerts)
        for rule in rules:
            with self.subTest(alert=rule.get("alert")):
                self.assertRegex(rule["alert"], r"^Verity[A-Za-z]+$")
                self.assertTrue(rule["expr"].strip())
                self.assertIn(rule["labels"]["severity"], ("page", "warn"))
                self.assertTrue(rule["annotations"]["summary"])
                if "for" in rule:
                    self.assertRegex(rule["for"], r"^\d+[smh]$")

    def test_dashboard_covers_what_operators_asked_for(self):
        """The issue's list: ingest rate, commit latency, refit lag, query p99, database pool
        saturation, errors by code, each in some panel's query."""
        queries = "\n".join(dashboard_queries(self.dashboard))
        for needed in ("verity_ingest_annotations_total",
                       "verity_ingest_commit_duration_seconds_bucket",
                       "verity_training_due_projects",
                       "verity_rpc_duration_seconds_bucket",
                       'verity_db_pool_connections{job=~"$job", instance=~"$instance", '
                       'state="in_use"}',
                       "sum by (code) (rate(verity_rpc_total"):
            self.assertIn(needed, queries)
        self.assertIn("histogram_quantile(0.99", queries)
        ids = [panel["id"] for panel in self.dashboard["panels"]]
        self.assertEqual(len(ids), len(set(ids)), "panel ids must be unique: %s" % ids)

    def test_refit_lag_counts_the_labels_since_the_fit(self):
        """verity_project_labels_since_model, added for the refit-lag panel: exactly the labels
        submitted after the fit; the project's other labels were in it."""
        self.assertEqual(self.types["verity_project_labels_since_model"], "gauge")
        self.assertEqual(self.values['verity_project_labels_since_model{project="ops"}'],
                         LATE_LABELS)
        self.assertEqual(self.values['verity_project_labels{project="ops"}'], 60 + LATE_LABELS)

    def test_the_traffic_reached_the_metrics(self):
        """The scrape is of a server that did the work: not only families, but values."""
        self.assertIn("verity_rpc_total", self.types)
        self.assertIn("verity_ingest_annotations_total", self.samples)
        self.assertIn("verity_rpc_duration_seconds_bucket", self.samples)
        self.assertIn("verity_training_duration_seconds_bucket", self.samples)


if __name__ == "__main__":
    (DashboardMetricsTest.server_binary, DashboardMetricsTest.cli,
     DashboardMetricsTest.dashboard_path, DashboardMetricsTest.alerts_path) = (
         os.path.abspath(p) for p in sys.argv[1:5])
    unittest.main(argv=sys.argv[:1], verbosity=2)
