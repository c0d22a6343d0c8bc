#!/bin/sh
# //console:console_browser_test: runs console_browser_test.py with Debian's python3 (the
# python3 on PATH may be a pyenv build); Chromium is Debian's `chromium` (Makefile PACKAGES).
set -eu
if [ ! -x /usr/bin/chromium ]; then
  echo "console_browser_test: /usr/bin/chromium is missing (apt-get install chromium)" >&2
  exit 1
fi
exec /usr/bin/python3 "$(dirname "$0")/console_browser_test.py" "$@"
