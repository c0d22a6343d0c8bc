"""Web console end to end in headless Chromium.

Starts the real verity_server (embedded PostgreSQL, console on a free metrics port), loads a
small synthetic project with the verity CLI (gold items, labels, a model fit, leases from a
suggestion), a mace project (spam scores) and a lia project (learned annotator embeddings),
checks the JSON endpoints over plain HTTP, then opens the console in headless Chromium:
clicks into the project and into an annotator; opens the deep links #/projects/NAME and
#/projects/NAME/annotators/ID directly in a fresh tab; checks the history charts (ingest rate,
resolved share) fill in through the page's periodic refresh after more labels arrive, and that
pausing stops it; the reliability diagram on gold items, the spam-score column and the
embedding map; and saves console.png (the project view) and console-annotator.png (the lia
project's embedding map and an annotator, opened by a deep link) into
$TEST_UNDECLARED_OUTPUTS_DIR. Then, with a second server with --auth=on: the page's key
prompt, and that a reader key's page lists only the key's project.

Chromium is driven directly through the Chrome DevTools Protocol over --remote-debugging-pipe
(file descriptors 3 and 4, NUL-separated JSON messages), which needs nothing beyond the Python
standard library. (The npm registry is reachable, so Playwright could drive it too; this
protocol client is about 80 lines and needs no node_modules in the repository.)

Usage: console_browser_test.py VERITY_SERVER VERITY_CLI  (run by //console:console_browser_test
with /usr/bin/python3).
"""

import base64
import fcntl
import json
import os
import random
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

CHROMIUM = "/usr/bin/chromium"
PROJECT = "console-demo"
CLASSES = ["cat", "dog", "fox"]
NUM_ITEMS = 60
NUM_ANNOTATORS = 6
NUM_GOLD = 15  # item-0 .. item-14 have gold labels (their true class).
SPAM_PROJECT = "console-mace"
EMBEDDING_PROJECT = "console-lia"


def fail(message):
    raise AssertionError(message)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, what, timeout=30.0, interval=0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            fail("timed out waiting for " + what)
        time.sleep(interval)


class Server:
    def __init__(self, binary, workdir, extra_flags=(), name="server"):
        self.log_path = os.path.join(workdir, name + ".log")
        self.data_dir = os.path.join(workdir, name + "-var")
        self.metrics_port = free_port()
        self.log = open(self.log_path, "w")
        self.process = subprocess.Popen(
            [binary, "--listen=localhost:0", "--metrics_port=%d" % self.metrics_port,
             "--data_dir=" + self.data_dir, "--background_refit=false"] + list(extra_flags),
            stdout=self.log, stderr=subprocess.STDOUT)
        line = wait_for(self._listening_line, "the server to listen", timeout=120)
        self.port = int(re.search(r"\bport=(\d+)", line).group(1))
        if int(re.search(r"\bmetrics_port=(\d+)", line).group(1)) != self.metrics_port:
            fail("metrics port not served: " + line)

    def _listening_line(self):
        if self.process.poll() is not None:
            fail("server exited with %s:\n%s" % (self.process.returncode,
                                                  open(self.log_path).read()))
        for line in open(self.log_path):
            if "event=listening" in line:
                return line
        return None

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.log.close()


def http_get(port, path):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=10) as r:
            return r.status, r.headers.get("Content-Type"), r.read().decode("utf-8")
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), e.read().decode("utf-8")


def verity_cli(cli, server):
    def verity(*args):
        result = subprocess.run([cli, "--server=localhost:%d" % server.port] + list(args),
                                capture_output=True, text=True, timeout=300)
        if result.returncode != 0:
            fail("verity %s failed (%d): %s%s" % (" ".join(args), result.returncode,
                                                  result.stdout, result.stderr))
        return result.stdout
    return verity


def load_data(cli, server, workdir):
    """A 3-class project: 60 items (the first NUM_GOLD with gold labels), 6 annotators of
    decreasing accuracy, one label each; the same labels in a mace and a lia project.
    Returns (number of labels, gold items with at least one label)."""
    rng = random.Random(7)
    accuracies = [0.95, 0.9, 0.85, 0.75, 0.6, 0.45]
    rows = ["item,annotator,label"]
    labelled = set()
    for item in range(NUM_ITEMS):
        truth = item % len(CLASSES)
        for a in range(NUM_ANNOTATORS):
            if rng.random() < 0.25:
                continue  # Not every annotator labels every item.
            label = truth if rng.random() < accuracies[a] else rng.randrange(len(CLASSES))
            rows.append("item-%d,ann-%d,%s" % (item, a, CLASSES[label]))
            labelled.add(item)
    labels_csv = os.path.join(workdir, "labels.csv")
    with open(labels_csv, "w") as f:
        f.write("\n".join(rows) + "\n")
    gold_csv = os.path.join(workdir, "gold.csv")
    with open(gold_csv, "w") as f:
        f.write("item,label\n")
        for item in range(NUM_GOLD):
            f.write("item-%d,%s\n" % (item, CLASSES[item % len(CLASSES)]))

    verity = verity_cli(cli, server)
    verity("project", "create", PROJECT, "--classes=" + ",".join(CLASSES), "--method=ds",
           "--confidence_target=0.9")
    verity("item", "add", "--project=" + PROJECT, "--gold_csv=" + gold_csv)
    verity("submit", "--project=" + PROJECT, "--csv=" + labels_csv)
    verity("model", "train", "--project=" + PROJECT)
    # Two leases: with gold items (resolved, never suggested) few items are still open.
    verity("suggest", "items", "--project=" + PROJECT, "--annotator=ann-new", "--k=2")
    for name, method in ((SPAM_PROJECT, "mace"), (EMBEDDING_PROJECT, "lia")):
        verity("project", "create", name, "--classes=" + ",".join(CLASSES), "--method=" + method)
        verity("submit", "--project=" + name, "--csv=" + labels_csv)
        verity("model", "train", "--project=" + name)
    return len(rows) - 1, len([i for i in range(NUM_GOLD) if i in labelled])


def submit_more_labels(cli, server, workdir):
    """A seventh annotator labels every item: the ingest rate between two samples is > 0. Its
    id, ann/6, has a slash, which the page's deep link must URI-encode."""
    path = os.path.join(workdir, "more-labels.csv")
    with open(path, "w") as f:
        f.write("item,annotator,label\n")
        for item in range(NUM_ITEMS):
            f.write("item-%d,ann/6,%s\n" % (item, CLASSES[item % len(CLASSES)]))
    verity_cli(cli, server)("submit", "--project=" + PROJECT, "--csv=" + path)


def check_json_endpoints(port, num_labels, gold_with_labels):
    status, content_type, body = http_get(port, "/api/projects")
    if status != 200 or not content_type.startswith("application/json"):
        fail("/api/projects: %s %s" % (status, content_type))
    projects = json.loads(body)["projects"]
    [project] = [p for p in projects if p["name"] == PROJECT]
    if (project["classes"] != CLASSES or project["items"] != NUM_ITEMS
            or project["labels"] != num_labels or project["model_version"] != 1
            or project["model_method"] != "ds"):
        fail("unexpected project summary: %r" % project)

    status, _, body = http_get(port, "/api/projects/" + PROJECT)
    detail = json.loads(body)
    if status != 200 or sum(detail["confidence_histogram"]["counts"]) != NUM_ITEMS:
        fail("unexpected project detail: %s %r" % (status, detail))
    if len(detail["confidence_histogram"]["counts"]) != 10:
        fail("histogram must have 10 bins: %r" % detail["confidence_histogram"])
    assignment = detail["assignment"]
    if assignment["outstanding_leases"] != 2 or assignment["resolved_items"] is None:
        fail("unexpected assignment state: %r" % assignment)
    if assignment["resolved_items"] + assignment["open_items"] != NUM_ITEMS:
        fail("resolved + open must be every item: %r" % assignment)
    # History: parallel arrays, with at least the sample this request took (a project's JSON
    # samples it when its last sample is 5 s old or there is none).
    history = detail["history"]
    lengths = {len(history[key]) for key in
               ("time_ms", "labels", "labels_per_second", "resolved_share")}
    if len(lengths) != 1 or lengths.pop() < 1:
        fail("history arrays must be parallel and non-empty: %r" % history)
    if history["time_ms"] != sorted(history["time_ms"]) or history["labels_per_second"][0] is not None:
        fail("history must be oldest first, without a rate for its first sample: %r" % history)
    if any(not 0 <= s <= 1 for s in history["resolved_share"] if s is not None):
        fail("resolved shares must lie in [0, 1]: %r" % history)
    # Reliability on gold items: every gold item with a label is scored, once.
    if detail["gold_items"] != NUM_GOLD or detail["gold_items_with_labels"] != gold_with_labels:
        fail("gold items: %r / %r" % (detail["gold_items"], detail["gold_items_with_labels"]))
    reliability = detail["reliability"]
    if reliability["count"] != gold_with_labels or len(reliability["bins"]) != 10:
        fail("unexpected reliability: %r" % reliability)
    if sum(b["count"] for b in reliability["bins"]) != gold_with_labels:
        fail("reliability bins must hold every scored gold item: %r" % reliability)
    right = sum(b["count"] * b["accuracy"] for b in reliability["bins"] if b["count"])
    if abs(right / gold_with_labels - reliability["accuracy"]) > 1e-9:
        fail("the bins' accuracies must add up to the overall accuracy: %r" % reliability)
    # Mostly accurate annotators: Dawid-Skene gets most gold items right from labels alone.
    if not reliability["accuracy"] > 0.7 or not 0 <= reliability["expected_calibration_error"] <= 1:
        fail("implausible reliability: %r" % reliability)
    for b in reliability["bins"]:
        if b["count"] and not b["low"] <= b["mean_confidence"] <= b["high"]:
            fail("a bin's mean confidence must lie in the bin: %r" % b)
    [version] = detail["versions"]
    if version["version"] != 1 or version["method"] != "ds" or version["log_likelihood"] >= 0:
        fail("unexpected model version: %r" % version)

    status, _, body = http_get(port, "/api/projects/%s/annotators" % PROJECT)
    annotators = json.loads(body)["annotators"]
    # ann-new got leases but no labels yet: it is not an annotator of the project until then,
    # or it is one with 0 labels; either way the six labelling annotators are there.
    by_id = {a["id"]: a for a in annotators}
    for a in range(NUM_ANNOTATORS):
        entry = by_id["ann-%d" % a]
        confusion = entry["confusion"]
        if len(confusion) != 3 or any(len(row) != 3 for row in confusion):
            fail("confusion must be 3x3: %r" % entry)
        if any(abs(sum(row) - 1) > 1e-6 for row in confusion):
            fail("confusion rows must sum to 1: %r" % entry)
    if not by_id["ann-0"]["accuracy"] > by_id["ann-5"]["accuracy"]:
        fail("the best annotator must look better than the worst: %r" % by_id)
    # ds gives neither spam scores nor embeddings.
    body = json.loads(http_get(port, "/api/projects/%s/annotators" % PROJECT)[2])
    if body["spam_scores"] or body["embedding_dim"] != 0 or any(
            a["spam_score"] is not None or a["embedding_2d"] is not None for a in annotators):
        fail("ds has no spam scores or embeddings: %r" % body)

    # mace: a spam score (1 - competence) per annotator; the near-random ann-5 spams more
    # than the 95%-accurate ann-0.
    spam = json.loads(http_get(port, "/api/projects/%s/annotators" % SPAM_PROJECT)[2])
    scores = {a["id"]: a["spam_score"] for a in spam["annotators"]}
    if not spam["spam_scores"] or any(s is None or not 0 <= s <= 1 for s in scores.values()):
        fail("mace must give every annotator a spam score in [0, 1]: %r" % scores)
    if not scores["ann-5"] > scores["ann-0"]:
        fail("the worst annotator must have the higher spam score: %r" % scores)

    # lia: every annotator on the first two principal components of its embedding. The PCA is
    # centred, so the coordinates sum to 0 on each axis.
    lia = json.loads(http_get(port, "/api/projects/%s/annotators" % EMBEDDING_PROJECT)[2])
    points = [a["embedding_2d"] for a in lia["annotators"]]
    if lia["embedding_dim"] != 16 or any(p is None or len(p) != 2 for p in points):
        fail("lia must place every annotator on the map: %r" % lia)
    for axis in (0, 1):
        if abs(sum(p[axis] for p in points)) > 1e-6 * max(1, max(abs(p[axis]) for p in points)):
            fail("PCA coordinates must be centred: %r" % points)
    if not sum(p[0] ** 2 for p in points) >= sum(p[1] ** 2 for p in points) * (1 - 1e-9):
        fail("the first component must carry at least the second's variance: %r" % points)

    status, _, body = http_get(port, "/api/projects/no-such-project")
    if status != 404 or "no-such-project" not in json.loads(body)["error"]:
        fail("unknown project: %s %s" % (status, body))
    status, _, _ = http_get(port, "/api/nothing")
    if status != 404:
        fail("/api/nothing: %s" % status)
    status, _, body = http_get(port, "/metrics")
    if status != 200 or "verity_project_labels" not in body:
        fail("/metrics must still be served: %s" % status)
    status, content_type, body = http_get(port, "/")
    if status != 200 or not content_type.startswith("text/html") or "Verity console" not in body:
        fail("/: %s %s" % (status, content_type))


class Chromium:
    """Headless Chromium driven over the DevTools protocol on --remote-debugging-pipe."""

    def __init__(self, workdir):
        to_browser_read, self.to_browser = os.pipe()
        self.from_browser, from_browser_write = os.pipe()

        def use_pipe_fds():
            # Duplicate above 4 first so that neither dup2 clobbers the other's source.
            read_end = fcntl.fcntl(to_browser_read, fcntl.F_DUPFD, 10)
            write_end = fcntl.fcntl(from_browser_write, fcntl.F_DUPFD, 10)
            os.dup2(read_end, 3)
            os.dup2(write_end, 4)

        self.profile = os.path.join(workdir, "chromium-profile")
        self.log = open(os.path.join(workdir, "chromium.log"), "w")
        # As root (the test machines) Chromium refuses to start without --no-sandbox.
        self.process = subprocess.Popen(
            [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
             "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
             "--remote-debugging-pipe", "--user-data-dir=" + self.profile,
             "--window-size=1280,1600", "about:blank"],
            pass_fds=(3, 4), preexec_fn=use_pipe_fds, stdout=self.log,
            stderr=subprocess.STDOUT, env=dict(os.environ, HOME=workdir))
        os.close(to_browser_read)
        os.close(from_browser_write)
        self.buffer = b""
        self.next_id = 0
        self.session = None

    def send(self, method, params=None, timeout=30.0):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if self.session is not None and not method.startswith("Target."):
            message["sessionId"] = self.session
        os.write(self.to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in self.buffer:
                raw, self.buffer = self.buffer.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self.next_id:
                    if "error" in reply:
                        fail("%s: %r" % (method, reply["error"]))
                    return reply["result"]
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.process.poll() is not None:
                fail("no reply to %s (chromium %s)" % (method, self.process.poll()))
            ready, _, _ = select.select([self.from_browser], [], [], remaining)
            if ready:
                chunk = os.read(self.from_browser, 1 << 20)
                if not chunk:
                    fail("chromium closed the pipe")
                self.buffer += chunk

    def open_page(self, url):
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.send("Target.attachToTarget",
                                 {"targetId": target, "flatten": True})["sessionId"]
        self.send("Page.enable")
        self.send("Runtime.enable")
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": 1280, "height": 1600, "deviceScaleFactor": 1, "mobile": False})
        self.send("Page.navigate", {"url": url})
        # The new tab starts on about:blank: wait for the page itself before reading it.
        self.wait_until("location.href === %s && document.readyState === 'complete'" %
                        json.dumps(url), "the page %s to load" % url)

    def evaluate(self, expression):
        result = self.send("Runtime.evaluate",
                           {"expression": expression, "returnByValue": True,
                            "awaitPromise": True})
        if "exceptionDetails" in result:
            fail("%s threw %r" % (expression, result["exceptionDetails"]))
        return result["result"].get("value")

    def wait_until(self, expression, what, timeout=20.0):
        return wait_for(lambda: self.evaluate(expression), what, timeout=timeout)

    def screenshot(self, path):
        """The whole page, not only the window: the project view is taller than 1600 px."""
        size = self.send("Page.getLayoutMetrics")["cssContentSize"]
        data = self.send("Page.captureScreenshot",
                         {"format": "png", "captureBeyondViewport": True,
                          "clip": {"x": 0, "y": 0, "width": size["width"],
                                   "height": size["height"], "scale": 1}})["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self):
        try:
            os.close(self.to_browser)
        except OSError:
            pass
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
        self.log.close()


def check_console_in_browser(port, workdir, outputs, submit_more):
    browser = Chromium(workdir)
    try:
        browser.open_page("http://127.0.0.1:%d/" % port)
        browser.wait_until(
            "document.querySelector('#projects tbody tr[data-project=\"%s\"]') !== null" % PROJECT,
            "the project list")
        row_text = browser.evaluate(
            "document.querySelector('#projects tbody tr[data-project=\"%s\"]').innerText" % PROJECT)
        if "cat, dog, fox" not in row_text or "ds v1" not in row_text:
            fail("project row shows %r" % row_text)

        browser.evaluate(
            "document.querySelector('#projects tbody tr[data-project=\"%s\"]').click()" % PROJECT)
        browser.wait_until(
            "document.querySelectorAll('#annotators tbody tr').length >= %d" % NUM_ANNOTATORS,
            "the annotator table")
        title = browser.evaluate("document.getElementById('project-title').textContent")
        if title != "Project " + PROJECT:
            fail("project title is %r" % title)
        bars = browser.evaluate("document.querySelectorAll('#histogram .bar').length")
        if bars != 10:
            fail("histogram shows %r bars" % bars)
        bar_total = browser.evaluate(
            "[...document.querySelectorAll('#histogram .bar span')]"
            ".reduce((sum, s) => sum + Number(s.textContent), 0)")
        if bar_total != NUM_ITEMS:
            fail("histogram counts sum to %r" % bar_total)
        versions = browser.evaluate(
            "[...document.querySelectorAll('#versions tbody tr')].map(r => r.cells[1].textContent)")
        if versions != ["ds"]:
            fail("versions table shows %r" % versions)
        assignment = browser.evaluate("document.getElementById('assignment').textContent")
        if "2 outstanding leases" not in assignment:
            fail("assignment shows %r" % assignment)

        # Sorting: by accuracy descending (first click on a numeric column), then ascending.
        accuracy_column = ("[...document.querySelectorAll('#annotators tbody tr')]"
                           ".map(r => Number(r.cells[2].textContent))")
        browser.evaluate("document.querySelector('#annotators th[data-key=\"accuracy\"]').click()")
        descending = browser.evaluate(accuracy_column)
        if descending != sorted(descending, reverse=True):
            fail("not sorted by accuracy, descending: %r" % descending)
        browser.evaluate("document.querySelector('#annotators th[data-key=\"accuracy\"]').click()")
        ascending = browser.evaluate(accuracy_column)
        if ascending != sorted(ascending):
            fail("not sorted by accuracy, ascending: %r" % ascending)
        browser.evaluate("document.querySelector('#annotators th[data-key=\"accuracy\"]').click()")

        browser.evaluate(
            "document.querySelector('#annotators tbody tr[data-annotator=\"ann-0\"]').click()")
        browser.wait_until("document.getElementById('annotator').style.display === 'block'",
                           "the confusion matrix")
        annotator_title = browser.evaluate("document.getElementById('annotator-title').textContent")
        if not annotator_title.startswith("Annotator ann-0:"):
            fail("annotator title is %r" % annotator_title)
        cells = browser.evaluate("document.querySelectorAll('#confusion td.cell').length")
        if cells != len(CLASSES) ** 2:
            fail("confusion matrix has %r cells, want %d" % (cells, len(CLASSES) ** 2))
        headers = browser.evaluate(
            "[...document.querySelectorAll('#confusion tr:first-child th')].map(t => t.textContent)")
        if headers[1:] != CLASSES:
            fail("confusion matrix columns are %r" % headers)
        colours = browser.evaluate(
            "[...document.querySelectorAll('#confusion td.cell')].map(c => c.style.backgroundColor)")
        if any(not c.startswith("rgba(") for c in colours):
            fail("heatmap cells lack colours: %r" % colours)

        # Clicks navigate by the URL's hash, so the view can be bookmarked.
        url_hash = browser.evaluate("location.hash")
        if url_hash != "#/projects/%s/annotators/ann-0" % PROJECT:
            fail("clicking an annotator leads to %r" % url_hash)

        # Reliability on gold items: one bar and point per non-empty bin, the diagonal.
        bins = browser.evaluate("document.querySelectorAll('#reliability-chart rect.bin').length")
        points = browser.evaluate(
            "document.querySelectorAll('#reliability-chart circle.point').length")
        diagonal = browser.evaluate(
            "document.querySelectorAll('#reliability-chart line.diagonal').length")
        if bins < 1 or points != bins or diagonal != 1:
            fail("reliability diagram: %r bins, %r points, %r diagonals" % (bins, points, diagonal))
        summary = browser.evaluate("document.getElementById('reliability-summary').textContent")
        if not re.match(r"\d+ of %d gold items with labels: accuracy" % NUM_GOLD, summary):
            fail("reliability summary is %r" % summary)
        # Spam scores: ds gives none, and says so.
        spam_cells = browser.evaluate(
            "[...document.querySelectorAll('#annotators tbody tr')].map(r => r.cells[3].textContent)")
        if set(spam_cells) != {"–"}:
            fail("ds annotators show spam scores %r" % spam_cells)
        embedding = browser.evaluate("document.getElementById('embedding-summary').textContent")
        if "no annotator embeddings" not in embedding:
            fail("embedding summary for ds is %r" % embedding)

        # Periodic refresh: labels arrive after the page opened; without reloading it, the
        # ingest chart shows a rate above 0 and the resolved-share chart has several samples.
        updated = browser.evaluate("document.getElementById('updated-at').textContent")
        if not updated.startswith("Updated at "):
            fail("no 'updated at': %r" % updated)
        submit_more()
        rates = ("[...document.querySelectorAll('#ingest-chart circle.point title')]"
                 ".map(t => Number(t.textContent.split(': ').pop()))")
        browser.wait_until("%s.some(v => v > 0)" % rates, "a positive ingest rate on the chart",
                           timeout=40)
        browser.wait_until(
            "document.querySelectorAll('#resolved-chart circle.point').length >= 2",
            "two resolved-share samples", timeout=40)
        if browser.evaluate("document.querySelector('#projects tbody tr[data-project=\"%s\"]')"
                            ".cells[4].textContent" % PROJECT) == "0":
            fail("the project list was not refreshed")
        browser.evaluate("window.scrollTo(0, 0)")
        os.makedirs(outputs, exist_ok=True)
        path = os.path.join(outputs, "console.png")
        browser.screenshot(path)
        with open(path, "rb") as f:
            if f.read(8) != b"\x89PNG\r\n\x1a\n":
                fail("screenshot is not a PNG")

        # Pause: the 'updated at' line stops changing; resume refreshes at once.
        browser.evaluate("document.getElementById('refresh-toggle').click()")
        if browser.evaluate("document.getElementById('refresh-toggle').textContent") != "Resume":
            fail("the pause button does not offer to resume")
        paused_text = browser.evaluate("document.getElementById('updated-at').textContent")
        if not paused_text.endswith("(paused)"):
            fail("paused, the page says %r" % paused_text)
        # README.md: "Pause stops the refresh": paused, the page reads nothing more from the
        # server. Reads are counted from a second after the click (a refresh under way when the
        # button was clicked may still finish).
        browser.evaluate(
            "window.realFetch = window.realFetch || window.fetch;"
            "window.fetch = (...args) => {"
            "  window.pausedReads++; return window.realFetch(...args);"
            "};"
            "0")
        time.sleep(1)
        browser.evaluate("window.pausedReads = 0")
        time.sleep(6.5)  # Longer than the 5 s refresh period.
        if browser.evaluate("document.getElementById('updated-at').textContent") != paused_text:
            fail("the page refreshed while paused")
        paused_reads = browser.evaluate("window.pausedReads")
        if paused_reads != 0:
            fail("paused, the page read the server %r times" % paused_reads)
        browser.evaluate("document.getElementById('refresh-toggle').click()")
        browser.wait_until("!document.getElementById('updated-at').textContent.endsWith('(paused)')",
                           "the refresh to resume")

        # README.md "Deep links": each part of the hash is URI-encoded. Clicking ann/6 names it
        # ann%2F6 in the hash and opens its panel.
        row = "document.querySelector('#annotators tbody tr[data-annotator=\"ann/6\"]')"
        browser.wait_until("%s !== null" % row, "ann/6 in the annotator table")
        browser.evaluate("%s.click()" % row)
        browser.wait_until("location.hash === '#/projects/%s/annotators/ann%%2F6'" % PROJECT,
                           "the hash of ann/6")
        browser.wait_until("document.getElementById('annotator-title').textContent"
                           ".startsWith('Annotator ann/6:')", "the panel of ann/6")

        # Hash navigation back to the project: the annotator panel closes.
        browser.evaluate("location.hash = '#/projects/%s'" % PROJECT)
        browser.wait_until("document.getElementById('annotator').style.display === 'none'",
                           "the annotator panel to close")
        errors = browser.evaluate("document.getElementById('error').textContent")
        if errors:
            fail("the page shows an error: %r" % errors)
    finally:
        browser.close()


def check_deep_links(port, workdir, outputs):
    """Each view opened directly from its URL, in a fresh browser."""
    base = "http://127.0.0.1:%d/" % port
    browser = Chromium(workdir)
    try:
        # A project: its view without any click.
        browser.open_page(base + "#/projects/" + SPAM_PROJECT)
        browser.wait_until(
            "document.querySelectorAll('#annotators tbody tr').length >= %d" % NUM_ANNOTATORS,
            "the mace project from its deep link")
        title = browser.evaluate("document.getElementById('project-title').textContent")
        if title != "Project " + SPAM_PROJECT:
            fail("deep link opened %r" % title)
        if browser.evaluate("document.getElementById('annotator').style.display") == "block":
            fail("a project link must not open an annotator")
        selected = browser.evaluate(
            "[...document.querySelectorAll('#projects tbody tr.selected')].map(r => r.dataset.project)")
        if selected != [SPAM_PROJECT]:
            fail("the project list highlights %r" % selected)
        # mace's spam scores in their column, sortable: descending puts ann-5 above ann-0.
        browser.evaluate("document.querySelector('#annotators th[data-key=\"spam_score\"]').click()")
        order = browser.evaluate(
            "[...document.querySelectorAll('#annotators tbody tr')].map(r => r.dataset.annotator)")
        scores = browser.evaluate(
            "[...document.querySelectorAll('#annotators tbody tr')].map(r => Number(r.cells[3].textContent))")
        if scores != sorted(scores, reverse=True) or not order.index("ann-5") < order.index("ann-0"):
            fail("spam scores sorted descending: %r %r" % (order, scores))

        # An annotator of the lia project: project view, confusion matrix and embedding map.
        browser.open_page(base + "#/projects/%s/annotators/ann-3" % EMBEDDING_PROJECT)
        browser.wait_until("document.getElementById('annotator').style.display === 'block'",
                           "the annotator from its deep link")
        annotator_title = browser.evaluate("document.getElementById('annotator-title').textContent")
        if not annotator_title.startswith("Annotator ann-3:"):
            fail("annotator deep link opened %r" % annotator_title)
        if browser.evaluate("document.getElementById('project-title').textContent") != (
                "Project " + EMBEDDING_PROJECT):
            fail("the annotator's project is not shown")
        dots = browser.evaluate(
            "[...document.querySelectorAll('#embedding-map circle.annotator')]"
            ".map(c => c.dataset.annotator).sort()")
        if dots != ["ann-%d" % a for a in range(NUM_ANNOTATORS)]:
            fail("embedding map shows %r" % dots)
        # A dot is a link to its annotator.
        browser.evaluate(
            "document.querySelector('#embedding-map circle[data-annotator=\"ann-1\"]')"
            ".dispatchEvent(new MouseEvent('click', {bubbles: true}))")
        browser.wait_until("document.getElementById('annotator-title').textContent"
                           ".startsWith('Annotator ann-1:')", "the annotator of a map dot")
        browser.evaluate("document.getElementById('embedding-map').scrollIntoView()")
        path = os.path.join(outputs, "console-annotator.png")
        browser.screenshot(path)

        # An unknown annotator is reported, not silently ignored.
        browser.evaluate("location.hash = '#/projects/%s/annotators/nobody'" % EMBEDDING_PROJECT)
        browser.wait_until("document.getElementById('error').textContent.includes('nobody')",
                           "the error for an unknown annotator")
    finally:
        browser.close()


def check_console_with_a_key(server_binary, cli, workdir):
    """Authentication on: the page asks for a key, keeps it in sessionStorage and shows only
    the projects the key may read; /api/ without a key answers 401."""
    server = Server(server_binary, workdir, ["--auth=on"], name="auth-server")
    browser = None
    try:
        with open(os.path.join(server.data_dir, "admin.key")) as f:
            admin_key = f.read().strip()

        def verity(*args):
            result = subprocess.run(
                [cli, "--server=localhost:%d" % server.port, "--output=json"] + list(args),
                capture_output=True, text=True, timeout=120,
                env=dict(os.environ, VERITY_API_KEY=admin_key))
            if result.returncode != 0:
                fail("verity %s failed (%d): %s%s" % (" ".join(args), result.returncode,
                                                      result.stdout, result.stderr))
            return json.loads(result.stdout)

        verity("project", "create", "visible", "--classes=a,b")
        verity("project", "create", "hidden", "--classes=a,b")
        reader_key = verity("key", "create", "--role=reader", "--projects=visible",
                            "--name=console")["secret_key"]
        status, _, body = http_get(server.metrics_port, "/api/projects")
        if status != 401:
            fail("/api/projects without a key: %s %s" % (status, body))

        browser = Chromium(workdir)
        browser.open_page("http://127.0.0.1:%d/" % server.metrics_port)
        browser.wait_until("(document.getElementById('key-form') || {style: {}}).style.display"
                           " === 'block'", "the key prompt")
        browser.evaluate("document.getElementById('api-key').value = %s" % json.dumps(reader_key))
        browser.evaluate("document.getElementById('key-form').requestSubmit()")
        browser.wait_until(
            "document.querySelector('#projects tbody tr[data-project=\"visible\"]') !== null",
            "the key's project")
        shown = browser.evaluate(
            "[...document.querySelectorAll('#projects tbody tr')].map(r => r.dataset.project)")
        if shown != ["visible"]:
            fail("a reader of 'visible' is shown %r" % shown)
        if browser.evaluate("sessionStorage.getItem('verity_api_key')") != reader_key:
            fail("the key is not kept in sessionStorage")
        if browser.evaluate("document.getElementById('key-form').style.display") != "none":
            fail("the key prompt is still shown")
        errors = browser.evaluate("document.getElementById('error').textContent")
        if errors:
            fail("the page shows an error: %r" % errors)
    finally:
        if browser is not None:
            browser.close()
        server.stop()


def main():
    server_binary, cli = (os.path.abspath(p) for p in sys.argv[1:3])
    # Under /tmp and world-readable: the embedded PostgreSQL runs as an unprivileged user
    # when the test runs as root.
    workdir = tempfile.mkdtemp(prefix="verity-console-", dir="/tmp")
    os.chmod(workdir, 0o755)
    outputs = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR", workdir)
    server = None
    ok = False
    try:
        server = Server(server_binary, workdir)
        num_labels, gold_with_labels = load_data(cli, server, workdir)
        check_json_endpoints(server.metrics_port, num_labels, gold_with_labels)
        print("JSON endpoints: ok")
        check_console_in_browser(server.metrics_port, workdir, outputs,
                                 lambda: submit_more_labels(cli, server, workdir))
        print("browser: ok, screenshot in " + os.path.join(outputs, "console.png"))
        check_deep_links(server.metrics_port, workdir, outputs)
        print("deep links: ok, screenshot in " + os.path.join(outputs, "console-annotator.png"))
        check_console_with_a_key(server_binary, cli, workdir)
        print("browser with authentication on: ok (key prompt, one project)")
        ok = True
    finally:
        if server is not None:
            server.stop()
        if not ok:
            for name in ("server.log", "auth-server.log", "chromium.log"):
                path = os.path.join(workdir, name)
                if os.path.exists(path):
                    print("---- %s (tail) ----" % name)
                    print("".join(open(path, errors="replace").readlines()[-40:]))
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
