"""The learner's own mini (issue 16): earlier chapters' passing answers loaded into later
chapters, the table of what is whose, the profiler's share of the learner's ops, and
``mini-course export``.

The fast tests check each piece on its own; ``test_proof`` (slow) is the issue's proof: a
workspace whose chapters 02 and 03 hold the solutions except one wrong exercise, chapter 05's
notebook loading the passing ones and training the CNN on them, and the exported package's
tests failing exactly at the wrong exercise.
"""
from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import numpy as np
import pytest

import mini
from mini import exercises as ex
from mini import yours
from mini.utils import profiler

REPO = Path(__file__).resolve().parents[2]
WRONG_SLOT = "02.exp_vjp"
WRONG_BODY = "    return grad * out.exp()   # exp(a) is already `out`: this takes exp twice\n"


# --------------------------------------------------------------------------- the setting

def test_setting_cell_then_environment_then_where_it_runs(monkeypatch):
    monkeypatch.delenv(yours.ENV, raising=False)
    assert yours.setting(None, in_workspace=True) == yours.MINE
    assert yours.setting(None, in_workspace=False) == yours.REFERENCES
    monkeypatch.setenv(yours.ENV, "references only")
    assert yours.setting(None, in_workspace=True) == yours.REFERENCES
    assert yours.setting("mine where it passes", in_workspace=True) == yours.MINE  # the cell wins
    monkeypatch.setenv(yours.ENV, "mine")
    assert yours.setting(None, in_workspace=False) == yours.MINE
    with pytest.raises(ValueError, match="MY_CODE.*'maybe'.*\"mine\".*\"references\""):
        yours.setting("maybe", in_workspace=True)
    monkeypatch.setenv(yours.ENV, "bogus")
    with pytest.raises(ValueError, match=r"\$MINI_MY_CODE is 'bogus'"):
        yours.setting(None, in_workspace=True)


def test_outside_a_workspace_nothing_is_loaded(monkeypatch, capsys):
    """The course's own notebooks (this mini has no workspace marker beside it): even with
    "mine" asked for, no earlier chapter is read, and the table says so."""
    import grader.own
    monkeypatch.setattr(grader.own, "load_earlier_chapters",
                        lambda *a: pytest.fail("read earlier chapters outside a workspace"))
    state = yours.use_your_code("mine", chapter="03")
    assert state["loaded"] == {}
    out = capsys.readouterr().out
    assert "loads nothing from outside its folder, references only" in out
    assert re.search(r"02\.toposort\s+autograd\s+reference", out)


def test_while_nbgrader_executes_the_marker_is_ignored(tmp_path, monkeypatch):
    (tmp_path / yours.WORKSPACE_MARKER).write_text('{"workspace": ".."}')
    assert yours._workspace_of(tmp_path) == {"workspace": ".."}
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert yours._workspace_of(tmp_path) is None


# --------------------------------------------------------------------------- the profiler

def test_profiler_counts_the_ops_that_ran_learner_code():
    """relu's VJP registered as the learner's: of x*2 -> relu -> sum, forward and backward,
    exactly the ReLU backward node ran the learner's code."""
    calls = []

    @ex.implement("02.relu_vjp")
    def relu_vjp(grad, a):
        calls.append(1)
        return grad * (a > 0).to(dtype=grad.dtype)

    x = mini.tensor(np.array([-1.0, 2.0, 3.0]), requires_grad=True)
    with profiler.profile() as prof:
        (x * 2).relu().sum().backward()
    ops = [(e[0], e[1]) for e in prof.events if e[4]]
    assert len(calls) == 1
    assert prof.learner_ops() == 1 and len(ops) == 1
    assert ops[0][1] == "backward" and "relu" in ops[0][0].lower()
    assert prof.num_ops > 4            # mul, relu, sum forward and their backward nodes
    assert yours.share(prof).startswith(f"1 of the {prof.num_ops} ops")
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 2.0, 2.0])


def test_ops_called_from_learner_code_are_the_learners():
    @ex.implement("05.cross_entropy")
    def cross_entropy(logits, target):
        return ex.reference("05.cross_entropy")(logits, target)

    from mini.nn import losses
    logits = mini.tensor(np.zeros((2, 3)), requires_grad=True)
    target = mini.tensor(np.array([0, 2]))
    with profiler.profile() as prof:
        losses.cross_entropy(logits, target)
        mini.tensor([1.0])        # created here, outside the learner's code
    assert prof.num_ops > 2 and prof.learner_ops() == prof.num_ops - 1
    assert not prof.events[-1][4] and prof.events[-1][0] == "tensor"


# --------------------------------------------------------------------------- export's bodies

def _ref_def(code: str):
    return ast.parse(textwrap.dedent(code)).body[0]


def test_learner_body_same_parameters_goes_in_as_the_body():
    from grader.own import learner_body
    cell = ('import math\n\n@implement("02.exp_vjp")\ndef exp_vjp(grad, out):\n'
            '    """doc"""\n    # the saved output\n    return grad * out\n')
    body = learner_body(cell, "02.exp_vjp", _ref_def("def exp_vjp(grad, out):\n    pass\n"))
    assert body == "import math\n# the saved output\nreturn grad * out"


def test_learner_body_other_parameters_and_helpers_still_run():
    from grader.own import learner_body
    cell = ('def _twice(v):\n    return 2 * v\n\n@implement("03.offset")\n'
            'def element_offset(idx, st, off):\n    """doc"""\n'
            '    return off + sum(i * s for i, s in zip(idx, st)) + _twice(0)\n')
    ref = _ref_def("def element_offset(index, strides, offset=0, *, check=True):\n    pass\n")
    body = learner_body(cell, "03.offset", ref)
    src = "def element_offset(index, strides, offset=0, *, check=True):\n" + \
        textwrap.indent(body, "    ") + "\n"
    ns: dict = {}
    exec(src, ns)
    assert ns["element_offset"]((1, 2), (3, 1), 4) == 9


def test_learner_body_without_the_slot_is_an_error():
    from grader.own import learner_body
    with pytest.raises(ValueError, match=r"no function decorated @implement\('03.offset'\)"):
        learner_body("def f(x):\n    return x\n", "03.offset", _ref_def("def f(x):\n  pass\n"))


# --------------------------------------------------------------------------- the proof

def _gid(cell) -> str:
    return str((cell.get("metadata", {}).get("nbgrader", {}) or {}).get("grade_id") or "")


def _fill_with_solutions(ws: Path, chapter: str, name: str, wrong: dict | None = None) -> None:
    """The learner's notebook answered with the course's solutions (``wrong``: grade id ->
    body replacing a solution region)."""
    ref = nbformat.read(str(REPO / "course" / chapter / f"{name}.ipynb"), as_version=4)
    sol = {_gid(c): c.source for c in ref.cells
           if (c.get("metadata", {}).get("nbgrader", {}) or {}).get("solution")}
    path = ws / chapter / f"{name}.ipynb"
    nb = nbformat.read(str(path), as_version=4)
    for c in nb.cells:
        if _gid(c) in sol:
            c.source = sol[_gid(c)]
            if wrong and _gid(c) in wrong:
                c.source = c.source.split("    ### BEGIN SOLUTION")[0] + wrong[_gid(c)]
    nbformat.write(nb, str(path))


@pytest.fixture(scope="module")
def proof_workspace(tmp_path_factory):
    """Chapters 02, 03, 05 of a learner's workspace: 02 and 03 answered with the solutions
    but one exercise wrong, 05 answered with its solutions."""
    from grader.course import CHAPTER_IGNORE, workspace
    root = tmp_path_factory.mktemp("own")
    src = root / "course"
    for ch in ("02_autodiff", "03_strides", "05_training"):
        shutil.copytree(REPO / "course" / ch, src / ch,
                        ignore=shutil.ignore_patterns(*CHAPTER_IGNORE))
    ws = workspace(root / "ws", course_src=src, log=lambda *_: None)
    _fill_with_solutions(ws, "02_autodiff", "autodiff", {"02_exp_vjp_code": WRONG_BODY})
    _fill_with_solutions(ws, "03_strides", "strides")
    _fill_with_solutions(ws, "05_training", "training")
    return ws


def _run(nb, folder: Path, env: dict | None = None):
    from nbclient import NotebookClient
    old = dict(os.environ)
    os.environ.update(env or {})
    try:
        NotebookClient(nb, timeout=900, kernel_name="python3",
                       resources={"metadata": {"path": str(folder)}}).execute()
    finally:
        os.environ.clear()
        os.environ.update(old)
    return {_gid(c): "".join(o.get("text", "") for o in c.get("outputs", [])
                             if o.get("output_type") == "stream") for c in nb.cells}


@pytest.mark.slow
def test_proof(proof_workspace, tmp_path):
    ws = proof_workspace
    ch05 = ws / "05_training"
    assert json.loads((ch05 / yours.WORKSPACE_MARKER).read_text())["workspace"] == ".."

    # chapter 05: the setup loads the passing answers, the payoff trains on them
    nb = nbformat.read(str(ch05 / "training.ipynb"), as_version=4)
    nb.cells = [c for c in nb.cells if c.cell_type == "code" and (
        _gid(c).endswith("_code") or _gid(c) in ("05_setup", "05_payoff", "05_payoff_yours"))]
    out = _run(nb, ch05, {"MINI_NO_WIDGETS": "1"})
    setup = out["05_setup"]
    assert "your code where it passes its checks" in setup
    rows = dict(re.findall(r"^  (\d\d\.\w+)\s+\w+\s+(yours|reference)\b", setup, re.M))
    loaded = sorted(s for s, who in rows.items() if who == "yours")
    expected = sorted(s for s in ex.slots() if s[:2] in ("02", "03") and s != WRONG_SLOT)
    assert loaded == expected
    wrong_row = re.search(rf"^  {re.escape(WRONG_SLOT)}\s+\w+\s+reference\s+(.*)$", setup, re.M)
    assert wrong_row and "its visible check fails" in wrong_row.group(1)
    assert re.search(r"^  04\.im2col\s+ops\s+reference\s+not written yet", setup, re.M)
    acc = float(re.search(r"test accuracy ([\d.]+)% after", out["05_payoff"]).group(1))
    assert acc >= 97.0
    share = re.search(r"([\d,]+) of the ([\d,]+) ops this run executed", out["05_payoff_yours"])
    mine, total = (int(g.replace(",", "")) for g in share.groups())
    assert 0 < mine < total

    # a class release (no marker) reads nothing outside its folder, even when asked to
    release = tmp_path / "class" / "05_training"
    shutil.copytree(ch05, release, ignore=shutil.ignore_patterns(yours.WORKSPACE_MARKER))
    for ch in ("02_autodiff", "03_strides"):
        shutil.copytree(ws / ch, tmp_path / "class" / ch)
    probe = textwrap.dedent(f"""
        import sys
        outside = []
        def audit(event, args):
            if event == "open" and isinstance(args[0], str) and \\
                    args[0].startswith({str(tmp_path / 'class')!r}) and \\
                    not args[0].startswith({str(release)!r}):
                outside.append(args[0])
        sys.addaudithook(audit)
        import mini
        assert mini.__file__.startswith({str(release)!r}), mini.__file__
        from mini import yours
        state = yours.use_your_code("mine", chapter="05")
        assert state["loaded"] == {{}}, state["loaded"]
        assert outside == [], outside
        print("read nothing outside")
    """)
    proc = subprocess.run([sys.executable, "-c", probe], cwd=release, capture_output=True,
                          text=True, env=dict(os.environ, MINI_MY_CODE="mine"))
    assert proc.returncode == 0, proc.stderr
    assert "read nothing outside" in proc.stdout and "references only" in proc.stdout

    # the export: the learner's code in the slots, mini's tests fail exactly at the wrong one
    from grader.cli import main
    dest = tmp_path / "my-mini"
    assert main(["export", str(dest), "--workspace", str(ws)]) == 0
    readme = (dest / "README.md").read_text()
    assert f"| `{WRONG_SLOT}` | yours (fails its checks) |" in readme
    assert "| `03.offset` | yours |" in readme and "| `04.im2col` | mini's reference |" in readme
    elementwise = (dest / "mini" / "ops" / "elementwise.py").read_text()
    assert WRONG_BODY.strip() in elementwise
    tests = ["tests/ops/test_ops_gradcheck.py", "tests/ndarray/test_strides_functions.py"]
    tests = [t for t in tests if (dest / t).exists()]
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
                          "-rf", *tests], cwd=dest, capture_output=True, text=True,
                         env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    failed = re.findall(r"^FAILED (.+?)(?: - .*)?$", run.stdout, re.M)   # (ids may hold spaces)
    assert run.returncode == 1 and failed, run.stdout[-3000:]
    passed = int(re.search(r"(\d+) passed", run.stdout).group(1))
    assert passed > 100
    # exactly at the wrong exercise: with the reference's body in that slot, they all pass
    fixed = elementwise.replace(WRONG_BODY.strip(), "return grad * out")
    (dest / "mini" / "ops" / "elementwise.py").write_text(fixed)
    again = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
                            *failed], cwd=dest, capture_output=True, text=True,
                           env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    assert again.returncode == 0, again.stdout[-3000:]


def test_an_earlier_setup_cell_loaded_again_loads_nothing(monkeypatch):
    """While grader.own runs an earlier chapter's cells (its setup cell calls
    use_your_code too), that call leaves everything as it is."""
    import grader.own
    monkeypatch.setattr(grader.own, "load_earlier_chapters",
                        lambda *a: pytest.fail("loaded from inside a load"))
    monkeypatch.setattr(yours, "_STATE", dict(yours._STATE, chapter="05", loaded={"02.x": "nb"}))
    monkeypatch.setattr(yours, "LOADING", [True])
    assert yours.use_your_code("mine", chapter="03")["chapter"] == "05"
    assert yours._STATE["loaded"] == {"02.x": "nb"}


def test_an_exported_learners_slot_is_never_replaced_by_a_fast_path(monkeypatch):
    """In a package written by export, mini/_yours.py lists the learner's slots: their body is
    the learner's code, so no fast path (a C++ im2col) may stand in for it."""
    import types
    monkeypatch.setitem(sys.modules, "mini._yours", types.SimpleNamespace(SLOTS=("04.im2col",)))
    monkeypatch.setattr(ex, "_IS_SOLUTION", {})
    assert not ex.runs_reference("04.im2col") and ex.runs_reference("04.col2im")
    monkeypatch.delitem(sys.modules, "mini._yours")
    monkeypatch.setattr(ex, "_IS_SOLUTION", {})
    assert ex.runs_reference("04.im2col")


def test_a_cpp_answer_is_carried_with_its_source_and_builds():
    """Chapter 04's answers hold their C++ in the cell: the exported body carries it and
    builds it with load_inline (the compile cache: the same source builds once)."""
    from grader.checks import solution_grade_id
    from grader.own import learner_body
    from mini.backends.cpu import exercises as cpu_exercises
    nb = nbformat.read(str(REPO / "course" / "04_hardware" / "hardware.ipynb"), as_version=4)
    cell = next(c.source for c in nb.cells if _gid(c) == solution_grade_id("04.omp_add"))
    ref = next(n for n in ast.parse(Path(cpu_exercises.__file__).read_text()).body
               if isinstance(n, ast.FunctionDef) and n.name == "omp_add")
    body = learner_body(cell, "04.omp_add", ref)
    assert "#pragma omp parallel for" in body and "load_inline(" in body
    ns = dict(vars(cpu_exercises))
    exec("def omp_add(a, b):\n" + textwrap.indent(body, "    ") + "\n", ns)
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(ns["omp_add"](a.T, a.T), 2 * a.T)
