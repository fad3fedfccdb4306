"""The worker process: ``python -I -c 'from grader.worker.main import main; main()'``
inside the sandbox, talking codec frames on its stdin/stdout (see :mod:`grader.worker`).

Requests (dicts) and their answers:

- ``{"op": "hello"}`` -> ``{"ok": True, "python": version}``
- ``{"op": "load", "cells": [{"grade_id", "source"}]}``: run the notebook's setup and
  answer cells in one namespace -> ``{"ok": True, "cells": [{"grade_id", "raised"}]}``
- ``{"op": "call", "slot", "name", "args", "kwargs", "seed", "backward", "observe_args"}``
  -> ``{"ok": True, "outcome": {...}}`` (see :func:`grader.worker.execute.run_call`)
- ``{"op": "scenario", "module", "scenario", "slot", "name", "params", "seed"}``
  -> ``{"ok": True, "outcome": {"value", "raised"}}``
- ``{"op": "bind", "slot", "accessor"}``: for the release audit, make the object mini
  exposes as ``accessor`` (``reference``, ``wrapped``, ``fallback``, ``dispatch``) the
  implementation under test for ``slot`` -> ``{"ok": True, "found": bool}``

Before any student code runs, the worker keeps private copies of its channel (dup'ed file
descriptors) and points file descriptors 0, 1 and 2 at ``/dev/null``: what student code
prints cannot corrupt a frame.  (It could still write to the channel on purpose; the
trusted side only ever reads data from it, and bad frames end the worker.)
"""
from __future__ import annotations

import os
import sys

__all__ = ["main", "serve"]


def _accessor(slot: str, how: str):
    """What ``mini`` hands out for ``slot`` under the name ``how`` (for the release audit):
    ``dispatch``, ``reference``, ``wrapped``, ``fallback``, ``slot_reference``,
    ``obj:module:name`` for a module-level function, ``fast:k`` for the k-th fast path
    registered for the slot."""
    import importlib

    import mini.exercises as ex
    if how.startswith("obj:"):
        module_name, _, name = how[4:].partition(":")
        return getattr(importlib.import_module(module_name), name, None)
    if how.startswith("fast:"):
        paths = getattr(ex, "registered_fast_paths", dict)().get(slot, [])
        k = int(how[5:])
        return paths[k].fn if k < len(paths) else None
    info = ex.slots()[slot]
    if how == "reference":
        return ex.reference(slot)
    module = importlib.import_module(info.module)
    dispatch = getattr(module, info.qualname.split(".")[0], None)
    for part in info.qualname.split(".")[1:]:
        dispatch = getattr(dispatch, part, None)
    if how == "dispatch":
        return dispatch
    if how == "wrapped":
        return getattr(dispatch, "__wrapped__", None)
    if how == "fallback":
        return getattr(dispatch, "fallback", None)
    if how == "slot_reference":
        return getattr(dispatch, "reference", None)
    raise KeyError(how)


def serve(rin, wout) -> None:
    """Answer requests from ``rin`` on ``wout`` until the channel closes."""
    from grader.worker import codec, execute
    from grader.worker.scenarios import get_scenario

    namespace: dict = {"__name__": "__main__", "__builtins__": __builtins__}
    bound: dict = {}

    def target(msg):
        slot, name = msg.get("slot"), msg.get("name")
        if slot in bound:
            return bound[slot]
        return execute.resolve(slot, name, namespace)

    while True:
        try:
            msg = codec.read_frame(rin, "worker")
        except EOFError:
            return
        try:
            op = msg.get("op") if type(msg) is dict else None
            if op == "hello":
                reply = {"ok": True, "python": sys.version.split()[0]}
            elif op == "load":
                report = execute.run_cells(msg.get("cells", []), namespace)
                reply = {"ok": True, "cells": report}
            elif op == "call":
                fn = target(msg)
                if fn is execute.NOT_FOUND:
                    reply = {"ok": True, "outcome": {"missing": msg.get("name") or msg.get("slot")}}
                else:
                    outcome = execute.run_call(fn, list(msg.get("args", [])), dict(msg.get("kwargs", {})),
                                               seed=int(msg.get("seed") or 0),
                                               backward=msg.get("backward"),
                                               observe_args=bool(msg.get("observe_args")))
                    reply = {"ok": True, "outcome": outcome}
            elif op == "scenario":
                fn = get_scenario(str(msg.get("module")), str(msg.get("scenario")))
                impl = target(msg)
                if impl is execute.NOT_FOUND:
                    reply = {"ok": True, "outcome": {"missing": msg.get("name") or msg.get("slot")}}
                else:
                    outcome = execute.run_scenario(fn, impl, dict(msg.get("params", {})),
                                                   slot=msg.get("slot"),
                                                   seed=int(msg.get("seed") or 0))
                    reply = {"ok": True, "outcome": outcome}
            elif op == "bind":
                try:
                    found = _accessor(str(msg["slot"]), str(msg["accessor"]))
                except BaseException:  # noqa: BLE001 - mini exposes nothing under that name
                    found = None
                bound[str(msg["slot"])] = found if found is not None else _Nothing()
                reply = {"ok": True, "found": found is not None}
            else:
                reply = {"ok": False, "error": f"unknown request {op!r}"}
        except BaseException as e:  # noqa: BLE001 - keep serving; report what went wrong
            reply = {"ok": False, "error": f"{type(e).__name__}: {e}"[:2000]}
        try:
            data = codec.pack(reply)
        except BaseException as e:  # noqa: BLE001 - an answer that cannot be encoded
            data = codec.pack({"ok": False, "error": f"the answer could not be encoded: "
                                                     f"{type(e).__name__}: {e}"[:2000]})
        wout.write(data)
        wout.flush()


class _Nothing:
    """What the audit binds when mini exposes nothing under an accessor: not callable."""


def main() -> None:
    rfd, wfd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    rin = os.fdopen(rfd, "rb", buffering=0)
    wout = os.fdopen(wfd, "wb")
    serve(rin, wout)


if __name__ == "__main__":  # pragma: no cover
    main()
