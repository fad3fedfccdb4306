# mini: `make lab` runs the course, `make test` runs the test suite.
#
# Each target sets itself up: it creates .venv with a supported Python (see PY_MIN and
# PY_MAX) if it is missing, installs this package editable with its pinned dependencies,
# and builds the C++ kernels.  Nothing is reinstalled unless pyproject.toml, setup.py or
# the C++ sources change (the stamp file .venv/.mini-installed records the last install).

SHELL := /bin/bash
.DEFAULT_GOAL := install

ifeq ($(OS),Windows_NT)
$(error mini needs Linux or macOS (make, a POSIX shell, g++ or clang++). On Windows use WSL2: in PowerShell run `wsl --install -d Ubuntu`, open Ubuntu, run `sudo apt install make g++ python3-venv git`, clone the repository inside Ubuntu (under ~, not /mnt/c) and run make there. Open the printed JupyterLab address in your Windows browser)
endif

# The Python versions mini supports: those every pinned dependency has a wheel for
# (numpy 2.4.6 and ipykernel 7.4.0 have none for 3.10; numpy 2.4.6 and torch 2.13.0 none
# for 3.15).  pyproject.toml's requires-python, environment.yml and the README say the
# same; tests/test_environment.py checks that, and asks the package index for a wheel of
# every pin on every version in the range.
PY_MIN := 3.11
PY_MAX := 3.14
PY_RANGE := Python $(PY_MIN) to $(PY_MAX)
comma := ,
PY_SUPPORTED := import sys; sys.exit(not ($(subst .,$(comma),$(PY_MIN))) <= sys.version_info[:2] <= ($(subst .,$(comma),$(PY_MAX))))

# The interpreter that creates .venv: python3 if its version is supported, else the
# newest supported python3.X on PATH (override: make PYTHON=/path/to/python3.12).
PYTHON ?= $(shell for p in python3 $$(for ((m=$(lastword $(subst ., ,$(PY_MAX))); \
                      m>=$(lastword $(subst ., ,$(PY_MIN))); m--)); do echo python3.$$m; done); do \
            if command -v $$p >/dev/null 2>&1 && $$p -c '$(PY_SUPPORTED)' 2>/dev/null; then \
              echo $$p; exit 0; fi; done)

# The environment make installs into and runs from.  An active conda environment other than
# `base` (`conda activate mini` after `conda env create -f environment.yml`) is used as it
# is: conda installed the pinned packages, so make only installs mini itself into it
# (editable, no dependencies from PyPI) and never creates .venv.  Otherwise: .venv, made here.
# `make MINI_ENV=.venv ...` forces .venv even while a conda environment is active.
CONDA_ACTIVE := $(if $(and $(CONDA_PREFIX),$(filter-out base,$(CONDA_DEFAULT_ENV))),$(CONDA_PREFIX))
MINI_ENV ?= $(or $(CONDA_ACTIVE),.venv)
VENV := $(MINI_ENV)
ifeq ($(abspath $(VENV)),$(abspath .venv))
ENV_KIND := venv
else
ENV_KIND := active
endif
VBIN := $(VENV)/bin
VPY := $(VBIN)/python
STAMP := $(VENV)/.mini-installed
TORCH_STAMP := $(VENV)/.mini-torch
# Same pin as the `torch` extra in pyproject.toml (tests/test_environment.py checks).
TORCH_SPEC := torch==2.13.0
CPU_SOURCES := $(wildcard mini/backends/cpu/*.cpp mini/backends/cpu/*.h mini/backends/cpu/*.hpp)

# Commands run with the venv's bin first on PATH: nbgrader shells out to `alembic`,
# and Jupyter should find the venv's kernel.
RUN := PATH="$(abspath $(VBIN)):$$PATH" $(if $(filter venv,$(ENV_KIND)),VIRTUAL_ENV="$(abspath $(VENV))")

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

.PHONY: install lab workspace test clean distclean help python

help:
	@echo "make lab        set up (first time), then open your workspace in JupyterLab"
	@echo "                (make lab LAB_DIR=~/my-course: an instructor's course, formgrader included)"
	@echo "make test       set up (first time), then run the test suite"
	@echo "                (MINI_TEST_TORCH=1 also installs PyTorch for differential tests)"
	@echo "make install    only set up: .venv, pinned dependencies, the C++ kernels"
	@echo "make clean      remove build products (keeps .venv)"
	@echo "make distclean  remove build products and .venv"
	@echo "make python     show which Python would create .venv ($(PY_RANGE) supported),"
	@echo "                or which active conda environment is used instead"

install: $(STAMP)

# What to say when no supported interpreter is there.
define NO_PYTHON
echo "mini needs $(PY_RANGE) (its pinned packages have wheels for those)." >&2; \
echo "Install one, e.g. 'sudo apt install python$(PY_MAX) python$(PY_MAX)-venv', 'brew install python@$(PY_MAX)'" >&2; \
echo "or 'uv python install $(PY_MAX)', then run make again (or: make PYTHON=/path/to/python$(PY_MAX) ...)." >&2
endef

# Check the interpreter make would use (the `python` target prints it).
define CHECK_PYTHON
if [ -z "$(PYTHON)" ]; then \
  echo "No supported Python found: python3 is $$(python3 --version 2>/dev/null || echo 'missing')." >&2; \
  $(NO_PYTHON); exit 1; fi; \
if ! command -v $(PYTHON) >/dev/null 2>&1; then \
  echo "'$(PYTHON)' was not found." >&2; $(NO_PYTHON); exit 1; fi; \
if ! $(PYTHON) -c '$(PY_SUPPORTED)'; then \
  echo "'$(PYTHON)' ($$($(PYTHON) --version 2>/dev/null || echo 'does not run')) is not a supported Python." >&2; \
  $(NO_PYTHON); exit 1; fi
endef

ifeq ($(ENV_KIND),venv)
python:
	@$(CHECK_PYTHON); echo "$(PYTHON) ($$($(PYTHON) --version 2>/dev/null || echo 'not runnable')) would create $(VENV); supported: $(PY_RANGE)"

$(VPY):
	@$(CHECK_PYTHON)
	@echo "Creating $(VENV) with $$($(PYTHON) --version 2>/dev/null || echo 'not runnable') ($$(command -v $(PYTHON)))"
	@$(PYTHON) -m venv $(VENV) || { rm -rf $(VENV); \
	  echo "Could not create $(VENV). On Debian/Ubuntu: sudo apt install python3-venv" >&2; exit 1; }
	@$(VPY) -m pip install --quiet --upgrade pip || echo "(could not upgrade pip; continuing with $$($(VPY) -m pip --version))"

$(STAMP): pyproject.toml setup.py $(CPU_SOURCES) | $(VPY)
	@$(VPY) -c '$(PY_SUPPORTED)' || { \
	  echo "$(VENV) was made with $$($(VPY) --version 2>/dev/null), which mini no longer supports ($(PY_RANGE))." >&2; \
	  echo "Remove it with 'make distclean' and run make again." >&2; exit 1; }
	$(RUN) $(VPY) -m pip install -e .
	@$(VPY) -c 'import mini.backends._cpu as m; print("mini: C++ kernels built; OpenMP:", m.openmp_enabled(), "threads:", m.max_threads())'
	@touch $@
else
# The active environment (see MINI_ENV): conda provides the pinned packages and the build
# tools (setuptools, pybind11), so only mini itself is installed, without touching PyPI.
python:
	@echo "using the active environment $(VENV) ($$($(VPY) --version 2>/dev/null || echo 'no python in it')); .venv is not used (make MINI_ENV=.venv ... to use it)"

$(VPY):
	@echo "$(VENV) has no bin/python: is it a finished environment? (conda env create -f environment.yml)" >&2; exit 1

$(STAMP): pyproject.toml setup.py $(CPU_SOURCES) | $(VPY)
	@$(VPY) -c '$(PY_SUPPORTED)' || { \
	  echo "the active environment $(VENV) has $$($(VPY) --version 2>/dev/null), which mini does not support ($(PY_RANGE))." >&2; exit 1; }
	@echo "installing mini into the active environment $(VENV); if the pins changed, update it first: conda env update -f environment.yml --prune"
	$(RUN) $(VPY) -m pip install --no-deps --no-build-isolation -e .
	@$(VPY) -c 'import mini.backends._cpu as m; print("mini: C++ kernels built; OpenMP:", m.openmp_enabled(), "threads:", m.max_threads())'
	@touch $@
endif

$(TORCH_STAMP): Makefile | $(STAMP)
	$(RUN) $(VPY) -m pip install "$(TORCH_SPEC)"
	@touch $@

# The learner's workspace: the student version of every chapter (solutions stripped, hidden
# tests removed, the chapter's student copy of mini beside each notebook), made on first run
# in workspace/ (git-ignored) and never overwritten, so work survives re-runs and git pull;
# chapters added later appear on the next run.  Authors and instructors: make lab LAB_DIR=course
workspace: $(STAMP)
	@$(RUN) $(VBIN)/mini-course workspace >/dev/null

# `mini-course lab` opens the workspace without nbgrader's instructor tools; with a folder
# (LAB_DIR) it runs Lab in that folder, so that formgrader finds a course's nbgrader_config.py.
lab: $(STAMP)
	@$(RUN) exec $(VBIN)/mini-course lab $(LAB_DIR) -- $(LAB_ARGS)

# One BLAS thread per test worker: with -n 2 on 2 cores, a multi-threaded BLAS in each
# worker oversubscribes the machine and a 0.1 ms matrix product can take 15 ms.
test: $(TEST_DEPS)
	$(RUN) OPENBLAS_NUM_THREADS=$${OPENBLAS_NUM_THREADS:-1} $(VPY) -m pytest -n $(PYTEST_WORKERS) $(PYTEST_ARGS)

clean:
	rm -rf build dist *.egg-info .pytest_cache .hypothesis
	find mini grader -name '*.so' -delete 2>/dev/null || true
	find . -path ./.venv -prune -o \( -name __pycache__ -o -name .ipynb_checkpoints \) -type d -prune -exec rm -rf {} + 
	find . -path ./.venv -prune -o -name '*.stamp' -type f -exec rm -f {} +
	rm -f $(STAMP)

distclean: clean
ifeq ($(ENV_KIND),venv)
	rm -rf $(VENV)
else
	@echo "kept the active environment $(VENV) (remove it with conda env remove, if you mean to)"
endif
