#!/bin/bash
# The GPU steps of issue 21 in one script, for a lent GPU machine (tools/gpu/README.md): build
# with tools/gpu/build.sh, run the CUDA tests, time the neural epochs at 5M labels next to the
# bandwidth floor, time the default fits, and run the worker end to end. Each stage writes its
# output to $OUT (when set) so that a stage that runs out of time still reports what it did.
#
#   tools/gpu/device_checks.sh STAGE...     stages: build tests epochs fits batches worker
#
# `batches` times 20 epochs of the label-pass models at larger batches than the default, with
# their accuracy, to show how a pass's time falls with fewer, larger steps.
#
# Environment: KIT (default .devkit), BIN (default KIT/out), JOBS (default nproc), BATCH_METHODS
# (the methods `batches` times, comma-separated; default crowdlayer,trace_reg,conal,cmm).
set -uo pipefail
cd "$(dirname "$0")/../.."
kit=${KIT:-.devkit}
bin=${BIN:-$kit/out}
out=${OUT:-/tmp/device_checks}
mkdir -p "$out"
status=0
stage() { echo "== $1 $(date -u +%H:%M:%S)"; }
for s in "$@"; do
  case $s in
    build)
      stage build
      start=$SECONDS
      tools/gpu/build.sh "$kit" "$bin" > "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
      echo "build: $((SECONDS - start)) s"; tail -3 "$out/build.log" ;;
    tests)
      stage tests
      for t in sparse_row_amsgrad_test flat_amsgrad_test training_step_test; do
        "$bin/$t" > "$out/$t.log" 2>&1 || status=1
        tail -3 "$out/$t.log"
      done
      "$bin/neural_models_test" --gtest_filter='*Cuda*' > "$out/neural_models_test.log" 2>&1 || status=1
      grep -E "^\[  (PASSED|FAILED) |OK \]|FAILED \]" "$out/neural_models_test.log" | tail -12
      # One file back instead of four ($OUT returns at most 8 files).
      for t in sparse_row_amsgrad_test flat_amsgrad_test training_step_test neural_models_test; do
        { echo "### $t"; cat "$out/$t.log"; } >> "$out/tests.log"; rm "$out/$t.log"
      done ;;
    epochs)
      stage epochs
      nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/epochs.md"
      "$bin/neural_epoch_benchmark" --device=cuda --sizes=5m --format=markdown 2>&1 | tee -a "$out/epochs.md"
      # The previous schedule (dense tables, batch 1,024) on the same GPU, for the ratio.
      "$bin/neural_epoch_benchmark" --device=cuda --sizes=5m --methods=lia,crowdlayer \
        --batch_size=1024 --sparse_embeddings=false --format=markdown 2>&1 | tee -a "$out/epochs.md" ;;
    fits)
      stage fits
      "$bin/fit_benchmark" --methods=ds,lia,crowdlayer,trace_reg,conal,cmm --sizes=5m --classes=5 \
        --threads=2 --runs=1 --timeout_s=120 --format=markdown 2>&1 | tee "$out/fits.md" ;;
    batches)
      stage batches
      for b in 16384 32768; do
        "$bin/neural_epoch_benchmark" --device=cuda --sizes=5m \
          --methods="${BATCH_METHODS:-crowdlayer,trace_reg,conal,cmm}" --batch_size=$b \
          --epochs=20 --format=markdown 2>&1 | tee -a "$out/batches.md"
      done ;;
    worker)
      stage worker
      OUT=$out tools/gpu/worker_e2e.sh "$kit" "$bin" > "$out/worker_e2e.log" 2>&1 || status=1
      tail -25 "$out/worker_e2e.log" ;;
    *) echo "device_checks: unknown stage $s" >&2; exit 2 ;;
  esac
done
exit $status
