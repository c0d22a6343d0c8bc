#!/bin/sh
# //deploy:deploy_test: static checks of the deployment files (see deploy_test.py).
# /usr/bin/python3 explicitly: it has Debian's python3-yaml; a python3 earlier on PATH (pyenv)
# may not.
exec /usr/bin/python3 deploy/deploy_test.py "$@"
