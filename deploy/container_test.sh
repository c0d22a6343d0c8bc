#!/usr/bin/env bash
# Builds Verity's container image with Podman and runs it as deploy/compose.yaml describes,
# without any registry: the base images come from Debian's archive through debootstrap.
#
#   1. base: `debootstrap --variant=minbase bookworm`, imported as localhost/debian:bookworm,
#      and a slimmed copy (no docs, manual pages, translations) as localhost/debian:bookworm-slim,
#      the two FROM images of deploy/docker/Dockerfile;
#   2. build: deploy/docker/Dockerfile as localhost/verity:latest (with the host's Bazel disk
#      cache mounted, when there is one) and deploy/docker/postgres/ as
#      localhost/postgres:15-bookworm (Debian's postgresql-15, standing in for the official
#      image compose.yaml names, which cannot be pulled here);
#   3. start: compose.yaml's postgres, server, server-b and worker services, with the commands,
#      environment and volumes compose.yaml gives them (read from it, interpolated as Compose
#      would with VERITY_TRAINER=workers, since the worker runs), on a Podman network;
#   4. check: the server's Compose health check, both replicas answering by name and on their
#      published ports, a submit to one replica, a fit that the worker runs, and a posterior
#      query on the other replica, all with the `verity` CLI of the image.
#
# Before all that it checks deploy/k8s/*.yaml against the Kubernetes API schema of Debian's
# python3-kubernetes (deploy/k8s_schema_check.py; no cluster is needed or used).
#
# Usage (as root, from anywhere): deploy/container_test.sh
# Prerequisites (Debian 12):
#   apt-get install podman buildah debootstrap runc openssl python3-yaml python3-kubernetes
#
# Environment:
#   CONTAINER_TEST_REBUILD_BASE=1  make the base images again even if they exist
#   CONTAINER_TEST_NO_DISK_CACHE=1 build without the host's Bazel disk cache (a full build)
#   CONTAINER_TEST_JOBS=N          Bazel --jobs in the image build (default 2)
#   CONTAINER_TEST_LAYERS=1        keep Podman's layer cache (the build stage: about 4 GB per
#                                  base image), so that a rebuild skips `make deps`
#   CONTAINER_TEST_KEEP=1          leave the containers, network and volume running
#   CONTAINER_TEST_REMOVE_IMAGES=1 also remove the images this script made
#   DEBIAN_MIRROR                  archive for debootstrap (default http://deb.debian.org/debian)
#
# What this machine needs (see deploy/README.md, "Containers, built and run"): Podman's default
# OCI runtime crun fails on its hybrid cgroups, so every podman call here runs with runc; and
# the VM refuses rlimit changes, so a containers.conf with `default_ulimits = []` is passed
# through CONTAINERS_CONF.
#
# Exit status: 0 when every check passed; 1 otherwise (the failing phase is printed last).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

runtime=${CONTAINER_TEST_RUNTIME:-runc}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
jobs=${CONTAINER_TEST_JOBS:-2}
disk_cache=$HOME/.cache/verity/bazel-disk-cache   # the path .bazelrc's --disk_cache names
network=verity-ct
subnet_prefix=10.89.231
volume=verity-ct-pgdata
containers=(verity-ct-worker verity-ct-server-b verity-ct-server verity-ct-postgres)
base_image=localhost/debian:bookworm
slim_image=localhost/debian:bookworm-slim
verity_image=localhost/verity:latest
postgres_image=localhost/postgres:15-bookworm

if [[ $(id -u) != 0 ]]; then
  echo "container_test: run as root (rootful Podman and debootstrap)" >&2
  exit 1
fi
missing=()
for tool in podman debootstrap runc openssl python3; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
/usr/bin/python3 -c 'import yaml' 2>/dev/null || missing+=(python3-yaml)
/usr/bin/python3 -c 'import kubernetes' 2>/dev/null || missing+=(python3-kubernetes)
if (( ${#missing[@]} )); then
  echo "container_test: missing ${missing[*]}; install with:" >&2
  echo "  apt-get install -y --no-install-recommends podman buildah debootstrap runc openssl" \
    "python3-yaml python3-kubernetes" >&2
  exit 1
fi

work=$(mktemp -d /var/tmp/verity-container-test.XXXXXX)
export CONTAINERS_CONF=$work/containers.conf
cat >"$CONTAINERS_CONF" <<'EOF'
[containers]
# This VM refuses rlimit changes, and Podman sets RLIMIT_NOFILE/NPROC by default.
default_ulimits = []
EOF
pod() { podman --runtime "$runtime" "$@"; }

phase=setup
phase_start=$(date +%s)
timings=()
begin() {
  phase=$1
  phase_start=$(date +%s)
  echo
  echo "== $phase"
}
end() {
  local seconds=$(( $(date +%s) - phase_start ))
  timings+=("$(printf '%-44s %5d s' "$phase" "$seconds")")
  echo "-- $phase: ${seconds} s"
}

cleanup() {
  local status=$?
  set +e
  if [[ ${CONTAINER_TEST_KEEP:-0} != 1 ]]; then
    for c in "${containers[@]}"; do pod rm -f -t 10 "$c" >/dev/null 2>&1; done
    pod volume rm -f "$volume" >/dev/null 2>&1
    pod network rm -f "$network" >/dev/null 2>&1
    if [[ ${CONTAINER_TEST_REMOVE_IMAGES:-0} == 1 ]]; then
      pod rmi -f "$verity_image" "$postgres_image" "$slim_image" "$base_image" >/dev/null 2>&1
    fi
    rm -rf "$work"
  else
    echo "kept: containers ${containers[*]}, network $network, volume $volume, files $work"
  fi
  echo
  echo "== timings"
  printf '%s\n' "${timings[@]}"
  if (( status == 0 )); then
    echo "container_test: PASS"
  else
    echo "container_test: FAIL in phase: $phase"
  fi
}
trap cleanup EXIT

# Leftovers of an interrupted run.
for c in "${containers[@]}"; do pod rm -f -t 0 "$c" >/dev/null 2>&1 || true; done
pod volume rm -f "$volume" >/dev/null 2>&1 || true
pod network rm -f "$network" >/dev/null 2>&1 || true

# The image that a new one replaced under the same tag (the verity image's runtime layer
# alone is over 1 GB); kept if something still uses it.
remove_replaced() {  # OLD_ID TAG
  if [[ -n $1 && $1 != "$(pod image inspect --format '{{.Id}}' "$2")" ]]; then
    pod rmi "$1" >/dev/null 2>&1 || true
  fi
}

begin "0. Kubernetes manifests against the API schema"
/usr/bin/python3 deploy/k8s_schema_check.py deploy/k8s/*.yaml
end

# ------------------------------------------------------------------------------------------
# 1. Base images from Debian's archive.

begin "1. base images (debootstrap + podman import)"
if [[ ${CONTAINER_TEST_REBUILD_BASE:-0} != 1 ]] && pod image exists "$base_image" &&
   pod image exists "$slim_image"; then
  echo "$base_image and $slim_image exist (CONTAINER_TEST_REBUILD_BASE=1 makes them again)"
else
  previous_base=$(pod image inspect --format '{{.Id}}' "$base_image" 2>/dev/null || true)
  previous_slim=$(pod image inspect --format '{{.Id}}' "$slim_image" 2>/dev/null || true)
  rootfs=$work/rootfs
  debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log" >&2; exit 1; }
  # debootstrap lists only `bookworm`; the official images also follow the point updates and
  # security fixes.
  cat >"$rootfs/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
EOF
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb
  import_changes=(--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
                  --change 'CMD ["bash"]')
  tar -C "$rootfs" -c . | pod import -q "${import_changes[@]}" - "$base_image"
  # The -slim variant, as Debian's official one: dpkg leaves out documentation, manual pages
  # and translations from now on, and those already installed are removed.
  cat >"$rootfs/etc/dpkg/dpkg.cfg.d/docker-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF
  find "$rootfs/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
  find "$rootfs/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "$rootfs"/usr/share/{man,groff,info,lintian,linda}/*
  find "$rootfs/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
  tar -C "$rootfs" -c . | pod import -q "${import_changes[@]}" - "$slim_image"
  rm -rf "$rootfs"
  remove_replaced "$previous_base" "$base_image"
  remove_replaced "$previous_slim" "$slim_image"
fi
pod images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep '^localhost/debian:'
end

# ------------------------------------------------------------------------------------------
# 2. Images.

begin "2a. build deploy/docker/Dockerfile"
# Without the layer cache by default: the build stage's layers (the Makefile's packages and
# the build) take about 4 GB, and every new base image adds another copy of them.
layers=--layers=false
[[ ${CONTAINER_TEST_LAYERS:-0} == 1 ]] && layers=--layers=true
build_options=(-f deploy/docker/Dockerfile --ignorefile deploy/docker/Dockerfile.dockerignore
               "$layers" -t "$verity_image")
bazel_options="--jobs=$jobs"
if [[ ${CONTAINER_TEST_NO_DISK_CACHE:-0} != 1 && -d $disk_cache ]]; then
  # Bazel 4 keys its actions on the inherited PATH, so entries made on this host are found
  # only with the host's PATH.
  build_options+=(-v "$disk_cache:/root/.cache/verity/bazel-disk-cache")
  bazel_options+=" --action_env=PATH=$PATH"
  echo "with the Bazel disk cache $disk_cache"
fi
previous_verity=$(pod image inspect --format '{{.Id}}' "$verity_image" 2>/dev/null || true)
pod build "${build_options[@]}" --build-arg BAZEL_BUILD_OPTIONS="$bazel_options" . \
  2>&1 | tee "$work/build.log" | grep --line-buffered -E 'STEP [0-9]|COMMIT|INFO: (Elapsed|[0-9]+ processes)|ERROR' || true
[[ ${PIPESTATUS[0]} == 0 ]] || { tail -40 "$work/build.log" >&2; exit 1; }
# runtime_packages.sh's list, which the build stage prints: one package per line.
# (lines that are a bare package name; Podman's image ID is the one other bare word)
echo "runtime packages: $(grep -xE '[a-z][a-z0-9.+-]*[a-z0-9+]' "$work/build.log" |
  grep -cvxE '[0-9a-f]{64}')"
pod images --format '{{.Repository}}:{{.Tag}} {{.Size}}' "$verity_image"
remove_replaced "$previous_verity" "$verity_image"
end

begin "2b. build deploy/docker/postgres"
previous_postgres=$(pod image inspect --format '{{.Id}}' "$postgres_image" 2>/dev/null || true)
pod build -q "$layers" -t "$postgres_image" deploy/docker/postgres >/dev/null
remove_replaced "$previous_postgres" "$postgres_image"
pod images --format '{{.Repository}}:{{.Tag}} {{.Size}}' "$postgres_image"
end

# ------------------------------------------------------------------------------------------
# 3. compose.yaml's services on a Podman network.

begin "3. start postgres, server, server-b, worker"
# Each service's command, environment and container-side volume targets, as Compose would
# interpolate them with VERITY_TRAINER=workers (the worker runs); NUL-separated fields.
export VERITY_TRAINER=workers
compose_field() {  # SERVICE FIELD (command | entrypoint | environment | volumes | ports)
  /usr/bin/python3 - "$1" "$2" <<'EOF'
import os, re, sys, yaml
service, field = sys.argv[1], sys.argv[2]
spec = yaml.safe_load(open("deploy/compose.yaml"))["services"][service]
def interpolate(s):
    def value(m):
        name, default = m.group(1), m.group(3) or ""
        return os.environ.get(name) or default
    return re.sub(r"\$\{(\w+)(:-([^}]*))?\}", value, str(s)).replace("$$", "$")
value = spec.get(field, [])
if isinstance(value, dict):
    value = ["%s=%s" % (k, v) for k, v in value.items()]
sys.stdout.write("".join(interpolate(v) + "\0" for v in value))
EOF
}
read_fields() { mapfile -d '' -t "$1" < <(compose_field "$2" "$3"); }

# Certificates, as deploy/README.md makes them, naming the services' hosts.
tls=$work/tls
mkdir -p "$tls"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost \
  -addext subjectAltName=DNS:localhost,DNS:server,DNS:server-b \
  -keyout "$tls/tls.key" -out "$tls/tls.crt" 2>/dev/null
cp "$tls/tls.crt" "$tls/ca.crt"
# The server runs as uid 10001 and must read the key, which openssl writes with mode 0600.
chown 10001:10001 "$tls/tls.key"

# Compose resolves service names with its own DNS; Debian's Podman has no DNS plugin for its
# CNI networks, so the names are --add-host entries for fixed addresses.
pod network create --subnet "$subnet_prefix.0/24" "$network" >/dev/null
ip_postgres=$subnet_prefix.10 ip_server=$subnet_prefix.11 ip_server_b=$subnet_prefix.12
hosts=(--add-host "postgres:$ip_postgres" --add-host "server:$ip_server"
       --add-host "server-b:$ip_server_b")
pod volume create "$volume" >/dev/null

# Host ports: compose.yaml's, unless something on this machine already listens there.
free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
port_in_use() { /usr/bin/python3 -c "import socket,sys; s=socket.socket(); sys.exit(0 if s.connect_ex(('127.0.0.1', $1)) == 0 else 1)"; }
host_port() {  # SERVICE: its published 127.0.0.1 port in compose.yaml, or a free one
  local ports port
  mapfile -d '' -t ports < <(compose_field "$1" ports)
  port=${ports[0]#127.0.0.1:}
  port=${port%%:*}
  if port_in_use "$port"; then port=$(free_port); fi
  echo "$port"
}
port_server=$(host_port server)
port_server_b=$(host_port server-b)

read_fields postgres_env postgres environment
env_flags=()
for e in "${postgres_env[@]}"; do env_flags+=(-e "$e"); done
pod run -d --name verity-ct-postgres --network "$network" --ip "$ip_postgres" "${hosts[@]}" \
  "${env_flags[@]}" -v "$volume:/var/lib/postgresql/data" "$postgres_image" >/dev/null
# compose.yaml: the servers wait for postgres to be healthy (its health check, every second).
for i in $(seq 60); do
  if pod exec verity-ct-postgres pg_isready -U verity -d verity >/dev/null 2>&1; then break; fi
  sleep 1
done
pod exec verity-ct-postgres pg_isready -U verity -d verity

read_fields server_command server command
pod run -d --name verity-ct-server --network "$network" --ip "$ip_server" "${hosts[@]}" \
  -v "$tls:/etc/verity/tls:ro" -p "127.0.0.1:$port_server:50051" \
  "$verity_image" "${server_command[@]}" >/dev/null
echo "server: 127.0.0.1:$port_server, $(printf '%q ' "${server_command[@]}" | sed 's/password=[^ ]*/password=.../')"

# compose.yaml's server health check (the admin key file appears once the server is up).
health_command=$(/usr/bin/python3 -c '
import yaml; t = yaml.safe_load(open("deploy/compose.yaml"))["services"]["server"]["healthcheck"]["test"]
assert t[0] == "CMD-SHELL", t; print(t[1].replace("$$", "$"))')
healthy=0
for i in $(seq 60); do
  if pod exec verity-ct-server sh -c "$health_command" >/dev/null 2>&1; then healthy=1; break; fi
  sleep 1
done
if (( ! healthy )); then
  pod logs verity-ct-server 2>&1 | tail -30 >&2
  echo "container_test: server did not become healthy" >&2
  exit 1
fi
echo "server healthy after ${i} s (compose.yaml's health check: verity project list)"

read_fields server_b_command server-b command
pod run -d --name verity-ct-server-b --network "$network" --ip "$ip_server_b" "${hosts[@]}" \
  -v "$tls:/etc/verity/tls:ro" -p "127.0.0.1:$port_server_b:50051" \
  "$verity_image" "${server_b_command[@]}" >/dev/null
echo "server-b: 127.0.0.1:$port_server_b"

read_fields worker_entrypoint worker entrypoint
read_fields worker_command worker command
pod run -d --name verity-ct-worker --network "$network" "${hosts[@]}" \
  --entrypoint "${worker_entrypoint[0]}" "$verity_image" "${worker_command[@]}" >/dev/null
echo "worker: ${worker_entrypoint[*]} (compose.yaml's GPU reservation is not applied: no GPU here)"
end

# ------------------------------------------------------------------------------------------
# 4. Health check, submit, fit, posteriors.

begin "4. health, submit, fit (worker), posteriors"
admin_key=$(pod exec verity-ct-server cat /var/lib/verity/admin.key)
client_dir=$work/client
mkdir -p "$client_dir"
# One annotator is wrong on i3 and i6; the majority is right everywhere.
cat >"$client_dir/labels.csv" <<'EOF'
item,annotator,label
i1,w1,cat
i1,w2,cat
i1,w3,cat
i2,w1,dog
i2,w2,dog
i2,w3,dog
i3,w1,cat
i3,w2,cat
i3,w3,dog
i4,w1,dog
i4,w2,dog
i4,w3,dog
i5,w1,cat
i5,w2,cat
i5,w3,cat
i6,w1,dog
i6,w2,dog
i6,w3,cat
EOF
# The image's CLI, in a container of its own on the services' network (NETWORK, then CLI
# arguments).
cli() {
  local net=$1
  shift
  pod run --rm --network "$net" "${hosts[@]}" -e VERITY_API_KEY="$admin_key" \
    -v "$tls:/etc/verity/tls:ro" -v "$client_dir:/data:ro" --entrypoint /usr/local/bin/verity \
    "$verity_image" --tls_ca=/etc/verity/tls/ca.crt "$@"
}
# Both replicas by service name, and both published host ports as compose.yaml maps them.
for target in server:50051 server-b:50051; do
  cli "$network" --server="$target" --timeout=10s project list >/dev/null
  echo "$target answers (project list)"
done
cli host --server="localhost:$port_server,localhost:$port_server_b" --timeout=10s project list \
  >/dev/null
echo "localhost:$port_server,localhost:$port_server_b answer from the host"

cli "$network" --server=server:50051 project create containers --classes=cat,dog >/dev/null
echo "project create containers (on server)"
cli "$network" --server=server:50051 submit --project=containers --csv=/data/labels.csv |
  tee "$client_dir/submit.out"
grep -q 'accepted=18 ' "$client_dir/submit.out"
# The servers run with --trainer=workers: the fit is a job that the worker claims.
cli "$network" --server=server-b:50051 --timeout=5m model train --project=containers |
  tee "$client_dir/train.out"
cli "$network" --server=server-b:50051 posteriors --project=containers | tee "$client_dir/posteriors.csv"
expected="i1 cat
i2 dog
i3 cat
i4 dog
i5 cat
i6 dog"
actual=$(awk -F, 'NR > 1 { print $1, $2 }' "$client_dir/posteriors.csv")
if [[ $actual != "$expected" ]]; then
  echo "container_test: posteriors from server-b are not the majority labels:" >&2
  echo "$actual" >&2
  exit 1
fi
echo "posteriors on server-b: the majority label of every item"
echo "worker log (last lines):"
pod logs verity-ct-worker 2>&1 | tail -5
end
