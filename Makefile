# Two commands set everything up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The real ØMQ RAFT peers (npm zmq-raft, built against the system's libzmq) for the
# cluster tests and `make bench`.
RAFT_DIR := ic-harness/zmq-raft
RAFT_STAMP := $(RAFT_DIR)/node_modules/.installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: install raft-cluster demo demo-requests test test-fast lint bench chaos clean

$(STAMP): pyproject.toml setup.py ambrosia_core/wire/_cfast.pyx \
		ic-harness/ambrosia_ic/logstore/_cfast.pyx
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,dev,bench,spark,demo,raft,postgres]'
	@# The staged-records Spark source is Java, built against the installed pyspark: a JDK.
	command -v javac >/dev/null || { echo "installing openjdk-17-jdk-headless"; \
		$(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq openjdk-17-jdk-headless; }
	@# The status page's browser test drives Debian's chromium (playwright downloads none).
	test -x /usr/bin/chromium || { echo "installing chromium"; \
		$(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq chromium; }
	@# The power-cut tests mount a FUSE file system (tests/power): Debian's fuse3.
	command -v fusermount3 >/dev/null || { echo "installing fuse3"; \
		$(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq fuse3; }
	@# The partition tests (tests/partitions) build namespaced networks: ip, nft, iptables.
	missing=""; \
	command -v ip >/dev/null || missing="$$missing iproute2"; \
	command -v nft >/dev/null || missing="$$missing nftables"; \
	command -v iptables >/dev/null || missing="$$missing iptables"; \
	[ -z "$$missing" ] || { echo "installing$$missing"; $(SUDO) apt-get update -qq && \
		$(SUDO) apt-get install -y -qq $$missing; }
	@# The PostgreSQL sink's tests initdb a private server: Debian's binaries.
	command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
		echo "installing postgresql"; \
		$(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq postgresql; }
	$(PY) -m ambrosia_services.jobs.spark.jar >/dev/null
	touch $(STAMP)

install: $(STAMP)

$(RAFT_STAMP): $(RAFT_DIR)/package.json $(RAFT_DIR)/package-lock.json
	@# Only what is missing: Debian's nodejs and npm conflict with a Node installed otherwise.
	missing=""; \
	command -v pkg-config >/dev/null || missing="$$missing pkg-config"; \
	pkg-config --exists libzmq 2>/dev/null || missing="$$missing libzmq3-dev"; \
	command -v g++ >/dev/null || missing="$$missing g++"; \
	command -v make >/dev/null || missing="$$missing make"; \
	command -v npm >/dev/null || missing="$$missing nodejs npm"; \
	[ -z "$$missing" ] || { echo "installing$$missing"; $(SUDO) apt-get update -qq && \
		$(SUDO) apt-get install -y -qq $$missing; }
	cd $(RAFT_DIR) && npm_config_zmq_external=true npm install --no-audit --no-fund --loglevel=error
	touch $@

raft-cluster: $(RAFT_STAMP)

# The pipeline: feeds -> the coordinator immortal -> PySpark runners -> a 2PC sink, through
# kill -9 of the binding, the coordinator process and a runner; checked exactly at the end.
demo: $(STAMP)
	$(PY) samples/pipeline/run_pipeline.py

# The first demo: two immortals exchanging requests, the server killed part-way.
demo-requests: $(STAMP)
	$(PY) samples/demo/run_demo.py

# The suite starts a few thousand Python processes. Where PYTHONDONTWRITEBYTECODE is set,
# each compiled our modules from source again: tests/ic, tests/cli and tests/activeactive
# took 150 and 169 s of CPU that way, 119 s with the bytecode kept from an empty cache and
# 115 s from a kept one. The tests keep it under build/pycache, out of the source tree.
PYTEST_ENV := env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=$(CURDIR)/build/pycache

# The import contracts first (seconds): CI runs this target. Tests marked `chaos` (long
# fault runs whose fault kind another test here covers, named beside each marker) run in
# `make chaos`. The suite runs on the
# compiled codec (an install that failed to build it fails here), then the wire tests
# and the log store's fast-path tests again on the pure-Python one, but for those that
# hold the compiled paths against the pure ones: they call both by name, whatever the
# environment chose, so a second run repeats the first.
# Three workers on two cores: many real-process tests wait (for a lease, a timer, a
# process), and a third worker runs while they do. The Spark JVMs the tests start map a
# class-data archive (tests/jvm_archive.py): made under build/ once, by one Connect
# server, before the tests; made again when a JVM no longer loads it (another JDK or jars).
test: $(STAMP) $(RAFT_STAMP)
	$(VENV)/bin/lint-imports
	$(PY) -m tests.jvm_archive
	$(PYTEST_ENV) AMBROSIA_PY_CODEC=compiled $(PY) -m pytest -n 3 --dist loadgroup -q -m "not chaos"
	$(PYTEST_ENV) AMBROSIA_PY_CODEC=pure $(PY) -m pytest -n 2 -q tests/wire tests/ic/test_logstore_compiled.py \
		-k "not (compiled and (agree or xxh64))"

test-fast: $(STAMP) $(RAFT_STAMP)
	$(PY) -m tests.jvm_archive
	$(PYTEST_ENV) $(PY) -m pytest -n 2 -q -m "not slow and not chaos"

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

bench: $(STAMP) $(RAFT_STAMP)
	$(PY) bench/run.py

chaos: $(STAMP) $(RAFT_STAMP)
	$(PYTEST_ENV) $(PY) -m pytest -n 2 --dist loadgroup -q -m chaos
	$(PY) -m tests.sim --seeds 100000
	$(PY) bench/chaos.py --requests 2000 --kills 20
	$(PY) bench/chaos.py --requests 2000 --kills 10 --power-cuts 10
	$(PY) -m tests.power.leases --cuts 10 --kills 3
	$(PY) bench/partitions.py --store raft --faults 20
	$(PY) bench/partitions.py --store files --faults 20

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
