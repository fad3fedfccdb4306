"""Scenarios: scripted uses of stateful exercises, run next to the student's code.

A scenario is a function ``name(impl, **params) -> observations`` in
``grader/worker/scenarios/chNN.py``, listed in that module's ``SCENARIOS``.  ``impl`` is the
implementation under test (the student's function or class in the worker; mini's reference
when the trusted grader runs the same scenario to get the expected observations).  While it
runs, ``impl`` is registered in the exercise's slot, so the rest of mini uses it too.

Observations are plain data (numbers, strings, tuples, lists, dicts, numpy arrays); the
trusted check compares them with its own expectations.  Parameters come from the trusted
grader (seeds, sizes), so the inputs are unknown in advance.  Scenarios must not trust
anything ``impl`` returns beyond recording it, and must be deterministic given ``params``.
"""
from __future__ import annotations

import importlib
from typing import Callable

__all__ = ["get_scenario"]


def get_scenario(module: str, name: str) -> Callable:
    """The scenario ``name`` of ``grader/worker/scenarios/<module>.py``."""
    if not (module.isidentifier() and name.isidentifier()):
        raise KeyError(f"bad scenario name {module}.{name}")
    mod = importlib.import_module(f"{__name__}.{module}")
    table = getattr(mod, "SCENARIOS", {})
    if name not in table:
        raise KeyError(f"no scenario {name!r} in {module}")
    return table[name]
