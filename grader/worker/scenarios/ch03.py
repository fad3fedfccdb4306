"""Scenarios of chapter 03 (strides).

The exercises of chapter 03 are pure functions, checked by plain calls; the one scenario
here asks what mini's own ``compact_strides`` (the slot ``03.compact_strides``: the student's
exercise 1 in the worker, mini's reference in the trusted process) answers, so that a failing
``reshape_strides`` whose real cause is a wrong ``compact_strides`` is told to fix that first.
"""
from __future__ import annotations


def compact_strides_in_use(impl, shapes):
    """What the registered ``03.compact_strides`` returns for each shape: a list of
    ``["ok", strides]`` or ``["raised", text]`` (``impl`` is not used: the scenario only
    reads the slot it depends on)."""
    from mini.ndarray.strides import compact_strides

    out = []
    for shape in shapes:
        try:
            got = compact_strides(tuple(int(d) for d in shape))
        except NotImplementedError:
            raise                       # an unfinished exercise 1: the runner says which
        except Exception as e:  # noqa: BLE001 - recorded as text, judged by the trusted side
            out.append(["raised", type(e).__name__])
            continue
        if type(got) is tuple and all(type(s) is int for s in got):
            out.append(["ok", list(got)])
        else:
            out.append(["raised", f"returned {type(got).__name__}"])
    return out


SCENARIOS = {"compact_strides_in_use": compact_strides_in_use}
