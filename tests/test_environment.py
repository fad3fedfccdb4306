"""The two ways to install mini pin the same versions.

pyproject.toml (the `make` / pip route) and environment.yml (the conda route) must list
the same packages at the same exact versions; the Makefile's PyTorch pin must equal the
`torch` extra; and the environment running these tests must be the pinned one.
"""
from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import pytest
import yaml  # PyYAML: required by nbgrader and jupyter-events, so always installed

tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")

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
    assert "python>=3.10" in conda_specs(env)
    assert "cxx-compiler" in conda_specs(env)


def test_same_python_requirement(pyproject, env):
    assert pyproject["project"]["requires-python"] == ">=3.10"
    assert [s for s in conda_specs(env) if parse(s)[0] == "python"] == ["python>=3.10"]


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
