# Verity: the two set-up commands are `make run` and `make test` (see README.md).
# Both install missing Debian packages first (as root), then build with Bazel offline.

SHELL := /bin/bash
BAZEL ?= bazel
LISTEN ?= localhost:50051
DATA_DIR ?= ./var
DATASETS ?= $(abspath ../shared/datasets)

# Debian 12 packages the build, the tests and the embedded PostgreSQL need.
PACKAGES := bazel-bootstrap g++ make python3 libgrpc++-dev protobuf-compiler \
	protobuf-compiler-grpc libprotobuf-dev libabsl-dev libpqxx-dev libpq-dev libtorch-dev \
	libgtest-dev libgmock-dev libcivetweb-dev libssl-dev postgresql-15 \
	python3-grpcio python3-protobuf python3-pandas python3-yaml python3-venv python3-pip \
	python3-setuptools python3-wheel python3-scipy python3-sklearn python3-nltk python3-attr \
	python3-tqdm systemd chromium openssl

.PHONY: run test build deps demo clean

deps:
	@missing=$$(for p in $(PACKAGES); do \
	    dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; \
	  done); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "Installing missing packages:" $$missing; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	  else \
	    echo "Missing Debian packages. Run as root:"; \
	    echo "  apt-get update && apt-get install -y --no-install-recommends" $$missing; \
	    exit 1; \
	  fi; \
	fi

build: deps
	$(BAZEL) build //...

# Starts the server on $(LISTEN) with an embedded PostgreSQL under $(DATA_DIR).
run: deps
	$(BAZEL) build //server:verity_server //client:verity
	@echo "CLI: $(CURDIR)/bazel-bin/client/verity --help"
	exec bazel-bin/server/verity_server --listen=$(LISTEN) --data_dir=$(DATA_DIR)

# Runs every test; the last line is "N passed, N failed" (test cases, from the test.xml of the
# workspace's current test targets: bazel-testlogs also keeps those of moved or removed ones).
# Targets tagged manual are not run by `bazel test //...`, so they are not counted either.
test: deps
	@set -o pipefail; status=0; \
	VERITY_DATASETS=$(DATASETS) $(BAZEL) test //... || status=$$?; \
	if [ $$status -ne 0 ] && [ $$status -ne 3 ]; then \
	  echo "bazel test could not run the tests (exit $$status)"; echo "0 passed, 1 failed"; exit 1; \
	fi; \
	targets=$$(mktemp); $(BAZEL) query 'tests(//...) except attr(tags, "\bmanual\b", tests(//...))' > $$targets 2>/dev/null || { rm -f $$targets; \
	  echo "bazel query could not list the tests"; echo "0 passed, 1 failed"; exit 1; }; \
	python3 tools/test_summary.py bazel-testlogs $$targets; summary=$$?; rm -f $$targets; \
	if [ $$status -ne 0 ] || [ $$summary -ne 0 ]; then exit 1; fi

# Streams bluebirds into a running server (make run) and prints its accuracy against gold.
demo:
	$(BAZEL) build //client:verity
	tools/demo.sh $(DATASETS)/bluebirds

clean:
	$(BAZEL) clean
