"""Every name mini exports or mentions exists: each module's ``__all__`` entries, and every
dotted ``mini.…`` name written in mini's docstrings and comments resolves to a module or
an attribute.  (Parts of mini built in a later chapter are named as arriving with it, not
as if they were there.)"""
from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import mini

ROOT = Path(mini.__file__).parent


def _modules():
    out = []
    for info in pkgutil.walk_packages(mini.__path__, "mini."):
        try:
            out.append(importlib.import_module(info.name))
        except ImportError:  # an optional part that cannot load here (a GPU backend)
            continue
    return out


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    obj = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:], 1):
        if hasattr(obj, part):
            obj = getattr(obj, part)
            continue
        try:
            obj = importlib.import_module(".".join(parts[:i + 1]))
        except ImportError:
            return False
    return True


def test_every_name_in_all_exists():
    missing = [(m.__name__, n) for m in _modules() for n in getattr(m, "__all__", ())
               if not hasattr(m, n)]
    assert not missing, f"__all__ names that do not exist: {missing}"


def test_every_mini_name_in_the_source_text_exists():
    pattern = re.compile(r"\bmini(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
    unresolved = sorted({(str(p.relative_to(ROOT.parent)), name)
                         for p in ROOT.rglob("*.py") for name in set(pattern.findall(p.read_text()))
                         if not _resolves(name)})
    assert not unresolved, f"names in mini's text that do not exist: {unresolved}"


def test_a_later_chapters_package_is_an_attribute_error_that_says_so():
    try:
        importlib.import_module("mini.distributed")
    except ModuleNotFoundError:
        with pytest.raises(AttributeError, match="arrives with chapter 06"):
            mini.distributed  # noqa: B018
    else:
        assert mini.distributed is not None
