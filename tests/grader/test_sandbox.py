"""The sandbox (bubblewrap), the worker that runs student code in it, and the kernel-side
``run_check``.  Sandbox tests skip, saying why, on a machine without a usable bubblewrap
(CI installs it: .ci/run)."""
from __future__ import annotations

import builtins
import importlib
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from grader.checks import run_in_process
from grader.checks.student import Student, WorkerLost
from grader.hidden import run_check
from grader.sandbox import Limits, Sandbox, SandboxUnavailable
from grader.workerproc import WorkerBackend, WorkerProcess
from grader_helpers import processes_with, student_source

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


@pytest.fixture(scope="module")
def box() -> Sandbox:
    try:
        return Sandbox.detect()
    except SandboxUnavailable as e:
        pytest.skip(f"no sandbox on this machine (install bubblewrap to run this test): {e}")


def run_in(box, tmp_path, code: str, *, limits=Limits(), env=None, timeout=60, readonly=None):
    """Run ``code`` with the sandbox's Python; (exit status, output)."""
    proc = box.launch([box.python, "-c", code], scratch=tmp_path / "scratch", limits=limits,
                      env=env, readonly=readonly, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        rc = proc.wait(timeout=timeout)
        out = proc.popen.stdout.read().decode(errors="replace")
    finally:
        proc.kill()
    return rc, out, proc


# --------------------------------------------------------------------------- the sandbox

def test_the_sandbox_sees_only_its_runtime_and_scratch(box, tmp_path, monkeypatch):
    course = tmp_path / "course"
    (course / "source").mkdir(parents=True)
    (course / "gradebook.db").write_text("secret gradebook")
    monkeypatch.setenv("MINI_GRADER_SUBMISSION_DIR", str(course))
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    code = f'''
import os, json, socket, sys
out = {{"root": sorted(os.listdir("/")), "cwd": os.getcwd(), "env": sorted(os.environ),
        "pid": os.getpid(), "uid": os.getuid()}}
for path in ({str(course / "gradebook.db")!r}, "/etc/passwd", {str(Path.cwd())!r},
             {str(Path(__file__).resolve())!r}):
    out[path] = os.path.exists(path)
try:
    socket.create_connection(("127.0.0.1", 22), timeout=2)
    out["net"] = "open"
except OSError as e:
    out["net"] = type(e).__name__
for name in ("grader", "mini"):
    try:
        __import__(name)
        out[name] = "imported"
    except ImportError:
        out[name] = "missing"
for target in ("/opt/venv/lib/injected.pth", "/usr/evil", "/grading/mine.txt"):
    try:
        open(target, "w").write("x")
        out[target] = "written"
    except OSError as e:
        out[target] = type(e).__name__
print(json.dumps(out))
'''
    rc, out, _ = run_in(box, tmp_path, code)
    assert rc == 0, out
    import json
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["cwd"] == "/grading" and seen["pid"] <= 3 and seen["uid"] == 65534
    assert not any(seen[p] for p in (str(course / "gradebook.db"), "/etc/passwd",
                                     str(Path.cwd()), str(Path(__file__).resolve())))
    assert "work" not in seen["root"] and "home" not in seen["root"]
    assert not [k for k in seen["env"] if k.startswith(("MINI_GRADER", "NBGRADER", "JPY"))]
    assert seen["net"] in ("ConnectionRefusedError", "OSError") or "Error" in seen["net"]
    assert seen["grader"] == "missing" and seen["mini"] == "missing"
    assert seen["/opt/venv/lib/injected.pth"] != "written" and seen["/usr/evil"] != "written"
    assert seen["/grading/mine.txt"] == "written"
    assert (tmp_path / "scratch" / "mine.txt").read_text() == "x"


def test_a_readonly_student_mini_is_the_one_imported(box, tmp_path):
    fake = tmp_path / "student" / "mini"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("WHO = 'the student copy'\n")
    rc, out, _ = run_in(box, tmp_path, "import sys; sys.path.insert(0, '/grading'); import mini; "
                                       "print(mini.WHO); open('/grading/mini/x', 'w')",
                        readonly={fake: "mini"})
    assert "the student copy" in out and "Read-only file system" in out


def test_memory_limit_covers_the_sandbox_as_a_whole(box, tmp_path):
    if box.limits_note.startswith("no writable cgroup"):
        pytest.skip(box.limits_note)
    # Four children of 150 MiB each: each is under the limit, together they are not.
    code = '''
import os, time
kids = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        x = bytearray(150 * 2**20)
        for i in range(0, len(x), 4096):
            x[i] = 1
        time.sleep(2)
        os._exit(0)
    kids.append(pid)
killed = sum(os.waitpid(pid, 0)[1] & 0x7f == 9 for pid in kids)
print("killed", killed)
'''
    rc, out, proc = run_in(box, tmp_path, code, limits=Limits(memory=384 * 2**20), timeout=60)
    assert proc.memory_exceeded(), out
    assert "killed 0" not in out


def test_process_limit_stops_a_fork_bomb(box, tmp_path):
    if box.limits_note.startswith("no writable cgroup"):
        pytest.skip(box.limits_note)
    code = '''
import os, time
n = 0
try:
    while n < 500:
        if os.fork() == 0:
            time.sleep(20)
            os._exit(0)
        n += 1
except OSError:
    pass
print("forked", n)
'''
    rc, out, _ = run_in(box, tmp_path, code, limits=Limits(procs=40), timeout=60)
    assert "forked" in out and int(out.split("forked")[1].split()[0]) < 40


def test_kill_ends_double_forked_setsid_processes(box, tmp_path):
    token = f"mini-escapee-{os.getpid()}-{time.monotonic_ns()}"
    code = f'''
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sh", ["sh", "-c", "while true; do echo x > /grading/late.txt; sleep 0.05; done", "{token}"])
    os._exit(0)
print("escaped", flush=True)
time.sleep(60)
'''
    proc = box.launch([box.python, "-c", code], scratch=tmp_path / "scratch",
                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    late = tmp_path / "scratch" / "late.txt"
    deadline = time.monotonic() + 30
    while not late.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert late.exists() and processes_with(token), "the escapee never started"
    proc.kill()
    time.sleep(0.3)
    assert not processes_with(token)
    before = late.stat().st_mtime_ns
    time.sleep(0.4)
    assert late.stat().st_mtime_ns == before   # nothing writes after the kill


def test_without_a_sandbox_the_same_launcher_runs_unconfined(tmp_path):
    nb = Sandbox.none()
    proc = nb.launch([nb.python, "-c", "import os; print(os.getcwd())"], scratch=tmp_path / "s",
                     stdout=subprocess.PIPE)
    assert proc.wait(timeout=60) == 0
    assert proc.popen.stdout.read().decode().strip() == str((tmp_path / "s").resolve())
    proc.kill()


def test_detect_explains_what_is_missing(monkeypatch):
    import grader.sandbox as sb
    monkeypatch.setattr(sb.shutil, "which", lambda name: None)
    with pytest.raises(SandboxUnavailable, match="(?s)bubblewrap .* not installed.*--no-sandbox"):
        Sandbox.detect()
    assert Sandbox.detect(allow_none=True).kind == "none"


# --------------------------------------------------------------------------- the worker

@pytest.fixture(scope="module")
def student_mini(tmp_path_factory):
    from grader.course import default_mini_src
    from grader.solutions import strip_package
    dst = tmp_path_factory.mktemp("student") / "mini"
    strip_package(default_mini_src(), dst, 3)
    return dst


def _backend(box, mini, source, **kw):
    cells = [{"grade_id": "03_setup", "source": "import numpy as np\nfrom mini.exercises import implement"},
             {"grade_id": "03_compact_strides_code", "source": source}]
    return WorkerBackend(box, mini_dir=mini, cells=cells, **kw)


def test_the_worker_grades_the_notebooks_code_in_the_sandbox(box, student_mini):
    with _backend(box, student_mini, '@implement("03.compact_strides")' + CORRECT) as be:
        be.begin_check()
        verdict = _evaluate(be, "compact_strides")
        assert verdict.passed, verdict.message
    with _backend(box, student_mini, COLUMN_MAJOR) as be:
        be.begin_check()
        verdict = _evaluate(be, "compact_strides")
        assert not verdict.passed and "column-major" in verdict.message


def _evaluate(backend, name, slot=SLOT):
    from grader.checks import evaluate
    return evaluate(slot, Student(backend, slot, name))


def test_the_student_copy_gives_no_answer(box, student_mini):
    # The released chapter's slots are stubs in the student copy: the reference, the
    # dispatcher's __wrapped__ and the numpy fallback of the slot give nothing.
    attempts = {
        "reference": "from mini.exercises import reference\ncompact_strides = reference('03.compact_strides')",
        "wrapped": "from mini.ndarray import strides\ncompact_strides = strides.compact_strides.__wrapped__",
        "fallback": "from mini.ndarray import _numpy_fallbacks as f\ncompact_strides = f.compact_strides",
        "dispatch": "from mini.ndarray import strides\ncompact_strides = strides.compact_strides",
    }
    for how, source in attempts.items():
        with _backend(box, student_mini, source) as be:
            be.begin_check()
            verdict = _evaluate(be, "compact_strides")
            assert verdict.points == 0, (how, verdict.message)


def test_a_timeout_kills_the_worker_and_the_next_check_gets_a_new_one(box, student_mini):
    with _backend(box, student_mini, "def compact_strides(shape):\n    while True:\n        pass\n",
                  check_timeout=2) as be:
        be.begin_check()
        start = time.monotonic()
        verdict = _evaluate(be, "compact_strides")
        assert not verdict.passed and verdict.status == "timeout"
        assert "did not finish within 2 s" in verdict.message
        assert time.monotonic() - start < 30
        be.cells[-1]["source"] = CORRECT
        be.begin_check(budget=120)   # a fresh worker starts: on a loaded machine that alone can take 2 s
        assert _evaluate(be, "compact_strides").passed
        assert be.starts == 2


@pytest.mark.parametrize("body, status, fragment", [
    ("import os; os._exit(0)", "died", "os._exit"),
    ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", "died", "stopped"),
    ("raise SystemExit(0)", "ok", "sys.exit()"),
    ("import os; os.write(1, b'garbage'); os.write(2, b'more'); return (1,) * len(shape)", "ok",
     "expected (3, 1)"),       # fd 1 and 2 lead nowhere: the channel is elsewhere
    ("import os\n    for fd in range(3, 30):\n        try: os.write(fd, b'\\xff' * 64)\n"
     "        except OSError: pass\n    return (1,) * len(shape)", "protocol", "could not read"),
])
def test_a_worker_that_exits_or_scribbles_earns_nothing(box, student_mini, body, status, fragment):
    with _backend(box, student_mini, f"def compact_strides(shape):\n    {body}\n") as be:
        be.begin_check()
        verdict = _evaluate(be, "compact_strides")
        assert verdict.points == 0 and verdict.status == status, verdict
        assert fragment in verdict.message


def test_printing_does_not_disturb_the_channel(box, student_mini):
    noisy = CORRECT.replace("    return tuple", "    print('x' * 10000); import sys; "
                                                   "sys.stderr.write('y' * 1000)\n    return tuple")
    with _backend(box, student_mini, noisy) as be:
        be.begin_check()
        assert _evaluate(be, "compact_strides").passed


def test_a_memory_bomb_in_the_worker_is_a_memory_status(box, student_mini):
    if box.limits_note.startswith("no writable cgroup"):
        pytest.skip(box.limits_note)
    bomb = ("def compact_strides(shape):\n    x = bytearray(600 * 2**20)\n"
            "    for i in range(0, len(x), 4096):\n        x[i] = 1\n    return ()\n")
    with _backend(box, student_mini, bomb, limits=Limits(memory=300 * 2**20)) as be:
        be.begin_check()
        verdict = _evaluate(be, "compact_strides")
        assert verdict.points == 0 and verdict.status == "memory", verdict


def test_a_missing_name_says_so(box, student_mini):
    with _backend(box, student_mini, "def other():\n    return 'B'\n") as be:
        be.begin_check()
        verdict = _evaluate(be, "answer_views", slot="03.quiz_views")
        assert "defines no 'answer_views'" in verdict.message
        # an exercise slot without the student's function runs mini's stub: not implemented
        assert "not implemented yet" in _evaluate(be, "compact_strides").message


# --------------------------------------------------------------------------- run_check in a kernel

def real_assertion_error():
    try:
        assert False
    except BaseException as e:  # noqa: BLE001
        return type(e)


def test_run_check_passes_and_fails_in_process(capsys):
    assert run_check(SLOT, student_source(CORRECT, "compact_strides")) is None
    assert "hidden tests passed" in capsys.readouterr().out
    wrong = student_source(COLUMN_MAJOR, "compact_strides")
    expected = run_in_process(SLOT, wrong)
    assert not expected.passed and "column-major" in expected.message
    with pytest.raises(AssertionError) as info:
        run_check(SLOT, wrong)
    assert str(info.value) == expected.message


def test_always_equal_objects_and_int_subclasses_fail():
    fn = student_source('''
class Anything:
    def __eq__(self, other):
        return True
def compact_strides(shape):
    return Anything()
''', "compact_strides")
    with pytest.raises(AssertionError, match="tuple of ints.*Anything"):
        run_check(SLOT, fn)
    fn = student_source('''
class Int(int):
    def __eq__(self, other):
        return True
def compact_strides(shape):
    return tuple(Int(1) for _ in shape)
''', "compact_strides")
    with pytest.raises(AssertionError):
        run_check(SLOT, fn)


def test_rebinding_assertion_error_does_not_make_a_failing_check_pass(monkeypatch):
    real = real_assertion_error()
    wrong = student_source(COLUMN_MAJOR, "compact_strides")

    class Harmless(Exception):
        pass

    for fake in (Harmless, lambda *a, **k: None):
        monkeypatch.setattr(builtins, "AssertionError", fake)
        hidden = importlib.reload(sys.modules["grader.hidden"])
        try:
            hidden.run_check(SLOT, wrong)
        except BaseException as e:  # noqa: BLE001
            assert type(e) is real, type(e)
        else:
            pytest.fail("run_check returned normally for a wrong function")
        finally:
            monkeypatch.setattr(builtins, "AssertionError", real)
    importlib.reload(sys.modules["grader.hidden"])


@pytest.mark.parametrize("body, fragment", [
    ("raise NotImplementedError()", "not implemented yet"),
    ("import sys; sys.exit(0)", "sys.exit()"),
    ("raise KeyboardInterrupt", "KeyboardInterrupt"),
])
def test_run_check_reports_stubs_and_exits(body, fragment):
    fn = student_source(f"def compact_strides(shape):\n    {body}\n", "compact_strides")
    with pytest.raises(AssertionError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        run_check(SLOT, fn)


def test_run_check_needs_no_pickling():
    fn = student_source("import threading\n_lock = threading.Lock()\n"
                        "def compact_strides(shape):\n    with _lock:\n"
                        "        return tuple(int(s) // 8 for s in __import__('numpy').empty(shape).strides)"
                        " if 0 not in shape else ()\n", "compact_strides")
    with pytest.raises(AssertionError, match="compact_strides"):   # wrong for size-0 shapes only
        run_check(SLOT, fn)


def test_worker_process_reports_cells_that_raise(box, student_mini):
    w = WorkerProcess(box, mini_dir=student_mini)
    try:
        report = w.start([{"grade_id": "a", "source": "x = 1"},
                          {"grade_id": "b", "source": "raise ValueError('broken cell')"},
                          {"grade_id": "c", "source": "%time y = x + 1"}])
        assert [r["raised"] is None for r in report] == [True, False, True]
        assert report[1]["raised"].is_a("ValueError")
    finally:
        w.close()
    assert w.proc is None


def test_run_check_in_a_workspace_kernel_takes_the_reference_from_the_installed_mini(tmp_path):
    """In a learner's kernel, ``mini`` is the chapter's student copy (no references); a
    scenario check gets its expected observations from a plain process over the installed
    mini, and a right answer written in the notebook passes."""
    from grader.course import default_mini_src
    from grader.solutions import reference_regions, strip_package
    strip_package(default_mini_src(), tmp_path / "mini", 5)
    body = reference_regions(default_mini_src())["05.save_checkpoint"][1]
    cell = ("import os, tempfile\nimport mini\nfrom mini import serialization\n"
            "def save_checkpoint(path, model, optimizer, scheduler=None, loader=None, step=0):\n"
            + "".join("    " + line + "\n" for line in body.splitlines()))
    code = (f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n"
            "import mini\nassert mini.__file__.startswith(%r), mini.__file__\n" % str(tmp_path)
            + cell + "from grader.hidden import run_check\n"
            "run_check('05.save_checkpoint', save_checkpoint)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "05.save_checkpoint: hidden tests passed" in r.stdout
