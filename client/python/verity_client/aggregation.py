"""crowd-kit's aggregation interface, backed by Verity.

A crowd-kit user changes one import line and keeps their code:

    # from crowdkit.aggregation import DawidSkene
    from verity_client.aggregation import DawidSkene

    labels = DawidSkene(n_iter=100).fit_predict(df)   # df: columns task, worker, label

Each class takes crowd-kit's constructor arguments (n_iter, tol and the method's own, at
crowd-kit's defaults: the class docstrings say which Verity honours) and has fit, fit_predict
and fit_predict_proba (with crowd-kit's extra arguments: MajorityVote's skills, DawidSkene's
true_labels), and its fitted attributes keep crowd-kit's names, index names and shapes:
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

    def __init__(self, *, n_iter: int, tol: float, server: Union[str, Client, None],
                 calibration: Optional[str], timeout: float) -> None:
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
        data = _crowd_frame(data)
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

    def _fit(self, client: Client, data: pd.DataFrame,
             true_labels: Optional[pd.Series] = None) -> None:
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
        if true_labels is not None and len(true_labels):
            client.add_items(project, _gold_items(true_labels, task_values, values))
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
            # Without the unused second class of a one-label frame, each true class's row is a
            # distribution over the labels given, as crowd-kit's (probas_ likewise).
            totals = confusion.sum(axis=1, keepdims=True)
            confusion = np.divide(confusion, totals, out=np.zeros_like(confusion),
                                  where=totals > 0)
            for observed in range(k):
                if (annotator, str(values[observed])) not in self._observed:
                    continue
                index.append((workers[annotator], values[observed]))
                rows.append(confusion[:, observed])
        # Columns unnamed, as crowd-kit's (so that errors_.stack().reset_index() works).
        return pd.DataFrame(np.array(rows).reshape(len(rows), k),
                            index=pd.MultiIndex.from_tuples(index, names=["worker", "label"]),
                            columns=pd.Index(values))


def _sorted_values(values: np.ndarray) -> List[Any]:
    values = list(values)
    try:
        return sorted(values)
    except TypeError:  # mixed types
        return sorted(values, key=str)


def _crowd_frame(data: pd.DataFrame) -> pd.DataFrame:
    """`data`'s task, worker and label columns without rows missing one (ValueError if a column
    is absent or no row is left)."""
    missing = [c for c in ("task", "worker", "label") if c not in data.columns]
    if missing:
        raise ValueError("data lacks column(s) %s; crowd-kit's format is task, worker, "
                         "label" % ", ".join(missing))
    data = data[["task", "worker", "label"]].dropna()
    if data.empty:
        raise ValueError("data has no labels")
    return data


def _only_default(method: str, name: str, value: Any, default: Any) -> None:
    """Verity's method has no setting for crowd-kit's `name`: only its default is taken, as a
    description of what Verity's fit does; another value raises ValueError naming it."""
    if value is default or value == default:
        return
    raise ValueError("%s(%s=%r): Verity's %s does not take this setting; only crowd-kit's "
                     "default %r is accepted" % (method, name, value, method, default))


def _weighted_vote(data: pd.DataFrame, skills: pd.Series, on_missing_skill: str,
                   default_skill: Optional[float]) -> pd.DataFrame:
    """crowd-kit's MajorityVote with skills: each label weighs its worker's skill; probas_ rows
    are the normalised sums over the labels of the data, tasks in order of first appearance.
    on_missing_skill for a worker without a skill: "error" (ValueError naming it), "ignore"
    (its labels are left out), "value" (default_skill)."""
    weight = data["worker"].map(skills)
    absent = weight.isna()
    if absent.any():
        if on_missing_skill == "error":
            raise ValueError("skills has no skill of worker(s) %s (on_missing_skill='error')"
                             % sorted(map(str, data["worker"][absent].unique()))[:5])
        if on_missing_skill == "ignore":
            data, weight = data[~absent], weight[~absent]
        elif on_missing_skill == "value":
            if default_skill is None:
                raise ValueError("on_missing_skill='value' needs default_skill")
            weight = weight.fillna(default_skill)
        else:
            raise ValueError("on_missing_skill must be 'error', 'ignore' or 'value', got %r"
                             % (on_missing_skill,))
    tasks = pd.unique(data["task"])
    values = _sorted_values(data["label"].unique())
    scores = (pd.DataFrame({"task": data["task"], "label": data["label"],
                            "weight": weight.astype(np.float64)})
              .groupby(["task", "label"], sort=False)["weight"].sum()
              .unstack("label", fill_value=0.0)
              .reindex(index=tasks, columns=values, fill_value=0.0))
    totals = scores.sum(axis=1)
    probas = scores.div(totals.where(totals != 0, 1.0), axis=0)
    probas.index.name, probas.columns.name = "task", "label"
    return probas


def _most_probable(probas: pd.DataFrame) -> pd.Series:
    """The label of highest probability per task, ties toward the first column (the lowest
    label), as crowd-kit's get_most_probable_labels."""
    return probas.idxmax(axis="columns").rename("agg_label")


def _agreement(data: pd.DataFrame, labels: pd.Series) -> pd.Series:
    """Each worker's share of labels equal to the task's aggregate (crowd-kit's get_accuracy)."""
    agree = (data["label"].to_numpy() == data["task"].map(labels).to_numpy()).astype(np.float64)
    skills = pd.Series(agree, index=data["worker"].to_numpy()).groupby(level=0, sort=False).mean()
    skills.index.name = "worker"
    return skills.rename("skill")


def _gold_items(true_labels: pd.Series, task_values: pd.Index, values: List[Any]) -> pd.DataFrame:
    """The add_items frame of crowd-kit's true_labels (task -> label): the tasks of the data
    only, as their generated ids "t<n>", gold as the class index of the label."""
    position = {task: n for n, task in enumerate(task_values)}
    index = {value: k for k, value in enumerate(values)}
    items, gold = [], []
    for task, label in true_labels.dropna().items():
        if task not in position:
            continue  # crowd-kit's fit reads true labels of the data's tasks only.
        if label not in index:
            raise ValueError("true_labels[%r] = %r is none of the data's labels %r"
                             % (task, label, values))
        items.append("t%d" % position[task])
        gold.append(index[label])
    return pd.DataFrame({"item": items, "gold": gold})


class MajorityVote(_VerityAggregator):
    """crowd-kit's MajorityVote: labels_, probas_, skills_ (each worker's agreement with the
    majority). fit(data, skills) is crowd-kit's weighted vote: computed here from `skills`
    (workers without one as `on_missing_skill` says: "error", "ignore", or "value" for
    `default_skill`), no server needed."""

    _method = "mv"

    def __init__(self, default_skill: Optional[float] = None, on_missing_skill: str = "error",
                 *, n_iter: int = 100, tol: float = 1e-5,
                 server: Union[str, Client, None] = None, calibration: Optional[str] = None,
                 timeout: float = 600.0) -> None:
        # n_iter and tol (keyword only: crowd-kit's MajorityVote has neither) go to the
        # project's settings, as for every class; the vote does not iterate.
        super().__init__(n_iter=n_iter, tol=tol, server=server, calibration=calibration,
                         timeout=timeout)
        self.default_skill = default_skill
        self.on_missing_skill = on_missing_skill

    def fit(self, data: pd.DataFrame, skills: Optional[pd.Series] = None) -> "MajorityVote":
        data = _crowd_frame(data)
        if skills is None:
            with self._client() as client:
                self._fit(client, data)
            self.skills_ = _agreement(data, self.labels_)
            return self
        self.probas_ = _weighted_vote(data, skills, self.on_missing_skill, self.default_skill)
        self.labels_ = _most_probable(self.probas_)
        self.skills_ = _agreement(data, self.labels_)
        return self

    def fit_predict(self, data: pd.DataFrame, skills: Optional[pd.Series] = None) -> pd.Series:
        """fit(data, skills), then labels_."""
        return self.fit(data, skills).labels_

    def fit_predict_proba(self, data: pd.DataFrame,
                          skills: Optional[pd.Series] = None) -> pd.DataFrame:
        """fit(data, skills), then probas_."""
        return self.fit(data, skills).probas_


class _SkillVote(_VerityAggregator):
    """crowd-kit's Wawa and ZeroBasedSkill: skills_ from the fit; predict and predict_proba
    are the majority vote of another frame weighted by them, as crowd-kit's."""

    def _set_annotator_attributes(self, profiles, workers, values):
        self.skills_ = self._skills(profiles, workers)

    def predict(self, data: pd.DataFrame) -> pd.Series:
        """labels_ of the vote of `data` weighted by the fitted skills_."""
        self._apply(data)
        return self.labels_

    def predict_proba(self, data: pd.DataFrame) -> pd.DataFrame:
        """probas_ of the vote of `data` weighted by the fitted skills_."""
        self._apply(data)
        return self.probas_

    def _apply(self, data: pd.DataFrame) -> None:
        if getattr(self, "skills_", None) is None:
            raise ValueError("%s is not fitted: call fit first" % type(self).__name__)
        self.probas_ = _weighted_vote(_crowd_frame(data), self.skills_, "error", None)
        self.labels_ = _most_probable(self.probas_)


class Wawa(_SkillVote):
    """crowd-kit's Wawa (worker agreement with aggregate): labels_, probas_, skills_."""

    _method = "wawa"

    def __init__(self, *, n_iter: int = 100, tol: float = 1e-5,
                 server: Union[str, Client, None] = None, calibration: Optional[str] = None,
                 timeout: float = 600.0) -> None:
        # n_iter and tol: keyword only (crowd-kit's Wawa has neither), as MajorityVote's.
        super().__init__(n_iter=n_iter, tol=tol, server=server, calibration=calibration,
                         timeout=timeout)


class ZeroBasedSkill(_SkillVote):
    """crowd-kit's ZeroBasedSkill: labels_, probas_, skills_. Verity's runs crowd-kit's
    learning-rate schedule (models/zero_based_skill.h) for n_iter steps; lr_init,
    lr_steps_to_reduce, lr_reduce_factor and eps are that schedule's, other values are refused."""

    _method = "zero_based_skill"

    def __init__(self, n_iter: int = 100, lr_init: float = 1.0, lr_steps_to_reduce: int = 20,
                 lr_reduce_factor: float = 0.5, eps: float = 1e-5, tol: float = 1e-5, *,
                 server: Union[str, Client, None] = None, calibration: Optional[str] = None,
                 timeout: float = 600.0) -> None:
        for name, value, default in (("lr_init", lr_init, 1.0),
                                     ("lr_steps_to_reduce", lr_steps_to_reduce, 20),
                                     ("lr_reduce_factor", lr_reduce_factor, 0.5),
                                     ("eps", eps, 1e-5)):
            _only_default("ZeroBasedSkill", name, value, default)
        super().__init__(n_iter=n_iter, tol=tol, server=server, calibration=calibration,
                         timeout=timeout)
        self.lr_init, self.lr_steps_to_reduce = lr_init, lr_steps_to_reduce
        self.lr_reduce_factor, self.eps = lr_reduce_factor, eps


class MMSR(_VerityAggregator):
    """crowd-kit's MMSR (matrix mean-subsequence-reduced): labels_, probas_, skills_, scores_
    (task x label: Verity's posteriors, whose argmax is labels_), and fit_predict_score.
    Verity's MMSR always iterates as crowd-kit's does with its defaults, n_iter 10000 and tol
    1e-10 (models/mmsr.h reads no iteration setting): other values are kept but change nothing,
    and the constructor warns (UserWarning). random_state is that of crowd-kit's start, which
    Verity draws with the same generator and seed 0: other seeds are refused."""

    _method = "mmsr"

    def __init__(self, n_iter: int = 10000, tol: float = 1e-10, random_state: int = 0, *,
                 server: Union[str, Client, None] = None, calibration: Optional[str] = None,
                 timeout: float = 600.0) -> None:
        if (n_iter, tol) != (10000, 1e-10):
            warnings.warn("MMSR(n_iter=%r, tol=%r): Verity's MMSR runs crowd-kit's default "
                          "n_iter=10000, tol=1e-10 whatever is given" % (n_iter, tol),
                          UserWarning, stacklevel=2)
        _only_default("MMSR", "random_state", random_state, 0)
        super().__init__(n_iter=n_iter, tol=tol, server=server, calibration=calibration,
                         timeout=timeout)
        self.random_state = random_state

    def _set_annotator_attributes(self, profiles, workers, values):
        self.skills_ = self._skills(profiles, workers)
        self.scores_ = self.probas_

    def fit_predict_score(self, data: pd.DataFrame) -> pd.DataFrame:
        """fit(data), then scores_."""
        return self.fit(data).scores_


class DawidSkene(_VerityAggregator):
    """crowd-kit's DawidSkene: labels_, probas_, priors_, errors_. fit's true_labels (task ->
    label) are gold items of the fit: clamped to their label. Verity starts EM from the soft
    majority vote: initial_error_strategy and initial_error take crowd-kit's default None."""

    _method = "ds"

    def __init__(self, n_iter: int = 100, tol: float = 1e-5,
                 initial_error_strategy: Optional[str] = None, *,
                 server: Union[str, Client, None] = None, calibration: Optional[str] = None,
                 timeout: float = 600.0) -> None:
        _only_default(type(self).__name__, "initial_error_strategy", initial_error_strategy,
                      None)
        super().__init__(n_iter=n_iter, tol=tol, server=server, calibration=calibration,
                         timeout=timeout)
        self.initial_error_strategy = initial_error_strategy

    def _set_annotator_attributes(self, profiles, workers, values):
        self.errors_ = self._errors(profiles, workers, values)
        self.priors_ = self.probas_.mean(axis=0).rename("prior")

    def fit(self, data: pd.DataFrame, true_labels: Optional[pd.Series] = None,
            initial_error: Optional[pd.DataFrame] = None) -> "DawidSkene":
        if initial_error is not None:
            raise ValueError("DawidSkene.fit(initial_error=...): Verity's DawidSkene starts EM "
                             "from the soft majority vote; only None is accepted")
        data = _crowd_frame(data)
        with self._client() as client:
            self._fit(client, data, true_labels)
        return self

    def fit_predict(self, data: pd.DataFrame, true_labels: Optional[pd.Series] = None,
                    initial_error: Optional[pd.DataFrame] = None) -> pd.Series:
        """fit(data, true_labels, initial_error), then labels_."""
        return self.fit(data, true_labels, initial_error).labels_

    def fit_predict_proba(self, data: pd.DataFrame, true_labels: Optional[pd.Series] = None,
                          initial_error: Optional[pd.DataFrame] = None) -> pd.DataFrame:
        """fit(data, true_labels, initial_error), then probas_."""
        return self.fit(data, true_labels, initial_error).probas_


class OneCoinDawidSkene(DawidSkene):
    """crowd-kit's OneCoinDawidSkene: labels_, probas_, priors_, errors_, skills_."""

    _method = "one_coin"

    def _set_annotator_attributes(self, profiles, workers, values):
        super()._set_annotator_attributes(profiles, workers, values)
        self.skills_ = self._skills(profiles, workers)


class GLAD(_VerityAggregator):
    """crowd-kit's GLAD: labels_, probas_, priors_, alphas_ (annotator skill: Verity's accuracy,
    not GLAD's unbounded alpha). No betas_: Verity does not serve GLAD's item difficulties.
    Verity's GLAD has its own priors and M-step (models/glad.h): labels_priors,
    alphas_priors_mean, betas_priors_mean, m_step_max_iter and m_step_tol take crowd-kit's
    defaults only; silent (a progress bar) changes nothing."""

    _method = "glad"

    def __init__(self, n_iter: int = 100, tol: float = 1e-5, silent: bool = True,
                 labels_priors: Optional[pd.Series] = None,
                 alphas_priors_mean: Optional[pd.Series] = None,
                 betas_priors_mean: Optional[pd.Series] = None, m_step_max_iter: int = 25,
                 m_step_tol: float = 1e-2, *, server: Union[str, Client, None] = None,
                 calibration: Optional[str] = None, timeout: float = 600.0) -> None:
        for name, value in (("labels_priors", labels_priors),
                            ("alphas_priors_mean", alphas_priors_mean),
                            ("betas_priors_mean", betas_priors_mean)):
            if value is not None:
                _only_default("GLAD", name, "given", None)
        _only_default("GLAD", "m_step_max_iter", m_step_max_iter, 25)
        _only_default("GLAD", "m_step_tol", m_step_tol, 1e-2)
        super().__init__(n_iter=n_iter, tol=tol, server=server, calibration=calibration,
                         timeout=timeout)
        self.silent, self.labels_priors = silent, labels_priors
        self.alphas_priors_mean, self.betas_priors_mean = alphas_priors_mean, betas_priors_mean
        self.m_step_max_iter, self.m_step_tol = m_step_max_iter, m_step_tol

    def _set_annotator_attributes(self, profiles, workers, values):
        self.alphas_ = self._skills(profiles, workers).rename("alpha")
        # As crowd-kit's GLAD, whose priors_ index has no name (its DawidSkene's is "label").
        self.priors_ = self.probas_.mean(axis=0).rename("prior").rename_axis(None)


class MACE(_VerityAggregator):
    """crowd-kit's MACE: labels_, probas_, skills_ (accuracy under the fitted model). Verity's
    MACE is one deterministic EM from the soft majority vote with crowd-kit's priors (alpha =
    beta = 0.5; models/mace.h) for n_iter iterations: n_restarts, random_state and verbose
    change nothing; method, smoothing, default_noise, alpha and beta take crowd-kit's defaults
    only."""

    _method = "mace"

    def __init__(self, n_restarts: int = 10, n_iter: int = 50, method: str = "vb",
                 smoothing: float = 0.1, default_noise: float = 0.5, alpha: float = 0.5,
                 beta: float = 0.5, random_state: int = 0, verbose: int = 0, tol: float = 1e-5,
                 *, server: Union[str, Client, None] = None, calibration: Optional[str] = None,
                 timeout: float = 600.0) -> None:
        for name, value, default in (("method", method, "vb"), ("smoothing", smoothing, 0.1),
                                     ("default_noise", default_noise, 0.5),
                                     ("alpha", alpha, 0.5), ("beta", beta, 0.5)):
            _only_default("MACE", name, value, default)
        super().__init__(n_iter=n_iter, tol=tol, server=server, calibration=calibration,
                         timeout=timeout)
        self.n_restarts, self.method, self.smoothing = n_restarts, method, smoothing
        self.default_noise, self.alpha, self.beta = default_noise, alpha, beta
        self.random_state, self.verbose = random_state, verbose

    def _set_annotator_attributes(self, profiles, workers, values):
        self.skills_ = self._skills(profiles, workers)


class KOS(_VerityAggregator):
    """crowd-kit's KOS (binary labels only; ValueError for more, before any project is made):
    labels_, probas_. Verity's KOS starts from fixed messages: random_state changes nothing."""

    _method = "kos"

    def __init__(self, n_iter: int = 100, random_state: int = 0, tol: float = 1e-5, *,
                 server: Union[str, Client, None] = None, calibration: Optional[str] = None,
                 timeout: float = 600.0) -> None:
        super().__init__(n_iter=n_iter, tol=tol, server=server, calibration=calibration,
                         timeout=timeout)
        self.random_state = random_state

    def fit(self, data: pd.DataFrame) -> "KOS":
        data = _crowd_frame(data)
        labels = data["label"].unique()
        if len(labels) > 2:
            raise ValueError("KOS is for binary labels only; data has %d labels: %r"
                             % (len(labels), _sorted_values(labels)[:5]))
        with self._client() as client:
            self._fit(client, data)
        return self
