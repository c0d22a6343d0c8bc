#!/bin/bash
# The training worker end to end on one machine, with nothing installed but what the kit carries
# (tools/gpu/pack_devkit.sh) and what tools/gpu/build.sh built from it: a private PostgreSQL 15
# cluster, a Verity project of a simulated crowd loaded into it, one lia training job in the job
# table run by verity_worker on DEVICE, then verity_server serving the stored version, scored
# against the simulated truth.
#
#   tools/gpu/worker_e2e.sh [KIT_DIR [BIN_DIR]]      (defaults .devkit and KIT_DIR/out)
#
# Steps, each timed:
#   1. initdb + pg_ctl start of a cluster under a fresh folder in /tmp (RUN_DIR), listening on
#      127.0.0.1:PG_PORT. PostgreSQL refuses to run as root: as root, the cluster's programs run
#      as PG_OS_USER (default nobody) through setpriv (or runuser), and the kit's PostgreSQL and
#      libraries are copied into RUN_DIR, which that user can read wherever the kit lies.
#      initdb runs with TZ=UTC: without system time zone data it writes timezone 'UTC0', which
#      PostgreSQL can parse without any. fsync off (a throwaway cluster).
#   2. verity_server (--trainer=workers, no background refit) creates the schema (its
#      migrations) and, through the CLI, the project with method lia; then it stops.
#   3. synthetic_crowd writes ITEMS items x LABELS_PER_ITEM labels from ANNOTATORS annotators,
#      K = CLASSES, seed SEED: the crowd of //bench:fit_benchmark's sizes (5m = 1,000,000 x 5,
#      3,000 annotators, K = 5, seed 1, the defaults here). psql COPYs it into items,
#      annotators and annotations as the server's ingest would have stored it (indices in
#      creation order, seqs 1..N, the project's counters past them).
#   4. One job is enqueued as the server's scheduler does (TrainingJobStore::Enqueue's INSERT),
#      and `verity_worker --once --device=DEVICE` runs it: claim, load the labels, fit, store the
#      version with its outputs. Its job_done line gives each part (load_ms, consolidate_ms,
#      fit_ms, outputs_ms, persist_ms, job_ms); the job table gives claimed -> finished.
#   5. verity_server starts again on the database (timed until it has loaded the project and
#      answers), and
#      `verity accuracy` scores the served posteriors against the simulated truth (gold.csv);
#      a few items' posteriors are printed with the model version that served them.
# A compact summary goes to stdout and, when OUT is set, to $OUT/worker_e2e.txt; the logs stay in
# RUN_DIR (copied to $OUT/worker_e2e_logs/ when OUT is set). The cluster and the server are
# stopped on exit; RUN_DIR is removed unless KEEP_RUN=1.
#
# Environment: ITEMS (1000000), LABELS_PER_ITEM (5), ANNOTATORS (3000), CLASSES (5), SEED (1),
# DEVICE (cuda:0; cpu for a test without a GPU), METHOD (lia; any of the CLI's --method values),
# PG_PORT (54329), GRPC_PORT (50079), PG_OS_USER (nobody, as root only), RUN_DIR (a new
# /tmp/verity-e2e.XXXXXX), WORKER_FLAGS (more verity_worker flags), KEEP_RUN.
# Example, on the CPU at a small size:
#   ITEMS=10000 ANNOTATORS=300 DEVICE=cpu tools/gpu/worker_e2e.sh .devkit .devkit/out
set -euo pipefail
cd "$(dirname "$0")/../.."
kit=$(realpath "${1:-.devkit}")
bin=$(realpath "${2:-$kit/out}")
items=${ITEMS:-1000000}
labels_per_item=${LABELS_PER_ITEM:-5}
annotators=${ANNOTATORS:-3000}
classes=${CLASSES:-5}
seed=${SEED:-1}
device=${DEVICE:-cuda:0}
pg_port=${PG_PORT:-54329}
grpc_port=${GRPC_PORT:-50079}
method=${METHOD:-lia}
project=e2e
for b in verity_worker verity_server verity synthetic_crowd; do
  [[ -x $bin/$b ]] || { echo "worker_e2e: $bin/$b is missing (tools/gpu/build.sh)" >&2; exit 1; }
done
tools/gpu/unpack_devkit.sh "$kit"
# The binaries' RUNPATH names the kit's lib/, but a RUNPATH is not searched for the libraries
# of libraries (libgrpc.so's libupb.so, for one): the loader needs the folder in
# LD_LIBRARY_PATH. Seen on the GPU machine, where nothing else provides them.
export LD_LIBRARY_PATH="$kit/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

run=${RUN_DIR:-$(mktemp -d /tmp/verity-e2e.XXXXXX)}
mkdir -p "$run"
chmod 755 "$run"
summary=()
note() { summary+=("$*"); echo "worker_e2e: $*"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.1f", b - a}'; }

# --- 1. PostgreSQL ---------------------------------------------------------------------------
t=$(now)
cp -r "$kit/pg" "$kit/lib" "$run/"
pgbin=$run/pg/usr/lib/postgresql/15/bin
as_pg=()
if [[ $(id -u) == 0 ]]; then
  pg_user=${PG_OS_USER:-nobody}
  # setpriv, or runuser where it does not work here (both are util-linux's).
  as_pg=(setpriv --reuid="$(id -u "$pg_user")" --regid="$(id -g "$pg_user")" --clear-groups --)
  "${as_pg[@]}" true 2> /dev/null || as_pg=(runuser -u "$pg_user" --)
  note "running PostgreSQL as $pg_user ($(id -u "$pg_user")) via ${as_pg[0]}"
fi
mkdir -p "$run/data"
touch "$run/postgres.log"
[[ $(id -u) == 0 ]] && chown "$pg_user" "$run/data" "$run/postgres.log"
chmod 700 "$run/data"
pg() { (cd "$run" && "${as_pg[@]}" env LD_LIBRARY_PATH="$run/lib" TZ=UTC "$@"); }
pg "$pgbin/initdb" -D "$run/data" -U postgres --auth=trust -E UTF8 --locale=C --no-sync \
  > "$run/initdb.log" 2>&1 || { cat "$run/initdb.log" >&2; exit 1; }
cat >> "$run/data/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $pg_port
unix_socket_directories = ''
fsync = off
synchronous_commit = off
full_page_writes = off
shared_buffers = '1GB'
max_wal_size = '8GB'
maintenance_work_mem = '1GB'
EOF
cleanup() {
  [[ -n ${server_pid:-} ]] && kill "$server_pid" 2> /dev/null && wait "$server_pid" 2> /dev/null
  pg "$pgbin/pg_ctl" -D "$run/data" -m fast stop > /dev/null 2>&1 || true
  if [[ -n ${OUT:-} ]]; then
    mkdir -p "$OUT/worker_e2e_logs"
    cp "$run"/*.log "$OUT/worker_e2e_logs/" 2> /dev/null || true
  fi
  [[ -n ${KEEP_RUN:-} ]] || rm -rf "$run"
}
trap cleanup EXIT
pg "$pgbin/pg_ctl" -D "$run/data" -l "$run/postgres.log" -w -t 120 start > /dev/null ||
  { cat "$run/postgres.log" >&2; exit 1; }
psql() {
  LD_LIBRARY_PATH="$run/lib" "$pgbin/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$pg_port" \
    -U postgres "$@"
}
psql -d postgres -c 'CREATE DATABASE verity'
url="host=127.0.0.1 port=$pg_port user=postgres dbname=verity"
note "postgres: $(psql -d verity -At -c 'SHOW server_version') up in $(since "$t") s"

# --- 2. schema and project, through the server ------------------------------------------------
cli=("$bin/verity" --server="127.0.0.1:$grpc_port")
start_server() {  # start_server LOG: starts verity_server, waits until it answers and has
  # loaded the stored projects (it listens before: event=projects_loaded ends the load)
  "$bin/verity_server" --postgres_url="$url" --listen="127.0.0.1:$grpc_port" --trainer=workers \
    --background_refit=false --metrics_port=0 --device=cpu --db_timeout_seconds=600 \
    > "$run/$1" 2>&1 &
  server_pid=$!
  for _ in $(seq 1200); do
    grep -q "event=projects_loaded" "$run/$1" &&
      "${cli[@]}" --timeout=2s project list > /dev/null 2>&1 && return 0
    kill -0 "$server_pid" 2> /dev/null || { cat "$run/$1" >&2; exit 1; }
    sleep 0.5
  done
  echo "worker_e2e: verity_server did not answer in 10 minutes" >&2
  exit 1
}
stop_server() { kill "$server_pid"; wait "$server_pid" || true; server_pid=; }
t=$(now)
start_server server_setup.log
class_names=$(seq -s, -f 'c%g' 0 $((classes - 1)))
"${cli[@]}" project create "$project" --classes="$class_names" --method="$method" > /dev/null
stop_server
project_id=$(psql -d verity -At -c "SELECT project_id FROM projects WHERE name = '$project'")
note "schema and project $project (id $project_id, $method, K = $classes) in $(since "$t") s"

# --- 3. the simulated crowd -------------------------------------------------------------------
t=$(now)
"$bin/synthetic_crowd" --out="$run/crowd" --items="$items" --labels_per_item="$labels_per_item" \
  --annotators="$annotators" --classes="$classes" --seed="$seed" > /dev/null
note "crowd generated in $(since "$t") s: $(($(wc -l < "$run/crowd/labels.csv") - 1)) labels"
t=$(now)
psql -d verity <<EOF
BEGIN;
CREATE TEMP TABLE crowd_labels (item text, annotator text, label text);
\copy crowd_labels FROM '$run/crowd/labels.csv' WITH (FORMAT csv, HEADER true)
INSERT INTO items (project_id, item_index, external_id)
  SELECT $project_id, i, 'i' || i FROM generate_series(0, $items - 1) AS i;
INSERT INTO annotators (project_id, annotator_index, external_id)
  SELECT $project_id, a, 'w' || a FROM generate_series(0, $annotators - 1) AS a;
INSERT INTO annotations (project_id, item_index, annotator_index, label, seq)
  SELECT $project_id, substr(item, 2)::integer, substr(annotator, 2)::integer,
         substr(label, 2)::integer, row_number() OVER ()
  FROM crowd_labels;
UPDATE projects SET next_item_index = $items, next_annotator_index = $annotators,
                    next_seq = (SELECT count(*) + 1 FROM crowd_labels)
  WHERE project_id = $project_id;
COMMIT;
ANALYZE;
EOF
labels=$(psql -d verity -At -c "SELECT count(*) FROM annotations WHERE project_id = $project_id")
db_size=$(psql -d verity -At -c "SELECT pg_size_pretty(pg_database_size('verity'))")
note "loaded $items items x $labels_per_item labels ($labels), $annotators annotators in" \
  "$(since "$t") s (database $db_size)"

# --- 4. one training job, run by the worker ---------------------------------------------------
if [[ $device == cuda* ]] && command -v nvidia-smi > /dev/null; then
  note "GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)"
fi
psql -d verity -c "INSERT INTO training_jobs (project_id) VALUES ($project_id)"
t=$(now)
# shellcheck disable=SC2086
"$bin/verity_worker" --postgres_url="$url" --device="$device" --once --db_timeout_seconds=600 \
  ${WORKER_FLAGS:-} > "$run/worker.log" 2>&1 || { cat "$run/worker.log" >&2; exit 1; }
worker_s=$(since "$t")
done_line=$(grep 'event=job_done' "$run/worker.log" || true)
[[ -n $done_line ]] || { cat "$run/worker.log" >&2; echo "worker_e2e: no job_done" >&2; exit 1; }
field() { sed -n "s/.* $1=\\([^ ]*\\).*/\\1/p" <<< "$done_line"; }
seconds() { awk -v ms="$(field "$1")" 'BEGIN {printf "%.1f", ms / 1000}'; }
note "worker on $device: process ${worker_s} s; job $(seconds job_ms) s = load $(seconds load_ms)" \
  "+ consolidate $(seconds consolidate_ms) + fit $(seconds fit_ms) + outputs $(seconds outputs_ms)" \
  "+ persist $(seconds persist_ms) s (version $(field version), $(field labels) labels)"
note "job table: $(psql -d verity -At -F ' ' -c "SELECT state, 'claimed->finished',
  round(extract(epoch FROM finished_at - started_at)::numeric, 1), 's' FROM training_jobs
  WHERE project_id = $project_id"); version $(field version) stored $(psql -d verity -At -c "
  SELECT pg_size_pretty(sum(length(parameters))) FROM model_versions WHERE project_id = $project_id
  ") of parameters, $(psql -d verity -At -c "SELECT pg_size_pretty(sum(length(posteriors) +
  length(annotator_profiles))) FROM model_version_outputs WHERE project_id = $project_id") of outputs"

# --- 5. the server serves the version ---------------------------------------------------------
t=$(now)
start_server server.log
note "verity_server answering in $(since "$t") s"
t=$(now)
"${cli[@]}" --timeout=10m accuracy --project="$project" --gold_csv="$run/crowd/gold.csv" > "$run/accuracy.txt"
note "served posteriors vs truth: $(head -1 "$run/accuracy.txt") in $(since "$t") s"
"${cli[@]}" posteriors --project="$project" --items=i0,i1,i2 > "$run/posteriors.txt"
note "posteriors of i0..i2 (truth $(sed -n '2,4p' "$run/crowd/gold.csv" | cut -d, -f2 | paste -sd,)):"
while read -r line; do note "  $line"; done < "$run/posteriors.txt"
served=$("${cli[@]}" --output=json posteriors --project="$project" --items=i0 |
  sed -n 's/.*"model_version": *\([0-9]*\).*/\1/p')
[[ $served == "$(field version)" ]] && verdict=ok || verdict=MISMATCH
note "served model version ${served:-?}, the worker stored $(field version): $verdict"
stop_server

if [[ -n ${OUT:-} ]]; then
  mkdir -p "$OUT"
  printf '%s\n' "${summary[@]}" > "$OUT/worker_e2e.txt"
fi
