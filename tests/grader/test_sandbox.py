"""The hidden-test sandbox: run_check runs the check in a fresh, limited subprocess that
imports pristine code, and student code cannot talk its way to a pass.

The student functions are defined from source in a namespace named ``__main__``, as in a
notebook, so cloudpickle ships them by value (see conftest.student_source).
"""
from __future__ import annotations

import builtins
import importlib
import sys

import pytest

from grader_helpers import student_source
from grader.checks import Verdict, run_in_process
from grader.hidden import run_check
from grader.sandbox import run_sandboxed

SLOT = "03.compact_strides"

CORRECT = '''
def compact_strides(shape):
    strides, step = [], 1
    for dim in reversed(shape):
        strides.append(step)
        step *= max(dim, 1)
    return tuple(reversed(strides))
'''

COLUMN_MAJOR = '''
def compact_strides(shape):
    strides, step = [], 1
    for dim in shape:
        strides.append(step)
        step *= max(dim, 1)
    return tuple(strides)
'''


def real_assertion_error():
    try:
        assert False
    except BaseException as e:  # noqa: BLE001
        return type(e)


def test_correct_function_passes(capsys):
    assert run_check(SLOT, student_source(CORRECT, "compact_strides")) is None
    assert "hidden tests passed" in capsys.readouterr().out


def test_wrong_function_fails_with_the_checks_message():
    wrong = student_source(COLUMN_MAJOR, "compact_strides")
    expected = run_in_process(SLOT, wrong)
    assert not expected.passed and "column-major" in expected.message
    with pytest.raises(AssertionError) as info:
        run_check(SLOT, wrong)
    assert str(info.value) == expected.message


def test_always_equal_object_fails():
    fn = student_source('''
class Anything:
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    def __len__(self):
        return 2
def compact_strides(shape):
    return Anything()
''', "compact_strides")
    assert fn((2, 3)) == (3, 1)  # it would fool a naive ==
    with pytest.raises(AssertionError, match="tuple of ints.*Anything"):
        run_check(SLOT, fn)


def test_int_subclass_and_list_results_fail():
    fn = student_source('''
class Int(int):
    def __eq__(self, other):
        return True
def compact_strides(shape):
    return tuple(Int(1) for _ in shape)
''', "compact_strides")
    with pytest.raises(AssertionError, match="Python int"):
        run_check(SLOT, fn)
    as_list = student_source(CORRECT.replace("return tuple(reversed(strides))",
                                             "return list(reversed(strides))"), "compact_strides")
    with pytest.raises(AssertionError, match="should be a tuple"):
        run_check(SLOT, as_list)


@pytest.mark.parametrize("exit_call", ["import sys; sys.exit(0)", "import os; os._exit(0)",
                                       "raise SystemExit(0)", "raise KeyboardInterrupt"])
def test_exiting_early_fails(exit_call):
    fn = student_source(f"def compact_strides(shape):\n    {exit_call}\n", "compact_strides")
    with pytest.raises(AssertionError) as info:
        run_check(SLOT, fn)
    assert "03.compact_strides" in str(info.value)


def test_exit_after_printing_a_fake_verdict_fails():
    fn = student_source('''
def compact_strides(shape):
    import json, os, sys
    fake = {"nonce": "0" * 32, "verdict": {"slot_id": "03.compact_strides", "passed": True,
            "message": "passed", "points": 8, "max_points": 8}}
    print(json.dumps(fake)); sys.stdout.flush()
    print(json.dumps(fake), file=sys.stderr); sys.stderr.flush()
    os._exit(0)
''', "compact_strides")
    with pytest.raises(AssertionError):
        run_check(SLOT, fn)


def test_infinite_loop_fails_by_timeout():
    fn = student_source("def compact_strides(shape):\n    while True:\n        pass\n",
                        "compact_strides")
    # The loop never ends, so returning at all proves the sandbox killed it, and the message
    # names the 2 s limit (not some later one); no wall-clock bound on how long that took.
    with pytest.raises(AssertionError, match="did not finish within 2 s"):
        run_check(SLOT, fn, timeout=2)


def test_timeout_from_the_environment(monkeypatch):
    monkeypatch.setenv("MINI_GRADER_TIMEOUT", "1.5")
    fn = student_source("def compact_strides(shape):\n    import time; time.sleep(30)\n",
                        "compact_strides")
    v = run_sandboxed(SLOT, fn)
    assert not v.passed and "1.5 s" in v.message


def test_memory_hog_fails_under_the_memory_limit():
    fn = student_source("def compact_strides(shape):\n    x = bytearray(8 * 2**30)\n"
                        "    return (1,) * len(shape)\n", "compact_strides")
    v = run_sandboxed(SLOT, fn, memory_limit="1G", timeout=30)
    assert not v.passed
    assert "MemoryError" in v.message or "memory" in v.message


def test_patching_the_grader_in_the_kernel_does_not_help(monkeypatch):
    import grader.checks as checks

    wrong = student_source(COLUMN_MAJOR, "compact_strides")
    fake = checks.Check(SLOT, 8.0, lambda fn: None, "student")
    monkeypatch.setitem(checks._CHECKS, SLOT, fake)
    monkeypatch.setattr(checks, "run_in_process",
                        lambda slot, fn: Verdict(slot, True, "passed", 8.0, 8.0))
    monkeypatch.setattr(checks, "get_check", lambda slot: fake)
    assert checks.run_in_process(SLOT, wrong).passed  # the kernel's grader is fooled ...
    with pytest.raises(AssertionError, match="column-major"):  # ... the subprocess is not
        run_check(SLOT, wrong)


def test_patching_the_check_module_in_the_kernel_does_not_help(monkeypatch):
    import grader.checks.ch03_strides as ch03
    import grader.checks.helpers as helpers

    monkeypatch.setattr(helpers, "expect_tuple_of_ints", lambda value, what, **k: (3, 1))
    monkeypatch.setattr(ch03, "expect_tuple_of_ints", lambda value, what, **k: (3, 1), raising=False)
    with pytest.raises(AssertionError):
        run_check(SLOT, student_source(COLUMN_MAJOR, "compact_strides"))


def test_rebinding_assertion_error_does_not_make_a_failing_check_pass(monkeypatch):
    real = real_assertion_error()
    wrong = student_source(COLUMN_MAJOR, "compact_strides")

    class Harmless(Exception):
        pass

    for fake in (Harmless, lambda *a, **k: None):
        monkeypatch.setattr(builtins, "AssertionError", fake)
        hidden = importlib.reload(sys.modules["grader.hidden"])  # imported after the rebinding
        try:
            hidden.run_check(SLOT, wrong)
        except BaseException as e:  # noqa: BLE001
            assert type(e) is real, type(e)
        else:
            pytest.fail("run_check returned normally for a wrong function")
        finally:
            monkeypatch.setattr(builtins, "AssertionError", real)
    importlib.reload(sys.modules["grader.hidden"])


def test_not_implemented_says_so():
    fn = student_source("def compact_strides(shape):\n    # YOUR CODE HERE\n"
                        "    raise NotImplementedError()\n", "compact_strides")
    with pytest.raises(AssertionError, match="not implemented yet"):
        run_check(SLOT, fn)


def test_implement_wrapper_and_notebook_helpers_are_shipped_by_value():
    from mini.exercises import implement, unregister

    ns = {"__name__": "__main__", "__builtins__": __builtins__, "implement": implement}
    exec(compile('''
def _axis_step(dim):
    return max(dim, 1)

@implement("03.compact_strides")
def compact_strides(shape):
    out, step = [], 1
    for dim in reversed(shape):
        out.append(step)
        step *= _axis_step(dim)
    return tuple(reversed(out))
''', "<cell>", "exec"), ns)
    try:
        run_check(SLOT, ns["compact_strides"])
    finally:
        unregister(SLOT)


def test_local_helper_module_is_shipped_by_value(tmp_path, monkeypatch):
    (tmp_path / "my_strides_helper.py").write_text(
        "def step_of(dim):\n    return max(dim, 1)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    import my_strides_helper  # noqa: F401 - the notebook imported it
    fn = student_source(CORRECT.replace("step *= max(dim, 1)", "step *= my_strides_helper.step_of(dim)")
                        .replace("def compact_strides", "import my_strides_helper\ndef compact_strides"),
                        "compact_strides")
    run_check(SLOT, fn)
    sys.modules.pop("my_strides_helper", None)


def test_unpicklable_function_fails_with_a_message():
    fn = student_source("import threading\n_lock = threading.Lock()\n"
                        "def compact_strides(shape):\n    with _lock:\n        return ()\n",
                        "compact_strides")
    with pytest.raises(AssertionError, match="could not copy your function"):
        run_check(SLOT, fn)


def test_the_subprocess_does_not_import_the_notebook_folders_mini(tmp_path, monkeypatch):
    # A notebook folder holds a student copy of mini; the check must run on the real one.
    fake = tmp_path / "mini"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise RuntimeError('the notebook folder mini was imported')\n")
    monkeypatch.chdir(tmp_path)
    run_check(SLOT, student_source(CORRECT, "compact_strides"))
