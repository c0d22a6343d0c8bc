#!/bin/sh
# Prints, one per line and sorted, the Debian packages that provide the shared libraries the
# given binaries load (ldd, then dpkg -S). The Docker image's runtime stage installs exactly
# these, so the runtime library list is derived from the built binaries instead of being a
# second hand-written copy of the Makefile's PACKAGES.
#
# Usage: deploy/runtime_packages.sh BINARY...
# Exit status: 0 on success; 1 when a binary is missing, a library is not found ("not found"
# in ldd) or a library belongs to no installed package; 2 on a usage error.
set -eu

if [ "$#" -eq 0 ]; then
  echo "usage: $0 BINARY..." >&2
  exit 2
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
libraries="$work/libraries" candidates="$work/candidates" owners="$work/owners"
packages="$work/packages"

for binary in "$@"; do
  if [ ! -f "$binary" ]; then
    echo "$0: no such file: $binary" >&2
    exit 1
  fi
  if ! ldd_output=$(ldd "$binary" 2>&1); then
    # A static binary loads no libraries.
    case "$ldd_output" in *"not a dynamic executable"*) continue ;; esac
    echo "$0: ldd failed on $binary: $ldd_output" >&2
    exit 1
  fi
  if echo "$ldd_output" | grep -q 'not found'; then
    echo "$0: $binary needs libraries that are not installed:" >&2
    echo "$ldd_output" | grep 'not found' >&2
    exit 1
  fi
  # "libpq.so.5 => /lib/x86_64-linux-gnu/libpq.so.5 (0x...)" and the loader line
  # "/lib64/ld-linux-x86-64.so.2 (0x...)"; linux-vdso has no file.
  echo "$ldd_output" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' \
    >>"$libraries"
done

# dpkg knows a file under the path its package ships it at. Debian 12 merged /lib into
# /usr/lib, so ldd may report /lib/x86_64-linux-gnu/libc.so.6 while the package lists
# /usr/lib/..., or the reverse, and a soname symlink may be shipped under a different name than
# its target. So each library has up to four candidate paths: itself, its /usr-merged twin,
# its resolved target and that target's twin; the first one dpkg knows names the package.
# One dpkg -S call for all of them (each call reads the whole package database).
sort -u "$libraries" | while read -r library; do
  for path in "$library" "$(readlink -f "$library")"; do
    case "$path" in
      /usr/lib/*) twin="${path#/usr}" ;;
      /lib/* | /lib64/*) twin="/usr$path" ;;
      *) twin="$path" ;;
    esac
    printf '%s %s\n%s %s\n' "$library" "$path" "$library" "$twin"
  done
done >"$candidates"
if [ ! -s "$candidates" ]; then
  exit 0
fi

# dpkg -S fails when some path is unowned (expected for the twins); its lines look like
# "libc6:amd64: /lib/x86_64-linux-gnu/libc.so.6" or "pkg1:amd64, pkg2:amd64: PATH".
cut -d' ' -f2 "$candidates" | sort -u | xargs dpkg -S >"$owners" 2>/dev/null || true

awk -v script="$0" '
  FILENAME == ARGV[1] {
    if ($0 ~ /^diversion /) next
    split_at = index($0, ": /")
    if (split_at == 0) next
    path = substr($0, split_at + 2)
    package = substr($0, 1, split_at - 1)
    sub(/,.*/, "", package)    # first of several owners
    sub(/:.*/, "", package)    # drop ":amd64"
    owner[path] = package
    next
  }
  !($1 in found) && ($2 in owner) { found[$1] = owner[$2] }
  { seen[$1] = 1 }
  END {
    status = 0
    for (library in seen) {
      if (!(library in found)) {
        print script ": " library " belongs to no installed Debian package" > "/dev/stderr"
        status = 1
      } else {
        print found[library]
      }
    }
    exit status
  }
' "$owners" "$candidates" >"$packages"
sort -u "$packages"
