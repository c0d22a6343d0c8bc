"""Client: the Verity v1 API over one gRPC channel, with pandas in and out.

Every method is one RPC (or one RPC per page or chunk, where noted) with a deadline of the
client's `timeout` seconds per RPC and the client's API key, if any, as `authorization: Bearer
<key>` metadata; a non-OK status raises VerityError carrying the gRPC status code and the
server's message. Inputs that cannot be sent at all (a missing column, a label
that is not a class name) raise ValueError before anything is sent.

Thread safety: a Client may be shared by threads (gRPC channels and stubs are thread-safe);
submit() blocks its calling thread until every batch is acknowledged.
"""

import dataclasses
import datetime
import ipaddress
import json
import math
import os
import socket
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import grpc
import numpy as np
import pandas as pd
from google.protobuf import json_format

from verity.v1 import assignment_pb2
from verity.v1 import assignment_pb2_grpc
from verity.v1 import common_pb2
from verity.v1 import ingest_pb2
from verity.v1 import ingest_pb2_grpc
from verity.v1 import keys_pb2
from verity.v1 import keys_pb2_grpc
from verity.v1 import models_pb2
from verity.v1 import models_pb2_grpc
from verity.v1 import projects_pb2
from verity.v1 import projects_pb2_grpc
from verity.v1 import truth_pb2
from verity.v1 import truth_pb2_grpc

from verity_client import frames
from verity_client.errors import RETRYABLE_CODES, VerityError, status_code

# The largest message the client accepts (a page of posteriors or profiles over many classes
# can exceed gRPC's 4 MiB default). Same as the C++ client.
MAX_RECEIVE_MESSAGE_BYTES = 256 << 20

# Items per AddItems call and ids per GetPosteriors call (the API's limit).
MAX_ITEMS_PER_CALL = 10000

# The server's largest response, and the longest item id it accepts (server/api/validation.h).
_SERVER_RESPONSE_LIMIT = 16 << 20
_MAX_ID_BYTES = 256

# Truth methods by the short names the server and the CLI use.
METHODS = {
    "mv": common_pb2.TRUTH_METHOD_MAJORITY_VOTE,
    "ds": common_pb2.TRUTH_METHOD_DAWID_SKENE,
    "one_coin": common_pb2.TRUTH_METHOD_ONE_COIN,
    "glad": common_pb2.TRUTH_METHOD_GLAD,
    "lia": common_pb2.TRUTH_METHOD_LIA,
    "crowdlayer": common_pb2.TRUTH_METHOD_CROWDLAYER,
    "trace_reg": common_pb2.TRUTH_METHOD_TRACE_REG,
    "conal": common_pb2.TRUTH_METHOD_CONAL,
    "cmm": common_pb2.TRUTH_METHOD_CMM,
    "wawa": common_pb2.TRUTH_METHOD_WAWA,
    "zero_based_skill": common_pb2.TRUTH_METHOD_ZERO_BASED_SKILL,
    "kos": common_pb2.TRUTH_METHOD_KOS,
    "mace": common_pb2.TRUTH_METHOD_MACE,
    "bwa": common_pb2.TRUTH_METHOD_BWA,
    "ibcc": common_pb2.TRUTH_METHOD_IBCC,
    "ebcc": common_pb2.TRUTH_METHOD_EBCC,
    "mmsr": common_pb2.TRUTH_METHOD_MMSR,
    "auto": common_pb2.TRUTH_METHOD_AUTO,
}
# API key roles by the names the server and the CLI use (keys.proto: each role may do what the
# one before it may, and more).
ROLES = {
    "reader": keys_pb2.ROLE_READER,
    "writer": keys_pb2.ROLE_WRITER,
    "admin": keys_pb2.ROLE_ADMIN,
}
_ROLE_NAMES = {value: name for name, value in ROLES.items()}

# The environment variable the API key is read from when the constructor is given none (the
# CLI's too).
API_KEY_VARIABLE = "VERITY_API_KEY"

_METHOD_NAMES = {value: name for name, value in METHODS.items()}
_METHOD_NAMES[common_pb2.TRUTH_METHOD_UNSPECIFIED] = "default"


def _method_name(value):
    return _METHOD_NAMES.get(value, "unknown(%d)" % value)


def _time(message, field):
    """A Timestamp field as an aware UTC datetime; None when unset."""
    if not message.HasField(field):
        return None
    return getattr(message, field).ToDatetime(tzinfo=datetime.timezone.utc)


@dataclasses.dataclass(frozen=True)
class Project:
    """A project as the server describes it (counts are as of the call)."""
    name: str
    classes: Tuple[str, ...]
    method: str  # "ds", "mv", ... or "default" (the server's default, Dawid-Skene).
    item_feature_dim: int
    annotator_feature_dim: int
    num_items: int
    num_annotators: int
    num_labels: int
    created_at: Optional[datetime.datetime]
    settings: projects_pb2.ProjectSettings  # The full settings message.
    # Revised and stale labels kept in history: what settings.limits.max_revisions bounds.
    num_revisions: int = 0

    @classmethod
    def from_proto(cls, p):
        return cls(name=p.name, classes=tuple(p.classes),
                   method=_method_name(p.settings.model.method),
                   item_feature_dim=p.item_feature_dim,
                   annotator_feature_dim=p.annotator_feature_dim,
                   num_items=p.num_items, num_annotators=p.num_annotators,
                   num_labels=p.num_labels, created_at=_time(p, "created_at"),
                   settings=p.settings, num_revisions=p.num_revisions)


@dataclasses.dataclass(frozen=True)
class ModelVersion:
    """One immutable fit of a project's truth model."""
    version: int
    method: str
    watermark: int
    num_labels: int
    log_likelihood: float
    iterations: int
    duration_ms: float
    created_at: Optional[datetime.datetime]

    @classmethod
    def from_proto(cls, v):
        return cls(version=v.version, method=_method_name(v.method), watermark=v.watermark,
                   num_labels=v.num_labels, log_likelihood=v.log_likelihood,
                   iterations=v.iterations, duration_ms=v.duration_ms,
                   created_at=_time(v, "created_at"))


@dataclasses.dataclass(frozen=True)
class ModelStatus:
    """GetModelStatus: the method of the next fit, the current version (None before the first
    fit) and how many labels arrived since it. `calibration` (None when the project serves raw
    posteriors) is the map from the fitted posteriors to the served ones: a dict with kind,
    temperature, source ("crowd_labels", "gold" or "none"), gold_items, gold_ece_raw, gold_ece.
    For method "auto", `chosen_method` is the method the served version uses and
    `choice_reason` the criterion and its values per candidate (both "" otherwise)."""
    method: str
    current_version: Optional[ModelVersion]
    num_labels: int
    labels_since_version: int
    training: bool
    calibration: Optional[dict] = None
    chosen_method: str = ""
    choice_reason: str = ""


@dataclasses.dataclass(frozen=True)
class ApiKey:
    """An API key as the server describes it; never its secret."""
    key_id: str                  # Public id, 16 hex digits; part of the key itself.
    name: str                    # Free text given at creation.
    role: str                    # "reader", "writer" or "admin".
    projects: Tuple[str, ...]    # Projects it may touch; () = every project.
    created_at: Optional[datetime.datetime]
    revoked_at: Optional[datetime.datetime]  # None while the key is valid.
    created_by: str              # key_id of the admin key that created it; "" = bootstrap.

    @classmethod
    def from_proto(cls, k):
        return cls(key_id=k.key_id, name=k.name,
                   role=_ROLE_NAMES.get(k.role, "unknown(%d)" % k.role),
                   projects=tuple(k.projects), created_at=_time(k, "created_at"),
                   revoked_at=_time(k, "revoked_at"), created_by=k.created_by)


@dataclasses.dataclass(frozen=True)
class CreatedKey:
    """create_key()'s result. secret_key is the key to hand to its user: the server keeps only
    a salted hash of it and never shows it again."""
    secret_key: str   # "vk_<key_id>_<64 hex digits>".
    key: ApiKey

    def __repr__(self):
        # Keeps the secret out of logs and tracebacks that print the object.
        return "CreatedKey(secret_key='vk_%s_...', key=%r)" % (self.key.key_id, self.key)


@dataclasses.dataclass(frozen=True)
class Rejection:
    """An annotation the server refused (never written)."""
    row: int      # Position of the annotation in the submitted DataFrame (0-based).
    reason: str   # The server's reason, e.g. "label 7 out of range [0, 2)".


@dataclasses.dataclass
class SubmitResult:
    """Sums of the acks of one submit() call."""
    accepted: int = 0    # New live labels.
    duplicate: int = 0   # Resends of the live label: no change.
    revised: int = 0     # Replaced a different live label.
    stale: int = 0       # Older (client_time) than the live label: kept in history only.
    rejected: int = 0    # Invalid annotations; see rejections.
    rejections: list = dataclasses.field(default_factory=list)  # First max_rejections.
    retries: int = 0     # Streams reopened after a retryable failure.


# The service config of every channel (the C++ client's, client/verity_client.h): round_robin
# spreads calls over every connected address of the target and skips one whose connection
# failed; unary calls that fail UNAVAILABLE are retried (up to 4 attempts, 0.1 s to 1 s apart),
# so a call to a replica that died goes to another. CreateProject and CreateKey are not retried
# (a retry after a lost response would answer ALREADY_EXISTS or make a second key); submit()
# resends its unacknowledged batches itself.
SERVICE_CONFIG = json.dumps({
    "loadBalancingConfig": [{"round_robin": {}}],
    "methodConfig": [
        {
            "name": [{"service": "verity.v1." + s} for s in (
                "ProjectService", "TruthService", "ModelService", "AssignmentService",
                "KeyService")],
            "retryPolicy": {
                "maxAttempts": 4,
                "initialBackoff": "0.1s",
                "maxBackoff": "1s",
                "backoffMultiplier": 2,
                "retryableStatusCodes": ["UNAVAILABLE"],
            },
        },
        {
            "name": [{"service": "verity.v1.ProjectService", "method": "CreateProject"},
                     {"service": "verity.v1.KeyService", "method": "CreateKey"}],
        },
    ],
})

_OWN_SCHEMES = ("dns:", "ipv4:", "ipv6:", "unix:", "unix-abstract:", "vsock:", "xds:")


def _split_host_port(address, target):
    """(host, port) of one "host:port" or "[ipv6]:port" of the list `target`."""
    if address.startswith("["):
        close = address.find("]")
        if close < 0 or not address[close + 1:].startswith(":"):
            raise ValueError('target: address "%s" in "%s": expected [IPV6]:PORT'
                             % (address, target))
        host, port = address[1:close], address[close + 2:]
    else:
        if ":" not in address:
            raise ValueError('target: address "%s" in "%s" has no port: expected HOST:PORT'
                             % (address, target))
        host, port = address.rsplit(":", 1)
        if ":" in host:
            raise ValueError('target: address "%s" in "%s": write an IPv6 address as '
                             '[IPV6]:PORT' % (address, target))
    if not host:
        raise ValueError('target: address "%s" in "%s" has no host' % (address, target))
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError('target: address "%s" in "%s": port must be 1 to 65535'
                         % (address, target))
    return host, int(port)


def resolve_target(target: str) -> Tuple[str, str, str]:
    """The gRPC target of a Client's `target`, with its authority and TLS name.

    One address ("host:port", a DNS name that may stand for several replicas) or a target with
    its own scheme ("dns:///name:port", "ipv4:a:1,b:2", "unix:/path") is kept as given, with
    empty authority and TLS name (gRPC's defaults). Several comma-separated addresses
    ("a:1,b:2") are resolved now into one ipv4: (or, when some host has only IPv6 addresses,
    ipv6:) target; the authority is then the first address and the TLS name its host, the name
    every replica's certificate must carry. Same rules as the C++ client's ResolveServerTarget.

    Raises ValueError for an empty address, a missing or bad port (a lone address's port too,
    when it has one), or IPv4-only hosts mixed with IPv6-only ones, and VerityError(UNAVAILABLE) for a host that does not resolve.
    """
    if target.startswith(_OWN_SCHEMES):
        return target, "", ""
    if "," not in target:
        # Kept for gRPC to resolve; but gRPC reads a port past 65535 modulo 65536 and would
        # connect to another port (and send it the key), so the port is checked here.
        port = target.rsplit(":", 1)[1] if ":" in target else ""
        if port.isascii() and port.isdigit() and not 1 <= int(port) <= 65535:
            raise ValueError('target: address "%s": port must be 1 to 65535' % target)
        return target, "", ""
    host_ports = []
    for part in target.split(","):
        address = part.strip()
        if not address:
            raise ValueError('target: empty address in "%s"' % target)
        host_ports.append(_split_host_port(address, target))
    authority = target.split(",")[0].strip()
    ipv4, ipv6 = [], []
    every_host_has_ipv4 = every_host_has_ipv6 = True
    for host, port in host_ports:
        try:
            found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as error:
            raise VerityError(grpc.StatusCode.UNAVAILABLE, 'cannot resolve "%s" of "%s": %s'
                              % (host, target, error.strerror)) from None
        has_ipv4 = has_ipv6 = False
        for family, _, _, _, sockaddr in found:
            if family == socket.AF_INET:
                address = "%s:%d" % (sockaddr[0], port)
                if address not in ipv4:
                    ipv4.append(address)
                has_ipv4 = True
            elif family == socket.AF_INET6:
                address = "[%s]:%d" % (sockaddr[0], port)
                if address not in ipv6:
                    ipv6.append(address)
                has_ipv6 = True
        every_host_has_ipv4 = every_host_has_ipv4 and has_ipv4
        every_host_has_ipv6 = every_host_has_ipv6 and has_ipv6
    tls_name = _split_host_port(authority, target)[0]
    if every_host_has_ipv4:
        return "ipv4:" + ",".join(ipv4), authority, tls_name
    if every_host_has_ipv6:
        return "ipv6:" + ",".join(ipv6), authority, tls_name
    raise ValueError('target: "%s" mixes hosts with only IPv4 addresses and hosts with only '
                     'IPv6 addresses; list hosts of one family' % target)


def _is_loopback_target(target):
    """Whether a gRPC target names this machine only: localhost, a 127.0.0.0/8 or ::1 literal,
    or a unix socket (the rule of the server and the CLI, common/loopback.h); a list of several
    addresses when every one does."""
    if target.startswith(("unix:", "unix-abstract:")):
        return True
    for scheme in ("dns:///", "ipv4:", "ipv6:"):
        if target.startswith(scheme):
            target = target[len(scheme):]
            break
    return all(_is_loopback_address(address.strip()) for address in target.split(","))


def _is_loopback_address(host):
    """Whether one "host:port", "[ipv6]:port" or bare host is loopback (common/loopback.h)."""
    if host.startswith("["):
        end = host.find("]")
        if end < 0:
            return False
        host = host[1:end]
    elif host.count(":") == 1:
        host = host.rsplit(":", 1)[0]
    if host.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback  # 127.0.0.0/8 (four dotted parts only) or ::1.


class Client:
    """A connection to a Verity server.

        with verity_client.Client("localhost:50051", timeout=30) as client:
            client.create_project("birds", ["false", "true"])
            client.submit("birds", labels_df)
            posteriors = client.posteriors("birds")

    Args:
      target: "host:port" of the server, or several replicas of one database separated by
        commas ("a:50051,b:50051"): calls are spread over them (round robin) and move to
        another replica when one fails, unary calls by a gRPC retry, submit() by reopening its
        stream and resending the unacknowledged batches. A DNS name with several addresses
        counts as several replicas. See resolve_target() for the rules; with TLS, every
        replica's certificate must carry the first host's name.
      timeout: deadline of every RPC in seconds (submit() adds time per annotation; see there).
      credentials: grpc.ChannelCredentials for a TLS channel; None = plaintext.
      channel_options: extra gRPC channel arguments, (key, value) pairs.
      api_key: API key sent with every call, submit()'s streams included, as
        `authorization: Bearer <key>`, for a server with authentication on. None (the default)
        reads the environment variable VERITY_API_KEY; "" sends no key. A call without a
        valid key raises VerityError(UNAUTHENTICATED), one outside the key's role or projects
        VerityError(PERMISSION_DENIED).
      allow_plaintext_key: send api_key without TLS (credentials=None) to a target that is not
        loopback (localhost, 127.0.0.0/8, ::1, a unix: socket). Off by default, when such a
        Client raises ValueError: anyone on the network path could read the key.
    """

    def __init__(self, target: str = "localhost:50051", timeout: float = 30.0, *,
                 credentials: Optional[grpc.ChannelCredentials] = None,
                 channel_options: Sequence[Tuple[str, Any]] = (), api_key: Optional[str] = None,
                 allow_plaintext_key: bool = False) -> None:
        try:
            seconds = float(timeout)
        except (TypeError, ValueError):
            seconds = math.nan
        if not math.isfinite(seconds) or seconds <= 0:
            raise ValueError("timeout must be a positive number of seconds (not inf or nan), "
                             "got %r" % (timeout,))
        self.target = target
        self.timeout = float(timeout)
        if api_key is None:
            api_key = os.environ.get(API_KEY_VARIABLE, "")
        api_key = api_key.strip()
        if api_key and credentials is None and not allow_plaintext_key \
                and not _is_loopback_target(target):
            raise ValueError(
                "refusing to send the API key in plaintext to %s, which is not a loopback "
                "address: connect with TLS, credentials=grpc.ssl_channel_credentials("
                "root_certificates=open('ca.pem', 'rb').read()) (the CA that signed the "
                "server's certificate; the server runs with --tls_cert and --tls_key, see "
                "docs/SECURITY.md), or pass allow_plaintext_key=True if the network path is "
                "one you trust" % target)
        # Metadata of every call; the key is kept nowhere else.
        self._metadata = (("authorization", "Bearer " + api_key),) if api_key else ()
        grpc_target, authority, tls_name = resolve_target(target)
        options = [("grpc.max_receive_message_length", MAX_RECEIVE_MESSAGE_BYTES),
                   ("grpc.service_config", SERVICE_CONFIG),
                   ("grpc.enable_retries", 1),
                   # A service config published in DNS TXT records would replace ours.
                   ("grpc.service_config_disable_resolution", 1)]
        if authority:
            options.append(("grpc.default_authority", authority))
        if tls_name and credentials is not None:
            options.append(("grpc.ssl_target_name_override", tls_name))
        options += list(channel_options)
        if credentials is None:
            self._channel = grpc.insecure_channel(grpc_target, options=options)
        else:
            self._channel = grpc.secure_channel(grpc_target, credentials, options=options)
        self._projects = projects_pb2_grpc.ProjectServiceStub(self._channel)
        self._ingest = ingest_pb2_grpc.IngestServiceStub(self._channel)
        self._truth = truth_pb2_grpc.TruthServiceStub(self._channel)
        self._models = models_pb2_grpc.ModelServiceStub(self._channel)
        self._assignment = assignment_pb2_grpc.AssignmentServiceStub(self._channel)
        self._keys = keys_pb2_grpc.KeyServiceStub(self._channel)
        # Class names by project: fixed at project creation, so safe to keep.
        self._classes = {}
        self._classes_lock = threading.Lock()

    # --- lifetime -----------------------------------------------------------------------

    def close(self) -> None:
        """Closes the channel; calls in flight are cancelled."""
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
        return False

    def wait_until_ready(self, timeout: Optional[float] = None) -> None:
        """Blocks until the channel is connected; VerityError(UNAVAILABLE) after `timeout`
        seconds (default: the client's timeout)."""
        timeout = self.timeout if timeout is None else timeout
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            raise VerityError(grpc.StatusCode.UNAVAILABLE,
                              "could not connect to %s within %gs" % (self.target, timeout))

    def _call(self, method, request, what):
        try:
            return method(request, timeout=self.timeout, metadata=self._metadata)
        except grpc.RpcError as error:
            raise VerityError.from_rpc_error(error, what + ": ") from None

    # --- projects -----------------------------------------------------------------------

    def create_project(self, name: str, classes: Sequence[str], *, method: Optional[str] = None,
                       settings: Union["projects_pb2.ProjectSettings", Dict[str, Any], None] = None,
                       item_feature_dim: int = 0, annotator_feature_dim: int = 0,
                       exist_ok: bool = False) -> "Project":
        """Creates a project and returns it as a Project.

        Args:
          name: 1-128 characters of [A-Za-z0-9._-].
          classes: ordered class names (2 to 256); a label is an index into this list.
          method: truth method, "auto" (the server's default for new projects: chooses a
            classical method at each refit), "ds", "mv", "one_coin", "glad", "wawa",
            "zero_based_skill", "kos" (2 classes), "mace", "bwa", "ibcc", "ebcc", "mmsr" or a
            neural method (METHODS lists them all).
          settings: a projects_pb2.ProjectSettings or a dict in its JSON form, e.g.
            {"assignment": {"min_labels_per_item": 3}}; `method` overrides settings.model.method.
          exist_ok: if the project exists with the same classes, return it instead of raising
            ALREADY_EXISTS.
        """
        project = projects_pb2.Project(name=name, classes=list(classes),
                                       item_feature_dim=item_feature_dim,
                                       annotator_feature_dim=annotator_feature_dim)
        if settings is not None:
            if isinstance(settings, dict):
                json_format.ParseDict(settings, project.settings)
            else:
                project.settings.CopyFrom(settings)
        if method is not None:
            if method not in METHODS:
                raise ValueError("unknown method %r; one of %s" % (method, ", ".join(METHODS)))
            project.settings.model.method = METHODS[method]
        try:
            response = self._call(self._projects.CreateProject,
                                  projects_pb2.CreateProjectRequest(project=project),
                                  "CreateProject")
        except VerityError as error:
            if not (exist_ok and error.code == grpc.StatusCode.ALREADY_EXISTS):
                raise
            existing = self.get_project(name)
            if existing.classes != tuple(classes):
                raise
            return existing
        return self._remember(Project.from_proto(response.project))

    def get_project(self, name: str) -> "Project":
        """The project named `name`; VerityError(NOT_FOUND) if there is none."""
        response = self._call(self._projects.GetProject,
                              projects_pb2.GetProjectRequest(project=name), "GetProject")
        return self._remember(Project.from_proto(response.project))

    def list_projects(self) -> List["Project"]:
        """Every project the key may see, as a list of Project (every page of ListProjects)."""
        projects: List["Project"] = []
        token = ""
        while True:
            response = self._call(self._projects.ListProjects,
                                  projects_pb2.ListProjectsRequest(page_token=token),
                                  "ListProjects")
            projects.extend(self._remember(Project.from_proto(p)) for p in response.projects)
            token = response.next_page_token
            if not token:
                return projects

    def add_items(self, project: str, df: pd.DataFrame) -> Tuple[int, int]:
        """Creates or updates items; returns (added, updated).

        df has a column item (or task) and optionally gold (or label, as in a dataset's
        gold.csv and the CLI: the known class, a name or index; missing = no gold; ValueError if
        df has both) and priority (assignment priority; missing = unchanged). One
        AddItems RPC per 10,000 items (under 3 MB: no features are sent); the chunks before a
        failed one stay written.
        """
        if not isinstance(df, pd.DataFrame):
            df = pd.DataFrame(df)
        items = frames.ids(frames.column(df, frames.ITEM_COLUMNS))
        gold = [None] * len(items)
        gold_columns = [c for c in ("gold", "label") if c in df.columns]
        if len(gold_columns) > 1:
            raise ValueError("columns 'gold' and 'label' both give gold labels: keep one")
        if gold_columns:
            column = df[gold_columns[0]]
            known = column.notna().to_numpy()
            if known.any():
                indices = frames.label_indices(column[known], self._class_names(project),
                                               rows=np.flatnonzero(known))
                for row, index in zip(np.flatnonzero(known), indices):
                    gold[row] = int(index)
        priority = [None] * len(items)
        if "priority" in df.columns:
            priority = [None if pd.isna(p) else float(p) for p in df["priority"]]
        added = updated = 0
        for lo in range(0, len(items), MAX_ITEMS_PER_CALL):
            request = projects_pb2.AddItemsRequest(project=project)
            for row in range(lo, min(lo + MAX_ITEMS_PER_CALL, len(items))):
                item = request.items.add(id=items[row])
                if gold[row] is not None:
                    item.gold_label = gold[row]
                if priority[row] is not None:
                    item.priority = priority[row]
            response = self._call(self._projects.AddItems, request,
                                  "AddItems (rows %d to %d)" % (lo, lo + len(request.items) - 1))
            added += response.added
            updated += response.updated
        return added, updated

    def _remember(self, project):
        with self._classes_lock:
            self._classes[project.name] = project.classes
        return project

    def _class_names(self, project):
        with self._classes_lock:
            classes = self._classes.get(project)
        return classes if classes is not None else self.get_project(project).classes

    # --- ingest -------------------------------------------------------------------------

    def submit(self, project: str, df: pd.DataFrame, *, batch_size: int = 1000,
               max_unacked_batches: int = 8, max_retries: int = 4,
               min_throughput: float = 1000.0, max_rejections: int = 10,
               progress: Optional[Callable[..., Any]] = None) -> "SubmitResult":
        """Streams the labels of `df` to `project` and returns the summed acks (SubmitResult).

        df has columns item (or task), annotator (or worker) and label: class names, or class
        indices (integers). Rows go in order, in batches of `batch_size` (1 to 10,000) over one
        bidirectional SubmitAnnotations stream, at most `max_unacked_batches` ahead of their
        acks. An ack means the batch is durable. An invalid annotation is rejected alone and
        reported in SubmitResult.rejections; a batch the server refuses whole raises
        VerityError with the ack's code (NOT_FOUND for an unknown project, INVALID_ARGUMENT
        ...); the batches acknowledged before it stay written. A batch or stream failing with
        UNAVAILABLE or RESOURCE_EXHAUSTED is resent on a new stream (resending is safe) after
        a back-off, up to `max_retries` times in a row without progress.

        The stream's deadline is the client's timeout plus one second per `min_throughput`
        annotations still to send. `progress(acked, total)` is called after each ack.
        """
        if not 1 <= batch_size <= 10000:
            raise ValueError("batch_size must be 1 to 10,000, got %r" % batch_size)
        if max_unacked_batches < 1:
            raise ValueError("max_unacked_batches must be positive")
        if not float(min_throughput) > 0:
            raise ValueError("min_throughput must be a positive number of labels per second, "
                             "got %r" % (min_throughput,))
        items, annotators, label_column = frames.annotations(df)
        if not items:
            return SubmitResult()
        classes = self._class_names(project) if frames.needs_class_names(label_column) else ()
        labels = frames.label_indices(label_column, classes)
        streamer = _AnnotationStreamer(
            self._ingest.SubmitAnnotations, project, items, annotators, labels.tolist(),
            batch_size=batch_size, max_unacked_batches=max_unacked_batches,
            max_retries=max_retries, metadata=self._metadata,
            deadline=lambda unacked: self.timeout + unacked / float(min_throughput),
            max_rejections=max_rejections, progress=progress)
        return streamer.run()

    # --- truth --------------------------------------------------------------------------

    def posteriors(self, project: str, items: Optional[Iterable[Any]] = None, *,
                   page_size: int = 1000, details: bool = False) -> pd.DataFrame:
        """Current posteriors as a DataFrame: item, label (the most probable class name),
        confidence (its probability), then one column of probabilities per class, named by
        the class (by "p_" + the class, for every class, when a class name is also the name
        of one of the frame's columns: item, label, confidence or a details column).

        items: None = every item of the project (ListPosteriors, one RPC per page of
          `page_size`, in item creation order; a page ends early where the server's 16 MiB
          response limit would be passed); or a list of item ids (GetPosteriors, one RPC per
          10,000 ids, fewer with many classes, in that order; NOT_FOUND if one is unknown).
        details: also add num_labels, model_version, includes_newer_labels, is_gold and
          difficulty (the item's difficulty for methods that learn one, lia: the chance that
          an annotator of average competence mislabels it; NaN for the other methods).
        """
        classes = self._class_names(project)
        posteriors = []
        if items is None:
            token = ""
            while True:
                response = self._call(
                    self._truth.ListPosteriors,
                    truth_pb2.ListPosteriorsRequest(project=project, page_size=page_size,
                                                    page_token=token),
                    "ListPosteriors")
                posteriors.extend(response.posteriors)
                token = response.next_page_token
                if not token:
                    break
        else:
            items = [str(item) for item in items]
            # As many ids per call as the server's response limit holds at the longest id
            # (its bound per posterior: the id, 8 bytes a class and 64), at most 10,000.
            per_call = max(1, min(MAX_ITEMS_PER_CALL,
                                  (_SERVER_RESPONSE_LIMIT - 4096)
                                  // (_MAX_ID_BYTES + 8 * len(classes) + 64)))
            for lo in range(0, len(items), per_call):
                response = self._call(
                    self._truth.GetPosteriors,
                    truth_pb2.GetPosteriorsRequest(project=project,
                                                   items=items[lo:lo + per_call]),
                    "GetPosteriors")
                posteriors.extend(response.posteriors)
        probabilities = np.zeros((len(posteriors), len(classes)))
        for row, p in enumerate(posteriors):
            probabilities[row, :] = p.probabilities
        frame = frames.posterior_frame([p.item for p in posteriors], probabilities,
                                       [p.map_label for p in posteriors],
                                       [p.confidence for p in posteriors], classes)
        if details:
            frame["num_labels"] = np.array([p.num_labels for p in posteriors], dtype=np.int64)
            frame["model_version"] = np.array([p.model_version for p in posteriors],
                                              dtype=np.int64)
            frame["includes_newer_labels"] = np.array(
                [p.includes_newer_labels for p in posteriors], dtype=bool)
            frame["is_gold"] = np.array([p.is_gold for p in posteriors], dtype=bool)
            frame["difficulty"] = np.array(
                [p.difficulty if p.HasField("difficulty") else np.nan for p in posteriors],
                dtype=np.float64)
        return frame

    def annotators(self, project: str, annotators: Optional[Iterable[Any]] = None) -> pd.DataFrame:
        """Annotator profiles as a DataFrame: annotator, accuracy (probability of a correct
        label under the class prior), num_labels, confusion (a K-by-K numpy array, row = true
        class, column = answered class), embedding (the annotator's learned embedding as a
        numpy array, for methods that learn one: lia, conal; empty for the others),
        predicted_from_features (True when the confusion and accuracy are lia's prediction
        from the annotator's features, for an annotator the current fit did not see).
        annotators: ids (one call per 10,000, or per half as many while the server answers
          RESOURCE_EXHAUSTED: profiles past its response limit, with many classes), or None
          for every annotator (a page at a time)."""
        # None: every annotator; any iterable (a list, a Series, an array), empty included: those.
        ids = None if annotators is None else [str(a) for a in annotators]
        profiles = []
        if ids is not None:
            per_call, lo = MAX_ITEMS_PER_CALL, 0
            while lo < len(ids):
                chunk = ids[lo:lo + per_call]
                try:
                    response = self._call(
                        self._truth.GetAnnotatorProfiles,
                        truth_pb2.GetAnnotatorProfilesRequest(project=project, annotators=chunk),
                        "GetAnnotatorProfiles")
                except VerityError as error:
                    if error.code != grpc.StatusCode.RESOURCE_EXHAUSTED or len(chunk) == 1:
                        raise
                    per_call = len(chunk) // 2
                    continue
                profiles.extend(response.profiles)
                lo += len(chunk)
        else:
            request = truth_pb2.GetAnnotatorProfilesRequest(project=project)
            while True:
                response = self._call(self._truth.GetAnnotatorProfiles, request,
                                      "GetAnnotatorProfiles")
                profiles.extend(response.profiles)
                if not response.next_page_token:
                    break
                request.page_token = response.next_page_token
        return pd.DataFrame({
            "annotator": pd.Series([p.annotator for p in profiles], dtype=object),
            "accuracy": np.array([p.accuracy for p in profiles], dtype=np.float64),
            "num_labels": np.array([p.num_labels for p in profiles], dtype=np.int64),
            "confusion": pd.Series(
                [np.array(p.confusion.probabilities).reshape(p.confusion.num_classes,
                                                             p.confusion.num_classes)
                 for p in profiles], dtype=object),
            "embedding": pd.Series(
                [np.array(p.embedding, dtype=np.float32) for p in profiles], dtype=object),
            "predicted_from_features": np.array(
                [p.predicted_from_features for p in profiles], dtype=bool),
        })

    # --- models -------------------------------------------------------------------------

    def model_status(self, project: str) -> "ModelStatus":
        """The project's ModelStatus."""
        r = self._call(self._models.GetModelStatus,
                       models_pb2.GetModelStatusRequest(project=project), "GetModelStatus")
        current = (ModelVersion.from_proto(r.current_version)
                   if r.HasField("current_version") else None)
        calibration = None
        if r.HasField("calibration"):
            c = r.calibration
            calibration = {"kind": c.kind, "temperature": c.temperature, "source": c.source,
                           "gold_items": c.gold_items, "gold_ece_raw": c.gold_ece_raw,
                           "gold_ece": c.gold_ece}
        return ModelStatus(method=_method_name(r.method), current_version=current,
                           num_labels=r.num_labels,
                           labels_since_version=r.labels_since_version, training=r.training,
                           calibration=calibration, chosen_method=r.chosen_method,
                           choice_reason=r.choice_reason)

    def train(self, project: str) -> "ModelVersion":
        """Fits the project's configured method now (TrainModel: warm-started like a background
        refit, after any fit in progress) and returns the new ModelVersion. The deadline is the
        client's timeout. VerityError(FAILED_PRECONDITION) when the project has no labels."""
        r = self._call(self._models.TrainModel, models_pb2.TrainModelRequest(project=project),
                       "TrainModel")
        return ModelVersion.from_proto(r.version)

    def model_versions(self, project: str, limit: int = 20) -> List["ModelVersion"]:
        """The newest `limit` (1 to 1,000) model versions as a list of ModelVersion."""
        r = self._call(self._models.ListModelVersions,
                       models_pb2.ListModelVersionsRequest(project=project, limit=limit),
                       "ListModelVersions")
        return [ModelVersion.from_proto(v) for v in r.versions]

    # --- assignment ---------------------------------------------------------------------

    def suggest_items(self, project: str, annotator: str, k: int = 10,
                      candidates: Optional[Iterable[str]] = None) -> pd.DataFrame:
        """The k items `annotator` should label next, best first, each leased to them, as a
        DataFrame: item, score (expected entropy reduction), p_correct, lease_expires_at
        (UTC). Fewer rows (or none) when fewer items are open. candidates: item ids to choose
        from; None = every open item."""
        r = self._call(
            self._assignment.SuggestItems,
            assignment_pb2.SuggestItemsRequest(
                project=project, annotator=str(annotator), k=k,
                candidate_items=[] if candidates is None else [str(c) for c in candidates]),
            "SuggestItems")
        s = r.suggestions
        return pd.DataFrame({
            "item": pd.Series([x.item for x in s], dtype=object),
            "score": np.array([x.score for x in s], dtype=np.float64),
            "p_correct": np.array([x.p_correct for x in s], dtype=np.float64),
            "lease_expires_at": pd.to_datetime([_time(x, "lease_expires_at") for x in s],
                                               utc=True),
        })

    def suggest_annotators(self, project: str, item: str, k: int = 10,
                           candidates: Optional[Iterable[str]] = None) -> pd.DataFrame:
        """The k annotators who should label `item` next, best first, as a DataFrame:
        annotator, score, p_correct. Does not lease. candidates: None = the project's
        annotators (the server refuses that with INVALID_ARGUMENT for a project of more than
        max(10,000, 655,360,000 / classes**2) annotators: pass candidates then)."""
        r = self._call(
            self._assignment.SuggestAnnotators,
            assignment_pb2.SuggestAnnotatorsRequest(
                project=project, item=str(item), k=k,
                candidates=[] if candidates is None else [str(c) for c in candidates]),
            "SuggestAnnotators")
        s = r.suggestions
        return pd.DataFrame({
            "annotator": pd.Series([x.annotator for x in s], dtype=object),
            "score": np.array([x.score for x in s], dtype=np.float64),
            "p_correct": np.array([x.p_correct for x in s], dtype=np.float64),
        })


    # --- API keys -----------------------------------------------------------------------

    def create_key(self, role: str, projects: Optional[Sequence[str]] = None, *,
                   name: str = "") -> "CreatedKey":
        """Creates an API key and returns it as a CreatedKey (secret_key, key). Needs an admin
        key valid for every project.

        Args:
          role: "reader" (queries), "writer" (also submits labels, adds items and annotators,
            trains, suggests items) or "admin" (also creates projects and changes settings;
            valid for every project, also manages keys).
          projects: project names the key may touch; None = every project, present and future.
          name: free text, who or what uses the key (at most 256 bytes).
        """
        if role not in ROLES:
            raise ValueError("unknown role %r; one of %s" % (role, ", ".join(ROLES)))
        if projects is not None:
            projects = [str(p) for p in projects]
            if not projects or "" in projects:
                raise ValueError("projects: give project names, or None for every project")
        response = self._call(
            self._keys.CreateKey,
            keys_pb2.CreateKeyRequest(name=name, role=ROLES[role], projects=projects or []),
            "CreateKey")
        return CreatedKey(secret_key=response.secret_key, key=ApiKey.from_proto(response.key))

    def list_keys(self, include_revoked: bool = False) -> List["ApiKey"]:
        """The valid keys (also the revoked ones with include_revoked), oldest first, as a list
        of ApiKey. Needs an admin key valid for every project."""
        response = self._call(self._keys.ListKeys,
                              keys_pb2.ListKeysRequest(include_revoked=include_revoked),
                              "ListKeys")
        return [ApiKey.from_proto(k) for k in response.keys]

    def revoke_key(self, key_id: str) -> "ApiKey":
        """Revokes the key `key_id` (its public id, not the key itself) and returns it as an
        ApiKey. It stops working on this server at once, on other servers of the database
        within their key refresh interval. Revoking a revoked key changes nothing;
        VerityError(NOT_FOUND) for an unknown id. Needs an admin key valid for every
        project."""
        if key_id.startswith("vk_"):
            raise ValueError("key_id is the key's 16-hex-digit id (ApiKey.key_id), "
                             "not the key itself")
        response = self._call(self._keys.RevokeKey, keys_pb2.RevokeKeyRequest(key_id=key_id),
                              "RevokeKey")
        return ApiKey.from_proto(response.key)


class _AnnotationStreamer:
    """One submit() across its streams. Batch b holds rows [b * batch_size, (b + 1) *
    batch_size) and is sent with batch_id b + 1; acks come in batch order."""

    _INITIAL_BACKOFF_S = 0.2
    _MAX_BACKOFF_S = 5.0

    def __init__(self, rpc, project, items, annotators, labels, *, batch_size,
                 max_unacked_batches, max_retries, metadata, deadline, max_rejections,
                 progress):
        self._rpc = rpc
        self._metadata = metadata
        self._project = project
        self._items = items
        self._annotators = annotators
        self._labels = labels
        self._batch_size = batch_size
        self._max_unacked = max_unacked_batches
        self._max_retries = max_retries
        self._deadline = deadline
        self._max_rejections = max_rejections
        self._progress = progress
        self._num_batches = math.ceil(len(items) / batch_size)
        # Batches before first_unfinished are acknowledged; counted[b]: batch b's ack is in
        # the result (a batch after a failed one can be counted before it is resent).
        self._first_unfinished = 0
        self._counted = [False] * self._num_batches
        self._acked_rows = 0
        self._result = SubmitResult()

    def run(self):
        failures_in_a_row = 0
        backoff = self._INITIAL_BACKOFF_S
        while self._first_unfinished < self._num_batches:
            first_before = self._first_unfinished
            error = self._run_stream()
            if error is None:
                break
            if error.code not in RETRYABLE_CODES:
                raise error
            if self._first_unfinished > first_before:
                failures_in_a_row = 0
                backoff = self._INITIAL_BACKOFF_S
            if failures_in_a_row >= self._max_retries:
                raise VerityError(error.code, "gave up after %d attempts: %s" %
                                  (failures_in_a_row + 1, error.message))
            failures_in_a_row += 1
            self._result.retries += 1
            time.sleep(backoff)
            backoff = min(2 * backoff, self._MAX_BACKOFF_S)
        return self._result

    def _rows(self, b):
        return b * self._batch_size, min(len(self._items), (b + 1) * self._batch_size)

    def _batch_name(self, b):
        lo, hi = self._rows(b)
        return "batch %d of %d (rows %d to %d)" % (b + 1, self._num_batches, lo, hi - 1)

    def _batch(self, b):
        lo, hi = self._rows(b)
        # Every batch names the project, so any batch can open a new stream.
        return ingest_pb2.AnnotationBatch(
            batch_id=b + 1, project=self._project,
            annotations=[ingest_pb2.Annotation(item=i, annotator=a, label=l)
                         for i, a, l in zip(self._items[lo:hi], self._annotators[lo:hi],
                                            self._labels[lo:hi])])

    def _count(self, b, ack):
        if self._counted[b]:
            return
        self._counted[b] = True
        r = self._result
        r.accepted += ack.accepted
        r.duplicate += ack.duplicate
        r.revised += ack.revised
        r.stale += ack.stale
        r.rejected += ack.rejected
        lo, hi = self._rows(b)
        for rejection in ack.rejections:
            if len(r.rejections) >= self._max_rejections:
                break
            r.rejections.append(Rejection(row=lo + rejection.index, reason=rejection.reason))
        self._acked_rows += hi - lo
        if self._progress is not None:
            self._progress(self._acked_rows, len(self._items))

    def _run_stream(self):
        """Sends batches from first_unfinished on over one new stream. None once every batch
        is acknowledged; otherwise the VerityError that ended the stream, with
        first_unfinished at the first batch to resend."""
        first = self._first_unfinished
        # The request iterator runs on a gRPC thread: it takes a window slot per batch, and
        # each ack gives one back. `stop` ends the writes (half-close) early.
        window = threading.Semaphore(self._max_unacked)
        stop = threading.Event()

        def requests():
            for b in range(first, self._num_batches):
                window.acquire()
                if stop.is_set():
                    return
                yield self._batch(b)

        unacked_rows = len(self._items) - self._rows(first)[0]
        call = self._rpc(requests(), timeout=self._deadline(unacked_rows),
                         metadata=self._metadata)
        retry_error = None  # The first retryable batch error of this stream.
        stream_error = None
        b = first
        try:
            for ack in call:
                window.release()
                if b >= self._num_batches or ack.batch_id != b + 1:
                    return VerityError(
                        grpc.StatusCode.INTERNAL,
                        "SubmitAnnotations: got the ack of batch id %d while expecting batch "
                        "id %d" % (ack.batch_id, b + 1))
                if ack.error_code != 0:
                    error = VerityError(status_code(ack.error_code), "%s: %s" % (
                        self._batch_name(b), ack.error_message))
                    if error.code not in RETRYABLE_CODES:
                        return error
                    if retry_error is None:
                        retry_error = error
                        stop.set()  # Resend from here on a new stream; finish this one.
                        window.release()
                else:
                    self._count(b, ack)
                    # Acks come in order, so without an earlier failure b is the first
                    # unfinished batch.
                    if retry_error is None:
                        self._first_unfinished = b + 1
                b += 1
        except grpc.RpcError as error:
            stream_error = error
        finally:
            # Unblocks the request iterator for good, and ends the call if it still runs.
            stop.set()
            window.release(self._max_unacked + 1)
            call.cancel()
        if retry_error is not None:
            return retry_error
        # Every batch acked means every batch is durable, whatever ended the stream after.
        if self._first_unfinished == self._num_batches:
            return None
        if stream_error is not None:
            return VerityError.from_rpc_error(
                stream_error, "SubmitAnnotations stream (at %s): " %
                self._batch_name(self._first_unfinished))
        return VerityError(
            grpc.StatusCode.INTERNAL,
            "SubmitAnnotations: the server ended the stream without acknowledging %s" %
            self._batch_name(self._first_unfinished))
