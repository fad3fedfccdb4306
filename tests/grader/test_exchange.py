"""A mini course through nbgrader's exchange, as on a shared server: the instructor
releases to a local exchange folder, two students fetch and submit from their own Unix
accounts, the instructor collects and autogrades.  Needs root (to create the two accounts
and run commands as them); skipped elsewhere."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest

from grader import course
from grader.cli import main
from grader_helpers import FIXTURE_CHAPTER

STUDENTS = ("mini-learner1", "mini-learner2")
CORRECT_COMPACT = ("    out, step = [], 1\n    for d in reversed(shape):\n"
                   "        out.append(step)\n        step *= max(d, 1)\n"
                   "    return tuple(reversed(out))")
quiet = lambda *a, **k: None  # noqa: E731


def _ensure_user(name: str) -> None:
    if subprocess.run(["id", "-u", name], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "--no-create-home", "--home-dir", "/nonexistent",
                        "--shell", "/usr/sbin/nologin", name], check=True, capture_output=True)


def _as(user: str, home: Path, *argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``argv`` run as ``user`` (no other groups), in ``home``."""
    import pwd
    pw = pwd.getpwnam(user)
    full = {"HOME": str(home), "USER": user, "LOGNAME": user, "LANG": "C.UTF-8",
            "PATH": "/usr/bin:/bin", **(env or {})}
    try:
        return subprocess.run(list(argv), cwd=home, env=full, user=pw.pw_uid, group=pw.pw_gid,
                              extra_groups=[], capture_output=True, text=True, timeout=300)
    except PermissionError as e:            # the interpreter itself is out of their reach
        return subprocess.CompletedProcess(argv, 126, "", f"PermissionError: {e}")


def _student_python(user: str, home: Path) -> tuple[list[str], dict] | str:
    """How a student account runs nbgrader: this interpreter if other users may run it
    (a system-wide install, as on a shared server), else a system Python of the same
    version over this environment's packages.  A string says why neither works."""
    import sysconfig
    site = sysconfig.get_paths()["purelib"]
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [([sys.executable], {})]
    for folder in ("/usr/bin", "/usr/local/bin"):
        exe = Path(folder) / f"python{version}"
        if exe.is_file():
            candidates.append(([str(exe), "-s"], {"PYTHONPATH": site}))
    why = []
    for argv, env in candidates:
        r = _as(user, home, *argv, "-c", "import nbgrader", env=env)
        if r.returncode == 0:
            return argv, env
        why.append(f"{argv[0]}: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    return "; ".join(why)


@pytest.fixture
def two_students():
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("needs root: the test creates two Unix accounts and runs nbgrader as them")
    if shutil.which("useradd") is None:
        pytest.skip("needs useradd to create the students' accounts")
    for name in STUDENTS:
        _ensure_user(name)
    shared = Path(tempfile.mkdtemp(prefix="mini-exchange-test-", dir="/tmp"))
    shared.chmod(0o755)                              # the students can reach the exchange in it
    homes = {}
    for name in STUDENTS:
        home = shared / f"home-{name}"
        home.mkdir(mode=0o700)
        import pwd
        os.chown(home, pwd.getpwnam(name).pw_uid, pwd.getpwnam(name).pw_gid)
        homes[name] = home
    python = _student_python(STUDENTS[0], homes[STUDENTS[0]])
    if isinstance(python, str):
        shutil.rmtree(shared, ignore_errors=True)
        pytest.skip(f"the students' accounts cannot run nbgrader: {python} (install Python "
                    f"and the environment where other users may read them)")
    try:
        yield shared, homes, python
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def _nbgrader(python, user, home, *args):
    argv, env = python
    r = _as(user, home, *argv, "-m", "nbgrader", *args, env=env)
    assert r.returncode == 0, f"nbgrader {' '.join(args)} as {user}:\n{r.stdout}\n{r.stderr}"
    return r


@pytest.mark.nbgrader
@pytest.mark.slow
def test_release_fetch_submit_collect_autograde(graded_fixture, two_students, tmp_path):
    shared, homes, python = two_students
    exchange = shared / "exchange"
    d = tmp_path / "course"
    shutil.copytree(graded_fixture.course_dir, d)
    for old in (d / "submitted").iterdir():         # only the exchange's students this time
        shutil.rmtree(old)
    cfg = d / "nbgrader_config.py"                   # what `init --exchange DIR` writes
    cfg.write_text(cfg.read_text() + f"\nc.Exchange.root = {str(exchange)!r}\n")

    assert main(["release", "03", "--exchange", "--course-dir", str(d)]) == 0
    outbound = exchange / "mini" / "outbound" / FIXTURE_CHAPTER
    assert (outbound / "fixture.ipynb").is_file()
    assert (outbound / "mini" / "__init__.py").is_file()          # the student copy of mini
    assert "run_check" not in (outbound / "fixture.ipynb").read_text()

    course_opts = ["--course=mini", f"--Exchange.root={exchange}"]
    for user in STUDENTS:
        _nbgrader(python, user, homes[user], "fetch_assignment", FIXTURE_CHAPTER, *course_opts)
        fetched = homes[user] / FIXTURE_CHAPTER
        assert (fetched / "fixture.ipynb").is_file() and (fetched / "mini" / "__init__.py").is_file()
    # learner1 does the first exercise (in their own account); learner2 submits the blank.
    work = homes[STUDENTS[0]] / FIXTURE_CHAPTER / "fixture.ipynb"
    nb = nbformat.read(str(work), as_version=4)
    cell = next(c for c in nb.cells if '@implement("03.compact_strides")' in c.source)
    cell.source = cell.source.replace("    # YOUR CODE HERE\n    raise NotImplementedError()",
                                      CORRECT_COMPACT)
    script = (f"import nbformat, sys; nbformat.write(nbformat.reads(sys.stdin.read(), "
              f"as_version=4), {str(work)!r})")
    import pwd
    pw = pwd.getpwnam(STUDENTS[0])
    subprocess.run([*python[0], "-c", script], input=nbformat.writes(nb), text=True,
                   env={"PATH": "/usr/bin:/bin", **python[1]}, check=True, user=pw.pw_uid,
                   group=pw.pw_gid, extra_groups=[])
    for user in STUDENTS:
        _nbgrader(python, user, homes[user], "submit", FIXTURE_CHAPTER, *course_opts)
    # A student cannot see what others submitted (the inbound folder is write-only for them).
    peek = _as(STUDENTS[1], homes[STUDENTS[1]], "/bin/ls", str(exchange / "mini" / "inbound"))
    assert peek.returncode != 0 and "Permission denied" in peek.stderr

    lines = []
    assert course.collect("03", d, log=lines.append) == sorted(STUDENTS)
    for user in STUDENTS:
        assert (d / "submitted" / user / FIXTURE_CHAPTER / "fixture.ipynb").is_file()
    from grader.sandbox import Sandbox, SandboxUnavailable
    try:
        Sandbox.detect()
        no_sandbox = False
    except SandboxUnavailable:
        no_sandbox = True                            # the fixture's code is ours
    results = course.autograde("03", d, jobs=2, no_sandbox=no_sandbox, log=quiet)
    assert {s: (r.score, r.max_score, r.status) for s, r in results.items()} == {
        STUDENTS[0]: (8.0, 16.0, "ok"), STUDENTS[1]: (0.0, 16.0, "ok")}
    # Collecting again finds nothing new.
    assert course.collect("03", d, log=quiet) == []
