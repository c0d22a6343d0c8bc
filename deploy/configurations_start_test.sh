#!/bin/sh
# //deploy:configurations_start_test: each shipped configuration starts a real server (see
# configurations_start_test.py). Debian's python3: it has python3-grpcio and python3-yaml.
exec /usr/bin/python3 deploy/configurations_start_test.py "$@"
