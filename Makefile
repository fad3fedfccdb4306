# mini: `make lab` runs the course, `make test` runs the test suite.
#
# Each target sets itself up: it creates .venv with python3 (>= 3.10) if it is missing,
# installs this package editable with its pinned dependencies, and builds the C++
# kernels.  Nothing is reinstalled unless pyproject.toml, setup.py or the C++ sources
# change (the stamp file .venv/.mini-installed records the last install).

SHELL := /bin/bash
.DEFAULT_GOAL := install

# The first of these that is Python >= 3.10 creates the venv (override: make PYTHON=...).
PYTHON ?= $(shell for p in python3 python3.14 python3.13 python3.12 python3.11 python3.10; do \
            if command -v $$p >/dev/null 2>&1 && \
               $$p -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then \
              echo $$p; exit 0; fi; done; echo python3)

VENV := .venv
VBIN := $(VENV)/bin
VPY := $(VBIN)/python
STAMP := $(VENV)/.mini-installed
TORCH_STAMP := $(VENV)/.mini-torch
# Same pin as the `torch` extra in pyproject.toml (tests/test_environment.py checks).
TORCH_SPEC := torch==2.13.0
CPU_SOURCES := $(wildcard mini/backends/cpu/*.cpp mini/backends/cpu/*.h mini/backends/cpu/*.hpp)

# Commands run with the venv's bin first on PATH: nbgrader shells out to `alembic`,
# and Jupyter should find the venv's kernel.
RUN := PATH="$(CURDIR)/$(VBIN):$$PATH" VIRTUAL_ENV="$(CURDIR)/$(VENV)"

# What `make lab` opens: empty means the learner's workspace (see the `workspace` target).
LAB_DIR ?=
LAB_ARGS ?=

# `make test` runs the suite on this many workers (pytest-xdist); PYTEST_ARGS adds more.
PYTEST_WORKERS ?= 2
PYTEST_ARGS ?=

# CI sets MINI_TEST_TORCH=1 to install PyTorch for the differential tests.
TEST_DEPS := $(STAMP)
ifeq ($(MINI_TEST_TORCH),1)
TEST_DEPS += $(TORCH_STAMP)
endif

.PHONY: install lab workspace test clean distclean help

help:
	@echo "make lab        set up (first time), then open the course in JupyterLab"
	@echo "make test       set up (first time), then run the test suite"
	@echo "                (MINI_TEST_TORCH=1 also installs PyTorch for differential tests)"
	@echo "make install    only set up: .venv, pinned dependencies, the C++ kernels"
	@echo "make clean      remove build products (keeps .venv)"
	@echo "make distclean  remove build products and .venv"

install: $(STAMP)

$(VPY):
	@if ! command -v $(PYTHON) >/dev/null 2>&1; then \
	  echo "mini needs Python >= 3.10, and '$(PYTHON)' was not found." >&2; \
	  echo "Install Python 3.10 or newer, or run: make PYTHON=/path/to/python3.11 ..." >&2; exit 1; fi
	@if ! $(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then \
	  echo "mini needs Python >= 3.10, but '$(PYTHON)' is $$($(PYTHON) --version 2>&1)." >&2; \
	  echo "Install Python 3.10 or newer, or run: make PYTHON=/path/to/python3.11 ..." >&2; exit 1; fi
	@echo "Creating $(VENV) with $$($(PYTHON) --version 2>&1) ($$(command -v $(PYTHON)))"
	@$(PYTHON) -m venv $(VENV) || { rm -rf $(VENV); \
	  echo "Could not create $(VENV). On Debian/Ubuntu: sudo apt install python3-venv" >&2; exit 1; }
	@$(VPY) -m pip install --quiet --upgrade pip || echo "(could not upgrade pip; continuing with $$($(VPY) -m pip --version))"

$(STAMP): pyproject.toml setup.py $(CPU_SOURCES) | $(VPY)
	$(RUN) $(VPY) -m pip install -e .
	@$(VPY) -c 'import mini.backends._cpu as m; print("mini: C++ kernels built; OpenMP:", m.openmp_enabled(), "threads:", m.max_threads())'
	@touch $@

$(TORCH_STAMP): Makefile | $(STAMP)
	$(RUN) $(VPY) -m pip install "$(TORCH_SPEC)"
	@touch $@

# Hook for the learner workspace (filled in by the grading-loop work): if the course CLI
# has a `workspace` command, it prepares the learner's workspace before Lab opens.
# The learner's workspace: the student version of every chapter (solutions stripped, hidden
# tests removed, the chapter's student copy of mini beside each notebook), made on first run
# in workspace/ (git-ignored) and never overwritten, so work survives re-runs and git pull;
# chapters added later appear on the next run.  Authors and instructors: make lab LAB_DIR=course
workspace: $(STAMP)
	@$(RUN) $(VBIN)/mini-course workspace >/dev/null

lab: $(STAMP)
	@dir="$(LAB_DIR)"; \
	if [ -z "$$dir" ]; then dir=$$($(RUN) $(VBIN)/mini-course workspace) || exit 1; fi; \
	root=""; if [ "$$(id -u)" = 0 ]; then root="--allow-root"; fi; \
	echo "Opening JupyterLab on $$dir/ (stop it with Ctrl-C)"; \
	$(RUN) exec $(VBIN)/jupyter lab --ServerApp.root_dir="$$dir" $$root $(LAB_ARGS)

# One BLAS thread per test worker: with -n 2 on 2 cores, a multi-threaded BLAS in each
# worker oversubscribes the machine and a 0.1 ms matrix product can take 15 ms.
test: $(TEST_DEPS)
	$(RUN) OPENBLAS_NUM_THREADS=$${OPENBLAS_NUM_THREADS:-1} $(VPY) -m pytest -n $(PYTEST_WORKERS) $(PYTEST_ARGS)

clean:
	rm -rf build dist *.egg-info .pytest_cache .hypothesis
	find mini grader -name '*.so' -delete 2>/dev/null || true
	find . -path ./$(VENV) -prune -o \( -name __pycache__ -o -name .ipynb_checkpoints \) -type d -prune -exec rm -rf {} + 
	find . -path ./$(VENV) -prune -o -name '*.stamp' -type f -exec rm -f {} +
	rm -f $(STAMP)

distclean: clean
	rm -rf $(VENV)
