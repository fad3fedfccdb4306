"""Shared fixtures of the grader's tests.

The fixture chapter ``fixtures/course/03_fixture/fixture.ipynb`` (regenerate it with
``fixtures/make_fixture.py``) has two exercises on the real slots ``03.compact_strides``
and ``03.offset``, so the tooling is tested independently of the real chapter notebooks.
"""
from __future__ import annotations

import importlib.util
import sys

import pytest

from grader_helpers import FIXTURE_CHAPTER, FIXTURE_COURSE, HERE  # noqa: E402


def _load_chapter_helpers():
    name = "chapter_helpers"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, HERE.parent / "chapters" / "helpers.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


chapter_helpers = _load_chapter_helpers()

from grader_helpers import replace_in_cells  # noqa: E402


@pytest.fixture(scope="session")
def graded_fixture(tmp_path_factory):
    """The fixture chapter released and autograded once, for real, with these students:

    solution (the instructor's notebook), blank (the released notebook), looper (an
    infinite loop in compact_strides), killer (os._exit in element_offset), hog (allocates
    64 GiB in element_offset: the memory limit turns it into a MemoryError), wrong (wrong for
    size-0 axes: passes the visible tests, fails the hidden ones), cheater (tries to replace
    grader.hidden.run_check in the kernel -- grader is not importable in the sandbox -- and
    is wrong like `wrong`).  Graded in sandboxes, two at a time.
    """
    extra = {
        "looper": replace_in_cells(("    strides = []\n", "    while True:\n        pass\n")),
        "killer": replace_in_cells(("    position = offset\n", "    import os; os._exit(0)\n")),
        "wrong": replace_in_cells(("step *= max(dim, 1)", "step *= dim")),
        "hog": replace_in_cells(("    position = offset\n",
                                 "    hog = bytearray(64 * 2**30)\n    position = offset\n")),
        "cheater": replace_in_cells(
            ('@implement("03.compact_strides")',
             'import grader.hidden\ngrader.hidden.run_check = lambda *a, **k: None\n'
             '@implement("03.compact_strides")'),
            ("step *= max(dim, 1)", "step *= dim")),
    }
    return chapter_helpers.graded_once(
        "grader-fixture", tmp_path_factory, chapter=FIXTURE_CHAPTER, course_src=FIXTURE_COURSE,
        extra=extra, cell_timeout=8, check_timeout=5)
