"""crowd-kit's aggregation interface, backed by Verity.

A crowd-kit user changes one import line and keeps their code:

    # from crowdkit.aggregation import DawidSkene
    from verity_client.aggregation import DawidSkene

    labels = DawidSkene(n_iter=100).fit_predict(df)   # df: columns task, worker, label

Each class takes crowd-kit's constructor arguments (n_iter, tol) and has fit, fit_predict and
fit_predict_proba, and its fitted attributes keep crowd-kit's names, index names and shapes:
labels_ (Series "agg_label" indexed by "task"), probas_ (DataFrame indexed by "task", one column
per label), and, where crowd-kit has them, errors_ (DataFrame indexed by (worker, observed
label), one column per true label), priors_ (Series by label) and skills_ (Series "skill"
indexed by "worker": the annotator's accuracy under Verity's fitted model).

Where the fit runs: `server=` an address ("host:port") or a verity_client.Client; else the
server of an enclosing `with verity_client.aggregation.serve(...)` block; else a private
LocalServer (verity_client.local: a verity_server on its own embedded PostgreSQL) started for
that fit alone and removed after it. Each fit creates a new project named
"crowdkit-<method>-<random>" on the server (Verity has no project deletion; on a shared server
these stay). The labels are the distinct values of the `label` column, sorted, sent as their
str(); tasks and workers may be any hashable values: they are sent as generated ids and come
back as the original values.

Differences from crowd-kit: the fit is Verity's method of the same name (models/), so results
agree with crowd-kit where both methods reach the same accuracy, not bit for bit; probas_ are
Verity's served posteriors, calibrated by default (calibration="none" gives the model's own).
Verity keeps one label per (task, worker): where `data` repeats a pair, the last row counts
and the others are revisions, while crowd-kit counts every row as a vote; fit warns
(UserWarning) when that happens.
"""

import contextlib
import threading
import uuid
import warnings
from typing import Any, Dict, Iterator, List, Optional, Union

import numpy as np
import pandas as pd

from verity.v1 import projects_pb2
from verity_client import frames
from verity_client.client import Client
from verity_client.local import LocalServer

__all__ = ["DawidSkene", "GLAD", "KOS", "MACE", "MMSR", "MajorityVote", "OneCoinDawidSkene",
           "Wawa", "ZeroBasedSkill", "serve"]

_state = threading.local()


@contextlib.contextmanager
def serve(server: Union[str, Client, None] = None, *, binary: Optional[str] = None,
          timeout: float = 600.0) -> Iterator[Client]:
    """Within the block, aggregators without their own `server` fit on this one.

    Args:
      server: "host:port" or a Client; None starts one LocalServer for the whole block
        (`binary`: its verity_server, see verity_client.local.find_server_binary).
      timeout: deadline of each RPC in seconds (a fit's TrainModel included).
    Yields the Client the aggregators use.
    """
    with contextlib.ExitStack() as stack:
        if isinstance(server, Client):
            client = server
        else:
            if server is None:
                server = stack.enter_context(LocalServer(binary=binary)).address
            client = stack.enter_context(Client(server, timeout=timeout))
        previous = getattr(_state, "client", None)
        _state.client = client
        try:
            yield client
        finally:
            _state.client = previous


class _VerityAggregator:
    """One crowd-kit classification aggregator: fit() runs Verity's `_method` on the data."""

    _method = ""

    def __init__(self, n_iter: int = 100, tol: float = 1e-5, *,
                 server: Union[str, Client, None] = None, calibration: Optional[str] = None,
                 timeout: float = 600.0) -> None:
        if int(n_iter) < 1:
            raise ValueError("n_iter must be >= 1, got %r" % (n_iter,))
        if not 0 <= float(tol) < 1:
            raise ValueError("tol must be in [0, 1), got %r" % (tol,))
        self.n_iter = int(n_iter)
        self.tol = float(tol)
        self.server = server
        self.calibration = calibration
        self.timeout = timeout
        self.labels_: Optional[pd.Series] = None
        self.probas_: Optional[pd.DataFrame] = None
        self.project_: Optional[str] = None

    # --- crowd-kit's methods ----------------------------------------------------------------

    def fit(self, data: pd.DataFrame) -> "_VerityAggregator":
        """Fits on `data` (columns task, worker, label; other columns are ignored)."""
        missing = [c for c in ("task", "worker", "label") if c not in data.columns]
        if missing:
            raise ValueError("data lacks column(s) %s; crowd-kit's format is task, worker, "
                             "label" % ", ".join(missing))
        data = data.dropna(subset=["task", "worker", "label"])
        if data.empty:
            raise ValueError("data has no labels")
        with self._client() as client:
            self._fit(client, data)
        return self

    def fit_predict(self, data: pd.DataFrame) -> pd.Series:
        """fit(data), then labels_."""
        return self.fit(data).labels_

    def fit_predict_proba(self, data: pd.DataFrame) -> pd.DataFrame:
        """fit(data), then probas_."""
        return self.fit(data).probas_

    # --- the fit ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _client(self) -> Iterator[Client]:
        if isinstance(self.server, Client):
            yield self.server
        elif self.server is not None:
            with Client(self.server, timeout=self.timeout) as client:
                yield client
        elif getattr(_state, "client", None) is not None:
            yield _state.client
        else:
            with serve(None, timeout=self.timeout) as client:
                yield client

    def _fit(self, client: Client, data: pd.DataFrame) -> None:
        values = _sorted_values(data["label"].unique())
        names = [str(v) for v in values]
        if len(set(names)) != len(names):
            raise ValueError("labels %r are not distinct as strings" % (values,))
        for value, name in zip(values, names):
            # Verity's class names (projects.proto): 1 to 128 bytes, no control character.
            if not 1 <= len(name.encode("utf-8")) <= 128 or any(
                    ord(c) < 0x20 or ord(c) == 0x7f for c in name):
                raise ValueError("label %r: as a string it must be 1 to 128 bytes without "
                                 "control characters (Verity sends labels as class names)"
                                 % (value,))
        if len(names) < 2:
            # Verity needs two classes; a second, unused one keeps every label the answer.
            names.append("__verity_unused__")
        # Ids go to the server as "t<n>" and "w<n>" (Verity's ids are UTF-8 text of at most 256
        # bytes without control characters; crowd-kit's may be anything, numbers and NaN
        # included) and come back as the original values.
        task_codes, task_values = pd.factorize(data["task"])
        worker_codes, worker_values = pd.factorize(data["worker"])
        repeats = int(pd.Series(list(zip(task_codes, worker_codes))).duplicated().sum())
        if repeats:
            warnings.warn("%d rows repeat a (task, worker) pair of an earlier row: Verity keeps "
                          "the last label of each pair, crowd-kit counts every row" % repeats,
                          UserWarning, stacklevel=3)
        tasks = {"t%d" % i: v for i, v in enumerate(task_values)}
        workers = {"w%d" % i: v for i, v in enumerate(worker_values)}
        project = "crowdkit-%s-%s" % (self._method, uuid.uuid4().hex[:12])
        settings = projects_pb2.ProjectSettings()
        settings.model.max_iterations = self.n_iter
        settings.model.tolerance = self.tol
        if self.calibration is not None:
            settings.model.calibration = self.calibration
        client.create_project(project, names, method=self._method, settings=settings)
        worker_ids = np.char.add("w", worker_codes.astype(str))
        labels = data["label"].map(str).to_numpy()
        frame = pd.DataFrame({"task": np.char.add("t", task_codes.astype(str)),
                              "worker": worker_ids, "label": labels})
        # The largest batches the API takes: a one-shot load, acked batch by batch.
        result = client.submit(project, frame, batch_size=10000)
        if result.rejections:
            first = result.rejections[0]
            raise ValueError("the server refused %d of the labels; row %d: %s"
                             % (len(result.rejections), first.row, first.reason))
        client.train(project)
        self.project_ = project
        posteriors = client.posteriors(project)
        # tupleize_cols=False: tuple tasks stay values of one level, not a MultiIndex.
        index = pd.Index([tasks[t] for t in posteriors["item"]], name="task",
                         tupleize_cols=False)
        columns = pd.Index(values, name="label")
        probas = posteriors[frames.class_columns(names)[:len(values)]].to_numpy(dtype=np.float64)
        if len(values) < len(names):
            # Without the unused second class (it keeps a little of each posterior's mass), a
            # row of probas_ sums to 1 as crowd-kit's do.
            totals = probas.sum(axis=1, keepdims=True)
            probas = np.divide(probas, totals, out=np.ones_like(probas), where=totals > 0)
        self.probas_ = pd.DataFrame(probas, index=index, columns=columns)
        by_name = dict(zip(names, values))
        self.labels_ = pd.Series([by_name.get(n, n) for n in posteriors["label"]], index=index,
                                 name="agg_label")
        profiles = client.annotators(project)
        # crowd-kit's errors_ has a row for each (worker, label) pair the data holds.
        self._observed = set(zip(worker_ids, labels))
        self._set_annotator_attributes(profiles, workers, values)

    def _set_annotator_attributes(self, profiles: pd.DataFrame, workers: Dict[str, Any],
                                  values: List[Any]) -> None:
        """Sets the method's crowd-kit attributes from Verity's annotator profiles."""

    # helpers for the subclasses
    @staticmethod
    def _skills(profiles: pd.DataFrame, workers: Dict[str, Any]) -> pd.Series:
        return pd.Series(profiles["accuracy"].to_numpy(dtype=np.float64),
                         index=pd.Index([workers[a] for a in profiles["annotator"]],
                                        name="worker", tupleize_cols=False), name="skill")

    def _errors(self, profiles: pd.DataFrame, workers: Dict[str, Any],
                values: List[Any]) -> pd.DataFrame:
        k = len(values)
        rows, index = [], []
        for annotator, confusion in zip(profiles["annotator"], profiles["confusion"]):
            confusion = np.asarray(confusion, dtype=np.float64)[:k, :k]  # [true, observed]
            for observed in range(k):
                if (annotator, str(values[observed])) not in self._observed:
                    continue
                index.append((workers[annotator], values[observed]))
                rows.append(confusion[:, observed])
        return pd.DataFrame(np.array(rows).reshape(len(rows), k),
                            index=pd.MultiIndex.from_tuples(index, names=["worker", "label"]),
                            columns=pd.Index(values, name="label"))


def _sorted_values(values: np.ndarray) -> List[Any]:
    values = list(values)
    try:
        return sorted(values)
    except TypeError:  # mixed types
        return sorted(values, key=str)


class MajorityVote(_VerityAggregator):
    """crowd-kit's MajorityVote: labels_, probas_, skills_ (agreement with the majority)."""

    _method = "mv"

    def _set_annotator_attributes(self, profiles, workers, values):
        self.skills_ = self._skills(profiles, workers)


class Wawa(MajorityVote):
    """crowd-kit's Wawa (worker agreement with aggregate): labels_, probas_, skills_."""

    _method = "wawa"


class ZeroBasedSkill(MajorityVote):
    """crowd-kit's ZeroBasedSkill: labels_, probas_, skills_."""

    _method = "zero_based_skill"


class MMSR(MajorityVote):
    """crowd-kit's MMSR (matrix mean-subsequence-reduced): labels_, probas_, skills_."""

    _method = "mmsr"


class DawidSkene(_VerityAggregator):
    """crowd-kit's DawidSkene: labels_, probas_, priors_, errors_."""

    _method = "ds"

    def _set_annotator_attributes(self, profiles, workers, values):
        self.errors_ = self._errors(profiles, workers, values)
        self.priors_ = self.probas_.mean(axis=0).rename("prior")


class OneCoinDawidSkene(DawidSkene):
    """crowd-kit's OneCoinDawidSkene: labels_, probas_, priors_, errors_, skills_."""

    _method = "one_coin"

    def _set_annotator_attributes(self, profiles, workers, values):
        super()._set_annotator_attributes(profiles, workers, values)
        self.skills_ = self._skills(profiles, workers)


class GLAD(_VerityAggregator):
    """crowd-kit's GLAD: labels_, probas_, priors_, alphas_ (annotator skill: Verity's accuracy,
    not GLAD's unbounded alpha). No betas_: Verity does not serve GLAD's item difficulties."""

    _method = "glad"

    def _set_annotator_attributes(self, profiles, workers, values):
        self.alphas_ = self._skills(profiles, workers).rename("alpha")
        # As crowd-kit's GLAD, whose priors_ index has no name (its DawidSkene's is "label").
        self.priors_ = self.probas_.mean(axis=0).rename("prior").rename_axis(None)


class MACE(_VerityAggregator):
    """crowd-kit's MACE: labels_, probas_, skills_ (accuracy under the fitted model)."""

    _method = "mace"

    def _set_annotator_attributes(self, profiles, workers, values):
        self.skills_ = self._skills(profiles, workers)


class KOS(_VerityAggregator):
    """crowd-kit's KOS (binary labels only): labels_, probas_."""

    _method = "kos"
