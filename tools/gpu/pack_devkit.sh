#!/bin/bash
# Packs what tools/gpu/build.sh needs besides LibTorch into one folder that can travel to a GPU
# machine which has PyTorch but not Debian's development packages: Abseil's headers and shared
# libraries and GoogleTest's headers and static libraries, as installed here by `make` (Debian 12,
# x86-64). The machine it goes to must be x86-64 with a glibc and libstdc++ at least as new.
#
#   tools/gpu/pack_devkit.sh [DIR]      (default .devkit, which .gitignore ignores)
set -euo pipefail
kit=${1:-.devkit}
lib=/usr/lib/x86_64-linux-gnu
for needed in /usr/include/absl /usr/include/gtest /usr/include/gmock "$lib/libgtest.a"; do
  [[ -e $needed ]] || { echo "pack_devkit: $needed is missing (run make first)" >&2; exit 1; }
done
rm -rf "$kit"
mkdir -p "$kit/include" "$kit/lib"
cp -r /usr/include/absl /usr/include/gtest /usr/include/gmock "$kit/include/"
for dev in "$lib"/libabsl_*.so; do
  soname=$(objdump -p "$dev" | awk '/SONAME/ {print $2}')
  cp -L "$dev" "$kit/lib/$soname"
  ln -s "$soname" "$kit/lib/$(basename "$dev")"
done
cp "$lib"/libgtest.a "$lib"/libgtest_main.a "$lib"/libgmock.a "$kit/lib/"
echo "pack_devkit: $(du -sh "$kit" | cut -f1) in $kit"
