"""The catalogue of wrong CUDA kernels (grader/mistakes/cuda_kernels): the emulator
catches each one the way the catalogue says (a report of the named kind at the line of
the mistake, a wrong result that ``diagnose`` names, or a counter far from the
reference's), and the references are clean under the same scenarios."""
from __future__ import annotations

import numpy as np
import pytest

from grader.mistakes.cuda_kernels import CUDA_MISTAKES, diagnose, load_module, mistake_source, run
from mini.backends.cuda import emulator, kernels
from cuda_helpers import emulated, requires_posix

pytestmark = requires_posix

REPORT_KINDS = set(emulator.KINDS)


@pytest.fixture(scope="module")
def mod():
    with emulated():
        return load_module()


def _result_ok(outcome, exercise):
    n = outcome.inputs[0].size
    return np.allclose(outcome.got, outcome.expected, rtol=1e-4, atol=1e-5 * n)


def test_the_catalogue_covers_the_issue_list():
    names = {m.name for m in CUDA_MISTAKES}
    for required in ("missing bounds check", "missing barrier before reusing a tile",
                     "barrier inside a divergent branch", "row/column swap", "shared tile too small",
                     "shuffle with a partial mask", "uninitialised shared read",
                     "write-write race on an output", "atomic mixed with a plain write"):
        assert required in names
    assert any(m.detect == "uncoalesced" for m in CUDA_MISTAKES)
    assert len(CUDA_MISTAKES) >= 10
    for m in CUDA_MISTAKES:
        assert m.exercise in kernels.EXERCISES
        assert m.detect in REPORT_KINDS | {"wrong_result", "uncoalesced", "bank_conflicts"}
        src = mistake_source(m)
        assert "__global__" in src and kernels.MARKER not in src


@pytest.mark.parametrize("m", CUDA_MISTAKES, ids=[m.id for m in CUDA_MISTAKES])
def test_each_mistake_is_caught(mod, m):
    outcome, r = run(m.exercise, mod, m.id)
    ref_outcome, ref = run(m.exercise, mod)
    assert ref.ok and _result_ok(ref_outcome, m.exercise), ref
    if m.detect in REPORT_KINDS:
        found = r.of_kind(m.detect)
        assert found, f"{m.id}: expected a {m.detect} report, got:\n{r}"
        if m.line_has:
            quoted = [t["source"] for rep in found for t in rep["threads"] if t]
            assert any(m.line_has in q for q in quoted), (m.line_has, quoted)
        host = lambda rep: all(t is None or t["thread"] is None for t in rep["threads"])   # noqa: E731
        assert all(rep["message"] and (rep["kernel"] or host(rep)) for rep in found)
    elif m.detect == "wrong_result":
        assert not _result_ok(outcome, m.exercise)
        message = diagnose(m.exercise, outcome)
        assert m.diagnosis and m.diagnosis in message, message
    elif m.detect == "uncoalesced":
        assert _result_ok(outcome, m.exercise) and r.ok      # right, quiet, and slow
        # add: the scenario runs a grid that covers the data (one element per thread: the
        # chunks are 1 long, coalesced) and a small one (chunks of 8: one sector per lane);
        # transpose: without the tile the writes walk down columns
        wrong, good = r.counters(), ref.counters()
        for way in ("load", "store"):
            assert good[f"sectors_per_{way}_request"] <= 4.0
        worst = max(wrong["sectors_per_load_request"], wrong["sectors_per_store_request"])
        assert worst >= 4 * 4.0
    elif m.detect == "bank_conflicts":
        assert _result_ok(outcome, m.exercise) and r.ok
        assert ref.counters()["shared_bank_conflicts"] == 0
        assert r.counters()["shared_bank_conflicts"] > 0


def test_a_race_is_caught_whatever_the_schedule(mod):
    """The race checker does not depend on the thread order: the missing second barrier
    of the tiled matmul is reported under forward, reverse and shuffled schedules alone,
    even when the result happens to be right."""
    for schedules in (["forward"], ["reverse"], ["shuffled:3"]):
        _, r = run("matmul_tiled", mod, "matmul_tiled_no_second_barrier", schedules=schedules)
        assert r.of_kind("race"), (schedules, r)


def test_the_atomic_race_needs_no_luck(mod):
    """Under the forward schedule thread 0 zeroes the sum before anyone adds, so the
    result is right; the race report does not depend on that."""
    outcome, r = run("block_sum_shared", mod, "block_sum_atomic_after_plain_write", schedules=1)
    assert _result_ok(outcome, "block_sum_shared")
    (race,) = [x for x in r.of_kind("race") if x["kernel"] == "block_sum_shared"][:1]
    assert {t["access"] for t in race["threads"]} == {"write", "atomic"}
    _, r3 = run("block_sum_shared", mod, "block_sum_atomic_after_plain_write", schedules=3)
    assert r3.of_kind("schedule_dependent")
