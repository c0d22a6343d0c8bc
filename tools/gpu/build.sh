#!/bin/bash
# Builds Verity's binaries with the C++ compiler alone, against the LibTorch inside the Python
# torch package of this machine (a CUDA one on a GPU machine): the models library (classical and
# neural), //bench:neural_epoch_benchmark, //bench:fit_benchmark, the neural models' tests, and
# the deployable verity_worker, verity_server and verity (the CLI), with //bench:synthetic_crowd
# to feed them. For machines without Bazel or Debian's packages; everywhere else use Bazel
# (LIBTORCH_HOME selects the LibTorch there). Abseil, GoogleTest, gRPC, protobuf, libpqxx and the
# code protoc generates from proto/ come from a kit that tools/gpu/pack_devkit.sh packs on a
# Debian machine (unpacked here on first use); the kit also lists the sources of each binary.
#
#   tools/gpu/build.sh KIT_DIR OUT_DIR
#
# Writes to OUT_DIR, by TARGETS (default all of them, space-separated):
#   bench   neural_epoch_benchmark, fit_benchmark
#   tests   neural_models_test, paper_claims_test, flat_amsgrad_test, training_step_test
#           (and sparse_row_amsgrad_test where models/neural/sparse_row_amsgrad_test.cc exists)
#   worker  verity_worker         server  verity_server
#   cli     verity                crowd   synthetic_crowd
# Objects are compiled JOBS at a time into OUT_DIR/obj, each source once for all targets; a later
# run reuses the objects there (so other TARGETS cost only what they add): remove OUT_DIR/obj
# after editing sources.
# The binaries find the kit's and LibTorch's libraries by their runpath; nothing else is needed
# besides glibc, libstdc++ and libgcc_s.
# Environment: CXX (default g++), PYTHON (default python3), JOBS (default nproc), TARGETS,
# LIBTORCH_HOME (a LibTorch's root, with include/ and lib/, instead of the torch package's; /usr
# means Debian's libtorch-dev, as for Bazel), STD (the C++ standard; default: the oldest of c++17
# and c++20 that the torch headers accept).
set -euo pipefail
kit=$(realpath "${1:?usage: tools/gpu/build.sh KIT_DIR OUT_DIR}")
mkdir -p "${2:?usage: tools/gpu/build.sh KIT_DIR OUT_DIR}"
out=$(realpath "$2")
cd "$(dirname "$0")/../.."
cxx=${CXX:-g++}
python=${PYTHON:-python3}
jobs=${JOBS:-$(nproc)}
targets=" ${TARGETS:-bench tests worker server cli crowd} "
wants() { [[ $targets == *" $1 "* ]]; }
start=$SECONDS
tools/gpu/unpack_devkit.sh "$kit"

torch_include=()
if [[ ${LIBTORCH_HOME:-} == /usr || ${LIBTORCH_HOME:-} == /usr/ ]]; then
  torch=/usr  # Debian's libtorch-dev: /usr/include is searched anyway (-isystem would break it)
  torch_lib=/usr/lib/x86_64-linux-gnu
  torch_include=(-isystem /usr/include/torch/csrc/api/include)
  abi=1
  echo "build: Debian's LibTorch, $($cxx --version | head -1)"
else
  if [[ -n ${LIBTORCH_HOME:-} ]]; then
    torch=$LIBTORCH_HOME  # include/ and lib/ of a LibTorch, as for Bazel
    abi=1
    echo "build: LibTorch at $torch, $($cxx --version | head -1)"
  else
    torch=$("$python" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
    abi=$("$python" -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
    echo "build: torch $("$python" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)') at $torch, $($cxx --version | head -1)"
  fi
  torch_lib=$torch/lib
  torch_include=(-isystem "$torch/include" -isystem "$torch/include/torch/csrc/api/include")
fi
if [[ $abi != 1 ]]; then
  echo "build: this torch uses the pre-C++11 string ABI; Debian's Abseil in the kit does not" >&2
  exit 1
fi

# The oldest standard this torch's headers accept (C++17 up to torch 2.x; newer ones need 20).
std=${STD:-c++17}
if [[ -z ${STD:-} ]]; then
  echo '#include <torch/torch.h>' > "$out/probe.cc"
  if ! "$cxx" -std=$std -fsyntax-only "${torch_include[@]}" "$out/probe.cc" 2>/dev/null; then
    std=c++20
  fi
  rm -f "$out/probe.cc"
fi
# <cstdint> in every file: GCC 13's libstdc++ headers stopped including it, and the kit's headers
# (protobuf 3.21, gRPC 1.51, libpqxx 6.4) are older than GCC 13.
cxxflags=(-std=$std -O2 -DNDEBUG -fPIC -D_GLIBCXX_USE_CXX11_ABI=1 -include cstdint -I. -I"$kit/gen"
          -isystem "$kit/include" "${torch_include[@]}")
# With a CUDA LibTorch and the CUDA runtime's headers, training steps can be CUDA graphs
# (models/neural/training_step.h).
cuda_include=${CUDA_HOME:-/usr/local/cuda}/include
# The CUDA runtime library: the one the torch package ships, else the toolkit's.
cudart=
for candidate in "$torch"/../nvidia/*/lib/libcudart.so* "${CUDA_HOME:-/usr/local/cuda}"/lib64/libcudart.so; do
  if [[ -e $candidate ]]; then cudart=$candidate; break; fi
done
cuda_libs=()
if [[ -e $torch_lib/libtorch_cuda.so && -e $cuda_include/cuda_runtime_api.h && -n $cudart ]]; then
  cxxflags+=(-DVERITY_CUDA_GRAPHS -isystem "$cuda_include")
  cuda_libs=("$cudart" -Wl,-rpath,"$(dirname "$(realpath "$cudart")")")
  echo "build: CUDA graphs on (CUDA headers in $cuda_include, runtime $cudart)"
fi
echo "build: -std=$std, $jobs jobs, targets:$targets"

# What each target links, as sources; the models library is every models/ source but tests and
# mains (the benchmarks and tests link all of it, as before).
library=$(ls models/*.cc models/neural/*.cc | grep -v -e '_test\.cc$' -e '_main\.cc$')
listed() {  # the sources the kit lists for a Bazel target, generated ones from the kit
  local list=$kit/sources/$1.txt
  [[ -e $list ]] || { echo "build: $list is missing (pack the kit again)" >&2; exit 1; }
  cat "$list"
  ls "$kit"/gen/verity/v1/*.cc
}
sources=()
if wants bench; then
  sources+=($library bench/random_crowd.cc bench/neural_epoch_benchmark_main.cc
            bench/fit_benchmark_main.cc)
fi
tests=(neural_models_test paper_claims_test flat_amsgrad_test training_step_test)
[[ -e models/neural/sparse_row_amsgrad_test.cc ]] && tests+=(sparse_row_amsgrad_test)
if wants tests; then
  sources+=($library models/testing/synthetic_crowd.cc models/testing/dataset_path.cc)
  for t in "${tests[@]}"; do sources+=("models/neural/$t.cc"); done
fi
wants worker && sources+=($(listed verity_worker))
wants server && sources+=($(listed verity_server))
wants cli && sources+=($(listed verity))
wants crowd && sources+=(bench/random_crowd.cc bench/synthetic_crowd_main.cc)

# Object files are named by their source's path (the kit's generated sources as kit/...).
obj() { for s in "$@"; do echo "$out/obj/$(echo "${s/#$kit\//kit/}" | tr / _).o"; done; }
mkdir -p "$out/obj"
todo=()
for s in $(printf '%s\n' "${sources[@]}" | sort -u); do
  [[ -e $(obj "$s") ]] || todo+=("$s")
done
echo "build: compiling ${#todo[@]} sources"
export cxx out kit
printf '%s\n' "${todo[@]}" | xargs -r -P "$jobs" -I{} sh -c \
  's={}; o="$out/obj/$(echo "$s" | sed "s|^$kit/|kit/|" | tr / _).o"; '"$cxx"' '"${cxxflags[*]}"' \
   -c "$s" -o "$o.tmp" && mv "$o.tmp" "$o" || { echo "build: $s failed" >&2; exit 255; }'
echo "build: compiled in $((SECONDS - start)) s"

torch_libs=(-L"$torch_lib" -Wl,-rpath,"$torch_lib" -Wl,--no-as-needed -ltorch -ltorch_cpu -lc10)
[[ -e $torch_lib/libtorch_cuda.so ]] && torch_libs+=(-ltorch_cuda -lc10_cuda "${cuda_libs[@]}")
# The kit's runpath comes first so that its libraries win over any in LibTorch's folder (which is
# Debian's system folder with LIBTORCH_HOME=/usr).
kit_libs=(-L"$kit/lib" -Wl,-rpath,"$kit/lib" -Wl,-rpath-link,"$kit/lib")
absl_libs=()
for so in "$kit"/lib/libabsl_*.so; do absl_libs+=("-l$(basename "$so" .so | sed 's/^lib//')"); done
grpc_libs=(-lgrpc++_reflection -lgrpc++ -lgrpc -lgpr -laddress_sorting -lprotobuf)
link() {  # link OUTPUT SOURCES... [-- EXTRA LIBS]: with the models library and LibTorch
  local name=$1; shift
  local srcs=() extra=()
  while (($#)) && [[ $1 != -- ]]; do srcs+=("$1"); shift; done
  (($#)) && shift && extra=("$@")
  "$cxx" -o "$out/$name" $(obj $library "${srcs[@]}") "${extra[@]}" "${kit_libs[@]}" \
    "${torch_libs[@]}" "${absl_libs[@]}" -pthread
}
link_listed() {  # link_listed OUTPUT TARGET [torch]: the sources the kit lists for TARGET
  local with_torch=()
  [[ ${3:-} == torch ]] && with_torch=("${torch_libs[@]}")
  "$cxx" -o "$out/$1" $(obj $(listed "$2")) "${kit_libs[@]}" "${with_torch[@]}" \
    "${grpc_libs[@]}" -lpqxx -lpq -lcivetweb -lcrypto "${absl_libs[@]}" -pthread
}
if wants bench; then
  link neural_epoch_benchmark bench/random_crowd.cc bench/neural_epoch_benchmark_main.cc
  link fit_benchmark bench/random_crowd.cc bench/fit_benchmark_main.cc
fi
if wants tests; then
  gtest=("$kit/lib/libgtest_main.a" "$kit/lib/libgmock.a" "$kit/lib/libgtest.a")
  link neural_models_test models/testing/synthetic_crowd.cc models/neural/neural_models_test.cc -- "${gtest[@]}"
  link paper_claims_test models/testing/synthetic_crowd.cc models/neural/paper_claims_test.cc -- "${gtest[@]}"
  link flat_amsgrad_test models/neural/flat_amsgrad_test.cc -- "${gtest[@]}"
  link training_step_test models/neural/training_step_test.cc -- "${gtest[@]}"
  if [[ -e models/neural/sparse_row_amsgrad_test.cc ]]; then
    link sparse_row_amsgrad_test models/neural/sparse_row_amsgrad_test.cc -- "${gtest[@]}"
  fi
fi
wants worker && link_listed verity_worker verity_worker torch
wants server && link_listed verity_server verity_server torch
wants cli && link_listed verity verity
if wants crowd; then
  "$cxx" -o "$out/synthetic_crowd" $(obj bench/random_crowd.cc bench/synthetic_crowd_main.cc) \
    "${kit_libs[@]}" "${absl_libs[@]}" -pthread
fi
echo "build: done in $((SECONDS - start)) s, binaries in $out"
