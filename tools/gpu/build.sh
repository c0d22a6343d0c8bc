#!/bin/bash
# Builds the models library (classical and neural), //bench:neural_epoch_benchmark,
# //bench:fit_benchmark and the neural models' tests with the C++ compiler alone, against the
# LibTorch inside the Python torch package of this machine (a CUDA one on a GPU machine). For
# machines without Bazel or Debian's packages; everywhere else use Bazel (LIBTORCH_HOME selects
# the LibTorch there). models/ needs only LibTorch and Abseil; the tests also GoogleTest: both
# come from a kit that tools/gpu/pack_devkit.sh packs on a Debian machine.
#
#   tools/gpu/build.sh KIT_DIR OUT_DIR
#
# Writes OUT_DIR/{neural_epoch_benchmark,fit_benchmark,neural_models_test,paper_claims_test,
# flat_amsgrad_test,training_step_test}.
# Environment: CXX (default g++), PYTHON (default python3), JOBS (default nproc), LIBTORCH_HOME
# (a LibTorch's root, with include/ and lib/, instead of the torch package's).
set -euo pipefail
kit=$(realpath "${1:?usage: tools/gpu/build.sh KIT_DIR OUT_DIR}")
mkdir -p "${2:?usage: tools/gpu/build.sh KIT_DIR OUT_DIR}"
out=$(realpath "$2")
cd "$(dirname "$0")/../.."
cxx=${CXX:-g++}
python=${PYTHON:-python3}
jobs=${JOBS:-$(nproc)}

if [[ -n ${LIBTORCH_HOME:-} ]]; then
  torch=$LIBTORCH_HOME  # include/ and lib/ of a LibTorch, as for Bazel
  abi=1
  echo "build: LibTorch at $torch, $($cxx --version | head -1)"
else
  torch=$("$python" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
  abi=$("$python" -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
  echo "build: torch $("$python" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)') at $torch, $($cxx --version | head -1)"
fi
if [[ $abi != 1 ]]; then
  echo "build: this torch uses the pre-C++11 string ABI; Debian's Abseil in the kit does not" >&2
  exit 1
fi

# The oldest standard this torch's headers accept (C++17 up to torch 2.x; newer ones need 20).
std=c++17
echo '#include <torch/torch.h>' > "$out/probe.cc"
if ! "$cxx" -std=$std -fsyntax-only -isystem "$torch/include" \
     -isystem "$torch/include/torch/csrc/api/include" "$out/probe.cc" 2>/dev/null; then
  std=c++20
fi
cxxflags=(-std=$std -O2 -DNDEBUG -fPIC -D_GLIBCXX_USE_CXX11_ABI=1 -I. -isystem "$kit/include"
          -isystem "$torch/include" -isystem "$torch/include/torch/csrc/api/include")
# With a CUDA LibTorch and the CUDA runtime's headers, training steps can be CUDA graphs
# (models/neural/training_step.h).
cuda_include=${CUDA_HOME:-/usr/local/cuda}/include
# The CUDA runtime library: the one the torch package ships, else the toolkit's.
cudart=
for candidate in "$torch"/../nvidia/*/lib/libcudart.so* "${CUDA_HOME:-/usr/local/cuda}"/lib64/libcudart.so; do
  if [[ -e $candidate ]]; then cudart=$candidate; break; fi
done
cuda_libs=()
if [[ -e $torch/lib/libtorch_cuda.so && -e $cuda_include/cuda_runtime_api.h && -n $cudart ]]; then
  cxxflags+=(-DVERITY_CUDA_GRAPHS -isystem "$cuda_include")
  cuda_libs=("$cudart" -Wl,-rpath,"$(dirname "$(realpath "$cudart")")")
  echo "build: CUDA graphs on (CUDA headers in $cuda_include, runtime $cudart)"
fi
echo "build: -std=$std, $jobs jobs"

library=$(ls models/*.cc models/neural/*.cc | grep -v -e '_test\.cc$' -e '_main\.cc$')
sources="$library models/testing/synthetic_crowd.cc models/testing/dataset_path.cc bench/random_crowd.cc
  bench/neural_epoch_benchmark_main.cc bench/fit_benchmark_main.cc
  models/neural/neural_models_test.cc models/neural/paper_claims_test.cc
  models/neural/flat_amsgrad_test.cc models/neural/training_step_test.cc"
mkdir -p "$out/obj"
export cxx out
printf '%s\n' $sources | xargs -P "$jobs" -I{} sh -c \
  'o="$out/obj/$(echo {} | tr / _).o"; '"$cxx"' '"${cxxflags[*]}"' -c {} -o "$o" || { echo "build: {} failed" >&2; exit 255; }'

obj() { for s in "$@"; do echo "$out/obj/$(echo "$s" | tr / _).o"; done; }
torch_libs=(-L"$torch/lib" -Wl,-rpath,"$torch/lib" -Wl,--no-as-needed -ltorch -ltorch_cpu -lc10)
[[ -e $torch/lib/libtorch_cuda.so ]] && torch_libs+=(-ltorch_cuda -lc10_cuda "${cuda_libs[@]}")
absl_libs=(-L"$kit/lib" -Wl,-rpath,"$kit/lib")
for so in "$kit"/lib/libabsl_*.so; do absl_libs+=("-l$(basename "$so" .so | sed 's/^lib//')"); done
link() {  # link OUTPUT SOURCES... [-- EXTRA LIBS]
  local name=$1; shift
  local srcs=() extra=()
  while (($#)) && [[ $1 != -- ]]; do srcs+=("$1"); shift; done
  (($#)) && shift && extra=("$@")
  "$cxx" -o "$out/$name" $(obj $library "${srcs[@]}") "${extra[@]}" "${torch_libs[@]}" \
    "${absl_libs[@]}" -pthread
}
link neural_epoch_benchmark bench/random_crowd.cc bench/neural_epoch_benchmark_main.cc
link fit_benchmark bench/random_crowd.cc bench/fit_benchmark_main.cc
gtest=("$kit/lib/libgtest_main.a" "$kit/lib/libgmock.a" "$kit/lib/libgtest.a")
link neural_models_test models/testing/synthetic_crowd.cc models/neural/neural_models_test.cc -- "${gtest[@]}"
link paper_claims_test models/testing/synthetic_crowd.cc models/neural/paper_claims_test.cc -- "${gtest[@]}"
link flat_amsgrad_test models/neural/flat_amsgrad_test.cc -- "${gtest[@]}"
link training_step_test models/neural/training_step_test.cc -- "${gtest[@]}"
rm -f "$out/probe.cc"
echo "build: done, binaries in $out"
