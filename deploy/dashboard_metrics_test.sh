#!/bin/sh
# //deploy:dashboard_metrics_test: the metrics of deploy/grafana and deploy/prometheus against a
# running server (see dashboard_metrics_test.py). Debian's python3: it has python3-yaml.
exec /usr/bin/python3 deploy/dashboard_metrics_test.py "$@"
