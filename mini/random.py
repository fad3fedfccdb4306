"""mini's random number generator: one global, seedable stream.

Everything random in mini (``rand``, ``randn``, initialisers, dropout masks, data
shuffling) draws from here, so ``mini.manual_seed(0)`` makes a run reproducible and a
checkpoint can save and restore the exact stream with ``get_rng_state``/``set_rng_state``.
"""
from __future__ import annotations

import copy

import numpy as np

_GEN = [np.random.Generator(np.random.PCG64(0))]


def manual_seed(seed: int):
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
        raise TypeError(f"manual_seed expects an int, got {type(seed).__name__}")
    _GEN[0] = np.random.Generator(np.random.PCG64(int(seed)))
    return _GEN[0]


def generator() -> np.random.Generator:
    return _GEN[0]


def get_rng_state() -> dict:
    """A snapshot of the stream (a plain dict, picklable)."""
    return copy.deepcopy(_GEN[0].bit_generator.state)


def set_rng_state(state: dict) -> None:
    if not isinstance(state, dict) or "bit_generator" not in state:
        raise ValueError("set_rng_state expects a state from mini.random.get_rng_state()")
    bg = getattr(np.random, state["bit_generator"])()
    bg.state = state
    _GEN[0] = np.random.Generator(bg)
