"""The catalogue of typical mistakes: wrong implementations that the checks must catch.

``grader/mistakes/chNN_topic.py`` exposes ``MISTAKES: list[Mistake]``::

    from grader.mistakes import Mistake

    def _strides_forward(shape):          # walks the axes in the wrong order
        ...

    MISTAKES = [
        Mistake("03.compact_strides", "axes in the wrong order", _strides_forward,
                expect_message="last axis"),
    ]

CI (``tests/chapters/test_invariants.py``) runs ``run_in_process(m.slot_id, m.fn)`` for
each entry and requires a failed verdict whose message contains ``m.expect_message``
(a substring of the check's message: it proves the student is told what is wrong).
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Callable

__all__ = ["Mistake", "all_mistakes", "mistakes_for_chapter"]


@dataclass(frozen=True)
class Mistake:
    slot_id: str          # the exercise, e.g. "03.compact_strides"
    name: str             # a short description of the mistake, e.g. "axes in the wrong order"
    fn: Callable          # the wrong implementation
    expect_message: str   # a substring the failed verdict's message must contain

    @property
    def chapter(self) -> int:
        from grader.checks import chapter_of
        return chapter_of(self.slot_id)


def all_mistakes() -> list[Mistake]:
    """Every ``MISTAKES`` entry of every ``grader/mistakes/chNN_*.py`` module."""
    out: list[Mistake] = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("ch") and info.name[2:4].isdigit():
            module = importlib.import_module(f"{__name__}.{info.name}")
            out.extend(getattr(module, "MISTAKES", []))
    return out


def mistakes_for_chapter(chapter: int) -> list[Mistake]:
    return [m for m in all_mistakes() if m.chapter == int(chapter)]
