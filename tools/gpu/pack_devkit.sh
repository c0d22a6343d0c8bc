#!/bin/bash
# Packs what tools/gpu/build.sh and tools/gpu/worker_e2e.sh need besides LibTorch into one folder
# that can travel to a GPU machine which has PyTorch and a C++ compiler but none of Debian's
# development packages, no protoc, no Bazel and no PostgreSQL. Everything comes from this machine
# (Debian 12, x86-64, after `make`); the machine it goes to must be x86-64 with a glibc and
# libstdc++ at least as new, and needs no other library: every shared library the binaries and
# PostgreSQL load, besides glibc's, libstdc++ and libgcc_s, is in the kit.
#
#   tools/gpu/pack_devkit.sh [DIR]      (default .devkit, which .gitignore ignores)
#
# The kit, before compression:
#   include/   headers of Abseil, GoogleTest, protobuf, gRPC, libpqxx, libpq, OpenSSL, civetweb
#   lib/       their shared libraries by soname (plus the unversioned names the linker wants),
#              every library those load in turn, GoogleTest's static libraries, and the
#              libraries of PostgreSQL's programs (ICU, libxml2, Kerberos, LDAP, ...)
#   gen/       the C++ that protoc and grpc_cpp_plugin generate from proto/ (verity/v1/*.pb.*)
#   sources/   TARGET.txt: the repository's .cc files of each binary, from `bazel query`
#   pg/usr/lib/postgresql/15/{bin,lib}, pg/usr/share/postgresql/15: PostgreSQL 15's server
#              (initdb, pg_ctl, postgres, psql; plpgsql and the encoding conversions; the share
#              files, timezone sets included) in Debian's relative layout, so that PostgreSQL
#              finds its share and lib folders relative to its binaries wherever the kit lies.
#              Debian's PostgreSQL reads time zones from the system's /usr/share/zoneinfo; without
#              one it still runs in UTC (worker_e2e.sh runs initdb with TZ=UTC, checked with an
#              empty /usr/share/zoneinfo).
# All of that is stored as kit.tar.xz (tens of MiB less than unpacked; ICU's data alone is 31 MiB);
# build.sh and worker_e2e.sh unpack it in place on first use (see unpack_devkit.sh). KEEP=1 keeps
# the unpacked folders here too.
set -euo pipefail
kit=$(realpath -m "${1:-.devkit}")
cd "$(dirname "$0")/../.."
lib=/usr/lib/x86_64-linux-gnu
pg_bin=/usr/lib/postgresql/15/bin
pg_pkglib=/usr/lib/postgresql/15/lib
pg_share=/usr/share/postgresql/15
for needed in /usr/include/absl /usr/include/gtest /usr/include/gmock "$lib/libgtest.a" \
              /usr/include/grpcpp /usr/include/google/protobuf /usr/include/pqxx \
              /usr/include/postgresql/libpq-fe.h /usr/include/civetweb.h /usr/bin/protoc \
              /usr/bin/grpc_cpp_plugin "$pg_bin/postgres" "$pg_share/postgres.bki"; do
  [[ -e $needed ]] || { echo "pack_devkit: $needed is missing (run make first)" >&2; exit 1; }
done
rm -rf "$kit"
mkdir -p "$kit/include/postgresql" "$kit/lib" "$kit/gen" "$kit/sources"

# Headers.
cp -r /usr/include/absl /usr/include/gtest /usr/include/gmock /usr/include/grpc \
  /usr/include/grpcpp /usr/include/grpc++ /usr/include/google /usr/include/pqxx \
  /usr/include/openssl /usr/include/civetweb.h /usr/include/CivetServer.h "$kit/include/"
cp /usr/include/postgresql/*.h "$kit/include/postgresql/"
cp -r /usr/include/postgresql/libpq "$kit/include/postgresql/"

# Libraries linked by name (build.sh's -l flags): the file by its soname and the unversioned name.
add_dev_lib() {  # add_dev_lib /path/libfoo.so
  local soname
  soname=$(objdump -p "$1" | awk '/SONAME/ {print $2}')
  [[ -e $kit/lib/$soname ]] || cp -L "$1" "$kit/lib/$soname"
  [[ $(basename "$1") == "$soname" ]] || ln -sf "$soname" "$kit/lib/$(basename "$1")"
}
for dev in "$lib"/libabsl_*.so; do add_dev_lib "$dev"; done
for name in grpc++_reflection grpc++ grpc gpr address_sorting protobuf pqxx pq civetweb crypto; do
  add_dev_lib "$lib/lib$name.so"
done
cp "$lib"/libgtest.a "$lib"/libgtest_main.a "$lib"/libgmock.a "$kit/lib/"

# PostgreSQL, in Debian's layout below pg/ (its relocation logic keeps the relative paths between
# bindir, pkglibdir and sharedir).
pg=$kit/pg
mkdir -p "$pg$pg_bin" "$pg$pg_pkglib" "$pg$pg_share/extension"
cp "$pg_bin"/{initdb,pg_ctl,postgres,psql,pg_isready} "$pg$pg_bin/"
cp "$pg_pkglib"/{plpgsql.so,dict_snowball.so,libpqwalreceiver.so,pgoutput.so} \
  "$pg_pkglib"/*_and_*.so "$pg$pg_pkglib/"
(cd "$pg_share" && cp -r $(ls | grep -v -x -e extension -e man -e contrib) "$pg$pg_share/")
cp "$pg_share"/extension/plpgsql* "$pg$pg_share/extension/"

# Every library those load, besides the C and C++ runtimes (which the GPU machine has, newer).
runtime='^(linux-vdso|ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libresolv|libutil'
runtime+='|libstdc\+\+|libgcc_s)\.so'
mapfile -t loaded < <(ldd "$kit"/lib/*.so* "$pg$pg_bin"/* "$pg$pg_pkglib"/*.so 2>/dev/null |
  awk '/=> \// {print $1, $3}' | grep -v -E "$runtime" | sort -u | awk '{print $2}')
for path in "${loaded[@]}"; do
  name=$(basename "$path")
  [[ -e $kit/lib/$name ]] || cp -L "$path" "$kit/lib/$name"
done

# The generated C++ of the API (the GPU machine has neither protoc nor grpc_cpp_plugin).
protoc --proto_path=proto --proto_path=/usr/include --cpp_out="$kit/gen" --grpc_out="$kit/gen" \
  --plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin proto/verity/v1/*.proto

# The sources of each binary build.sh links, as Bazel sees them now.
for target in //server/training:verity_worker //server:verity_server //client:verity; do
  bazel query "kind('source file', deps($target))" 2>/dev/null | grep '^//' | grep '\.cc$' |
    sed -e 's|^//||' -e 's|^:||' -e 's|:|/|' | sort > "$kit/sources/${target##*:}.txt"
  if [[ ! -s $kit/sources/${target##*:}.txt ]]; then
    echo "pack_devkit: bazel query $target failed" >&2
    exit 1
  fi
done

unpacked=$(du -sm "$kit" | cut -f1)
tar -C "$kit" -cf - include lib gen pg | xz -6 -T2 > "$kit/kit.tar.xz"
if [[ -n ${KEEP:-} ]]; then touch "$kit/.unpacked"; else rm -rf "$kit"/{include,lib,gen,pg}; fi
packed=$(du -sm "$kit/kit.tar.xz" | cut -f1)
echo "pack_devkit: ${unpacked} MiB unpacked, kit.tar.xz ${packed} MiB;" \
  "$(du -sm "$kit" | cut -f1) MiB in $kit"
