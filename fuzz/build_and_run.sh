#!/bin/bash
# Builds the libFuzzer target fuzz/request_validation_fuzzer.cc with Debian's clang 14
# (-fsanitize=fuzzer,address,undefined) against the system protobuf and Abseil, then runs it
# for a fixed time on fuzz/corpus/ (plus fuzz/seeds/) and minimizes the corpus.
#
# Usage (from anywhere in the repository):
#   fuzz/build_and_run.sh [SECONDS]        # default 60
#   FUZZ_JOBS=2 fuzz/build_and_run.sh 300  # more fuzzing processes
#
# Needs: clang-14, libclang-rt-14-dev, protobuf-compiler, libprotobuf-dev, libabsl-dev.
# Bazel is not involved (it builds with gcc); outputs go to fuzz/build/ (git-ignored).
# A crash leaves its input in fuzz/build/crashes/ and makes the script exit non-zero.
set -euo pipefail

seconds="${1:-60}"
jobs="${FUZZ_JOBS:-1}"
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

CXX="${CXX:-clang++-14}"
build=fuzz/build
gen="$build/gen"
obj="$build/obj"
mkdir -p "$gen" "$obj" "$build/crashes" fuzz/corpus fuzz/seeds

for tool in "$CXX" protoc pkg-config; do
  command -v "$tool" >/dev/null || { echo "missing $tool" >&2; exit 1; }
done

# 1. C++ code of the v1 protos (messages only; the fuzzer needs no gRPC).
protoc --proto_path=proto --proto_path=/usr/include --cpp_out="$gen" proto/verity/v1/*.proto

# 2. Objects: the generated messages and the code under test, with coverage for libFuzzer.
common_flags=(-std=c++17 -O1 -g -fno-omit-frame-pointer -I. -I"$gen" -Wall -Wno-sign-compare)
san_flags=(-fsanitize=address,undefined -fno-sanitize-recover=undefined)
objects=()
for src in "$gen"/verity/v1/*.pb.cc server/api/validation.cc; do
  o="$obj/$(basename "${src%.cc}").o"
  if [[ ! -f "$o" || "$src" -nt "$o" || server/api/validation.h -nt "$o" ]]; then
    echo "compiling $src"
    "$CXX" "${common_flags[@]}" "${san_flags[@]}" -fsanitize=fuzzer-no-link -c "$src" -o "$o"
  fi
  objects+=("$o")
done

libs=($(pkg-config --libs protobuf absl_status absl_strings absl_str_format absl_time \
  absl_flat_hash_set absl_hash absl_raw_hash_set))

# 3. The fuzzer and the seed writer.
echo "linking $build/request_validation_fuzzer"
"$CXX" "${common_flags[@]}" "${san_flags[@]}" -fsanitize=fuzzer \
  fuzz/request_validation_fuzzer.cc "${objects[@]}" "${libs[@]}" \
  -o "$build/request_validation_fuzzer"
"$CXX" "${common_flags[@]}" "${san_flags[@]}" \
  fuzz/make_seeds.cc "${objects[@]}" "${libs[@]}" -o "$build/make_seeds"
"$build/make_seeds" fuzz/seeds

# 4. Fuzz for a fixed time; new inputs go to fuzz/corpus/.
before=$(ls fuzz/corpus | wc -l)
status=0
parallel=()
# -jobs runs the fuzzing in child processes that log to fuzz-N.log in the current directory.
if [[ "$jobs" -gt 1 ]]; then parallel=(-jobs="$jobs" -workers="$jobs"); fi
# -use_value_profile=1: comparisons guide the search towards bounds that add no coverage, e.g.
# the last microsecond the store takes (found in ~10 s with it, not in 60 s without).
"$build/request_validation_fuzzer" -max_total_time="$seconds" "${parallel[@]}" \
  -use_value_profile=1 -max_len=4096 -print_final_stats=1 -artifact_prefix="$build/crashes/" \
  fuzz/corpus fuzz/seeds 2>&1 | tee "$build/fuzz.log" || status=$?
for log in fuzz-*.log; do
  if [[ -f "$log" ]]; then cat "$log" >> "$build/fuzz.log"; rm -f "$log"; fi
done

# 5. Keep the corpus small: the subset of corpus + seeds that reaches the same coverage.
rm -rf "$build/merged"
mkdir -p "$build/merged"
"$build/request_validation_fuzzer" -merge=1 "$build/merged" fuzz/corpus fuzz/seeds \
  >"$build/merge.log" 2>&1
rm -rf fuzz/corpus
mv "$build/merged" fuzz/corpus

echo "corpus: $before files before, $(ls fuzz/corpus | wc -l) after merge" \
  "($(du -sh fuzz/corpus | cut -f1)); crashes: $(ls "$build/crashes" | wc -l)" \
  "(in $build/crashes/); log: $build/fuzz.log"
exit "$status"
