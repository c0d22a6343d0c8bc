#!/bin/bash
# Unpacks the kit.tar.xz that tools/gpu/pack_devkit.sh wrote, in place, once (build.sh and
# worker_e2e.sh call it; a kit packed without kit.tar.xz is left as it is).
#
#   tools/gpu/unpack_devkit.sh KIT_DIR
set -euo pipefail
kit=${1:?usage: tools/gpu/unpack_devkit.sh KIT_DIR}
if [[ -e $kit/kit.tar.xz && ! -e $kit/.unpacked ]]; then
  start=$SECONDS
  xz -dc -T0 "$kit/kit.tar.xz" | tar -C "$kit" -xf -
  touch "$kit/.unpacked"
  echo "unpack_devkit: $(du -sm "$kit" | cut -f1) MiB in $kit ($((SECONDS - start)) s)"
fi
