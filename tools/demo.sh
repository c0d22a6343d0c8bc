#!/usr/bin/env bash
# Streams a dataset of shared/datasets into a running Verity server and shows the result:
# creates a project named after the dataset (with a -2, -3, ... suffix if the name is taken),
# submits labels.csv, waits up to $VERITY_DEMO_WAIT seconds (default 60) for the model to
# catch up (labels_since_version 0), then prints the first posteriors and, if the dataset
# has a gold.csv, the accuracy against it.
#
# Usage: tools/demo.sh DATASET_DIR          (e.g. ../shared/datasets/bluebirds)
# Environment: VERITY_SERVER (default localhost:50051), VERITY (the CLI binary, default
# bazel-bin/client/verity of this checkout), VERITY_DEMO_WAIT (seconds).
# Start the server first: `make run` in another terminal.
set -euo pipefail

if [[ $# -ne 1 || "$1" == -h || "$1" == --help ]]; then
  sed -n '2,10s/^# \{0,1\}//p' "$0" >&2
  exit 2
fi
dataset=${1%/}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
verity=${VERITY:-$root/bazel-bin/client/verity}
server=${VERITY_SERVER:-localhost:50051}
wait_seconds=${VERITY_DEMO_WAIT:-60}

for f in classes.txt labels.csv; do
  if [[ ! -f "$dataset/$f" ]]; then
    echo "demo: $dataset/$f not found (expected a dataset folder of shared/datasets)" >&2
    exit 1
  fi
done
if [[ ! -x "$verity" ]]; then
  echo "demo: $verity not found; build it with: bazel build //client:verity" >&2
  exit 1
fi

cli() { "$verity" --server="$server" "$@"; }

# Project names are [A-Za-z0-9._-]{1,128}.
base=$(basename "$dataset" | tr -c 'A-Za-z0-9._\n-' '_' | cut -c1-120)
project=$base
suffix=1
while true; do
  if err=$(cli project create "$project" --classes_file="$dataset/classes.txt" 2>&1 >/dev/null); then
    break
  fi
  if [[ "$err" != *ALREADY_EXISTS* ]]; then
    echo "$err" >&2
    exit 1
  fi
  suffix=$((suffix + 1))
  project="$base-$suffix"
done
echo "== project $project (classes: $(paste -sd, "$dataset/classes.txt"))"

echo "== verity submit --project=$project --csv=$dataset/labels.csv"
start=$(date +%s.%N)
cli submit --project="$project" --csv="$dataset/labels.csv"
end=$(date +%s.%N)
awk -v s="$start" -v e="$end" 'BEGIN { printf "(%.2f s)\n", e - s }'

echo "== waiting for the model to catch up (labels_since_version 0, up to ${wait_seconds}s)"
deadline=$((SECONDS + wait_seconds))
caught_up=false
while ((SECONDS < deadline)); do
  status=$(cli status --project="$project")
  if grep -qx 'labels_since_version: 0' <<<"$status" && grep -qx 'current_version:' <<<"$status"; then
    caught_up=true
    break
  fi
  sleep 1
done
cli status --project="$project"
if [[ $caught_up != true ]]; then
  echo "demo: the model has not caught up after ${wait_seconds}s; posteriors below are the" \
    "online ones" >&2
fi

echo "== verity posteriors --project=$project (first 10 items)"
posteriors=$(mktemp)
trap 'rm -f "$posteriors"' EXIT
cli posteriors --project="$project" --out="$posteriors" >/dev/null
head -n 11 "$posteriors"
echo "($(($(wc -l <"$posteriors") - 1)) items)"

if [[ -f "$dataset/gold.csv" ]]; then
  echo "== verity accuracy --project=$project --gold_csv=$dataset/gold.csv"
  cli accuracy --project="$project" --gold_csv="$dataset/gold.csv"
fi
