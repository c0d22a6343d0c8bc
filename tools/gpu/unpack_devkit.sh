#!/bin/bash
# Unpacks the kit.tar.xz that tools/gpu/pack_devkit.sh wrote, in place, once (build.sh and
# worker_e2e.sh call it; a kit packed without kit.tar.xz is left as it is).
#
#   tools/gpu/unpack_devkit.sh KIT_DIR
set -euo pipefail
kit=${1:?usage: tools/gpu/unpack_devkit.sh KIT_DIR}
if [[ -e $kit/kit.tar.xz && ! -e $kit/.unpacked ]]; then
  start=$SECONDS
  if command -v xz > /dev/null; then
    xz -dc -T0 "$kit/kit.tar.xz" | tar -C "$kit" -xf -
  else  # minimal images may lack xz-utils; Python's lzma reads it too
    python3 -c 'import sys, tarfile
with tarfile.open(sys.argv[1], "r:xz") as t:
    t.extractall(sys.argv[2], **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))' \
      "$kit/kit.tar.xz" "$kit"
  fi
  touch "$kit/.unpacked"
  echo "unpack_devkit: $(du -sm "$kit" | cut -f1) MiB in $kit ($((SECONDS - start)) s)"
fi
