"""Scenarios of chapter 04 (hardware on the CPU; the CUDA part's are in ``ch04_cuda.py``)."""
from __future__ import annotations

import numpy as np


def _set_threads(n: int):
    """Set the OpenMP team size of mini's extensions; the previous size (None: no OpenMP)."""
    try:
        from mini.utils import cpp_extension
        before = cpp_extension.get_max_threads()
        cpp_extension.set_num_threads(int(n))
        return before
    except Exception:  # noqa: BLE001 - no compiler / no OpenMP: nothing to race
        return None


def omp_sum_race(impl, *, n: int, seed: int, teams: list, per_team: int) -> list:
    """``impl(x)`` on the same big array of integers, ``per_team`` times under each OpenMP
    team size of ``teams``: the totals (or the exception of a run that raised)."""
    x = np.random.default_rng(int(seed)).integers(0, 1024, int(n)).astype(np.float64)
    try:
        impl(x)  # a stub ends here, before OpenMP is set up (that may compile a helper)
    except NotImplementedError:
        raise
    except Exception:  # noqa: BLE001 - the runs below record it
        pass
    before = _set_threads(teams[0])
    out = []
    try:
        for team in teams:
            _set_threads(team)
            for _ in range(int(per_team)):
                try:
                    value = impl(x)
                except NotImplementedError:
                    raise  # a stub: the whole scenario ends, "not implemented"
                except Exception as e:  # noqa: BLE001 - recorded, the trusted side reports it
                    out.append(e)
                    continue
                number = type(value) in (float, int) or isinstance(value, np.floating)
                out.append(float(value) if number else value)
    finally:
        if before is not None:
            _set_threads(before)
    return out


def earlier_exercise(impl, *, slot: str, args: list):
    """What mini runs for the earlier exercise ``slot`` returns on ``args`` (the student's
    function where the notebook registered one, mini's reference otherwise): a check uses it
    to tell whether a wrong result comes from the exercise under test or from one it builds
    on."""
    from mini import exercises
    return exercises.active(str(slot))(*args)


def view_writeable(impl, *, xp, kernel_size, stride) -> bool:
    """Whether the array ``impl(xp, kernel_size, stride)`` returns can be written through
    (the codec hands the trusted side a copy, so the flag is read here)."""
    v = impl(xp, tuple(kernel_size), tuple(stride))
    return bool(getattr(getattr(v, "flags", None), "writeable", True))


SCENARIOS = {"omp_sum_race": omp_sum_race, "earlier_exercise": earlier_exercise,
             "view_writeable": view_writeable}

from .ch04_cuda import SCENARIOS as _CUDA_SCENARIOS  # noqa: E402 - the CUDA part's, one table

SCENARIOS.update(_CUDA_SCENARIOS)
