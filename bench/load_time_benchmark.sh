#!/bin/bash
# load_time_benchmark.sh: a project's load time at start and its memory, by labels.
#
#   bazel build -c opt //server:verity_server //client:verity //bench:synthetic_crowd
#   bazel-bin/bench/synthetic_crowd --out=var/crowd_1m_k5 --items=200000 --labels_per_item=5 \
#     --annotators=3000 --classes=5 --seed=1
#   bench/load_time_benchmark.sh var/crowd_1m_k5
#
# Ingests the crowd into a fresh embedded database (var/loadtest) through the CLI, fits ds,
# stops the server and starts it again: prints the project_loaded event (labels, estimated
# bytes, load ms), the time from start to listening, and VmRSS after the load and of an empty
# server. Run from the repository root.
set -e
LABELS=$1   # folder from synthetic_crowd
D=var/loadtest
rm -rf $D; mkdir -p $D
V=bazel-bin/client/verity
# --load_threads=0: the server loads every project before it listens, so that "start to
# listening" is the load time (by default it listens at once and loads in the background).
start() {
  bazel-bin/server/verity_server --data_dir=$D --listen=localhost:50777 --metrics_port=0 \
    --background_refit=false --load_threads=0 > $D/$1.log 2>&1 &
  PID=$!
  until grep -q "event=listening" $D/$1.log; do sleep 0.2; done
}
start run1
$V project create load --classes_file=$LABELS/classes.txt --method=ds --server=localhost:50777 > /dev/null
/usr/bin/time -f "submit %e s" $V submit --project=load --csv=$LABELS/labels.csv --server=localhost:50777 > /dev/null
$V model train --project=load --server=localhost:50777 > /dev/null
kill -TERM $PID; wait $PID || true
T0=$(date +%s.%N)
start run2
T1=$(date +%s.%N)
grep -o "event=project_loaded.*" $D/run2.log
echo "start to listening: $(echo "$T1 - $T0" | bc) s"
grep VmRSS /proc/$PID/status
kill -TERM $PID; wait $PID || true
# The empty server, for the baseline.
rm -rf $D/empty; mkdir -p $D/empty
bazel-bin/server/verity_server --data_dir=$D/empty --listen=localhost:50778 --metrics_port=0 > $D/empty.log 2>&1 &
PID=$!
until grep -q "event=listening" $D/empty.log; do sleep 0.2; done
grep VmRSS /proc/$PID/status
kill -TERM $PID; wait $PID || true
