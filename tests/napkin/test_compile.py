"""mini.napkin.compile: the stopwatch on a scripted clock, the relative-error fit, the
dispatch law and the break-even rule, each against a direct computation."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from mini.napkin.compile import (break_even, dispatch_law, fit_dispatch, measured_crossover,
                                 time_per_call)


class Machine:
    """fn costs the next scripted time; each clock read costs `read` seconds."""

    def __init__(self, costs, read=0.0):
        self.costs, self.read, self.now, self.calls, self.reads = list(costs), read, 0.0, 0, 0

    def fn(self):
        self.now += self.costs[min(self.calls, len(self.costs) - 1)]
        self.calls += 1

    def clock(self):
        t = self.now
        self.now += self.read
        self.reads += 1
        return t


@given(st.lists(st.floats(0.1, 10.0), min_size=30, max_size=30), st.integers(1, 3),
       st.integers(1, 4), st.integers(1, 4))
@settings(max_examples=60, deadline=None)
def test_stopwatch_returns_the_fastest_round_per_call(costs, warmup, calls, repeats):
    m = Machine(costs, read=1e-3)
    got = time_per_call(m.fn, calls=calls, repeats=repeats, warmup=warmup, clock=m.clock)
    rounds = [sum(costs[warmup + r * calls:warmup + (r + 1) * calls]) + 1e-3
              for r in range(repeats)]
    assert got == pytest.approx(min(rounds) / calls, rel=1e-12)
    assert (m.calls, m.reads) == (warmup + calls * repeats, 2 * repeats)


@pytest.mark.parametrize("kwargs", [{"calls": 0}, {"repeats": 0}, {"warmup": -1}])
def test_stopwatch_refuses_bad_arguments(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        time_per_call(lambda: None, **kwargs)


@given(st.floats(1e-7, 1e-4), st.floats(1e-11, 1e-8))
@settings(max_examples=50, deadline=None)
def test_fit_recovers_exact_lines(td, te):
    n = np.geomspace(1, 1e7, 9)
    got = fit_dispatch(n, td + n * te)
    assert got == pytest.approx((td, te, td / te), rel=1e-6)


def test_fit_weighs_by_relative_error():
    """With 10 % noise on every size, the relative fit keeps t_d near its value; an
    ordinary least-squares fit is thrown off by the largest sizes."""
    rng = np.random.default_rng(0)
    n = np.geomspace(1, 1e7, 12)
    errors_rel, errors_abs = [], []
    for _ in range(50):
        t = (2e-6 + n * 1e-9) * np.exp(rng.normal(0, 0.1, n.size))
        errors_rel.append(abs(fit_dispatch(n, t)[0] / 2e-6 - 1))
        errors_abs.append(abs(np.polyfit(n, t, 1)[1] / 2e-6 - 1))
    assert np.median(errors_rel) < 0.1 < np.median(errors_abs)


@pytest.mark.parametrize("sizes, seconds", [([1, 2], [1e-6]), ([3, 3], [1e-6, 2e-6]),
                                            ([1, 10], [1e-6, -1.0]), ([1, 10, 100], [3e-6, 2e-6, 1e-6])])
def test_fit_refuses_what_gives_no_crossover(sizes, seconds):
    with pytest.raises(ValueError):
        fit_dispatch(sizes, seconds)


@given(st.integers(0, 1000), st.floats(0, 1e-4), st.floats(1e-9, 1.0), st.floats(0, 1.0))
@settings(max_examples=100, deadline=None)
def test_dispatch_law_terms_add_up(n, td, tc, tm):
    law = dispatch_law(n, td, tc, tm)
    step = n * td + tc + tm
    assert law["step"] == pytest.approx(step)
    assert law["share"] == pytest.approx(n * td / step)                 # the dispatch share
    assert law["speedup"] == pytest.approx(step / (tc + tm))            # without dispatch
    assert law["ratio"] == pytest.approx(n * td / (tc + tm))


@given(st.floats(0.01, 100), st.floats(1e-4, 1.0), st.floats(0.05, 0.95), st.integers(0, 5))
@settings(max_examples=100, deadline=None)
def test_break_even_is_where_the_totals_meet(t_compile, te, frac, recompiles):
    tc = te * frac
    n = break_even(t_compile, te, tc, recompiles)
    assert n * te == pytest.approx(t_compile * (1 + recompiles) + n * tc, rel=1e-9)


def test_break_even_refuses_a_compile_that_never_pays():
    with pytest.raises(ValueError, match="never pays off"):
        break_even(1.0, 1e-3, 1e-3)


@given(st.lists(st.floats(1e-4, 1e-2), min_size=1, max_size=60), st.floats(0.1, 0.9),
       st.floats(0, 0.2))
@settings(max_examples=100, deadline=None)
def test_crossover_is_the_first_call_where_compiled_is_ahead(eager, frac, t_compile):
    compiled = [e * frac for e in eager]
    got = measured_crossover(eager, compiled, t_compile)
    totals = [(t_compile + sum(compiled[:k]), sum(eager[:k])) for k in range(1, len(eager) + 1)]
    first = next((k for k, (c, e) in enumerate(totals, 1) if c <= e), None)
    assert got == first
    with pytest.raises(ValueError):
        measured_crossover(eager, compiled[:-1] + [1.0, 2.0], t_compile)
