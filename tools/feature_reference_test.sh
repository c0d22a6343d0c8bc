#!/bin/sh
# //tools:feature_reference_test (see feature_reference_test.py). Debian's python3, which has
# the python3-numpy, python3-scipy and python3-pandas that `make test` installs.
exec /usr/bin/python3 tools/feature_reference_test.py "$@"
