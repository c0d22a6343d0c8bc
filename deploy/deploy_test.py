"""Static checks of the deployment files under deploy/ (run by //deploy:deploy_test).

These checks need no container engine or cluster: they run in `make test` on every machine.
(The images are built and Compose's services run with Podman by deploy/container_test.sh, by
hand; see deploy/README.md.) What is checked here:

- the systemd units pass `systemd-analyze verify` (against the Bazel-built verity_server and
  verity_worker) and `systemd-analyze security --offline`, and the dedicated user they run as
  is the one verity.sysusers creates;
- every YAML file parses, and the Compose and Kubernetes files have the services, kinds and
  fields the deployment depends on (gRPC health probes, the Secret, the GPU request);
- every verity_server and verity_worker flag they pass (Compose, Kubernetes, the systemd flag
  files) exists in the Bazel-built server and worker, and the training mode is consistent:
  --trainer=workers only where a worker is deployed, a plain `docker compose up` trains
  in-process;
- the Dockerfile builds with the Makefile (`make build`) and installs no copy of the
  Makefile's package list; its runtime packages come from deploy/runtime_packages.sh, which is
  run here on the Bazel-built binaries.

Each check is a function returning a list of problems; next to each test on the real files, a
test feeds it a deliberately broken input and requires a problem, so that a check which cannot
fail (a tool that prints nothing in this sandbox, a glob that matches nothing) is caught.

Must run under /usr/bin/python3: it needs Debian's python3-yaml.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import xml.etree.ElementTree as ET

import yaml

DEPLOY = "deploy"
SERVER_BINARY = "server/verity_server"
WORKER_BINARY = "server/training/verity_worker"
CLI_BINARY = "client/verity"
# What the Dockerfile builds into the image: bazel-bin path -> name in /usr/local/bin.
IMAGE_BINARIES = {"bazel-bin/server/verity_server": "verity_server",
                  "bazel-bin/server/training/verity_worker": "verity_worker",
                  "bazel-bin/client/verity": "verity"}
SYSTEMD_ANALYZE = "/usr/bin/systemd-analyze"
SYSTEMD_SYSUSERS = "/usr/bin/systemd-sysusers"
UNITS = ("verity-server.service", "verity-worker.service")
# The one package the Dockerfile may install itself: the Makefile cannot run without it.
BOOTSTRAP_PACKAGES = {"make"}
# Exposure score ceiling for `systemd-analyze security` (0-100, shown as 0.0-10.0; an
# unhardened unit scores 96, systemd calls anything up to 39 "OK").
MAX_EXPOSURE = 25


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def deploy_path(*parts):
    return os.path.join(DEPLOY, *parts)


# ---------------------------------------------------------------------------------------------
# Makefile and Dockerfile


def makefile_packages(makefile_text):
    """The words of the Makefile's `PACKAGES :=` assignment (continuation lines joined)."""
    joined = makefile_text.replace("\\\n", " ")
    match = re.search(r"^PACKAGES\s*:?=(.*)$", joined, re.MULTILINE)
    return set(match.group(1).split()) if match else set()


def check_makefile_build_installs_packages(makefile_text):
    """`make build` must install PACKAGES first, or the Dockerfile's build stage breaks."""
    problems = []
    if not makefile_packages(makefile_text):
        problems.append("Makefile has no PACKAGES list")
    build = re.search(r"^build\s*:(.*)$", makefile_text, re.MULTILINE)
    if not build or "deps" not in build.group(1).split():
        problems.append("Makefile target build does not depend on deps")
    deps = re.search(r"^deps\s*:.*\n((?:\t.*\n?)+)", makefile_text, re.MULTILINE)
    if not deps or "$(PACKAGES)" not in deps.group(1) or "apt-get" not in deps.group(1):
        problems.append("Makefile target deps does not apt-get install $(PACKAGES)")
    return problems


def check_makefile_build_builds_the_image_binaries(makefile_text):
    """The Dockerfile copies verity_server, verity_worker and verity out of bazel-bin after
    `make build`: its recipe must build them (//... or each label)."""
    recipe = re.search(r"^build\s*:.*\n((?:\t.*\n?)+)", makefile_text, re.MULTILINE)
    words = recipe.group(1).split() if recipe else []
    if "build" not in words:
        return ["Makefile target build runs no bazel build"]
    targets = words[words.index("build") + 1:]
    if "//..." in targets:
        return []
    labels = {"//" + os.path.dirname(p[len("bazel-bin/"):]) + ":" + os.path.basename(p)
              for p in IMAGE_BINARIES}
    return ["Makefile target build does not build %s" % label
            for label in sorted(labels - set(targets))]


def dockerfile_instructions(text):
    """[(INSTRUCTION, arguments)] with continuation lines joined and comments dropped."""
    lines = [l for l in text.splitlines() if not l.lstrip().startswith("#")]
    joined = re.sub(r"\\\s*\n", " ", "\n".join(lines))
    result = []
    for line in joined.splitlines():
        line = line.strip()
        if line:
            keyword, _, rest = line.partition(" ")
            result.append((keyword.upper(), rest.strip()))
    return result


def dockerfile_stages(text):
    """[(FROM arguments, [(INSTRUCTION, arguments)])] per build stage."""
    stages = []
    for keyword, rest in dockerfile_instructions(text):
        if keyword == "FROM":
            stages.append((rest, []))
        elif stages:
            stages[-1][1].append((keyword, rest))
    return stages


def apt_installed_packages(shell):
    """Package names a shell command line passes to `apt-get install` / `apt install` itself
    (names that xargs reads from a file are not on the line and not returned)."""
    packages = []
    for command in re.split(r"&&|\|\||;|\|", shell):
        words = command.split()
        for i, word in enumerate(words):
            if word in ("apt-get", "apt") and "install" in words[i + 1:]:
                after = words[words.index("install", i) + 1:]
                packages += [w for w in after if not w.startswith("-")]
                break
    return packages


def check_dockerfile(text, packages):
    """Problems with a Dockerfile; `packages` is the Makefile's PACKAGES."""
    problems = []
    stages = dockerfile_stages(text)
    if len(stages) < 2:
        return ["Dockerfile needs a build stage and a runtime stage, has %d stage(s)" % len(stages)]
    build_from, build = stages[0]
    runtime_from, runtime = stages[-1]
    if not re.match(r"debian:bookworm(\s|$)", build_from) or "AS build" not in build_from:
        problems.append("build stage is not `FROM debian:bookworm AS build`: %s" % build_from)
    if not runtime_from.startswith("debian:bookworm-slim"):
        problems.append("runtime stage is not debian:bookworm-slim: %s" % runtime_from)

    build_runs = " && ".join(rest for keyword, rest in build if keyword == "RUN")
    if not re.search(r"(^|&&|;)\s*make build(\s|$)", build_runs):
        problems.append("build stage does not run `make build` (the README's build)")
    for keyword, rest in build + runtime:
        if keyword == "RUN":
            for package in apt_installed_packages(rest):
                if package not in BOOTSTRAP_PACKAGES:
                    problems.append("Dockerfile installs %s itself; package lists live in the "
                                    "Makefile or come from runtime_packages.sh" % package)

    # The runtime stage installs what runtime_packages.sh derived in the build stage.
    derived = re.search(r"deploy/runtime_packages\.sh\s+(.*?)>\s*(\S+)", build_runs)
    if not derived:
        problems.append("build stage does not write deploy/runtime_packages.sh's output")
    else:
        listed, package_file = derived.group(1).split(), derived.group(2)
        for binary in IMAGE_BINARIES.values():
            if not any(os.path.basename(b) == binary for b in listed):
                problems.append("runtime_packages.sh is not run on %s" % binary)
        copied = [rest for keyword, rest in runtime
                  if keyword == "COPY" and "--from=build" in rest and package_file in rest]
        if not copied:
            problems.append("runtime stage does not COPY --from=build %s" % package_file)
        runtime_runs = " && ".join(rest for keyword, rest in runtime if keyword == "RUN")
        if not re.search(r"xargs -a \S+ .*apt-get install", runtime_runs):
            problems.append("runtime stage does not apt-get install the derived package list")

    copies_binaries = [rest for keyword, rest in runtime
                       if keyword == "COPY" and "--from=build" in rest and "/usr/local/bin" in rest]
    if not copies_binaries:
        problems.append("runtime stage does not copy the binaries to /usr/local/bin")
    collected = re.search(r"cp -L ([^&]*)", build_runs)
    collected = collected.group(1).split() if collected else []
    for path in IMAGE_BINARIES:
        if path not in collected:
            problems.append("build stage does not collect %s (cp -L)" % path)
    entrypoints = [rest for keyword, rest in runtime if keyword == "ENTRYPOINT"]
    if not entrypoints or "/usr/local/bin/verity_server" not in entrypoints[-1]:
        problems.append("runtime ENTRYPOINT is not /usr/local/bin/verity_server")
    users = [rest for keyword, rest in runtime if keyword == "USER"]
    if not users or users[-1].split(":")[0] in ("0", "root"):
        problems.append("runtime stage runs as root")
    return problems


def package_list_copies(text, packages):
    """Makefile package names (besides the bootstrap) that a file names as words. Two or more
    in one file look like a second copy of the install list."""
    words = set(re.findall(r"[A-Za-z0-9][A-Za-z0-9.+-]*", text))
    return sorted(words & (packages - BOOTSTRAP_PACKAGES))


# ---------------------------------------------------------------------------------------------
# systemd


def unit_settings(text):
    """{(section, key): [values]} of a unit file (keys may repeat)."""
    settings, section = {}, None
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        settings.setdefault((section, key.strip()), []).append(value.strip())
    return settings


def verify_units(unit_texts):
    """Runs `systemd-analyze verify` on {file name: text} written to a temporary directory;
    returns its diagnostics, one problem per line.

    verify exits 0 on unknown keys and unparsable values (it only warns), so any output at all
    counts as a problem. ExecStart must name an existing executable, so callers point it at one.
    """
    with tempfile.TemporaryDirectory() as unit_dir:
        paths = []
        for name, text in unit_texts.items():
            path = os.path.join(unit_dir, name)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            paths.append(path)
        # --recursive-errors=no: judge our units, not the host's units they order against
        # (postgresql.service, network-online.target), which may be absent in a container.
        result = subprocess.run(
            [SYSTEMD_ANALYZE, "verify", "--recursive-errors=no", "--man=no"] + paths,
            capture_output=True, text=True, cwd=unit_dir, timeout=60)
        output = (result.stdout + result.stderr).replace(unit_dir + "/", "")
        problems = [l for l in output.splitlines() if l.strip()]
        if result.returncode != 0 and not problems:
            problems.append("systemd-analyze verify exited %d" % result.returncode)
        return problems


def unit_exposure_problems(name, text):
    """`systemd-analyze security --offline` fails units whose exposure exceeds MAX_EXPOSURE."""
    with tempfile.TemporaryDirectory() as unit_dir:
        path = os.path.join(unit_dir, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        result = subprocess.run(
            [SYSTEMD_ANALYZE, "security", "--offline=yes", "--threshold=%d" % MAX_EXPOSURE,
             "--no-pager", path], capture_output=True, text=True, timeout=60)
        overall = re.search(r"Overall exposure level for \S+: (\S+ \S+)", result.stdout)
        if result.returncode != 0 or not overall:
            return ["%s: exposure %s above %.1f (exit %d) %s" % (
                name, overall.group(1) if overall else "unknown", MAX_EXPOSURE / 10,
                result.returncode, result.stderr.strip())]
        return []


def with_exec_start(unit_text, binary):
    """The unit with its ExecStart binary replaced (arguments kept)."""
    return re.sub(r"^ExecStart=\S+", "ExecStart=" + binary, unit_text, flags=re.MULTILINE)


# ---------------------------------------------------------------------------------------------
# Flags, Compose and Kubernetes


def flag_names(binary):
    """Names of every flag a Bazel-built binary accepts (from --helpfull)."""
    result = subprocess.run([binary, "--helpfull"], capture_output=True, text=True, timeout=60)
    return set(re.findall(r"^\s+--([A-Za-z0-9_]+) \(", result.stdout + result.stderr,
                          re.MULTILINE))


def unknown_flags(args, known):
    """The --flags in `args` that are not in `known`."""
    names = [re.match(r"--([A-Za-z0-9_]+)", a) for a in args]
    return sorted({m.group(1) for m in names if m} - known)


def flag_values(args, name):
    """The values of --name=VALUE in `args`, in order."""
    prefix = "--%s=" % name
    return [a[len(prefix):] for a in args if a.startswith(prefix)]


def flag_file_args(text):
    """The flag lines of an Abseil --flagfile (comments and blank lines dropped)."""
    return [l.strip() for l in text.splitlines() if l.strip() and not l.lstrip().startswith("#")]


TRAINERS = ("inprocess", "workers")
DEVICE = re.compile(r"auto|cpu|cuda(:[0-9]+)?")


def flag_value_problems(where, args):
    """--trainer and --device values the binaries would reject or misread (they are only
    checked at run time, after connecting to the database)."""
    problems = []
    for trainer in flag_values(args, "trainer"):
        if trainer not in TRAINERS:
            problems.append("%s: --trainer=%s is not one of %s" % (where, trainer, TRAINERS))
    for device in flag_values(args, "device"):
        if not DEVICE.fullmatch(device):
            problems.append("%s: --device=%s is not auto, cpu, cuda or cuda:N" % (where, device))
    return problems


def interpolate(value, env):
    """Compose's variable interpolation of one string: $$, ${VAR}, $VAR, ${VAR:-default} and
    ${VAR-default} (the forms these files use), with `env` as the environment."""
    def substitute(match):
        if match.group(0) == "$$":
            return "$"
        name = match.group("braced") or match.group("plain")
        operator, default = match.group("operator"), match.group("default") or ""
        if operator == ":-":
            return env.get(name) or default
        if operator == "-":
            return env.get(name, default)
        return env.get(name, "")
    return re.sub(r"\$\$|\$\{(?P<braced>\w+)(?:(?P<operator>:?-)(?P<default>[^}]*))?\}"
                  r"|\$(?P<plain>\w+)", substitute, value)


def compose_args(service, env):
    """The command of a Compose service after interpolation in the environment `env`."""
    command = service.get("command") or []
    if isinstance(command, str):
        command = command.split()
    return [interpolate(str(a), env) for a in command]


# The environments compose.yaml is checked in: a plain `docker compose up`, and the worker mode
# that compose.yaml and README.md document (`VERITY_TRAINER=workers ... --profile worker up`).
COMPOSE_PLAIN_ENV = {}
COMPOSE_WORKER_ENV = {"VERITY_TRAINER": "workers"}
WORKER_PROFILE = "worker"


def check_compose(compose, server_flags, worker_flags):
    """Problems with compose.yaml; the flag sets are those of the Bazel-built binaries."""
    problems = []
    services = compose.get("services", {})
    missing = {"postgres", "server", "worker"} - set(services)
    if missing:
        return ["compose: missing services %s" % sorted(missing)]
    postgres, server, worker = services["postgres"], services["server"], services["worker"]
    if not str(postgres.get("image", "")).startswith("postgres:15"):
        problems.append("compose: postgres image is not postgres:15: %s" % postgres.get("image"))
    if "healthcheck" not in postgres:
        problems.append("compose: postgres has no healthcheck for the server to wait on")
    build = server.get("build", {})
    dockerfile = os.path.normpath(os.path.join(
        DEPLOY, build.get("context", "."), build.get("dockerfile", "Dockerfile")))
    if dockerfile != deploy_path("docker", "Dockerfile"):
        problems.append("compose: server is not built from deploy/docker/Dockerfile: %s"
                        % dockerfile)
    # The worker runs the server's image; with its own copy of the build, Compose builds the
    # image for it instead of pulling verity:latest from a registry.
    if worker.get("build") != build or worker.get("image") != server.get("image"):
        problems.append("compose: worker does not have the server's build and image")

    # Profiles: a plain `up` starts the server (in-process training) but not the worker.
    if server.get("profiles"):
        problems.append("compose: server is behind profiles %s; a plain `up` would not start "
                        "it" % server.get("profiles"))
    if WORKER_PROFILE not in (worker.get("profiles") or []):
        problems.append("compose: worker is not behind the %s profile" % WORKER_PROFILE)

    for mode, env, trainer in (("plain", COMPOSE_PLAIN_ENV, "inprocess"),
                               ("worker mode", COMPOSE_WORKER_ENV, "workers")):
        command = compose_args(server, env)
        where = "compose server (%s)" % mode
        if flag_values(command, "trainer") != [trainer]:
            problems.append("%s: --trainer is %s, not %s"
                            % (where, flag_values(command, "trainer"), trainer))
        problems += ["%s: verity_server has no flag --%s" % (where, f)
                     for f in unknown_flags(command, server_flags)]
        problems += flag_value_problems(where, command)
    command = compose_args(server, COMPOSE_PLAIN_ENV)
    url = flag_values(command, "postgres_url")
    if not url or "host=postgres" not in url[0]:
        problems.append("compose: server has no --postgres_url naming host=postgres")
    if "--listen=0.0.0.0:50051" not in command:
        problems.append("compose: server does not listen on 0.0.0.0:50051")
    depends = server.get("depends_on", {})
    if not isinstance(depends, dict) or \
            depends.get("postgres", {}).get("condition") != "service_healthy":
        problems.append("compose: server does not wait for a healthy postgres")

    if worker.get("entrypoint") != ["/usr/local/bin/verity_worker"]:
        problems.append("compose: worker does not run /usr/local/bin/verity_worker")
    command = compose_args(worker, COMPOSE_WORKER_ENV)
    problems += ["compose worker: verity_worker has no flag --%s" % f
                 for f in unknown_flags(command, worker_flags)]
    problems += flag_value_problems("compose worker", command)
    url = flag_values(command, "postgres_url")
    if not url or "host=postgres" not in url[0]:
        problems.append("compose: worker has no --postgres_url naming host=postgres")
    if not flag_values(command, "device"):
        problems.append("compose: worker has no --device")
    depends = worker.get("depends_on", {})
    if not isinstance(depends, dict) or \
            depends.get("postgres", {}).get("condition") != "service_healthy":
        problems.append("compose: worker does not wait for a healthy postgres")
    devices = (worker.get("deploy", {}).get("resources", {}).get("reservations", {})
               .get("devices", []))
    if not any("gpu" in d.get("capabilities", []) for d in devices):
        problems.append("compose: worker reserves no GPU")
    return problems


def manifests(paths):
    """{(kind, name): document} over every document of the given YAML files."""
    result = {}
    for path in paths:
        for doc in yaml.safe_load_all(read(path)):
            if doc:
                result[(doc.get("kind"), doc.get("metadata", {}).get("name"))] = doc
    return result


def secret_refs(container):
    """{env name: (secret name, key)} of a container's env taken from Secrets."""
    refs = {}
    for env in container.get("env", []):
        ref = env.get("valueFrom", {}).get("secretKeyRef")
        if ref:
            refs[env["name"]] = (ref.get("name"), ref.get("key"))
    return refs


def check_deployment_basics(name, deployment, secrets):
    """Selector, non-root, and a database URL read from an existing Secret key."""
    problems = []
    if deployment.get("apiVersion") != "apps/v1":
        problems.append("%s: apiVersion is not apps/v1" % name)
    spec = deployment.get("spec", {})
    template = spec.get("template", {})
    labels = template.get("metadata", {}).get("labels", {})
    selector = spec.get("selector", {}).get("matchLabels", {})
    if not selector or any(labels.get(k) != v for k, v in selector.items()):
        problems.append("%s: selector %s does not match the pod labels %s"
                        % (name, selector, labels))
    pod = template.get("spec", {})
    if not pod.get("securityContext", {}).get("runAsNonRoot"):
        problems.append("%s: pods may run as root" % name)
    containers = pod.get("containers", [])
    if len(containers) != 1:
        return problems + ["%s: expected one container, found %d" % (name, len(containers))]
    container = containers[0]
    refs = secret_refs(container)
    url_args = [a for a in container.get("args", []) if a.startswith("--postgres_url=")]
    if len(url_args) != 1:
        return problems + ["%s: no --postgres_url argument" % name]
    variable = re.fullmatch(r"--postgres_url=\$\((\w+)\)", url_args[0])
    if not variable or variable.group(1) not in refs:
        problems.append("%s: --postgres_url does not come from a Secret-backed variable: %s"
                        % (name, url_args[0]))
    else:
        secret_name, key = refs[variable.group(1)]
        secret = secrets.get(secret_name)
        if secret is None:
            problems.append("%s: Secret %s has no manifest" % (name, secret_name))
        elif key not in secret.get("stringData", {}) and key not in secret.get("data", {}):
            problems.append("%s: Secret %s has no key %s" % (name, secret_name, key))
    return problems


def check_server_manifests(docs, secrets, server_flags):
    deployment = docs.get(("Deployment", "verity-server"))
    service = docs.get(("Service", "verity-server"))
    if deployment is None or service is None:
        return ["k8s: missing Deployment or Service verity-server"]
    problems = check_deployment_basics("verity-server", deployment, secrets)
    pod = deployment["spec"]["template"]
    container = pod["spec"]["containers"][0]
    args = container.get("args", [])
    problems += ["verity-server: verity_server has no flag --%s" % f
                 for f in unknown_flags(args, server_flags)]
    problems += flag_value_problems("verity-server", args)
    ports = {p.get("name"): p.get("containerPort") for p in container.get("ports", [])}
    grpc_port = ports.get("grpc")
    if grpc_port is None:
        problems.append("verity-server: no container port named grpc")
    # The server serves TLS off loopback, and the kubelet's gRPC probes cannot speak TLS: the
    # probes open a TCP connection to the gRPC port.
    for probe in ("readinessProbe", "livenessProbe"):
        tcp = container.get(probe, {}).get("tcpSocket")
        if not tcp:
            problems.append("verity-server: %s is not a TCP probe of the gRPC port" % probe)
        elif tcp.get("port") not in ("grpc", grpc_port):
            problems.append("verity-server: %s probes port %s, the server listens on %s"
                            % (probe, tcp.get("port"), grpc_port))
    # TLS: plaintext is refused off loopback, so the args name the certificate and key, which
    # come from a mounted Secret.
    if not flag_values(args, "tls_cert") or not flag_values(args, "tls_key"):
        problems.append("verity-server: no --tls_cert/--tls_key (plaintext is refused off "
                        "loopback)")
    mounted = {m.get("name"): m.get("mountPath") for m in container.get("volumeMounts", [])}
    secret_volumes = {v["name"]: v["secret"].get("secretName")
                      for v in pod["spec"].get("volumes", []) if "secret" in v}
    for path in flag_values(args, "tls_cert") + flag_values(args, "tls_key"):
        if not any(name in secret_volumes and path.startswith(mount.rstrip("/") + "/")
                   for name, mount in mounted.items()):
            problems.append("verity-server: %s is not in a mounted Secret" % path)
    for name, secret in secret_volumes.items():
        if name in mounted and secret not in secrets:
            problems.append("verity-server: Secret %s is not in secret.example.yaml" % secret)
    listen = [a for a in container.get("args", []) if a.startswith("--listen=")]
    if not listen or not listen[0].endswith(":%s" % grpc_port):
        problems.append("verity-server: --listen %s is not the grpc port %s" % (listen, grpc_port))
    labels = pod["metadata"]["labels"]
    selector = service.get("spec", {}).get("selector", {})
    if not selector or any(labels.get(k) != v for k, v in selector.items()):
        problems.append("verity-server Service: selector %s does not match the pods" % selector)
    service_ports = service.get("spec", {}).get("ports", [])
    if not any(p.get("targetPort") in ("grpc", grpc_port) for p in service_ports):
        problems.append("verity-server Service: no port targets the grpc container port")
    return problems


def check_worker_manifest(docs, secrets, worker_flags):
    deployment = docs.get(("Deployment", "verity-worker"))
    if deployment is None:
        return ["k8s: missing Deployment verity-worker"]
    problems = check_deployment_basics("verity-worker", deployment, secrets)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    if container.get("command") != ["/usr/local/bin/verity_worker"]:
        problems.append("verity-worker: command is not /usr/local/bin/verity_worker")
    args = container.get("args", [])
    problems += ["verity-worker: verity_worker has no flag --%s" % f
                 for f in unknown_flags(args, worker_flags)]
    problems += flag_value_problems("verity-worker", args)
    if not any(d.startswith("cuda") for d in flag_values(args, "device")):
        problems.append("verity-worker: no --device=cuda or cuda:N for the GPU it requests")
    limits = container.get("resources", {}).get("limits", {})
    if str(limits.get("nvidia.com/gpu")) != "1":
        problems.append("verity-worker: does not request nvidia.com/gpu: 1 (limits: %s)" % limits)
    return problems


def check_training_mode(docs):
    """The server's --trainer matches the worker Deployment: with --trainer=workers nothing
    trains unless a worker runs, so the worker Deployment must exist with replicas."""
    server = docs.get(("Deployment", "verity-server"))
    if server is None:
        return ["k8s: missing Deployment verity-server"]
    args = server["spec"]["template"]["spec"]["containers"][0].get("args", [])
    trainers = flag_values(args, "trainer") or ["inprocess"]  # the server's default
    if trainers[-1] != "workers":
        return []
    worker = docs.get(("Deployment", "verity-worker"))
    replicas = (worker or {}).get("spec", {}).get("replicas", 1)  # Kubernetes' default: 1
    if worker is None or not replicas:
        return ["k8s: verity-server has --trainer=workers but no verity-worker replicas "
                "(nothing would train)"]
    return []


# ---------------------------------------------------------------------------------------------
# Tests


class YamlTest(unittest.TestCase):

    def test_every_yaml_file_parses(self):
        paths = sorted(os.path.join(root, name) for root, _, names in os.walk(DEPLOY)
                       for name in names if name.endswith((".yaml", ".yml")))
        # Guards against a glob in deploy/BUILD that stops shipping the files.
        self.assertEqual(paths, [deploy_path("compose.yaml"),
                                 deploy_path("k8s", "secret.example.yaml"),
                                 deploy_path("k8s", "server.yaml"),
                                 deploy_path("k8s", "worker.yaml")])
        for path in paths:
            with self.subTest(path=path):
                docs = [d for d in yaml.safe_load_all(read(path)) if d is not None]
                self.assertTrue(docs, "%s holds no YAML document" % path)
                self.assertTrue(all(isinstance(d, dict) for d in docs), path)

    def test_broken_yaml_is_rejected(self):
        with self.assertRaises(yaml.YAMLError):
            list(yaml.safe_load_all("services:\n  server:\n    command: [--listen\n"))


class DockerfileTest(unittest.TestCase):

    def setUp(self):
        self.makefile = read(deploy_path("repo_Makefile"))
        self.packages = makefile_packages(self.makefile)
        self.dockerfile = read(deploy_path("docker", "Dockerfile"))

    def test_makefile_build_installs_the_package_list(self):
        self.assertIn("libpqxx-dev", self.packages)
        self.assertEqual(check_makefile_build_installs_packages(self.makefile), [])

    def test_makefile_build_builds_the_image_binaries(self):
        self.assertEqual(check_makefile_build_builds_the_image_binaries(self.makefile), [])
        narrowed = self.makefile.replace(
            "$(BAZEL) build //...", "$(BAZEL) build //server:verity_server //client:verity")
        self.assertNotEqual(narrowed, self.makefile)
        self.assertEqual(check_makefile_build_builds_the_image_binaries(narrowed),
                         ["Makefile target build does not build //server/training:verity_worker"])

    def test_dockerfile_builds_with_the_makefile_and_derives_runtime_packages(self):
        self.assertEqual(check_dockerfile(self.dockerfile, self.packages), [])

    def test_checks_reject_a_dockerfile_without_the_worker(self):
        without = self.dockerfile.replace(" bazel-bin/server/training/verity_worker", "").replace(
            " /out/bin/verity_worker", "")
        self.assertNotEqual(without, self.dockerfile)
        self.assertEqual(check_dockerfile(without, self.packages), [
            "runtime_packages.sh is not run on verity_worker",
            "build stage does not collect bazel-bin/server/training/verity_worker (cp -L)"])

    def test_no_deployment_file_copies_the_package_list(self):
        checked = 0
        for root, _, names in os.walk(DEPLOY):
            for name in names:
                path = os.path.join(root, name)
                # The Makefile itself, and the test's own files, which name packages they use.
                if name in ("repo_Makefile", "README.md") or name.startswith("deploy_test"):
                    continue
                checked += 1
                with self.subTest(path=path):
                    self.assertLess(len(package_list_copies(read(path), self.packages)), 2,
                                    "%s names Makefile packages %s" % (
                                        path, package_list_copies(read(path), self.packages)))
        self.assertGreaterEqual(checked, 11)

    def test_checks_reject_a_dockerfile_with_its_own_package_list(self):
        copied = self.dockerfile.replace(
            "RUN make build",
            "RUN apt-get update && apt-get install -y --no-install-recommends bazel-bootstrap "
            "g++ libgrpc++-dev libpqxx-dev \\\n && bazel build //...\nRUN make build")
        problems = check_dockerfile(copied, self.packages)
        self.assertIn("Dockerfile installs libpqxx-dev itself; package lists live in the "
                      "Makefile or come from runtime_packages.sh", problems)
        self.assertTrue({"bazel-bootstrap", "g++", "libgrpc++-dev", "libpqxx-dev"} <=
                        set(package_list_copies(copied, self.packages)))

    def test_checks_reject_a_dockerfile_that_bypasses_make(self):
        bypassed = self.dockerfile.replace("RUN make build", "RUN bazel build //...")
        self.assertIn("build stage does not run `make build` (the README's build)",
                      check_dockerfile(bypassed, self.packages))
        hand_listed, replaced = re.subn(
            r"xargs -a \S+\s*\\\s*\n\s*env DEBIAN_FRONTEND=noninteractive apt-get install",
            "apt-get install libpq5 libpqxx-6.4", self.dockerfile)
        self.assertEqual(replaced, 1)
        problems = check_dockerfile(hand_listed, self.packages)
        self.assertIn("runtime stage does not apt-get install the derived package list",
                      problems)
        self.assertIn("Dockerfile installs libpq5 itself; package lists live in the "
                      "Makefile or come from runtime_packages.sh", problems)


class RuntimePackagesTest(unittest.TestCase):

    def run_script(self, *binaries, env=None):
        return subprocess.run([deploy_path("runtime_packages.sh")] + list(binaries),
                              capture_output=True, text=True, env=env, timeout=120)

    def test_lists_the_runtime_packages_of_the_built_binaries(self):
        # The three binaries of the image, as the Dockerfile runs it.
        result = self.run_script(SERVER_BINARY, WORKER_BINARY, CLI_BINARY)
        self.assertEqual(result.returncode, 0, result.stderr)
        packages = result.stdout.split()
        self.assertEqual(packages, sorted(set(packages)))
        for expected in ("libc6", "libstdc++6", "libpq5", "libabsl20220623"):
            self.assertIn(expected, packages)
        for prefix in ("libgrpc++", "libpqxx-", "libprotobuf", "libtorch"):
            self.assertTrue(any(p.startswith(prefix) for p in packages),
                            "no %s* package in %s" % (prefix, packages))
        # Headers and static libraries stay in the build stage.
        self.assertEqual([p for p in packages if p.endswith("-dev")], [])
        self.assertNotIn("bazel-bootstrap", packages)

    def test_the_worker_needs_the_database_and_libtorch_packages(self):
        # The worker's libraries are derived from the worker itself, not only from the server.
        result = self.run_script(WORKER_BINARY)
        self.assertEqual(result.returncode, 0, result.stderr)
        packages = result.stdout.split()
        self.assertIn("libpq5", packages)
        for prefix in ("libpqxx-", "libtorch"):
            self.assertTrue(any(p.startswith(prefix) for p in packages),
                            "no %s* package in %s" % (prefix, packages))
        self.assertEqual([p for p in packages if p.endswith("-dev")], [])

    def test_fails_on_a_library_no_package_owns(self):
        for binary in (SERVER_BINARY, WORKER_BINARY):
            with self.subTest(binary=binary), tempfile.TemporaryDirectory() as lib_dir:
                libpq = subprocess.run(["ldd", binary], capture_output=True, text=True)
                source = re.search(r"libpq\.so\.5 => (\S+)", libpq.stdout).group(1)
                shutil.copy(source, os.path.join(lib_dir, "libpq.so.5"))
                env = dict(os.environ, LD_LIBRARY_PATH=lib_dir)
                result = self.run_script(binary, env=env)
                self.assertEqual(result.returncode, 1)
                self.assertIn("libpq.so.5 belongs to no installed Debian package", result.stderr)

    def test_fails_on_a_missing_binary(self):
        result = self.run_script("deploy/no_such_binary")
        self.assertEqual(result.returncode, 1)
        self.assertIn("no such file: deploy/no_such_binary", result.stderr)


class SystemdTest(unittest.TestCase):
    """The units name /usr/local/bin binaries, where an installation puts them. `systemd-analyze
    verify` insists that ExecStart exists, so each unit is verified with its ExecStart pointed
    at the Bazel-built binary (verity_server, verity_worker); nothing else in the units is
    changed."""

    def setUp(self):
        self.binaries = {"verity-server.service": SERVER_BINARY,
                         "verity-worker.service": WORKER_BINARY}
        self.flag_files = {"verity-server.flags.example": SERVER_BINARY,
                           "verity-worker.flags.example": WORKER_BINARY}
        self.units = {name: read(deploy_path("systemd", name)) for name in UNITS}
        self.verifiable = {
            name: with_exec_start(text, os.path.abspath(self.binaries[name]))
            for name, text in self.units.items()}

    def test_units_pass_systemd_analyze_verify(self):
        for name, binary in self.binaries.items():
            self.assertIn("ExecStart=" + os.path.abspath(binary) + " --flagfile=",
                          self.verifiable[name])
            self.assertTrue(os.access(binary, os.X_OK), binary)
        self.assertEqual(verify_units(self.verifiable), [])

    def test_verify_reports_a_misspelled_key_and_a_missing_binary(self):
        broken = dict(self.verifiable)
        broken["verity-server.service"] = broken["verity-server.service"].replace(
            "Restart=on-failure", "Restrat=on-failure")
        problems = verify_units(broken)
        self.assertTrue(any("Unknown key 'Restrat'" in p for p in problems), problems)
        missing = {"verity-worker.service": with_exec_start(
            self.units["verity-worker.service"], "/nonexistent/verity_worker")}
        problems = verify_units(missing)
        self.assertTrue(any("/nonexistent/verity_worker" in p for p in problems), problems)

    def test_units_are_hardened(self):
        for name, text in self.verifiable.items():
            with self.subTest(unit=name):
                self.assertEqual(unit_exposure_problems(name, text), [])
        bare = "[Service]\nExecStart=/bin/true\n"
        self.assertNotEqual(unit_exposure_problems("bare.service", bare), [])

    def test_units_restart_on_failure_as_the_dedicated_user(self):
        expected_binary = {"verity-server.service": "/usr/local/bin/verity_server",
                           "verity-worker.service": "/usr/local/bin/verity_worker"}
        expected_flag_file = {"verity-server.service": "/etc/verity/verity-server.flags",
                              "verity-worker.service": "/etc/verity/verity-worker.flags"}
        for name, text in self.units.items():
            with self.subTest(unit=name):
                settings = unit_settings(text)
                self.assertEqual(settings.get(("Service", "User")), ["verity"])
                self.assertEqual(settings.get(("Service", "Group")), ["verity"])
                self.assertEqual(settings.get(("Service", "Restart")), ["on-failure"])
                self.assertEqual(settings.get(("Service", "NoNewPrivileges")), ["yes"])
                self.assertEqual(settings.get(("Service", "ProtectSystem")), ["strict"])
                exec_start = settings.get(("Service", "ExecStart"), [""])[0].split()
                self.assertEqual(exec_start, [expected_binary[name],
                                              "--flagfile=" + expected_flag_file[name]])
                self.assertEqual(settings.get(("Install", "WantedBy")), ["multi-user.target"])
        self.assertEqual(unit_settings(self.units["verity-server.service"])
                         .get(("Service", "PrivateDevices")), ["yes"])

    def test_sysusers_creates_the_user_the_units_run_as(self):
        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, "etc"))
            result = subprocess.run(
                [SYSTEMD_SYSUSERS, "--root=" + root,
                 os.path.abspath(deploy_path("systemd", "verity.sysusers"))],
                capture_output=True, text=True, timeout=60)
            self.assertEqual(result.returncode, 0, result.stderr)
            passwd = read(os.path.join(root, "etc", "passwd"))
        entry = [l.split(":") for l in passwd.splitlines() if l.startswith("verity:")]
        self.assertEqual(len(entry), 1, passwd)
        self.assertLess(int(entry[0][2]), 1000)  # a system user
        self.assertEqual(entry[0][5:], ["/var/lib/verity", "/usr/sbin/nologin"])

    @staticmethod
    def parse_flag_file(binary, flag_file):
        # --help: parse the flag file, print usage and exit, without connecting to a database.
        result = subprocess.run([binary, "--flagfile=" + flag_file, "--help"],
                                capture_output=True, text=True, timeout=60)
        return result.stdout + result.stderr

    def test_flag_file_examples_are_accepted_by_their_binaries(self):
        banner = {SERVER_BINARY: "Verity annotation aggregation server",
                  WORKER_BINARY: "Verity training worker"}
        for name, binary in self.flag_files.items():
            with self.subTest(flag_file=name):
                path = deploy_path("systemd", name)
                output = self.parse_flag_file(binary, path)
                self.assertIn(banner[binary], output)
                self.assertNotIn("ERROR", output)
                args = flag_file_args(read(path))
                self.assertEqual(unknown_flags(args, flag_names(binary)), [])
                self.assertEqual(flag_value_problems(name, args), [])

    def test_flag_files_choose_the_training_mode_and_device(self):
        server = flag_file_args(read(deploy_path("systemd", "verity-server.flags.example")))
        self.assertEqual(flag_values(server, "trainer"), ["inprocess"])
        worker = flag_file_args(read(deploy_path("systemd", "verity-worker.flags.example")))
        self.assertEqual(flag_values(worker, "device"), ["cuda:0"])
        self.assertEqual(len(flag_values(worker, "postgres_url")), 1)

    def test_flag_file_check_rejects_unknown_flags(self):
        with tempfile.NamedTemporaryFile("w", suffix=".flags") as bad:
            bad.write("--listen=0.0.0.0:50051\n--postgres_uri=host=db\n")
            bad.flush()
            self.assertIn("ERROR: Unknown command line flag 'postgres_uri'",
                          self.parse_flag_file(SERVER_BINARY, bad.name))
        with tempfile.NamedTemporaryFile("w", suffix=".flags") as bad:
            # --trainer is the server's flag, not the worker's.
            bad.write("--postgres_url=host=db\n--trainer=workers\n")
            bad.flush()
            self.assertIn("ERROR: Unknown command line flag 'trainer'",
                          self.parse_flag_file(WORKER_BINARY, bad.name))
            self.assertEqual(unknown_flags(flag_file_args(read(bad.name)),
                                           flag_names(WORKER_BINARY)), ["trainer"])
        self.assertEqual(flag_value_problems("x", ["--trainer=worker", "--device=gpu0"]), [
            "x: --trainer=worker is not one of ('inprocess', 'workers')",
            "x: --device=gpu0 is not auto, cpu, cuda or cuda:N"])


class ComposeAndKubernetesTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.server_flags = flag_names(SERVER_BINARY)
        cls.worker_flags = flag_names(WORKER_BINARY)
        cls.compose = yaml.safe_load(read(deploy_path("compose.yaml")))
        cls.docs = cls.load_manifests()
        cls.secrets = {name: doc for (kind, name), doc in cls.docs.items() if kind == "Secret"}

    @staticmethod
    def load_manifests():
        return manifests([deploy_path("k8s", n)
                          for n in ("secret.example.yaml", "server.yaml", "worker.yaml")])

    def test_server_and_worker_flags_are_read(self):
        self.assertTrue({"listen", "postgres_url", "pool_size", "trainer", "device"} <=
                        self.server_flags, self.server_flags)
        self.assertTrue({"postgres_url", "device", "name", "lease_seconds", "poll_ms",
                         "max_attempts", "once"} <= self.worker_flags, self.worker_flags)
        # Two different binaries: the worker has no server flags.
        self.assertNotIn("trainer", self.worker_flags)
        self.assertNotIn("listen", self.worker_flags)

    def test_interpolation(self):
        value = "--a=${X:-d} --b=${Y-e} --c=${Z} --d=$W --e=$$X"
        self.assertEqual(interpolate(value, {}), "--a=d --b=e --c= --d= --e=$X")
        self.assertEqual(interpolate(value, {"X": "", "Y": "", "Z": "z", "W": "w"}),
                         "--a=d --b= --c=z --d=w --e=$X")
        self.assertEqual(interpolate(value, {"X": "x"}), "--a=x --b=e --c= --d= --e=$X")

    def test_compose_runs_postgres_server_and_worker(self):
        self.assertEqual(check_compose(self.compose, self.server_flags, self.worker_flags), [])

    def test_compose_trains_in_process_unless_in_worker_mode(self):
        server = self.compose["services"]["server"]
        self.assertEqual(flag_values(compose_args(server, COMPOSE_PLAIN_ENV), "trainer"),
                         ["inprocess"])
        self.assertEqual(flag_values(compose_args(server, COMPOSE_WORKER_ENV), "trainer"),
                         ["workers"])
        worker = self.compose["services"]["worker"]
        self.assertEqual(worker["profiles"], [WORKER_PROFILE])
        self.assertEqual(flag_values(compose_args(worker, COMPOSE_PLAIN_ENV), "device"),
                         ["cuda:0"])

    def test_compose_check_rejects_a_server_on_the_embedded_database(self):
        compose = yaml.safe_load(read(deploy_path("compose.yaml")))
        server_command = compose["services"]["server"]["command"]
        compose["services"]["server"]["command"] = ["--listen=0.0.0.0:50051"] + [
            a for a in server_command if a.startswith("--trainer=")]
        del compose["services"]["worker"]["deploy"]
        self.assertEqual(check_compose(compose, self.server_flags, self.worker_flags), [
            "compose: server has no --postgres_url naming host=postgres",
            "compose: worker reserves no GPU"])

    def test_compose_check_rejects_a_fixed_trainer_and_unknown_flags(self):
        compose = yaml.safe_load(read(deploy_path("compose.yaml")))
        server, worker = compose["services"]["server"], compose["services"]["worker"]
        server["command"] = [a for a in server["command"] if not a.startswith("--trainer=")]
        server["command"].append("--trainer=workers")
        worker["command"] = worker["command"] + ["--trainer=workers", "--device=gpu"]
        self.assertEqual(check_compose(compose, self.server_flags, self.worker_flags), [
            "compose server (plain): --trainer is ['workers'], not inprocess",
            "compose worker: verity_worker has no flag --trainer",
            "compose worker: --device=gpu is not auto, cpu, cuda or cuda:N"])

    def test_compose_check_rejects_a_worker_outside_its_profile_or_image(self):
        compose = yaml.safe_load(read(deploy_path("compose.yaml")))
        worker = compose["services"]["worker"]
        del worker["profiles"]
        del worker["build"]
        worker["entrypoint"] = ["/usr/local/bin/verity_server"]
        compose["services"]["server"]["profiles"] = [WORKER_PROFILE]
        self.assertEqual(check_compose(compose, self.server_flags, self.worker_flags), [
            "compose: worker does not have the server's build and image",
            "compose: server is behind profiles ['worker']; a plain `up` would not start it",
            "compose: worker is not behind the worker profile",
            "compose: worker does not run /usr/local/bin/verity_worker"])

    def test_manifests_have_the_expected_kinds(self):
        self.assertEqual(sorted(self.docs), [("Deployment", "verity-server"),
                                             ("Deployment", "verity-worker"),
                                             ("Secret", "verity-db"),
                                             ("Secret", "verity-tls"),
                                             ("Service", "verity-server")])
        secret = self.secrets["verity-db"]
        self.assertEqual(secret["apiVersion"], "v1")
        # An example: the committed value is a placeholder, never a real password.
        self.assertIn("CHANGE_ME", secret["stringData"]["postgres-url"])

    def test_server_deployment_probes_the_grpc_port_and_reads_the_secrets(self):
        self.assertEqual(check_server_manifests(self.docs, self.secrets, self.server_flags), [])

    def test_worker_deployment_runs_the_worker_on_a_gpu(self):
        self.assertEqual(check_worker_manifest(self.docs, self.secrets, self.worker_flags), [])
        worker = self.docs[("Deployment", "verity-worker")]
        self.assertEqual(worker["spec"]["replicas"], 1)
        args = worker["spec"]["template"]["spec"]["containers"][0]["args"]
        self.assertEqual(flag_values(args, "device"), ["cuda:0"])

    def test_server_trains_with_the_workers(self):
        server = self.docs[("Deployment", "verity-server")]
        args = server["spec"]["template"]["spec"]["containers"][0]["args"]
        self.assertEqual(flag_values(args, "trainer"), ["workers"])
        self.assertEqual(check_training_mode(self.docs), [])

    def test_training_mode_check_rejects_workers_without_a_worker(self):
        docs = self.load_manifests()
        docs[("Deployment", "verity-worker")]["spec"]["replicas"] = 0
        expected = ["k8s: verity-server has --trainer=workers but no verity-worker replicas "
                    "(nothing would train)"]
        self.assertEqual(check_training_mode(docs), expected)
        del docs[("Deployment", "verity-worker")]
        self.assertEqual(check_training_mode(docs), expected)
        args = docs[("Deployment", "verity-server")]["spec"]["template"]["spec"][
            "containers"][0]["args"]
        args[:] = [a for a in args if not a.startswith("--trainer=")]
        self.assertEqual(check_training_mode(docs), [])  # in-process: no worker needed

    def test_manifest_checks_reject_a_server_without_tls_from_a_secret(self):
        docs = self.load_manifests()
        container = docs[("Deployment", "verity-server")]["spec"]["template"]["spec"][
            "containers"][0]
        container["args"] = [a for a in container["args"] if not a.startswith("--tls_key=")]
        container["volumeMounts"] = [m for m in container["volumeMounts"] if m["name"] != "tls"]
        self.assertEqual(check_server_manifests(docs, self.secrets, self.server_flags), [
            "verity-server: no --tls_cert/--tls_key (plaintext is refused off loopback)",
            "verity-server: /etc/verity/tls/tls.crt is not in a mounted Secret"])

    def test_manifest_checks_reject_http_probes_and_a_missing_secret_key(self):
        docs = self.load_manifests()
        container = docs[("Deployment", "verity-server")]["spec"]["template"]["spec"][
            "containers"][0]
        container["readinessProbe"] = {"httpGet": {"path": "/", "port": 50051}}
        container["env"][0]["valueFrom"]["secretKeyRef"]["key"] = "url"
        container["args"].append("--trainer=worker")
        self.assertEqual(check_server_manifests(docs, self.secrets, self.server_flags), [
            "verity-server: Secret verity-db has no key url",
            "verity-server: --trainer=worker is not one of ('inprocess', 'workers')",
            "verity-server: readinessProbe is not a TCP probe of the gRPC port"])
        worker = docs[("Deployment", "verity-worker")]["spec"]["template"]["spec"][
            "containers"][0]
        del worker["resources"]["limits"]["nvidia.com/gpu"]
        worker["args"] = [a for a in worker["args"] if not a.startswith("--device=")]
        worker["args"] += ["--pool_size=2"]
        self.assertEqual(check_worker_manifest(docs, self.secrets, self.worker_flags), [
            "verity-worker: verity_worker has no flag --pool_size",
            "verity-worker: no --device=cuda or cuda:N for the GPU it requests",
            "verity-worker: does not request nvidia.com/gpu: 1 (limits: {'memory': '32Gi'})"])


# ---------------------------------------------------------------------------------------------
# Runner: one <testcase> per test in Bazel's test.xml, so tools/test_summary.py counts them.


class JUnitResult(unittest.TextTestResult):

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cases = []

    def startTest(self, test):
        self._started = time.monotonic()
        super().startTest(test)

    def _record(self, test, kind=None, message="", subtest=None):
        classname, _, name = test.id().rpartition(".")
        if subtest is not None:
            name += " " + subtest._subDescription()
        classname = classname.replace("__main__", "deploy_test")
        seconds = 0.0 if subtest is not None else time.monotonic() - self._started
        self.cases.append((classname, name, seconds, kind, message))

    def addSuccess(self, test):
        super().addSuccess(test)
        self._record(test)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._record(test, "failure", self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        self._record(test, "error", self._exc_info_to_string(err, test))

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            kind = "failure" if issubclass(err[0], test.failureException) else "error"
            self._record(test, kind, self._exc_info_to_string(err, test), subtest)


def write_junit(result, path):
    suite = ET.Element("testsuite", name="deploy_test", tests=str(len(result.cases)),
                       failures=str(sum(1 for c in result.cases if c[3] == "failure")),
                       errors=str(sum(1 for c in result.cases if c[3] == "error")))
    for classname, name, seconds, kind, message in result.cases:
        case = ET.SubElement(suite, "testcase", classname=classname, name=name,
                             time="%.3f" % seconds)
        if kind:
            ET.SubElement(case, kind, message=message.strip().splitlines()[-1]).text = message
    suites = ET.Element("testsuites")
    suites.append(suite)
    ET.ElementTree(suites).write(path, encoding="utf-8", xml_declaration=True)


def main():
    # Bazel runs the test in its runfiles tree, where the workspace's files sit at their
    # repository paths; run by hand, the repository root works the same (with bazel-bin).
    if not os.path.isdir(DEPLOY):
        sys.exit("run from the workspace root (or through `bazel test //deploy:deploy_test`)")
    if "TEST_SRCDIR" not in os.environ:
        global SERVER_BINARY, WORKER_BINARY, CLI_BINARY
        SERVER_BINARY, WORKER_BINARY, CLI_BINARY = (
            "bazel-bin/" + SERVER_BINARY, "bazel-bin/" + WORKER_BINARY, "bazel-bin/" + CLI_BINARY)
    suite = unittest.defaultTestLoader.loadTestsFromModule(sys.modules[__name__])
    runner = unittest.TextTestRunner(resultclass=JUnitResult, verbosity=2, stream=sys.stdout)
    result = runner.run(suite)
    if os.environ.get("XML_OUTPUT_FILE"):
        write_junit(result, os.environ["XML_OUTPUT_FILE"])
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
