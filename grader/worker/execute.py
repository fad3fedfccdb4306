"""What the worker does with a request, shared by the sandboxed worker process
(:mod:`grader.worker.main`) and the trusted in-process backend
(:class:`grader.checks.student.InProcess`), so both report the same observations.

Everything here may run student code, and returns live objects that the caller encodes
with :mod:`grader.worker.codec`.
"""
from __future__ import annotations

import random
import re
import sys
from contextlib import contextmanager
from typing import Any, Callable

import numpy as np

__all__ = ["run_call", "run_scenario", "run_cells", "resolve", "seed_everything",
           "registered", "NOT_FOUND"]

NOT_FOUND = object()


def seed_everything(seed: int) -> None:
    """Seed every generator student code may draw from, so a submission behaves the same
    on every run (Python's, numpy's legacy global, mini's)."""
    seed = int(seed) % (2**32)
    random.seed(seed)
    np.random.seed(seed)
    mini = sys.modules.get("mini")
    if mini is not None:
        try:
            mini.manual_seed(seed)
        except Exception:  # noqa: BLE001 - a student copy without it, or a broken one
            pass


def _exercises():
    try:
        import mini.exercises as ex
        return ex
    except Exception:  # noqa: BLE001
        return None


def resolve(slot: str | None, name: str | None, namespace: dict | None) -> Any:
    """The implementation under test: the object the notebook bound to ``name`` (what the
    hidden test hands to ``run_check``), else what ``mini`` runs for ``slot``."""
    if namespace is not None and name:
        value = namespace.get(name, NOT_FOUND)
        if value is not NOT_FOUND:
            return value
    if slot:
        ex = _exercises()
        if ex is not None:
            try:
                return ex.active(slot)
            except Exception:  # noqa: BLE001 - not a mini slot (a quiz), or a broken mini
                pass
    return NOT_FOUND


@contextmanager
def registered(slot: str | None, impl: Any):
    """Run with ``impl`` registered in ``slot`` (if ``slot`` is a mini slot and ``impl`` is
    not already what mini runs there), restoring the previous registration afterwards."""
    ex = _exercises()
    if not slot or ex is None or not callable(impl):
        yield
        return
    try:
        known = slot in ex._SLOTS or slot in ex.slots()
    except Exception:  # noqa: BLE001
        known = False
    dispatcher = getattr(impl, "slot_id", None) == slot and hasattr(impl, "on")
    if not known or dispatcher or ex._ACTIVE.get(slot) is impl:
        yield  # (mini's own dispatching function for the slot runs what is registered)
        return
    before = ex._ACTIVE.get(slot)
    ex.implement(slot)(impl)
    try:
        yield
    finally:
        if before is None:
            ex._ACTIVE.pop(slot, None)
        else:
            ex._ACTIVE[slot] = before


def _tensor_class():
    mini = sys.modules.get("mini")
    if mini is None:
        return None
    try:
        from mini.autograd.tensor import Tensor
        return Tensor
    except Exception:  # noqa: BLE001
        return None


def run_call(fn: Callable, args: list, kwargs: dict, *, seed: int = 0, backward: Any = None,
             observe_args: bool = False) -> dict:
    """Call ``fn(*args, **kwargs)`` and report what happened (live objects):
    ``value``, ``raised``, ``is_arg`` (index of the argument the result *is*), ``shares``
    (indexes of the array arguments the result shares memory with), ``args_after`` and
    ``kwargs_after`` (when ``observe_args``), and ``backward_raised`` after an optional
    ``backward`` (``"sum"``, ``"default"`` or a gradient tensor) on the result."""
    out: dict = {"value": None, "raised": None, "is_arg": None, "shares": [],
                 "backward_raised": None}
    if not callable(fn):
        out["not_callable"] = fn
        return out
    seed_everything(seed)
    try:
        value = fn(*args, **kwargs)
    except BaseException as e:  # noqa: BLE001 - everything the student's code raises
        out["raised"] = e
        if observe_args:
            out["args_after"], out["kwargs_after"] = list(args), dict(kwargs)
        return out
    out["value"] = value
    for i, a in enumerate(args):
        if value is a and not (a is None or type(a) in (int, float, bool, str)):
            out["is_arg"] = i
            break
    if type(value) is np.ndarray:
        out["shares"] = [i for i, a in enumerate(args)
                         if type(a) is np.ndarray and np.may_share_memory(value, a)]
    if backward is not None:
        tensor = _tensor_class()
        try:
            if tensor is None or type(value) is not tensor:
                raise TypeError("the result is not a mini Tensor, so backward cannot run")
            if isinstance(backward, str):
                (value.sum() if backward == "sum" else value).backward()
            else:
                value.backward(backward)
        except BaseException as e:  # noqa: BLE001
            out["backward_raised"] = e
    if observe_args:
        out["args_after"], out["kwargs_after"] = list(args), dict(kwargs)
    return out


def run_scenario(fn: Callable, impl: Any, params: dict, *, slot: str | None = None,
                 seed: int = 0) -> dict:
    """Run the scenario ``fn(impl, **params)`` with ``impl`` registered in ``slot``."""
    seed_everything(seed)
    try:
        with registered(slot, impl):
            value = fn(impl, **params)
    except BaseException as e:  # noqa: BLE001
        return {"value": None, "raised": e}
    return {"value": value, "raised": None}


# --------------------------------------------------------------------------- notebook cells

_MAGIC = re.compile(r"^\s*[%!]", re.M)


class _Shell:
    """Enough of ``get_ipython()`` for cells that use magics: cell magics run their body
    (``%%time``, ``%%capture``...), other magics and shell commands do nothing."""

    def __init__(self, namespace: dict):
        self.user_ns = namespace

    def run_line_magic(self, name, line, *args, **kwargs):
        return None

    def run_cell_magic(self, name, line, cell):
        if name in ("time", "timeit", "capture", "prun"):
            exec(compile(cell, "<cell magic>", "exec"), self.user_ns)
        return None

    def system(self, *args, **kwargs):
        return None

    getoutput = system

    def __getattr__(self, name):
        return lambda *a, **k: None


def _python_source(source: str, namespace: dict) -> str:
    if not _MAGIC.search(source):
        return source
    try:
        from IPython.core.inputtransformer2 import TransformerManager
        source = TransformerManager().transform_cell(source)
    except Exception:  # noqa: BLE001 - no IPython: the magics stay a syntax error
        return source
    namespace.setdefault("get_ipython", lambda: _Shell(namespace))
    return source


def run_cells(cells: list[dict], namespace: dict) -> list[dict]:
    """Execute ``cells`` (``{"grade_id", "source"}``) in order in ``namespace``; a cell that
    raises is recorded and the next one runs.  Returns ``[{"grade_id", "raised"}]``."""
    report = []
    for cell in cells:
        gid = str(cell.get("grade_id") or "")
        raised = None
        try:
            code = compile(_python_source(str(cell.get("source", "")), namespace),
                           f"<cell {gid}>", "exec")
            exec(code, namespace)
        except BaseException as e:  # noqa: BLE001 - SystemExit, KeyboardInterrupt included
            raised = e
        report.append({"grade_id": gid, "raised": raised})
    return report
