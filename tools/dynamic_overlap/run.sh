#!/bin/bash
# Dynamic overlap against fixed overlap, before and after calibration (issue 18, point 4).
#
# For each dataset, confidence target and calibration mode, replays the dataset's crowd with
# the UNIFORM policy (fewest labels first), AssignmentSettings.confidence_target = the target
# and max_labels_per_item = CAP, until the crowd has nothing left to label: items stop being
# offered once the served posterior's confidence reaches the target. Then replays the same
# crowd (same seeds) with UNIFORM, no target and the same cap (fixed overlap), reading the
# accuracy at exactly the numbers of labels each dynamic run bought. The only difference
# between a dynamic run and its fixed-overlap reading is when items stop being labelled.
#
# Usage (from the repository root, after
#   bazel build -c opt //server:verity_server //client:verity_simulate):
#   tools/dynamic_overlap/run.sh OUT_DIR [datasets...]
# Environment: SEEDS (3), CAP (5), MIN_LABELS (1), TARGETS ("0.9 0.95"), CALIBRATIONS
# ("none auto"), PORT (50199),
# GOLD_EVERY (0: no gold; n: every n-th scored item is project gold in the dynamic and the
# fixed runs alike, and is not scored; verity_simulate --gold_every), GOLD_FOR_NEW (0; with
# project gold, AssignmentSettings.gold_items_for_new_annotators: the server offers gold items
# only to annotators with fewer labels than this, so without it they never get labels).
# Writes OUT_DIR/dynamic-*.csv and OUT_DIR/fixed-*.csv (rows of verity_simulate's --out_csv);
# tools/dynamic_overlap/summary.py OUT_DIR prints the table.
set -euo pipefail
out=${1:?usage: run.sh OUT_DIR [datasets...]}
shift
datasets=${*:-bluebirds rte possent medical_treat}
seeds=${SEEDS:-3}
cap=${CAP:-5}
min_labels=${MIN_LABELS:-1}
targets=${TARGETS:-0.9 0.95}
calibrations=${CALIBRATIONS:-none auto}
port=${PORT:-50199}
gold_every=${GOLD_EVERY:-0}
gold_for_new=${GOLD_FOR_NEW:-0}
mkdir -p "$out/bin"
# Copies, so that a rebuild during the run does not change the binaries under test.
cp -f bazel-bin/server/verity_server bazel-bin/client/verity_simulate "$out/bin/"
git rev-parse HEAD > "$out/commit"
"$out/bin/verity_server" --listen=127.0.0.1:$port --data_dir="$out/var" > "$out/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true; wait $server 2>/dev/null || true' EXIT
sleep 20   # the embedded PostgreSQL's first start (initdb)

simulate() { "$out/bin/verity_simulate" --server=127.0.0.1:$port --timeout=120s "$@"; }

# Phase 1: dynamic overlap, every dataset × target × calibration at once.
pids=()
for d in $datasets; do
  for t in $targets; do
    for c in $calibrations; do
      simulate --data=../shared/datasets/$d --policies=uniform --seeds=$seeds \
          --confidence_target=$t --min_labels_per_item=$min_labels \
          --max_labels_per_item=$cap --calibration=$c \
          --gold_every=$gold_every --gold_items_for_new_annotators=$gold_for_new \
          --budget_fractions=1 --project_prefix=dyn-$c-${t/./} \
          --out_csv="$out/dynamic-$d-$t-$c.csv" 2> "$out/dynamic-$d-$t-$c.log" &
      pids+=($!)
    done
  done
done
for p in "${pids[@]}"; do wait $p; done

# Phase 2: fixed overlap (uniform, no target, same cap) at each dynamic run's label count,
# per seed.
pids=()
for d in $datasets; do
  total=$(($(wc -l < ../shared/datasets/$d/labels.csv) - 1))
  for s in $(seq 1 $seeds); do
    fractions=$(for f in "$out"/dynamic-$d-*.csv; do
                  awk -F, -v s=$s -v n=$total 'NR > 1 && $3 == s { printf "%.10f\n", $4 / n }' "$f"
                done | sort -u | paste -sd,)
    simulate --data=../shared/datasets/$d --policies=uniform --seeds=1 --first_seed=$s \
        --max_labels_per_item=$cap --gold_every=$gold_every \
        --gold_items_for_new_annotators=$gold_for_new \
        --budget_fractions=$fractions --project_prefix=fixed \
        --out_csv="$out/fixed-$d-s$s.csv" 2> "$out/fixed-$d-s$s.log" &
    pids+=($!)
  done
done
for p in "${pids[@]}"; do wait $p; done
echo "done: $out"
