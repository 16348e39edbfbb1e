# tetrarch monorepo: one virtual environment with core and every plugin installed editable.
#
#   make venv     build .venv (idempotent; redone when a pyproject.toml changes)
#   make demo     run examples/quickstart.py
#   make test     run the whole suite (tests/ and plugins/*/tests) with one pytest command
#   make bench    run benchmarks/bench_calls.py
#   make clean    remove build litter (keeps .venv; `make distclean` removes it too)

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
THIRD_PARTY := pyzmq pynng pytest pytest-timeout psutil uvloop numpy
PLUGINS := transport_zmq transport_nng rdma_verbs rdma_efa alloc_local alloc_slurm
PLUGIN_PYPROJECTS := $(wildcard $(foreach p,$(PLUGINS),plugins/$(p)/pyproject.toml))
PLUGIN_DIRS := $(patsubst %/pyproject.toml,%,$(PLUGIN_PYPROJECTS))
PYPROJECTS := $(wildcard core/pyproject.toml) $(PLUGIN_PYPROJECTS)

PYTEST_ARGS ?=

.PHONY: venv deps-apt demo test bench clean distclean

venv: $(STAMP)

# Debian packages some backends need (libfabric, slurm, ...); a no-op when all are present.
deps-apt:
	@bash scripts/apt-deps.sh

$(STAMP): $(PYPROJECTS) Makefile | deps-apt
	@test -f core/pyproject.toml || { echo "core/pyproject.toml is missing" >&2; exit 1; }
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip
	$(PIP) install "$(TORCH)"
	$(PIP) install $(THIRD_PARTY)
	@# Register all seven local distributions first (no dependencies), then resolve
	@# core[test]: requirements of core's extras that name plugin distributions are then
	@# satisfied by these folders, never looked up on an index. Plugins stay --no-deps:
	@# their third-party dependencies are installed above.
	$(PIP) install --no-deps -e core $(foreach p,$(PLUGIN_DIRS),-e $(p))
	$(PIP) install -e "core[test]"
	touch $@

demo: venv
	$(VPY) examples/quickstart.py

test: venv
	$(VPY) -m pytest $(PYTEST_ARGS)

bench: venv
	$(VPY) benchmarks/bench_calls.py

clean:
	find . -path ./$(VENV) -prune -o -path ./.git -prune -o \
	    \( -name __pycache__ -o -name '*.egg-info' -o -name .pytest_cache \) -type d -print0 \
	    | xargs -0 rm -rf
	rm -rf build dist core/build core/dist $(foreach p,$(PLUGINS),plugins/$(p)/build plugins/$(p)/dist)

distclean: clean
	rm -rf $(VENV)
