"""Every attack of issue 10 as a submission, graded in one batch with honest controls.

One class of chapter 03 (the real chapter: 100 points), graded for real (nbgrader, the
sandboxed kernel, the sandboxed worker, ``--jobs 2``): each submission uses one technique a
student could write -- calling mini's reference, ``__wrapped__`` or the shipped numpy
fallback, reading ``source/`` or a classmate's notebook, load-time (``__reduce__``) and
call-time (frame walking, writing to the grader's channel) forgery, patching the registries,
a double-forked ``setsid`` process racing the verdict and writing the gradebook afterwards,
sabotaging classmates, a ``.pth`` dropped into the venv, killing the grader, corrupting the
gradebook, a loop that ignores interrupts, 100 MB of output, printing secrets, memory bombs
in forked children, editing nbgrader metadata -- and scores exactly what its real work
deserves.  Honest controls in the same batch keep 100, the batch completes, nothing survives
the sandbox, nothing outside the scratch folders changes, and no feedback page holds a
canary string planted in every check module, solution region and hidden test.

Skips (saying why) on a machine without a usable bubblewrap.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

import nbformat
import pytest

from grader import course
from grader.checks.ch03_strides import POINTS
from grader.sandbox import Sandbox, SandboxUnavailable
from grader_helpers import processes_with

pytestmark = [pytest.mark.nbgrader, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
CHAPTER = "03_strides"
CANARY = "mini-grader-canary"
TOKEN = f"mini-attack-{os.getpid()}"
FUNCTIONS = {  # slot -> (function name, parameters)
    "03.compact_strides": ("compact_strides", "shape"),
    "03.offset": ("element_offset", "index, strides, offset"),
    "03.slice_view": ("slice_view", "shape, strides, offset, key"),
    "03.permute": ("permute", "shape, strides, axes"),
    "03.broadcast_to": ("broadcast_to", "shape, strides, new_shape"),
    "03.reshape": ("reshape_strides", "shape, strides, new_shape"),
    "03.compact": ("compact", "buffer, shape, strides, offset"),
}


def _code_id(slot: str) -> str:
    return slot.replace(".", "_") + "_code"


def _cells(nb) -> dict:
    return {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("grade_id")}


def _with_canaries(text: str, markers: tuple, label: str) -> str:
    """``text`` with a canary comment line after each line that is one of ``markers``."""
    out = []
    for line in text.split("\n"):
        out.append(line)
        if line.strip() in markers:
            out.append(f"{line[: len(line) - len(line.lstrip())]}# {CANARY}: {label}")
    return "\n".join(out)


def _canary_copy(src_dir: Path, dst_dir: Path, label: str) -> None:
    """``dst_dir``: a copy of the chapter with a canary line in every solution region and
    every hidden-test region of its notebook."""
    shutil.copytree(src_dir, dst_dir)
    for nb_path in dst_dir.glob("*.ipynb"):
        nb = nbformat.read(str(nb_path), as_version=4)
        for cell in nb.cells:
            cell.source = _with_canaries(cell.source, ("### BEGIN SOLUTION", "### BEGIN HIDDEN TESTS"),
                                         label)
        nbformat.write(nb, str(nb_path))


def _canary_mini(dst: Path) -> None:
    """A copy of mini with a canary line in every reference (solution region)."""
    shutil.copytree(course.default_mini_src(), dst,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for p in dst.rglob("*.py"):
        text = p.read_text()
        if "### BEGIN SOLUTION" in text:
            p.write_text(_with_canaries(text, ("### BEGIN SOLUTION",), "reference"))


# --------------------------------------------------------------------------- the submissions

def _blank_with(nb_released, code_by_slot: dict, prefix: str = "") -> nbformat.NotebookNode:
    """The released (blank) notebook with each slot's answer cell replaced by cheating code
    (``code_by_slot[slot]`` is the body, given the function's parameters), and ``prefix``
    run at the top of the first answer cell."""
    nb = nbformat.from_dict(json.loads(json.dumps(nb_released)))
    cells = _cells(nb)
    for slot, (name, params) in FUNCTIONS.items():
        body = code_by_slot.get(slot)
        if body is None:
            continue
        body = body.format(slot=slot, name=name, params=params)
        cells[_code_id(slot)].source = (f'@implement("{slot}")\ndef {name}({params}):\n'
                                        + "\n".join("    " + l for l in body.split("\n")))
    if prefix:
        cell = cells[_code_id("03.compact_strides")]
        cell.source = prefix + "\n" + cell.source
    return nb


def _honest_with(nb_source, prefix: str = "", replace: dict | None = None) -> nbformat.NotebookNode:
    """The instructor's notebook (every answer right), with ``prefix`` at the top of the
    first answer cell and the bodies of ``replace`` ({slot: body}) swapped in."""
    nb = nbformat.from_dict(json.loads(json.dumps(nb_source)))
    for cell in nb.cells:   # a student's copy of the answers carries no canary
        cell.source = "\n".join(l for l in cell.source.split("\n") if CANARY not in l)
    cells = _cells(nb)
    for slot, body in (replace or {}).items():
        name, params = FUNCTIONS[slot]
        cells[_code_id(slot)].source = (f'@implement("{slot}")\ndef {name}({params}):\n'
                                        + "\n".join("    " + l for l in body.split("\n")))
    if prefix:
        cell = cells[_code_id("03.compact_strides")]
        cell.source = prefix + "\n" + cell.source
    return nb


def _detached(script: str) -> str:
    """Python for a double-forked, setsid process running ``script`` (a shell command)."""
    return (f"import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
            f"        os.execv('/bin/sh', ['sh', '-c', {script!r}, '{TOKEN}'])\n"
            f"    os._exit(0)\n")


def _submissions(nb_source, nb_blank, paths: dict) -> dict:
    """{student: (notebook, expected total, expected status or None)}."""
    gradebook = paths["gradebook"]
    guesses = [str(gradebook), str(gradebook.parent / ".." / "course" / "gradebook.db"),
               "/grading/../gradebook.db", "../../gradebook.db", "../../../gradebook.db"]
    find_and_exec = (
        "import glob, json, os\n"
        f"places = {[str(paths['course'] / 'source' / CHAPTER / 'strides.ipynb'), str(paths['course'] / 'submitted' / 'honest1' / CHAPTER / 'strides.ipynb'), str(paths['course'] / 'autograded' / 'honest1' / CHAPTER / 'strides.ipynb')]!r}\n"
        "for pattern in ('../*.ipynb', '../*/*.ipynb', '../../*/*/*.ipynb', '../../../*/*/*/*.ipynb',\n"
        "                '/*/*.ipynb', '/tmp/*/*.ipynb', '/tmp/*/*/*.ipynb'):\n"
        "    places += glob.glob(pattern)\n"
        "print('found', [p for p in places if os.path.exists(p)])\n"
        "for path in places:\n"
        "    try:\n"
        "        nb = json.load(open(path))\n"
        "    except Exception:\n"
        "        continue\n"
        "    for c in nb['cells']:\n"
        "        if c.get('metadata', {}).get('nbgrader', {}).get('solution'):\n"
        "            exec(''.join(c['source']), globals())\n")
    sql_write = (
        "import sqlite3, time\ntime.sleep({delay})\n"
        f"for path in {guesses!r}:\n"
        "    try:\n"
        "        con = sqlite3.connect(path)\n"
        "        con.execute(\"{sql}\")\n"
        "        con.commit()\n"
        "        print('wrote', path)\n"
        "    except Exception as e:\n"
        "        print('cannot write', path, type(e).__name__)\n")
    cheat = {"reference": "from mini.exercises import reference\nreturn reference('{slot}')({params})",
             "wrapped": "import importlib, mini.exercises as ex\ninfo = ex.slots()['{slot}']\n"
                        "fn = getattr(importlib.import_module(info.module), info.qualname)\n"
                        "return fn.__wrapped__({params})",
             "fallback": "from mini.ndarray import _numpy_fallbacks as f\n"
                         "name = '{name}' if '{name}' != 'reshape_strides' else 'reshape_strides'\n"
                         "return getattr(f, name)({params})"}
    subs = {}
    subs["honest1"] = (_honest_with(nb_source), 100.0, "ok")
    subs["honest2"] = (_honest_with(nb_source), 100.0, "ok")
    subs["blank"] = (nb_blank, 0.0, "ok")
    for how, body in cheat.items():
        subs[f"cheat_{how}"] = (_blank_with(nb_blank, {s: body for s in FUNCTIONS}), 0.0, None)
    subs["read_source_and_classmates"] = (_blank_with(nb_blank, {}, prefix=find_and_exec), 0.0, None)
    subs["load_time_forgery"] = (_honest_with(nb_source, prefix=(
        "class Forged:\n    def __reduce__(self):\n"
        f"        open('/tmp/{TOKEN}-reduce-ran', 'w').write('x')\n        return (print, ('forged',))\n"
        "FORGED = Forged()\n")), 100.0, "ok")
    # (03.permute and 03.broadcast_to: no other exercise calls them, so the attack costs
    # exactly their points; mini's reshape_strides, for one, calls compact_strides)
    subs["call_time_forgery"] = (_honest_with(nb_source, replace={"03.permute": (
        "import sys, gc, os\nf = sys._getframe()\nwhile f is not None:\n"
        "    for d in (f.f_locals, f.f_globals):\n"
        "        for k, v in list(d.items()):\n"
        "            if isinstance(v, dict) and ('points' in v or 'passed' in v or 'ok' in v):\n"
        "                v.update(passed=True, points=8, ok=True)\n"
        "    f = f.f_back\n"
        "for fd in range(3, 40):\n"
        "    try:\n        os.write(fd, b'\\x10\\x00\\x00\\x00\\x00\\x00\\x00\\x00{\"ok\": true, \"outcome\": {}}')\n"
        "    except OSError:\n        pass\n"
        "return tuple(shape), tuple(strides)")}), 100.0 - POINTS["03.permute"], None)
    subs["registry_patch"] = (_blank_with(nb_blank, {}, prefix=(
        "try:\n    import grader.checks as gc\n    gc._CHECKS.clear()\nexcept Exception as e:\n"
        "    print('no grader here:', type(e).__name__)\n"
        "import mini.exercises as ex\nex.reference = lambda slot: (lambda *a, **k: None)\n"
        "ex._SLOTS.clear()\n")), 0.0, None)
    subs["escapee"] = (_honest_with(nb_source, prefix=_detached(
        "for i in $(seq 1200); do for f in /grading/* /grading/.kernel/* /tmp/*; do "
        "echo PASS >> \"$f\" 2>/dev/null; done; sleep 0.05; done")), 100.0, "ok")
    subs["gradebook_after_grading"] = (_blank_with(nb_blank, {}, prefix=(
        "import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        + "\n".join("        " + l for l in sql_write.format(
            delay=5, sql="UPDATE grade SET auto_score = 100").split("\n"))
        + "\n        os._exit(0)\n    os._exit(0)\n")), 0.0, None)
    subs["sabotage"] = (_blank_with(nb_blank, {}, prefix=sql_write.format(
        delay=0, sql="UPDATE grade SET auto_score = 0")), 0.0, None)
    site = Path(sys.prefix) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    subs["pth_in_venv"] = (_honest_with(nb_source, prefix=(
        f"for d in ('/opt/venv/lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages', {str(site)!r}):\n"
        "    try:\n"
        f"        open(d + '/{TOKEN}.pth', 'w').write('import os; os.system(\"touch /tmp/{TOKEN}-pth-ran\")')\n"
        "    except OSError as e:\n        print('cannot write', d, type(e).__name__)\n")), 100.0, "ok")
    subs["kill_grader"] = (_honest_with(nb_source, prefix=(
        "import os, signal\n"
        f"for pid in [int(os.environ.get('JPY_PARENT_PID', 0) or 0), os.getppid(), 1, {os.getpid()}] + list(range(2, 300)):\n"
        "    if pid > 0 and pid != os.getpid():\n"
        "        try:\n            os.kill(pid, signal.SIGKILL)\n        except OSError:\n            pass\n"
        # (inside the sandbox these numbers reach only the sandbox's own processes: the
        # kernel's threads are among them, so the kernel kills itself and is restarted)
        )), 100.0, None)
    subs["corrupt_gradebook"] = (_blank_with(nb_blank, {}, prefix=(
        f"for path in {guesses!r}:\n"
        "    try:\n        with open(path, 'r+b') as f:\n            f.write(b'\\0' * 4096)\n"
        "    except OSError as e:\n        print('cannot corrupt', path, type(e).__name__)\n")), 0.0, None)
    subs["ignores_interrupts"] = (_honest_with(nb_source, replace={"03.broadcast_to": (
        "import time\nwhile True:\n    try:\n        time.sleep(0.2)\n    except BaseException:\n"
        "        pass")}), 100.0 - POINTS["03.broadcast_to"], "timeout")
    subs["huge_output"] = (_honest_with(nb_source, prefix=(
        "import sys\nfor _ in range(100):\n    sys.stdout.write('x' * (1 << 20))\n")), 100.0, "ok")
    subs["prints_secrets"] = (_honest_with(nb_source, prefix=(
        "import glob, inspect, os\n"
        f"for p in ['/etc/passwd', {str(REPO / 'grader' / 'checks' / 'ch03_strides.py')!r}, "
        f"{str(paths['course'] / 'source' / CHAPTER / 'strides.ipynb')!r}, "
        f"{str(REPO / 'mini' / 'ndarray' / 'strides.py')!r}]:\n"
        "    try:\n        print(open(p).read())\n"
        "    except OSError as e:\n        print('cannot read', p, type(e).__name__)\n"
        "try:\n    import grader.checks.ch03_strides as c\n    print(inspect.getsource(c))\n"
        "except ImportError as e:\n    print('no checks here:', e)\n"
        "import mini.ndarray.strides, mini.ndarray._numpy_fallbacks\n"
        "print(inspect.getsource(mini.ndarray.strides))\n"
        "print(inspect.getsource(mini.ndarray._numpy_fallbacks))\n")), 100.0, "ok")
    subs["memory_bombs"] = (_honest_with(nb_source, replace={"03.compact": (
        "import os\nkids = []\nfor _ in range(4):\n    pid = os.fork()\n    if pid == 0:\n"
        "        b = bytearray(700 * 2**20)\n        for i in range(0, len(b), 4096):\n"
        "            b[i] = 1\n        os._exit(0)\n    kids.append(pid)\n"
        "for pid in kids:\n    os.waitpid(pid, 0)\nreturn None")}),
        100.0 - POINTS["03.compact"], "memory")
    games = _honest_with(nb_source)
    cells = _cells(games)
    test = cells["03_compact_strides"]
    test.metadata["nbgrader"].update(points=1000, locked=False)
    test.source = "print('all good')"
    games.cells.append(nbformat.v4.new_code_cell("print('bonus')", metadata={"nbgrader": {
        "grade": True, "grade_id": "bonus", "locked": False, "points": 100, "schema_version": 3,
        "solution": False, "task": False}}))
    cells["03_offset_code"].metadata["nbgrader"]["grade_id"] = "renamed_offset_code"
    subs["metadata_games"] = (games, 100.0, None)
    return subs


# --------------------------------------------------------------------------- the batch

def _tree_digest(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    try:
        Sandbox.detect()
    except SandboxUnavailable as e:
        pytest.skip(f"no sandbox on this machine (install bubblewrap to run the attacks): {e}")
    tmp = tmp_path_factory.mktemp("attacks")
    src = tmp / "src"
    src.mkdir()
    _canary_copy(REPO / "course" / CHAPTER, src / CHAPTER, "solution or hidden test")
    mini_src = tmp / "mini"
    _canary_mini(mini_src)
    d = tmp / "course"
    course.init_course(d, course_src=src, mini_src=mini_src, cell_timeout=20, check_timeout=15,
                       kernel_memory="1500M", check_memory="1G", notebook_timeout=240,
                       log=lambda *a: None)
    release = course.release("03", d, log=lambda *a: None)
    nb_source = nbformat.read(str(d / "source" / CHAPTER / "strides.ipynb"), as_version=4)
    nb_blank = nbformat.read(str(release / "strides.ipynb"), as_version=4)
    subs = _submissions(nb_source, nb_blank, {"course": d, "gradebook": d / "gradebook.db"})
    inbox = tmp / "inbox"
    inbox.mkdir()
    for student, (nb, _, _) in subs.items():
        nbformat.write(nb, str(inbox / f"{student}_strides.ipynb"))
    (inbox / "broken_strides.ipynb").write_text("{this is not a notebook")
    (inbox / "bad name_strides.ipynb").write_text("{}")
    course.import_submissions("03", inbox, d, log=lambda *a: None)
    site = Path(sys.prefix) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    before = {name: _tree_digest(d / name) for name in ("source", "release", "submitted")}
    site_before = sorted(p.name for p in site.iterdir())
    start = time.monotonic()
    results = course.autograde("03", d, jobs=2, log=lambda *a: None)
    seconds = time.monotonic() - start
    time.sleep(6)   # longer than the delayed gradebook writer would wait
    return {"course": d, "subs": subs, "results": results, "before": before, "site": site,
            "site_before": site_before, "seconds": seconds,
            "rows": course.grades(d), "feedback": course.feedback("03", d, log=lambda *a: None)}


def test_every_attack_scores_what_its_real_work_deserves(attacked):
    results = attacked["results"]
    wrong = {}
    for student, (_, expected, status) in attacked["subs"].items():
        r = results[student]
        if expected is not None and r.score != expected:
            wrong[student] = (r.score, expected, r.status, r.detail)
        if status is not None and r.status != status:
            wrong[student] = (r.score, expected, r.status, f"status {r.status}, expected {status}")
        assert r.max_score == 100.0, (student, r.max_score)
    assert not wrong, wrong
    # killing the grader's processes from the sandbox reaches nothing: honest work, full marks
    assert results["kill_grader"].score == 100.0
    assert results["broken"].status == "invalid notebook" and results["broken"].score == 0


def test_the_batch_completed_and_the_gradebook_is_whole(attacked):
    d = attacked["course"]
    students = set(attacked["subs"]) | {"broken"}
    assert set(attacked["results"]) == students
    rows = attacked["rows"]
    per = {}
    for r in rows:
        if r["status"] != "rejected at import":
            per[r["student"]] = per.get(r["student"], 0.0) + r["score"]
    assert per["honest1"] == per["honest2"] == 100.0          # the saboteurs changed nothing
    assert per["gradebook_after_grading"] == 0.0              # nor did the late writer
    assert any(r["status"] == "rejected at import" for r in rows)
    assert list((d / ".mini-grader" / "backup").glob("gradebook-*.db"))


def test_nothing_survives_the_sandbox_and_nothing_outside_it_changed(attacked):
    d = attacked["course"]
    assert not processes_with(TOKEN)
    assert not list(Path("/tmp").glob(f"{TOKEN}*"))           # no __reduce__, no .pth ran here
    for name, digest in attacked["before"].items():
        assert _tree_digest(d / name) == digest, name
    assert sorted(p.name for p in attacked["site"].iterdir()) == attacked["site_before"]
    for student in attacked["subs"]:
        folder = d / "autograded" / student / CHAPTER
        if folder.exists():
            assert sorted(p.name for p in folder.iterdir()) == ["strides.ipynb"], student


def test_feedback_holds_no_secret_and_no_flood(attacked):
    d = attacked["course"]
    pages = sorted((d / "feedback").rglob("*"))
    assert pages
    for p in pages:
        if p.is_file():
            assert p.suffix == ".html", p
            text = p.read_text(errors="replace")
            assert CANARY not in text, p
            assert "root:x:0:0" not in text and "BEGIN HIDDEN TESTS" not in text, p
            assert p.stat().st_size < 4 * 2**20, (p, p.stat().st_size)
    for nb_path in (d / "autograded").rglob("*.ipynb"):
        nb = nbformat.read(str(nb_path), as_version=4)
        outputs = json.dumps([c.get("outputs", []) for c in nb.cells])
        assert CANARY not in outputs, nb_path
        assert len(outputs) < 3 * 2**20, (nb_path, len(outputs))
    secrets_page = (d / "feedback" / "prints_secrets" / CHAPTER / "strides.html").read_text()
    assert re.search(r"cannot read /etc/passwd|No such file", secrets_page)
