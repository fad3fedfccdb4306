"""The two ways to install mini pin the same versions, for the Pythons the README names.

pyproject.toml (the `make` / pip route) and environment.yml (the conda route) must list
the same packages at the same exact versions; the Makefile's PyTorch pin must equal the
`torch` extra; and the environment running these tests must be the pinned one.

One Python range (the Makefile's PY_MIN and PY_MAX) is stated in pyproject.toml's
requires-python, environment.yml, the README and .ci/run; every pin has a wheel for every
Python in it (asked of the package index through pip); the Makefile picks an interpreter
in that range and refuses others with a message that says what to install.
"""
from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml  # PyYAML: required by nbgrader and jupyter-events, so always installed

ROOT = Path(__file__).resolve().parent.parent

# conda-forge names that differ from PyPI's.
CONDA_TO_PYPI = {"matplotlib-base": "matplotlib", "pytorch": "torch"}
# Tooling in environment.yml that pyproject.toml handles elsewhere (build-system, the
# interpreter, the compiler).
CONDA_TOOLING = {"python", "pip", "setuptools", "cxx-compiler", "llvm-openmp"}

SPEC = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*((?:==|>=|<=|!=|~=|>|<|=).*)?$")


def normalize(name: str) -> str:
    """PEP 503: case-insensitive, runs of - _ . are the same."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse(spec: str) -> tuple[str, str]:
    match = SPEC.match(spec.split("#")[0])
    assert match, f"cannot parse requirement {spec!r}"
    return normalize(match.group(1)), (match.group(2) or "").replace(" ", "")


def exact_pins(specs) -> dict[str, str]:
    pins = {}
    for spec in specs:
        name, constraint = parse(spec)
        assert constraint.startswith("==") and "," not in constraint, f"{spec!r} is not pinned exactly (==)"
        assert name not in pins, f"{name} is listed twice"
        pins[name] = constraint[2:]
    return pins


@pytest.fixture(scope="module")
def pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


@pytest.fixture(scope="module")
def env_text():
    return (ROOT / "environment.yml").read_text()


@pytest.fixture(scope="module")
def env(env_text):
    return yaml.safe_load(env_text)


def conda_specs(env):
    return [d for d in env["dependencies"] if isinstance(d, str)]


def test_pyproject_pins_every_dependency_exactly(pyproject):
    pins = exact_pins(pyproject["project"]["dependencies"])
    for name in ["numpy", "jupyterlab", "nbgrader", "pybind11", "pytest", "scikit-learn", "tqdm",
                 "hypothesis", "pytest-xdist"]:
        assert name in pins, f"{name} is missing from pyproject.toml's dependencies"
    assert "torch" not in pins, "torch must stay an optional extra, never a base requirement"


def test_environment_yml_shape(env):
    assert env["name"] == "mini"
    assert env["channels"] == ["conda-forge"]
    assert "cxx-compiler" in conda_specs(env)


# --------------------------------------------------------------------------- Python versions

def python_range() -> tuple[tuple[int, int], tuple[int, int]]:
    """(oldest, newest) supported Python as (major, minor), from the Makefile."""
    text = (ROOT / "Makefile").read_text()
    found = {}
    for key in ("PY_MIN", "PY_MAX"):
        m = re.search(rf"^{key}\s*:?=\s*(\d+)\.(\d+)\s*$", text, re.MULTILINE)
        assert m, f"Makefile has no {key} := 3.X"
        found[key] = (int(m.group(1)), int(m.group(2)))
    assert found["PY_MIN"] <= found["PY_MAX"]
    return found["PY_MIN"], found["PY_MAX"]


def supported_pythons() -> list[str]:
    (major, lo), (_, hi) = python_range()
    return [f"{major}.{minor}" for minor in range(lo, hi + 1)]


def test_one_python_range_everywhere(pyproject, env):
    (major, lo), (_, hi) = python_range()
    bounds = f">={major}.{lo},<{major}.{hi + 1}"
    assert pyproject["project"]["requires-python"] == bounds
    assert [s for s in conda_specs(env) if parse(s)[0] == "python"] == ["python" + bounds]
    phrase = f"Python {major}.{lo} to {major}.{hi}"
    assert phrase in (ROOT / "README.md").read_text(), f"the README should say {phrase!r}"
    assert phrase in (ROOT / ".ci" / "run").read_text(), f".ci/run should say {phrase!r}"


def test_this_python_is_supported():
    low, high = python_range()
    assert low <= sys.version_info[:2] <= high, (
        f"running on Python {sys.version.split()[0]}, outside the supported range: make "
        f"should have refused it")


# pip's words for an index it could not reach (as opposed to one that has no such wheel)
_UNREACHABLE = re.compile(r"NewConnectionError|Failed to establish a new connection|Temporary "
                          r"failure in name resolution|Name or service not known|ConnectTimeout"
                          r"|ReadTimeout|ProxyError|Max retries exceeded|Network is unreachable"
                          r"|Could not fetch URL", re.IGNORECASE)


def _pip_finds_wheels(python: str, specs: list[str], target: Path) -> tuple[int, str]:
    """Ask the configured package index, through pip, for a wheel of each of ``specs``
    for CPython ``python`` on this platform, downloading only metadata (a dry run)."""
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--ignore-installed",
           "--only-binary=:all:", "--python-version", python, "--target", str(target),
           "--timeout", "20", "--retries", "1", "--disable-pip-version-check", *specs]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    return proc.returncode, proc.stdout + proc.stderr


def test_every_pin_has_a_wheel_for_every_supported_python(pyproject, tmp_path):
    """The pins and the range agree: pip finds a wheel (binary, or pure Python) of every
    pinned package, the torch extra included, for each Python in the range, on this
    platform.  Skips when no package index is reachable."""
    pins = exact_pins(pyproject["project"]["dependencies"])
    pins.update(exact_pins(pyproject["project"]["optional-dependencies"]["torch"]))
    specs = [f"{name}=={version}" for name, version in sorted(pins.items())]
    pythons = supported_pythons()
    with ThreadPoolExecutor(len(pythons)) as pool:   # network-bound: in parallel
        results = dict(zip(pythons, pool.map(
            lambda py: _pip_finds_wheels(py, specs, tmp_path / py), pythons)))
    missing = {}
    for python, (code, out) in results.items():
        if code == 0:
            continue
        unreachable = _UNREACHABLE.search(out)
        if unreachable:
            pytest.skip(f"no package index reachable, so the wheels cannot be checked (pip, "
                        f"Python {python}: {unreachable.group(0)})")
        # which pins: one at a time (pip stops at the first it cannot find)
        missing[python] = [spec for spec in specs
                           if _pip_finds_wheels(python, [spec], tmp_path / python)[0] != 0]
        assert missing[python], f"pip failed for Python {python} but found every pin alone:\n{out}"
    assert not missing, (
        f"no wheel on the package index for (Python: pins) {missing}: narrow the range "
        f"(Makefile PY_MIN/PY_MAX, requires-python, environment.yml, README) or change the pins")


def test_same_pins(pyproject, env):
    pip_pins = exact_pins(pyproject["project"]["dependencies"])
    conda = {}
    for spec in conda_specs(env):
        name, constraint = parse(spec)
        if name in CONDA_TOOLING:
            continue
        assert constraint.startswith("=="), f"environment.yml: {spec!r} is not pinned exactly (==)"
        conda[CONDA_TO_PYPI.get(name, name)] = constraint[2:]
    missing = sorted(set(pip_pins) - set(conda))
    extra = sorted(set(conda) - set(pip_pins))
    assert not missing, f"in pyproject.toml but not in environment.yml: {missing}"
    assert not extra, f"in environment.yml but not in pyproject.toml: {extra}"
    differ = {n: (pip_pins[n], conda[n]) for n in pip_pins if pip_pins[n] != conda[n]}
    assert not differ, f"pins differ (pyproject, environment.yml): {differ}"


def test_pip_section_installs_only_mini(env):
    pip_sections = [d["pip"] for d in env["dependencies"] if isinstance(d, dict)]
    assert pip_sections == [["-e ."]], "every dependency should come from conda-forge"


def test_torch_pins_agree(pyproject, env_text):
    extra = exact_pins(pyproject["project"]["optional-dependencies"]["torch"])
    assert set(extra) == {"torch"}
    commented = re.findall(r"^\s*#\s*-\s*(pytorch\S*)", env_text, re.MULTILINE)
    assert len(commented) == 1, "environment.yml should name the optional pytorch pin in a comment"
    assert parse(commented[0]) == ("pytorch", "==" + extra["torch"])
    makefile = (ROOT / "Makefile").read_text()
    spec = re.search(r"^TORCH_SPEC\s*:?=\s*(\S+)", makefile, re.MULTILINE)
    assert spec, "Makefile has no TORCH_SPEC"
    assert parse(spec.group(1)) == ("torch", "==" + extra["torch"])


def test_build_uses_the_pinned_pybind11(pyproject):
    pins = exact_pins(pyproject["project"]["dependencies"])
    build = dict(parse(s) for s in pyproject["build-system"]["requires"])
    assert build["pybind11"] == "==" + pins["pybind11"]


def test_installed_versions_match_the_pins(pyproject):
    """The environment running the tests is the pinned one (catches a stale .venv)."""
    pins = exact_pins(pyproject["project"]["dependencies"])
    pins.update(exact_pins(pyproject["project"]["optional-dependencies"]["torch"]))
    wrong = {}
    for name, version in pins.items():
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            if name == "torch":
                continue  # optional
            wrong[name] = (version, "not installed")
            continue
        if installed.split("+")[0] != version:  # torch's local label, e.g. 2.13.0+cpu
            wrong[name] = (version, installed)
    assert not wrong, f"installed versions differ from the pins (pinned, installed): {wrong}; run `make`"


# --------------------------------------------------------------------------- the Makefile's Python

def _fake_python(folder: Path, name: str, version: str, supported: bool) -> None:
    """An interpreter that answers what the Makefile asks: ``--version``, and ``-c`` with
    the supported-version check (exit status 0 when supported)."""
    path = folder / name
    path.write_text(f'#!/bin/sh\ncase "$1" in\n  --version) echo "Python {version}" ;;\n'
                    f'  -c) exit {0 if supported else 1} ;;\n  *) exit 3 ;;\nesac\n')
    path.chmod(0o755)


def _make_python(bin_dir: Path, *args: str) -> subprocess.CompletedProcess:
    """``make python`` with only ``bin_dir`` on PATH (its fake interpreters, nothing else)."""
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    return subprocess.run([make, "-s", "-C", str(ROOT), "python", *args], capture_output=True,
                          text=True, timeout=60, env={"PATH": str(bin_dir), "HOME": str(bin_dir)})


def _interpreters(case: str, lo: int, hi: int):
    """({name: (version, supported)} on PATH, what make should choose) for one case."""
    if case == "python3 when it is supported":
        return {"python3": (f"3.{lo}.2", True), f"python3.{hi}": (f"3.{hi}.0", True)}, \
            f"python3 (Python 3.{lo}.2)"
    return {"python3": (f"3.{lo - 1}.9", False),              # too old
            f"python3.{hi + 1}": (f"3.{hi + 1}.0", False),    # too new: never tried
            f"python3.{lo}": (f"3.{lo}.4", True),
            f"python3.{hi}": (f"3.{hi}.1", True)}, f"python3.{hi} (Python 3.{hi}.1)"


@pytest.mark.parametrize("case", ["python3 when it is supported", "else the newest python3.X"])
def test_makefile_picks_a_supported_python(case, tmp_path):
    (_, lo), (_, hi) = python_range()
    fakes, chosen = _interpreters(case, lo, hi)
    for name, (version, supported) in fakes.items():
        _fake_python(tmp_path, name, version, supported)
    r = _make_python(tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"{chosen} would create .venv"), r.stdout


def test_makefile_refuses_an_unsupported_python_and_says_what_to_install(tmp_path):
    (_, lo), (_, hi) = python_range()
    _fake_python(tmp_path, "python3", f"3.{lo - 1}.12", False)
    r = _make_python(tmp_path)
    assert r.returncode != 0
    assert f"python3 is Python 3.{lo - 1}.12" in r.stderr
    assert f"mini needs Python 3.{lo} to 3.{hi}" in r.stderr
    assert f"make PYTHON=/path/to/python3.{hi}" in r.stderr
    # one named explicitly is checked too
    r = _make_python(tmp_path, f"PYTHON={tmp_path / 'python3'}")
    assert r.returncode != 0
    assert f"(Python 3.{lo - 1}.12) is not a supported Python" in r.stderr


def test_makefile_on_native_windows_says_to_use_wsl2(tmp_path):
    r = _make_python(tmp_path, "OS=Windows_NT")
    assert r.returncode != 0
    assert "WSL2" in r.stderr and "wsl --install -d Ubuntu" in r.stderr


# --------------------------------------------------------------------------- the conda route

def _fake_conda_env(tmp_path: Path) -> Path:
    """A prefix standing for an activated conda environment: its ``bin/python`` records each
    call and runs this interpreter (which has every pin), so a target that uses it works."""
    prefix = tmp_path / "envs" / "mini"
    (prefix / "bin").mkdir(parents=True)
    shim = prefix / "bin" / "python"
    shim.write_text(f'#!/bin/sh\necho "$@" >> "{prefix}/calls.log"\nexec "{sys.executable}" "$@"\n')
    shim.chmod(0o755)
    return prefix


def _make(target: str, prefix: Path | None, *args: str, conda_env: str = "mini",
          dry_run: bool = False, timeout: float = 60) -> subprocess.CompletedProcess:
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    env = {k: v for k, v in __import__("os").environ.items()
           if not k.startswith(("CONDA", "MAKE", "MFLAGS", "PYTEST_", "MINI_ENV"))}
    if prefix is not None:
        env.update(CONDA_PREFIX=str(prefix), CONDA_DEFAULT_ENV=conda_env)
    cmd = [make, "-s", "-C", str(ROOT)] + (["-n"] if dry_run else []) + [target, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def test_makefile_uses_an_active_conda_environment(tmp_path):
    prefix = _fake_conda_env(tmp_path)
    r = _make("python", prefix)
    assert r.returncode == 0 and r.stdout.startswith(f"using the active environment {prefix}"), r
    # Installing puts only mini into it (conda has the pins): no .venv, nothing from PyPI.
    r = _make("install", prefix, dry_run=True)
    assert r.returncode == 0, r.stderr
    assert f"{prefix}/bin/python -m pip install --no-deps --no-build-isolation -e ." in r.stdout
    assert "-m venv" not in r.stdout and ".venv" not in r.stdout
    assert f"touch {prefix}/.mini-installed" in r.stdout
    lab = _make("lab", prefix, dry_run=True).stdout
    assert f"{prefix}/bin/mini-course lab" in lab and ".venv" not in lab
    # A real `make test` (one small test) runs on the environment's python.
    (prefix / ".mini-installed").touch()
    r = _make("test", prefix, "PYTEST_WORKERS=0",
              "PYTEST_ARGS=tests/test_environment.py -k test_same_pins -q -p no:cacheprovider",
              timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "1 passed" in r.stdout
    assert "-m pytest -n 0 tests/test_environment.py" in (prefix / "calls.log").read_text()
    # distclean never removes the user's environment.
    out = _make("distclean", prefix, dry_run=True).stdout
    assert f"rm -rf {prefix}" not in out and "kept the active environment" in out


def test_makefile_ignores_conda_base_and_can_be_told_to_use_venv(tmp_path):
    prefix = _fake_conda_env(tmp_path)
    for r in (_make("python", prefix, conda_env="base"),
              _make("python", prefix, "MINI_ENV=.venv")):
        assert r.returncode == 0, r.stderr
        assert "would create .venv" in r.stdout, r.stdout


def test_environment_yml_says_how_to_use_it_with_make(env_text):
    """The conda route's commands in environment.yml's header are the ones the Makefile
    honours: create, activate, then make."""
    head = env_text.split("name:")[0]
    assert "conda env create -f environment.yml" in head and "conda activate mini" in head
    assert "make test" in head and "make lab" in head
