"""Whether operations record a graph: ``mini.no_grad()``, ``enable_grad()``, ``set_grad_enabled()``."""
from __future__ import annotations

import functools

_ENABLED = [True]


def is_grad_enabled() -> bool:
    return _ENABLED[0]


class _GradMode:
    """Context manager and decorator that sets grad mode and restores it afterwards."""
    mode: bool = True

    def __enter__(self):
        self._prev = _ENABLED[0]
        _ENABLED[0] = self.mode

    def __exit__(self, *exc):
        _ENABLED[0] = self._prev
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__():
                return fn(*args, **kwargs)
        return wrapper


class no_grad(_GradMode):
    """Inside this block no operation records a graph (inference, optimizer updates)."""
    mode = False


class enable_grad(_GradMode):
    mode = True


class set_grad_enabled(_GradMode):
    def __init__(self, mode: bool):
        self.mode = bool(mode)
        self._prev = _ENABLED[0]
        _ENABLED[0] = self.mode  # takes effect immediately, like torch's

    def __enter__(self):
        pass

    def __call__(self, fn):  # pragma: no cover - rarely used as a decorator
        mode = self.mode
        _ENABLED[0] = self._prev

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with set_grad_enabled(mode):
                return fn(*args, **kwargs)
        return wrapper
