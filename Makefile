# tetrarch monorepo: one virtual environment with core and every plugin installed editable.
#
#   make venv     build .venv (idempotent; redone when a pyproject.toml changes)
#   make demo     run examples/quickstart.py
#   make lint     ruff check and mypy (settings in the root pyproject.toml)
#   make test     run the whole suite (tests/ and plugins/*/tests) with one pytest command, on the
#                 default transport (ipc); TEST_TRANSPORTS=auto adds the per-transport kernel passes
#   make test-transports  tests/kernel once more per plugin transport (zmq, nng: skipped with the
#                 reason while unavailable), side by side (about 2 minutes); TEST_TRANSPORTS=all adds
#                 builtin tcp (tests/transport/test_every_transport.py); CI runs it after make test
#   make test-long  the tests of 10 s or more that make test leaves out (pytest -m long; about 4
#                 minutes); CI runs it after make test
#   make test-stress  the long flood and chaos runs that make test leaves out (pytest -m stress;
#                 about 2 minutes); CI runs it after make test
#   make test-packaging  build the seven wheels; install each README install into a fresh venv
#                 from them (and a third-party wheel cache, .cache/wheels) and run the quickstart
#   make bench    the benchmark suite (python -m benchmarks): call, pipelined, fan-out, spawn and
#                 payload, medians of 5 runs next to raw baselines from the same run;
#                 BENCH_ARGS=--quick for a smoke run, BENCH_ARGS=--peers adds Ray and Monarch columns
#                 (their venv is built once under ~/.cache/tetrarch-bench); docs/performance.md
#   make bench-transports  every available transport next to its raw library (bench_transports.py),
#                 RDMA, and tensors as arguments and results (bench_payload.py);
#                 BENCH_ARGS=--quick for a one-minute run, BENCH_ARGS="--transports tcp" for one
#   make bytecode compile the editable sources' __pycache__ (test, demo and bench do it first)
#   make clean    remove build litter (keeps .venv and .cache; `make distclean` removes them too)
#
# VPY=/path/to/python on the command line (make lint VPY=...) runs lint, test, demo and
# bench with that interpreter's environment as it is: no .venv is built or updated.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test

PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
PIP := $(VPY) -m pip
STAMP := $(VENV)/.stamp

# EXACTLY this pin: pip's config find-links a cached CPU wheel of it; an unpinned torch
# pulls several GB of CUDA wheels.
TORCH := torch==2.13.0
# Third-party packages the plugins and the test suite need. The plugins themselves are
# installed with --no-deps (their only other requirement is tetrarch itself), so their
# third-party dependencies are listed here explicitly. numpy: torch warns on import without it.
# setproctitle: a core dependency (process titles). setuptools: make test-packaging builds
# the wheels with --no-build-isolation.
THIRD_PARTY := pyzmq pynng pytest pytest-timeout psutil uvloop numpy setproctitle setuptools hypothesis cffi nbclient ipykernel
# `make lint`'s tools, pinned: a new release may add findings, so upgrades are deliberate.
LINT_TOOLS := ruff==0.17.5 mypy==2.4.1
PLUGINS := transport_zmq transport_nng rdma_verbs rdma_efa alloc_local alloc_slurm
PLUGIN_PYPROJECTS := $(wildcard $(foreach p,$(PLUGINS),plugins/$(p)/pyproject.toml))
PLUGIN_DIRS := $(patsubst %/pyproject.toml,%,$(PLUGIN_PYPROJECTS))
PYPROJECTS := $(wildcard core/pyproject.toml) $(PLUGIN_PYPROJECTS)

PYTEST_ARGS ?=
BENCH_ARGS ?=

.PHONY: venv deps-apt demo lint test test-transports test-long test-stress test-packaging bench bench-transports clean distclean

# What the run targets need first: the venv, unless VPY names another interpreter.
ifeq ($(origin VPY),command line)
RUN_DEPS :=
venv:
	@echo "make venv builds $(VENV) with $(PYTHON); VPY= is for running with another environment" >&2; exit 1
else
RUN_DEPS := venv
venv: $(STAMP)
endif

# Debian packages some backends need (libfabric, slurm, ...); a no-op when all are present.
deps-apt:
	@bash scripts/apt-deps.sh

$(STAMP): $(PYPROJECTS) Makefile | deps-apt
	@test -f core/pyproject.toml || { echo "core/pyproject.toml is missing" >&2; exit 1; }
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip
	$(PIP) install "$(TORCH)"
	$(PIP) install $(THIRD_PARTY) $(LINT_TOOLS)
	@# Register all seven local distributions first (no dependencies), then resolve
	@# core[test,admin,otel,trace,sql]: requirements of core's extras that name plugin distributions are then
	@# satisfied by these folders, never looked up on an index. Plugins stay --no-deps:
	@# their third-party dependencies are installed above.
	$(PIP) install --no-deps -e core $(foreach p,$(PLUGIN_DIRS),-e $(p))
	$(PIP) install -e "core[test,admin,otel,trace,sql]"
	touch $@

# The repository's own sources are installed editable, so nothing compiled them to bytecode the
# way installing a wheel does. With PYTHONDONTWRITEBYTECODE set (common in containers, and so in
# CI), every process would then compile the kernel from source on each start: a proc took about
# 0.36 s to spawn instead of 0.17 s, and the suite paid that on every spawn. `bytecode` writes the
# __pycache__ a wheel install would have; Python still recompiles any file edited since.
BYTECODE_DIRS := core/src $(wildcard plugins/*/src) tests $(wildcard plugins/*/tests) examples benchmarks

.PHONY: bytecode
bytecode: $(RUN_DEPS)
	@$(VPY) -m compileall -q -j 0 $(BYTECODE_DIRS) > /dev/null

demo: bytecode
	$(VPY) examples/quickstart.py

# Both tools always run (all findings in one go); the target fails if either found any.
# Neither takes paths here: ruff's `include` and mypy's `files` in pyproject.toml say what.
lint: $(RUN_DEPS)
	@status=0; \
	echo "$(VPY) -m ruff check"; $(VPY) -m ruff check || status=1; \
	echo "$(VPY) -m mypy"; $(VPY) -m mypy || status=1; \
	exit $$status

# The per-transport kernel passes have a target of their own (test-transports): make test stays
# under 12 minutes on 2 cores.
TEST_TRANSPORTS ?= none
test: bytecode
	$(VPY) -m pytest --transports=$(TEST_TRANSPORTS) $(PYTEST_ARGS)

test-transports: bytecode
	$(VPY) -m pytest tests/transport/test_every_transport.py --transports=$(if $(filter none,$(TEST_TRANSPORTS)),auto,$(TEST_TRANSPORTS)) $(PYTEST_ARGS)

# The tests of 10 s or more (tests/conftest.py LONG_TESTS): default bounds waited out, torch in many procs.
test-long: bytecode
	$(VPY) -m pytest -m long $(PYTEST_ARGS)

# The long flood and chaos runs (tests/conftest.py STRESS_TESTS), on the default transport.
test-stress: bytecode
	$(VPY) -m pytest -m stress $(PYTEST_ARGS)

# Minutes, not seconds: kept out of `make test` (tests/packaging/conftest.py skips it there).
# The first run downloads the third-party wheels into .cache/wheels through pip's configuration.
test-packaging: $(RUN_DEPS)
	$(VPY) -m pytest -m packaging tests/packaging $(PYTEST_ARGS)

# Not part of make test (tests/bench/test_runner_smoke.py checks the runner itself works).
bench: bytecode
	$(VPY) -m benchmarks $(BENCH_ARGS)

bench-transports: bytecode
	$(VPY) benchmarks/bench_transports.py $(BENCH_ARGS)
	$(VPY) benchmarks/bench_rdma.py
	$(VPY) benchmarks/bench_payload.py

clean:
	find . -path ./$(VENV) -prune -o -path ./.git -prune -o \
	    \( -name __pycache__ -o -name '*.egg-info' -o -name .pytest_cache \) -type d -print0 \
	    | xargs -0 rm -rf
	rm -rf build dist core/build core/dist $(foreach p,$(PLUGINS),plugins/$(p)/build plugins/$(p)/dist)
	rm -rf .mypy_cache .ruff_cache

distclean: clean
	rm -rf $(VENV) .cache
