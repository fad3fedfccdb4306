"""The instructor's course directory and the learner's workspace, on top of nbgrader.

An instructor course directory (``mini-course init DIR``) is nbgrader's standard layout::

    DIR/nbgrader_config.py     course id, timeouts, our preprocessors (edit freely)
    DIR/.mini-course.json      what mini-course needs to know (course id, where course/ is)
    DIR/gradebook.db
    DIR/source/03_strides/     the chapter's notebooks from course/03_strides/ plus the
                               student copy of mini for chapter 3 (mini/, stubs for >= 3)
    DIR/release/ submitted/ autograded/ feedback/
    DIR/.mini-grader/          logs, gradebook backups, archived re-imported submissions,
                               grading statuses, the run journal, and ``secret`` (the seed
                               of the hidden checks' inputs: keep it; never give it out)

nbgrader runs in process (``nbgrader.apps.NbGraderAPI``) with the venv's ``bin`` on PATH
(it shells out to ``alembic``), with the config in ``nbgrader_config.py``.  ``autograde``
grades each submission in a child process against a private copy of the course
(:mod:`grader.batch`) and merges the results into ``gradebook.db``, which only it writes.
"""
from __future__ import annotations

import datetime as _dt
import importlib.util
import json
import os
import re
import secrets
import shutil
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from grader.grading import RUN_CHECK_RE
from grader.solutions import strip_package

__all__ = [
    "CourseError", "repo_root", "default_course_src", "default_mini_src", "list_chapters",
    "resolve_chapter", "chapter_number", "init_course", "release", "import_submissions",
    "autograde", "feedback", "grades", "workspace", "run_nbgrader", "student_id_from_filename",
    "hidden_slots_by_cell", "find_leaks", "course_config", "course_secret", "StudentResult",
    "audit_release", "rejected_at_import", "collect",
]

CHAPTER_RE = re.compile(r"^(\d\d)_[A-Za-z0-9_]+$")
STUDENT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@+-]{0,63}$")
STATE_DIR = ".mini-grader"
# Never copied from course/<chapter>/ into a course: build scripts (they hold the answers),
# caches, and any stray mini/ or grader/ folder.
CHAPTER_IGNORE = (".ipynb_checkpoints", "__pycache__", "*.pyc", "mini", "grader", STATE_DIR,
                  "build_*.py", "workspace")
COURSE_FILE = ".mini-course.json"
# Copied from a submission into the grading folder never (besides nbgrader's defaults):
# packages that would shadow the grader's own imports in the kernel.
IGNORE = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "grader", "numpy",
          "nbgrader", "sitecustomize.py", "usercustomize.py", "*.pth", STATE_DIR,
          ".mini-workspace.json"]


class CourseError(Exception):
    """A user-facing error: the CLI prints the message and exits 2."""


# --------------------------------------------------------------------------- locations

def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


def default_course_src() -> Path:
    """The folder holding the chapters ``NN_topic/`` (``$MINI_COURSE_SRC`` or repo/course)."""
    env = os.environ.get("MINI_COURSE_SRC")
    return Path(env).resolve() if env else repo_root() / "course"


def default_mini_src() -> Path:
    """The instructor's ``mini`` package folder (the installed one)."""
    env = os.environ.get("MINI_PACKAGE_SRC")
    if env:
        return Path(env).resolve()
    spec = importlib.util.find_spec("mini")
    if spec is None or not spec.submodule_search_locations:
        raise CourseError("mini is not installed: run `pip install -e .` in the repository")
    return Path(list(spec.submodule_search_locations)[0]).resolve()


def list_chapters(course_src: Path) -> list[str]:
    """Chapter folders (``NN_topic``) of ``course_src`` that contain a notebook."""
    if not course_src.is_dir():
        return []
    return sorted(p.name for p in course_src.iterdir()
                  if p.is_dir() and CHAPTER_RE.match(p.name) and any(p.glob("*.ipynb")))


def chapter_number(chapter: str) -> int:
    return int(chapter[:2])


def resolve_chapter(arg: str | int, chapters: list[str]) -> str:
    """``"03"``, ``"3"``, ``3`` or ``"03_strides"`` -> ``"03_strides"``."""
    text = str(arg).strip().rstrip("/")
    if text in chapters:
        return text
    if text.isdigit():
        matches = [c for c in chapters if int(c[:2]) == int(text)]
        if len(matches) == 1:
            return matches[0]
    known = ", ".join(chapters) or "none"
    raise CourseError(f"unknown chapter {arg!r}; chapters: {known}")


def course_config(course_dir: Path) -> dict:
    p = course_dir / COURSE_FILE
    if not p.exists():
        raise CourseError(f"{course_dir} is not a mini-course directory (no {COURSE_FILE}); "
                          f"create one with `mini-course init DIR`")
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise CourseError(f"{p} cannot be read ({type(e).__name__}: {e}); it holds the course "
                          f"id and where course/ is: restore it from a backup, or re-create it "
                          f"with `mini-course init --force {course_dir}` (keeps submissions "
                          f"and grades)") from None
    missing = [k for k in ("course_id", "course_src", "mini_src") if not isinstance(data, dict)
               or not isinstance(data.get(k), str)]
    if missing:
        raise CourseError(f"{p} lacks {', '.join(missing)}: re-create it with "
                          f"`mini-course init --force {course_dir}` (keeps submissions and grades)")
    return data


def _course_chapters(course_dir: Path) -> list[str]:
    src = course_dir / "source"
    return sorted(p.name for p in src.iterdir() if p.is_dir() and CHAPTER_RE.match(p.name)) \
        if src.is_dir() else []


def _timestamp() -> str:
    return _dt.datetime.now().strftime("%Y%m%d-%H%M%S-%f")


# --------------------------------------------------------------------------- nbgrader

def _ensure_path() -> None:
    """nbgrader shells out to ``alembic``: put this interpreter's bin folder on PATH.
    Also answer nbgrader's ``alembic heads`` question in process (the subprocess it starts
    for every new gradebook takes seconds), falling back to nbgrader's own way."""
    bin_dir = str(Path(sys.executable).parent)
    if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    import nbgrader.api as nb_api
    if getattr(nb_api.get_alembic_version, "_mini_course", False):
        return
    original = nb_api.get_alembic_version
    cache: list[str] = []

    def get_alembic_version() -> str:
        if not cache:
            try:
                from alembic.config import Config
                from alembic.script import ScriptDirectory
                from nbgrader.dbutil import _temp_alembic_ini
                with _temp_alembic_ini("sqlite:////tmp/gradebook.db") as ini:
                    cache.append(ScriptDirectory.from_config(Config(ini)).get_current_head())
            except Exception:  # noqa: BLE001 - fall back to nbgrader's subprocess
                cache.append(original())
        return cache[0]

    get_alembic_version._mini_course = True
    nb_api.get_alembic_version = get_alembic_version


def load_nbgrader_config(course_dir: Path):
    from traitlets.config.loader import ConfigFileNotFound, PyFileConfigLoader
    try:
        return PyFileConfigLoader("nbgrader_config.py", path=str(course_dir)).load_config()
    except ConfigFileNotFound:
        raise CourseError(f"{course_dir / 'nbgrader_config.py'} is missing: re-create it with "
                          f"`mini-course init --force {course_dir}`") from None
    except Exception as e:  # noqa: BLE001 - a syntax or runtime error in the instructor's file
        raise CourseError(f"{course_dir / 'nbgrader_config.py'} does not run: "
                          f"{type(e).__name__}: {e}") from None


def run_nbgrader(course_dir: Path, step: str, chapter: str | None = None,
                 student: str | None = None, *, config: dict | None = None,
                 log_name: str | None = None, root: Path | None = None) -> dict:
    """Run one nbgrader step in this process through ``nbgrader.apps.NbGraderAPI``, with the
    course's ``nbgrader_config.py`` (plus ``config``: ``{"Section.trait": value}``).
    ``step``: ``generate_assignment``, ``autograde``, ``generate_feedback``,
    ``release_assignment`` and ``collect`` (nbgrader's exchange) or ``db`` (create the
    gradebook).  ``root``: run on another course folder (a private copy) with
    this course's configuration.  Returns nbgrader's ``{"success", "log", "error"}``."""
    _ensure_path()
    import logging
    import warnings
    warnings.filterwarnings("ignore", message=".*not in session.*")  # nbgrader's SAWarning noise
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    cfg = load_nbgrader_config(course_dir)
    for key, value in (config or {}).items():
        section, trait = key.rsplit(".", 1)
        setattr(cfg[section], trait, value)
    coursedir = CourseDirectory(config=cfg, root=str(root or course_dir))
    api = NbGraderAPI(coursedir=coursedir, config=cfg)
    api.log.setLevel(logging.INFO)
    if step == "generate_assignment":
        result = api.generate_assignment(chapter, force=True, create=True)
    elif step == "autograde":
        result = api.autograde(chapter, student, force=True, create=True)
    elif step == "generate_feedback":
        result = api.generate_feedback(chapter, student_id=student, force=True)
    elif step in ("release_assignment", "collect"):
        # nbgrader's exchange: publish release/<chapter> to the outbound folder (again, if it
        # is there: a re-release replaces it), or copy the newest submission of each student
        # from the inbound folder to submitted/.
        from nbgrader.apps.api import capture_log, temp_attrs
        with temp_attrs(api.coursedir, assignment_id=chapter):
            cls = api.exchange.ReleaseAssignment if step == "release_assignment" else api.exchange.Collect
            app = cls(coursedir=api.coursedir, authenticator=api.authenticator, parent=api)
            if step == "release_assignment":
                app.force = True
            else:
                app.update = True
            result = capture_log(app)
    elif step == "db":
        from nbgrader.api import Gradebook
        with Gradebook(coursedir.db_url, coursedir.course_id):
            pass
        result = {"success": True, "log": ""}
    else:  # pragma: no cover
        raise ValueError(step)
    if log_name:
        logs = course_dir / STATE_DIR / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        (logs / f"{log_name}.log").write_text(
            f"nbgrader {step} {chapter or ''} {student or ''}\n{result.get('log', '')}\n"
            f"{result.get('error', '')}")
    return result


def _nbgrader_errors(result: dict) -> str:
    text = result.get("log", "") + "\n" + result.get("error", "")
    lines = [l for l in text.splitlines() if "[ERROR]" in l or "Error" in l]
    return "\n".join(lines[-15:]) or text[-2000:]


CONFIG_TEMPLATE = '''\
"""nbgrader configuration of this mini course (written by `mini-course init`; edit freely).

Grade with `mini-course autograde CHAPTER`: it runs every student's code in a sandbox
(bubblewrap) and the hidden checks in a sandboxed worker, grades submissions in parallel and
merges the results into gradebook.db.  `nbgrader autograde` by hand uses the same pipeline
for one student at a time, with no parallelism and no run journal.
"""
c = get_config()  # noqa: F821

c.CourseDirectory.course_id = {course_id!r}
# Never copy these from a submission into the grading folder.
c.CourseDirectory.ignore = {ignore!r}

# Per-cell time limit at autograde (seconds).  A cell that hangs or kills its kernel scores 0;
# the kernel is restarted, the earlier cells are replayed and grading goes on.
c.Execute.timeout = {cell_timeout}
c.Execute.interrupt_on_timeout = True
c.Execute.extra_arguments = ["--IPKernelApp.log_level=ERROR"]  # quiet kernels
c.Autograde.autograde_preprocessors = {preprocessors}
# The kernel's sandbox: memory (all its processes together), processes, and the wall-clock
# budget of a whole notebook (seconds).
c.SandboxedExecute.memory_limit = {kernel_memory!r}
c.SandboxedExecute.notebook_timeout = {notebook_timeout}
# The hidden checks: seconds per check and the memory of the worker's sandbox.
c.TrustedVerdicts.check_timeout = {check_timeout}
c.TrustedVerdicts.memory_limit = {check_memory!r}
c.TrustedVerdicts.notebook_timeout = {notebook_timeout}

# nbgrader's exchange, for shared servers and JupyterHub: `mini-course release CHAPTER
# --exchange` publishes the release there, students `nbgrader fetch_assignment CHAPTER
# --course {course_id}` and `nbgrader submit CHAPTER --course {course_id}` from their own
# accounts (their nbgrader configuration names the same root), `mini-course collect
# CHAPTER` gathers the submissions into submitted/.
{exchange_line}

# Feedback: hidden tests removed from cell sources AND outputs (tracebacks), outputs capped.
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
    "grader.preprocessors.ScrubHiddenTests",
]
'''


def _copy_chapter(course_src: Path, chapter: str, dest: Path, mini_src: Path) -> list[str]:
    """``dest`` (must not exist) = course/<chapter> (notebooks, data) + the student mini."""
    shutil.copytree(course_src / chapter, dest, ignore=shutil.ignore_patterns(*CHAPTER_IGNORE))
    return strip_package(mini_src, dest / "mini", chapter_number(chapter))


def init_course(course_dir: str | Path, *, course_src: Path | None = None,
                mini_src: Path | None = None, force: bool = False, course_id: str = "mini",
                cell_timeout: int = 120, check_timeout: float = 60, check_memory: str = "4G",
                kernel_memory: str = "6G", notebook_timeout: float = 1800,
                exchange: str | Path | None = None, log=print) -> Path:
    """Create an instructor course directory (see the module docstring).

    Refuses a non-empty ``course_dir`` unless ``force``; with ``force`` the files it would
    replace (``nbgrader_config.py``, ``source/<chapter>/``) are moved to
    ``.mini-grader/backup/<timestamp>/`` first, and submissions, grades and feedback stay.
    """
    course_dir = Path(course_dir).resolve()
    course_src = (course_src or default_course_src()).resolve()
    mini_src = (mini_src or default_mini_src()).resolve()
    chapters = list_chapters(course_src)
    if not chapters:
        raise CourseError(f"no chapters with notebooks in {course_src}")
    if course_dir.exists() and not course_dir.is_dir():
        raise CourseError(f"{course_dir} exists and is not a directory")
    if course_dir.is_dir() and any(course_dir.iterdir()) and not force:
        raise CourseError(f"{course_dir} is not empty; use --force to re-initialize it (files "
                          f"that would be replaced are backed up, submissions and grades stay)")
    if repo_root() in course_dir.parents or course_dir == repo_root():
        log(f"warning: {course_dir} is inside the repository; a course directory holds "
            f"student data and belongs outside it")
    course_dir.mkdir(parents=True, exist_ok=True)
    backup = course_dir / STATE_DIR / "backup" / _timestamp()

    def keep(path: Path) -> None:
        if path.exists():
            target = backup / path.relative_to(course_dir)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(path), str(target))
            log(f"backed up {path.relative_to(course_dir)} -> {target.relative_to(course_dir)}")

    from grader.batch import AUTOGRADE_PREPROCESSORS     # one list: the config and the batch
    config_text = CONFIG_TEMPLATE.format(
        preprocessors="[\n" + "".join(f'    "{p}",\n' for p in AUTOGRADE_PREPROCESSORS) + "]",
        course_id=course_id, ignore=IGNORE, cell_timeout=int(cell_timeout),
        check_timeout=float(check_timeout), check_memory=str(check_memory),
        kernel_memory=str(kernel_memory), notebook_timeout=float(notebook_timeout),
        exchange_line=(f"c.Exchange.root = {str(Path(exchange).expanduser().resolve())!r}"
                       if exchange else "# c.Exchange.root = '/srv/nbgrader/exchange'"))
    cfg = course_dir / "nbgrader_config.py"
    if cfg.exists() and cfg.read_text() != config_text:
        keep(cfg)
    cfg.write_text(config_text)
    (course_dir / COURSE_FILE).write_text(json.dumps(
        {"course_id": course_id, "course_src": str(course_src), "mini_src": str(mini_src)},
        indent=2) + "\n")
    for sub in ("source", "release", "submitted", "autograded", "feedback"):
        (course_dir / sub).mkdir(exist_ok=True)
    course_secret(course_dir)  # created once, kept on --force: the same inputs forever
    for chapter in chapters:
        dest = course_dir / "source" / chapter
        keep(dest)
        _copy_chapter(course_src, chapter, dest, mini_src)
        log(f"source/{chapter}: {', '.join(p.name for p in sorted(dest.glob('*.ipynb')))} "
            f"+ mini (chapter {chapter_number(chapter)} and later stubbed)")
    # Create the gradebook (nbgrader runs alembic on first use).
    result = run_nbgrader(course_dir, "db", log_name="init")
    if not result["success"]:
        raise CourseError("nbgrader could not create the gradebook:\n" + _nbgrader_errors(result))
    log(f"course directory ready: {course_dir}")
    return course_dir


def course_secret(course_dir: Path) -> str:
    """The course's seed secret (``.mini-grader/secret``, created on first use, readable by
    its owner only).  The hidden checks' inputs are drawn from a hash of it and the slot, so
    grading is reproducible and nobody without the secret knows the inputs in advance."""
    path = Path(course_dir) / STATE_DIR / "secret"
    if path.exists():
        text = path.read_text().strip()
        if text:
            return text
    path.parent.mkdir(parents=True, exist_ok=True)
    text = secrets.token_hex(32)
    tmp = path.with_name(f"secret.{os.getpid()}.part")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text + "\n")
    os.replace(tmp, path)
    return text


def _course_paths(course_dir: str | Path | None) -> Path:
    course_dir = Path(course_dir or os.environ.get("MINI_COURSE_DIR") or os.getcwd()).resolve()
    course_config(course_dir)
    return course_dir


def _chapter_in_course(course_dir: Path, arg: str) -> str:
    chapters = sorted(set(_course_chapters(course_dir)))
    try:
        return resolve_chapter(arg, chapters)
    except CourseError:
        cfg = course_config(course_dir)
        src = Path(cfg["course_src"])
        return resolve_chapter(arg, list_chapters(src))


def release(chapter_arg: str, course_dir: str | Path | None = None, refresh: bool = False,
            log=print, exchange: bool = False) -> Path:
    """nbgrader generate_assignment for the chapter (solutions stripped, hidden tests
    removed, the student mini alongside); returns ``release/<chapter>``.  A chapter added to
    course/ after ``init`` is copied into source/ first; ``refresh`` re-copies it from course/
    and mini (the old source/<chapter> is backed up).  Fails if the release leaks."""
    course_dir = _course_paths(course_dir)
    chapter = _chapter_in_course(course_dir, chapter_arg)
    source = course_dir / "source" / chapter
    if refresh and source.exists():
        backup = course_dir / STATE_DIR / "backup" / _timestamp() / "source"
        backup.mkdir(parents=True)
        shutil.move(str(source), str(backup / chapter))
        log(f"backed up source/{chapter} -> {backup.relative_to(course_dir) / chapter}")
    if not source.exists():
        cfg = course_config(course_dir)
        _copy_chapter(Path(cfg["course_src"]), chapter, source, Path(cfg["mini_src"]))
        log(f"copied {chapter} into source/")
    result = run_nbgrader(course_dir, "generate_assignment", chapter, log_name=f"release-{chapter}")
    if not result["success"]:
        raise CourseError(f"nbgrader generate_assignment {chapter} failed:\n" + _nbgrader_errors(result))
    out = course_dir / "release" / chapter
    for junk in out.rglob("__pycache__"):
        shutil.rmtree(junk, ignore_errors=True)
    cfg = course_config(course_dir)
    leaks = find_leaks(out, chapter_number(chapter), Path(cfg["mini_src"]), source)
    if leaks:
        raise CourseError(f"release/{chapter} would leak solutions or hidden tests:\n" +
                          "\n".join(f"  {p}:{n}: {text}" for p, n, text in leaks[:20]))
    answers = audit_release(out / "mini", chapter_number(chapter), Path(cfg["mini_src"]))
    if answers:
        raise CourseError(f"release/{chapter}/mini hands out working answers to chapter "
                          f"{chapter_number(chapter)}'s exercises (a student could call them "
                          f"instead of writing their own):\n" + "\n".join(f"  {a}" for a in answers))
    log(f"released {chapter}: {out}")
    if exchange:
        result = run_nbgrader(course_dir, "release_assignment", chapter,
                              log_name=f"exchange-release-{chapter}")
        if not result["success"]:
            raise CourseError(f"nbgrader release_assignment {chapter} failed (is Exchange.root "
                              f"set in nbgrader_config.py, and writable?):\n"
                              + _nbgrader_errors(result))
        root, course_id = _exchange_root(course_dir), course_config(course_dir)["course_id"]
        log(f"released {chapter} to the exchange ({root}/{course_id}/outbound/{chapter}); "
            f"students: nbgrader fetch_assignment {chapter} --course {course_id}")
    return out


def _exchange_root(course_dir: Path) -> str:
    return str(_config_value(load_nbgrader_config(course_dir), "Exchange", "root",
                             "/srv/nbgrader/exchange"))


def collect(chapter_arg: str, course_dir: str | Path | None = None, log=print) -> list[str]:
    """nbgrader collect: the newest submission of each student from the exchange's inbound
    folder into ``submitted/<student>/<chapter>/`` (an older collected one is replaced; grade
    with ``autograde`` afterwards).  Returns the students whose submission is new or newer."""
    course_dir = _course_paths(course_dir)
    chapter = _chapter_in_course(course_dir, chapter_arg)

    def stamps() -> dict[str, str]:
        out = {}
        for s in _submitted_students(course_dir, chapter):
            t = course_dir / "submitted" / s / chapter / "timestamp.txt"
            out[s] = t.read_text().strip() if t.is_file() else ""
        return out

    before = stamps()
    result = run_nbgrader(course_dir, "collect", chapter, log_name=f"exchange-collect-{chapter}")
    if not result["success"]:
        raise CourseError(f"nbgrader collect {chapter} failed (exchange {_exchange_root(course_dir)}):"
                          f"\n" + _nbgrader_errors(result))
    after = stamps()
    new = sorted(s for s in after if before.get(s) != after[s])
    for s in new:
        log(f"collected: {s}/{chapter} (submitted {after[s] or 'at an unknown time'})")
    log(f"{len(new)} new or newer submissions of {chapter} collected, {len(after)} in submitted/; "
        f"next: mini-course autograde {chapter}")
    return new


# --------------------------------------------------------------------------- leaks

#: What a student copy of mini could hand out for a slot: the names the audit tries
#: (and ``fast:0``, ``fast:1``... for the fast paths registered for the slot).
AUDIT_ACCESSORS = ("dispatch", "reference", "wrapped", "fallback", "slot_reference",
                   "fast:0", "fast:1", "fast:2")


def audit_release(student_mini: Path, chapter: int, mini_src: Path,
                  timeout: float = 60.0) -> list[str]:
    """Run every check of chapter ``chapter`` against what the released ``student_mini``
    hands out for the slot -- the dispatching function with nothing registered,
    ``mini.exercises.reference(slot)``, its ``__wrapped__``, ``.fallback`` and
    ``.reference``, its registered fast paths, and every function the instructor's mini
    registers as a ``fallback=`` of the slot -- in a worker (plain process: only trusted code runs) over that copy.
    Returns one line per accessor that earns any points (an empty list: nothing to copy)."""
    from grader.checks import checks_for_chapter, evaluate
    from grader.checks.student import Student
    from grader.sandbox import Sandbox
    from grader.solutions import fallback_functions
    from grader.workerproc import WorkerBackend

    found = []
    fallbacks = fallback_functions(mini_src, chapter)   # {slot: ["module:function", ...]}
    slots = sorted(checks_for_chapter(chapter))
    with WorkerBackend(Sandbox.none(), mini_dir=student_mini, cells=[],
                       check_timeout=timeout) as backend:
        for slot in slots:
            accessors = list(AUDIT_ACCESSORS) + [f"obj:{f}" for f in fallbacks.get(slot, [])]
            for how in accessors:
                backend.begin_check()
                if not backend.bind(slot, how):
                    continue
                verdict = evaluate(slot, Student(backend, slot))
                if verdict.points > 0:
                    found.append(f"{slot}: {how} earns {verdict.points:g} of "
                                 f"{verdict.max_points:g} points")
    return found


def find_leaks(release_dir: Path, chapter: int, mini_src: Path,
               source_dir: Path | None = None) -> list[tuple[str, int, str]]:
    """Lines of ``release_dir`` (notebooks and every other text file) that give away a
    solution of chapter >= ``chapter`` or a hidden test.

    A solution line is a stripped line of a reference region (or of a source notebook's
    solution region) of a chapter >= ``chapter``, at least 10 characters long, that does not
    also appear in what may legitimately ship (mini outside those regions; the source
    notebook outside its solution and hidden-test regions).  Also flagged: the string
    ``BEGIN HIDDEN TESTS``, and ``run_check`` anywhere but in a line that mini itself holds
    outside its solution regions (``mini/notebook.py`` defines a ``run_check`` for students).
    """
    import nbformat
    from grader.solutions import BEGIN, END, _all_regions, cpp_regions, notebook_regions

    secret, allowed, mini_lines = set(), set(), set()
    for r in _all_regions(mini_src):
        if int(r.slot_id[:2]) >= chapter:
            secret.update(l.strip() for l in r.text.splitlines())
    # C++/CUDA regions (// BEGIN SOLUTION NN.name): mini's kernels that would give an answer
    # away; the rest of those files ships and may repeat a line
    cpp = cpp_regions(mini_src)
    for r in cpp:
        if int(r.slot_id[:2]) >= chapter:
            secret.update(l.strip() for l in r.text.splitlines())
    for path in sorted({r.path for r in cpp} | set(_cpp_files_of(mini_src))):
        lines = path.read_text().splitlines()
        inside = False
        for line in lines:
            s = line.strip()
            if s.startswith("// BEGIN SOLUTION"):
                inside = True
            elif s == "// END SOLUTION":
                inside = False
            elif not inside:
                allowed.add(s)
    for p in mini_src.rglob("*.py"):
        if "__pycache__" in p.parts:
            continue
        lines = p.read_text().splitlines()
        inside = False
        for line in lines:
            s = line.strip()
            if s == BEGIN:
                inside = True
            elif s == END:
                inside = False
            elif not inside:
                allowed.add(s)
    mini_lines.update(allowed)
    if source_dir is not None:
        for nb_path in sorted(source_dir.glob("*.ipynb")):
            for slot, text in notebook_regions(nb_path).items():
                if int(slot[:2]) >= chapter:
                    secret.update(l.strip() for l in text.splitlines())
            nb = nbformat.read(str(nb_path), as_version=4)
            for cell in nb.cells:
                inside = False
                for line in cell.source.splitlines():
                    s = line.strip()
                    if "BEGIN SOLUTION" in s or "BEGIN HIDDEN TESTS" in s:
                        inside = True
                    elif "END SOLUTION" in s or "END HIDDEN TESTS" in s:
                        inside = False
                    elif not inside:
                        allowed.add(s)
    secret = {s for s in secret - allowed if len(s) >= 10 and not s.startswith("#")}
    leaks = []
    for p in sorted(release_dir.rglob("*")):
        if not p.is_file() or p.suffix in (".so", ".pyd", ".dll", ".dylib", ".png", ".jpg", ".gz"):
            continue
        try:
            text = p.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        if p.suffix == ".ipynb":
            nb = nbformat.reads(text, as_version=4)
            lines = [l for cell in nb.cells for l in cell.source.splitlines()]
            for cell in nb.cells:
                for o in cell.get("outputs", []):
                    lines += json.dumps(o).split("\\n")
        else:
            lines = text.splitlines()
        rel = str(p.relative_to(release_dir))
        for n, line in enumerate(lines, 1):
            s = line.strip()
            hidden_call = "run_check" in s and (p.suffix == ".ipynb" or s not in mini_lines)
            if "BEGIN HIDDEN TESTS" in s or hidden_call or (s in secret):
                leaks.append((rel, n, s))
    return leaks


def _cpp_files_of(mini_src: Path):
    from grader.solutions import CPP_SUFFIXES
    return [p for p in Path(mini_src).rglob("*") if p.suffix in CPP_SUFFIXES and p.is_file()]


# --------------------------------------------------------------------------- import

def student_id_from_filename(filename: str, notebooks: list[str]) -> tuple[str, str]:
    """``(student_id, notebook)`` from a submitted file name.

    Rule: the file is ``<student>_<notebook>.ipynb`` (or ``<student>-<notebook>.ipynb``)
    where ``<notebook>`` is one of the chapter's notebook names; for a chapter with one
    notebook, ``<student>.ipynb`` is accepted too.  A student id is 1-64 characters of
    letters, digits, ``_ . @ + -``, starting with a letter or digit.  Anything else (path
    separators, spaces, ``..``) is rejected with ``ValueError``.
    """
    name = Path(filename).name
    if not name.lower().endswith(".ipynb"):
        raise ValueError(f"{filename}: not a notebook (.ipynb)")
    stem = name[: -len(".ipynb")]
    notebook = None
    for nb in sorted(notebooks, key=len, reverse=True):
        for sep in ("_", "-"):
            if stem.lower().endswith(sep + nb.lower()) and len(stem) > len(nb) + 1:
                notebook, stem = nb, stem[: -(len(nb) + 1)]
                break
        if notebook:
            break
    if notebook is None:
        if len(notebooks) != 1:
            raise ValueError(f"{filename}: name it <student>_<notebook>.ipynb with <notebook> one "
                             f"of {', '.join(notebooks)}")
        notebook = notebooks[0]
    if not STUDENT_RE.match(stem) or ".." in stem:
        raise ValueError(f"{filename}: {stem!r} is not a safe student id (letters, digits, "
                         f"_ . @ + -, starting with a letter or digit, at most 64 characters)")
    return stem, notebook


@dataclass
class ImportReport:
    imported: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)  # old copy archived
    rejected: list[str] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)   # imported, but not a valid notebook

    @property
    def found(self) -> int:
        """How many notebooks the upload held (kept or not)."""
        return len(self.imported) + len(self.unchanged) + len(self.replaced) + len(self.rejected)


@dataclass
class _Upload:
    """One file of an upload: its path inside the folder or zip, bytes, modification time,
    and why it cannot be read (a corrupt zip member), if so."""
    path: str
    data: bytes
    when: _dt.datetime | None
    unreadable: str = ""


def _read_upload(path: Path) -> list[_Upload]:
    """The files of a folder or a .zip (bytes of notebooks only), in path order.  A zip
    member that cannot be decompressed (bad CRC, truncated, corrupt deflate stream) is
    returned with ``unreadable`` set, so it is listed as rejected and the rest imported."""
    import zlib

    if not path.exists():
        raise CourseError(f"{path} does not exist: give the folder or .zip of submissions")
    entries: list[_Upload] = []
    if path.is_dir():
        for p in sorted(path.rglob("*")):
            rel = p.relative_to(path)
            if p.is_file() and ".ipynb_checkpoints" not in rel.parts and "__MACOSX" not in rel.parts:
                try:
                    data = p.read_bytes() if p.suffix.lower() == ".ipynb" else b""
                except OSError as e:
                    entries.append(_Upload(rel.as_posix(), b"", None, f"unreadable ({e.strerror})"))
                    continue
                entries.append(_Upload(rel.as_posix(), data,
                                       _dt.datetime.fromtimestamp(p.stat().st_mtime)))
        return entries
    if not zipfile.is_zipfile(path):
        raise CourseError(f"{path} is neither a folder nor a .zip file (a damaged download? "
                          f"download the submissions again)")
    try:
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                name = info.filename.replace("\\", "/")
                parts = name.split("/")
                if info.is_dir() or "__MACOSX" in parts or ".ipynb_checkpoints" in parts:
                    continue
                try:
                    when = _dt.datetime(*info.date_time)
                except ValueError:
                    when = None
                if not parts[-1].lower().endswith(".ipynb"):
                    entries.append(_Upload(name, b"", when))
                    continue
                try:
                    data = z.read(info)
                except (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError,
                        RuntimeError) as e:   # RuntimeError: an encrypted member
                    entries.append(_Upload(name, b"", when,
                                           f"corrupt in the zip ({type(e).__name__}: {e})"))
                    continue
                entries.append(_Upload(name, data, when))
    except zipfile.BadZipFile as e:
        raise CourseError(f"{path} is not a readable .zip file ({e}); download it again") from None
    return entries


def import_submissions(chapter_arg: str, path: str | Path, course_dir: str | Path | None = None,
                       log=print) -> ImportReport:
    """Place submitted notebooks (a folder or a .zip) in ``submitted/<student>/<chapter>/``.

    An existing different submission is moved to
    ``.mini-grader/archive/<student>/<chapter>/<timestamp>/`` first (and reported); an
    identical one is left alone.  Files with unsafe or unrecognized names, and zip members
    that cannot be decompressed, are rejected, listed by their path inside the upload, and
    recorded for the autograde summary and the grades (status ``rejected at import``); the
    rest is imported.  A file with a good name that is not a valid notebook is imported all
    the same (nothing is lost) and will be graded 0 with status ``invalid notebook``.

    Two files for one student and notebook (``a/erin_strides.ipynb`` and
    ``b/erin-strides.ipynb``): the newer by modification time (a zip's own timestamps, a
    folder's mtimes) is imported and the other is rejected, both named by their paths; with
    equal times neither is imported and both are rejected, so that the instructor chooses.
    An upload with no notebook at all is an error.
    """
    import nbformat

    course_dir = _course_paths(course_dir)
    chapter = _chapter_in_course(course_dir, chapter_arg)
    notebooks = sorted(p.stem for p in (course_dir / "source" / chapter).glob("*.ipynb"))
    if not notebooks:
        raise CourseError(f"source/{chapter} has no notebooks")
    path = Path(path).expanduser()
    entries = _read_upload(path)
    report = ImportReport()
    records: dict[str, dict] = {}     # path inside the upload -> the rejection

    def reject(entry_path: str, why: str, student: str = "") -> None:
        report.rejected.append(f"{entry_path}: {why}")
        records[entry_path] = {"status": "rejected at import", "student": student,
                               "detail": f"{entry_path}: {why}", "upload": str(path.resolve()),
                               "when": _timestamp()}

    # Who is who; two files for one student's notebook are settled before anything is written.
    claims: dict[tuple[str, str], list[_Upload]] = {}
    for e in entries:
        name = e.path.rsplit("/", 1)[-1]
        if not name.lower().endswith(".ipynb"):
            if not name.startswith("."):
                reject(e.path, "not a notebook (.ipynb), skipped")
            continue
        if e.unreadable:
            reject(e.path, f"{e.unreadable}, skipped: ask for it again")
            continue
        try:
            student, notebook = student_id_from_filename(name, notebooks)
        except ValueError as err:
            reject(e.path, str(err).split(": ", 1)[-1])
            continue
        claims.setdefault((student, notebook), []).append(e)
    if not any(e.path.lower().endswith(".ipynb") for e in entries):
        raise CourseError(f"{path} holds no submissions (no .ipynb files); expected "
                          f"<student>_<notebook>.ipynb files with <notebook> one of "
                          f"{', '.join(notebooks)}")
    chosen: list[tuple[str, str, _Upload]] = []
    for (student, notebook), files in sorted(claims.items()):
        if len(files) == 1:
            chosen.append((student, notebook, files[0]))
            continue
        def stamp(e):
            return e.when or _dt.datetime.min
        files = sorted(files, key=stamp, reverse=True)
        newest = [f for f in files if stamp(f) == stamp(files[0])]
        shown = lambda f: f"{f.path} ({f.when:%Y-%m-%d %H:%M:%S})" if f.when else f.path  # noqa: E731
        if len(newest) > 1:
            for f in files:
                reject(f.path, f"one of {len(files)} files for {student}/{notebook}.ipynb "
                               f"({', '.join(shown(g) for g in files)}) with the same newest "
                               f"modification time: none imported; import the right one alone",
                       student)
            continue
        chosen.append((student, notebook, files[0]))
        for f in files[1:]:
            reject(f.path, f"older duplicate for {student}/{notebook}.ipynb: kept "
                           f"{shown(files[0])}, skipped {shown(f)}", student)
    now = _dt.datetime.now()
    for student, notebook, e in chosen:
        data = e.data
        try:
            nbformat.reads(data.decode("utf-8"), as_version=4)
        except Exception as err:  # noqa: BLE001
            report.invalid.append(f"{student}/{chapter}/{notebook}.ipynb (from {e.path}): not a "
                                  f"valid notebook ({type(err).__name__}): kept, and graded 0 "
                                  f"with status 'invalid notebook'")
        dest_dir = course_dir / "submitted" / student / chapter
        dest = dest_dir / f"{notebook}.ipynb"
        label = f"{student}/{chapter}/{notebook}.ipynb"
        if dest.exists():
            if dest.read_bytes() == data:
                report.unchanged.append(label)
                continue
            archive = course_dir / STATE_DIR / "archive" / student / chapter / _timestamp()
            archive.mkdir(parents=True)
            for old in dest_dir.iterdir():
                shutil.copy2(old, archive / old.name) if old.is_file() else None
            dest.unlink()
            report.replaced.append(f"{label} (previous version kept in "
                                   f"{archive.relative_to(course_dir)})")
        else:
            report.imported.append(label)
        dest_dir.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_suffix(".ipynb.part")
        tmp.write_bytes(data)
        os.replace(tmp, dest)
        when = (e.when if e.when and e.when <= now else now)
        (dest_dir / "timestamp.txt").write_text(when.strftime("%Y-%m-%d %H:%M:%S.%f"))
    for title, items in (("imported", report.imported), ("replaced", report.replaced),
                         ("unchanged", report.unchanged), ("rejected", report.rejected),
                         ("warning", report.invalid)):
        for item in items:
            log(f"{title}: {item}")
    log(f"{len(report.imported)} imported, {len(report.replaced)} replaced, "
        f"{len(report.unchanged)} unchanged, {len(report.rejected)} rejected")
    # The rejections of this upload replace those recorded the last time it was imported.
    store = _JsonStore(course_dir / STATE_DIR / "status" / f"{chapter}-rejected.json")
    recorded = {k: v for k, v in store.load().items()
                if not (isinstance(v, dict) and v.get("upload") == str(path.resolve()))}
    recorded.update(records)
    if recorded or store.path.exists():
        store.save(recorded)
    return report


def rejected_at_import(course_dir: Path, chapter: str) -> list[dict]:
    """The rejections recorded for ``chapter`` by ``import``: ``{"path", "student",
    "detail"}`` each (``student`` is empty when the file name names none)."""
    data = _JsonStore(Path(course_dir) / STATE_DIR / "status" / f"{chapter}-rejected.json").load()
    return [{"path": k, "student": (v.get("student", "") if isinstance(v, dict) else ""),
             "detail": (v.get("detail", k) if isinstance(v, dict) else k)}
            for k, v in sorted(data.items())]


# --------------------------------------------------------------------------- autograde

def hidden_slots_by_cell(nb_path: Path) -> dict[str, list[str]]:
    """``{grade_id: [slot ids]}`` for the autograded test cells whose hidden-test region
    calls ``run_check("NN.name", ...)``."""
    import nbformat
    from grader.grading import hidden_tests

    nb = nbformat.read(str(nb_path), as_version=4)
    return {t.grade_id: [slot for slot, _ in t.slots] for t in hidden_tests(nb)}


def _gradebook(course_dir: Path):
    from nbgrader.api import Gradebook
    from sqlalchemy.exc import SQLAlchemyError
    cfg = course_config(course_dir)
    db = course_dir / "gradebook.db"
    if not db.is_file():
        raise CourseError(f"{db} is missing: `mini-course init --force {course_dir}` creates an "
                          f"empty one; earlier ones are in {STATE_DIR}/backup/")
    try:
        return Gradebook(f"sqlite:///{db}", course_id=cfg["course_id"])
    except SQLAlchemyError as e:
        raise CourseError(f"{db} cannot be opened as a gradebook ({type(e).__name__}: "
                          f"{str(e).splitlines()[0]}); copies made before each autograde are in "
                          f"{STATE_DIR}/backup/") from None


def _submitted_students(course_dir: Path, chapter: str) -> list[str]:
    sub = course_dir / "submitted"
    return sorted(p.name for p in sub.iterdir() if (p / chapter).is_dir()) if sub.is_dir() else []


class _JsonStore:
    """A small JSON file written atomically (only the autograde parent writes these)."""

    def __init__(self, path: Path):
        self.path = path

    def load(self) -> dict:
        try:
            data = json.loads(self.path.read_text())
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def save(self, data: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + f".{os.getpid()}.part")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        os.replace(tmp, self.path)


@dataclass
class StudentResult:
    """How one submission was graded: its status (see :mod:`grader.batch`), total score,
    and why (``detail``)."""
    student: str
    status: str
    score: float
    max_score: float
    detail: str = ""
    seconds: float = 0.0
    resumed: bool = False


def _submission_digest(folder: Path) -> str:
    import hashlib
    h = hashlib.sha256()
    for p in sorted(folder.glob("*.ipynb")):
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def _stage_mini(course_dir: Path, chapter: str) -> Path:
    """A compiled copy of ``source/<chapter>/mini`` for the sandboxes (read-only there, so
    Python cannot cache its bytecode itself)."""
    import compileall
    src = course_dir / "source" / chapter / "mini"
    if not (src / "__init__.py").exists():
        raise CourseError(f"source/{chapter}/mini is missing: run `mini-course release {chapter} "
                          f"--refresh`")
    stage = course_dir / STATE_DIR / "stage" / chapter
    tmp = stage.with_name(f"{chapter}.{os.getpid()}.part")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp / "mini", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    compileall.compile_dir(str(tmp / "mini"), quiet=1, workers=1)
    old = stage.with_name(f"{chapter}.old")
    shutil.rmtree(old, ignore_errors=True)
    if stage.exists():
        os.replace(stage, old)
    os.replace(tmp, stage)
    shutil.rmtree(old, ignore_errors=True)
    return stage / "mini"


def _config_value(cfg, section: str, trait: str, default):
    try:
        if section in cfg and trait in cfg[section]:
            return cfg[section][trait]
    except Exception:  # noqa: BLE001
        pass
    return default


def autograde(chapter_arg: str, course_dir: str | Path | None = None, student: str | None = None,
              *, jobs: int | None = None, no_sandbox: bool = False, restart: bool = False,
              log=print) -> dict[str, StudentResult]:
    """Autograde every submission of the chapter (or one ``student``), ``jobs`` at a time
    (default: the number of cores), each in its own child process and sandboxes
    (:mod:`grader.batch`); only this process writes ``gradebook.db``, which is backed up
    first, and each student's result is committed as soon as it is known.  A run that was
    interrupted resumes where it stopped (``restart``: grade everyone again).  Without
    bubblewrap this refuses unless ``no_sandbox`` (then every run warns).  Returns
    ``{student: StudentResult}``."""
    import tempfile
    import threading
    from concurrent.futures import ThreadPoolExecutor, as_completed

    from grader.batch import GradeSpec, Grader, backup_gradebook, merge_student, spec_json
    from grader.sandbox import Sandbox, SandboxUnavailable

    course_dir = _course_paths(course_dir)
    chapter = _chapter_in_course(course_dir, chapter_arg)
    cfg = course_config(course_dir)
    with _gradebook(course_dir) as gb:
        if chapter not in {a.name for a in gb.assignments}:
            raise CourseError(f"{chapter} has not been released yet: run `mini-course release "
                              f"{chapter}` first")
    students = [student] if student else _submitted_students(course_dir, chapter)
    if student and not (course_dir / "submitted" / student / chapter).is_dir():
        raise CourseError(f"no submission of {chapter} by {student!r} in submitted/")
    if not students:
        raise CourseError(f"no submissions of {chapter} in submitted/ (use `mini-course import`)")
    if no_sandbox:
        box = Sandbox.none()
        log("WARNING: grading WITHOUT a sandbox (--no-sandbox): every submission's code runs "
            "with your rights and can read and change your files, the course folder and the "
            "gradebook, and kill the grader. Use this only for code you trust.")
    else:
        try:
            box = Sandbox.detect()
        except SandboxUnavailable as e:
            raise CourseError("mini-course autograde runs student code only in a sandbox, and "
                              "there is none here:\n" + str(e)) from None
    if box.limits_note.startswith("no writable cgroup"):
        log(f"note: {box.limits_note}")
    nbcfg = load_nbgrader_config(course_dir)
    settings = dict(
        cell_timeout=float(_config_value(nbcfg, "Execute", "timeout", 120) or 120),
        check_timeout=float(_config_value(nbcfg, "TrustedVerdicts", "check_timeout",
                                          _config_value(nbcfg, "ResilientExecute", "check_timeout", 60))),
        notebook_timeout=float(_config_value(nbcfg, "SandboxedExecute", "notebook_timeout", 1800)),
        kernel_memory=str(_config_value(nbcfg, "SandboxedExecute", "memory_limit",
                                        _config_value(nbcfg, "ResilientExecute", "memory_limit", "6G"))),
        check_memory=str(_config_value(nbcfg, "TrustedVerdicts", "memory_limit",
                                       _config_value(nbcfg, "ResilientExecute", "check_memory", "4G"))),
    )
    stamp = _timestamp()
    backup = backup_gradebook(course_dir, stamp)
    if backup is not None:
        log(f"gradebook backed up to {backup.relative_to(course_dir)}")
    mini_dir = _stage_mini(course_dir, chapter)
    secret = course_secret(course_dir)
    journal_store = _JsonStore(course_dir / STATE_DIR / "runs" / f"autograde-{chapter}.json")
    journal = journal_store.load()
    selection = student or "*"
    if restart or journal.get("complete", True) or journal.get("selection") != selection:
        journal = {"started": stamp, "complete": False, "selection": selection, "students": {}}
    status_store = _JsonStore(course_dir / STATE_DIR / "status" / f"{chapter}.json")
    statuses = status_store.load()
    results: dict[str, StudentResult] = {}
    todo = []
    for s in students:
        if not STUDENT_RE.match(s):
            log(f"warning: {s}: unsafe student id, skipped")
            continue
        digest = _submission_digest(course_dir / "submitted" / s / chapter)
        done = journal["students"].get(s)
        if done and done.get("sha256") == digest and s in statuses:
            st = statuses[s]
            results[s] = StudentResult(s, st.get("status", "ok"), float(st.get("score", 0)),
                                       float(st.get("max_score", 0)), st.get("detail", ""),
                                       resumed=True)
            continue
        todo.append((s, digest))
    if results:
        log(f"resuming an interrupted run: {len(results)} of {len(results) + len(todo)} "
            f"submissions were already graded")
    journal_store.save(journal)
    jobs = max(1, int(jobs or os.cpu_count() or 1))
    work = Path(tempfile.mkdtemp(prefix="mini-grade-"))
    snapshot = work / "gradebook.db"
    shutil.copyfile(course_dir / "gradebook.db", snapshot)
    notebooks = max(1, len(list((course_dir / "source" / chapter).glob("*.ipynb"))))
    child_budget = notebooks * 2 * settings["notebook_timeout"] + 300
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MINI_GRADER", "NBGRADER"))}
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")

    local = threading.local()
    graders: list = []
    futures: dict = {}
    logs = course_dir / STATE_DIR / "logs"
    logs.mkdir(parents=True, exist_ok=True)

    def run_child(s: str) -> tuple[dict, Path]:
        root = work / s
        root.mkdir()
        spec = GradeSpec(course_dir=str(course_dir), chapter=chapter, student=s,
                         private_root=str(root / "course"), gradebook_copy=str(snapshot),
                         sandbox=box.kind, mini_dir=str(mini_dir), secret=secret, **settings)
        spec_path, result_path = root / "spec.json", root / "result.json"
        spec_path.write_text(spec_json(spec))
        grader = getattr(local, "grader", None)
        if grader is None:
            grader = local.grader = Grader(env, work, logs / f"autograde-{chapter}-{len(graders)}.log")
            graders.append(grader)
        return grader.grade(spec_path, result_path, child_budget), root / "course"

    pool = ThreadPoolExecutor(max_workers=jobs)
    try:
        futures = {pool.submit(run_child, s): (s, d) for s, d in todo}
        for fut in as_completed(futures):
            s, digest = futures[fut]
            try:
                result, private = fut.result()
            except Exception as e:  # noqa: BLE001 - one submission never stops the batch
                result, private = {"status": "crashed", "detail": f"{type(e).__name__}: {e}"}, work / s
            try:
                score, mx = merge_student(course_dir, chapter, s, private, result,
                                          cfg["course_id"])
            except Exception as e:  # noqa: BLE001
                result = {"status": "crashed", "detail": f"merging the grades failed: "
                          f"{type(e).__name__}: {e}"}
                score, mx = float("nan"), float("nan")
            res = StudentResult(s, str(result.get("status", "crashed")), score, mx,
                                str(result.get("detail", ""))[:500],
                                float(result.get("seconds", 0) or 0))
            results[s] = res
            statuses[s] = {"status": res.status, "detail": res.detail, "score": score,
                           "max_score": mx, "graded_at": _timestamp()}
            status_store.save(statuses)
            journal["students"][s] = {"sha256": digest, "status": res.status}
            journal_store.save(journal)
            shutil.rmtree(work / s, ignore_errors=True)
            log(f"{s}: {score:g} / {mx:g}  [{res.status}]" + (f"  {res.detail}" if res.detail else ""))
        journal["complete"] = True
        journal_store.save(journal)
    except BaseException:
        # Ctrl-C (or anything else): what is merged stays, the rest is for the next run.
        for fut in futures:
            fut.cancel()
        for grader in graders:
            grader.close()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        for grader in graders:
            grader.close()
        shutil.rmtree(work, ignore_errors=True)
    # Files rejected at import are rows of the summary too: nobody is silently missing.
    rejected = [] if student else rejected_at_import(course_dir, chapter)
    for r in rejected:
        log(f"{r['student'] or r['path']}: - [rejected at import]  {r['detail']}")
    counts: dict[str, int] = {}
    for r in results.values():
        counts[r.status] = counts.get(r.status, 0) + 1
    counts_text = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    log(f"graded {len(results)} submissions of {chapter}: {counts_text}"
        + (f"; {len(rejected)} files rejected at import (listed above)" if rejected else ""))
    if no_sandbox:
        log("WARNING: these grades were computed WITHOUT a sandbox (--no-sandbox).")
    return dict(sorted(results.items()))


# --------------------------------------------------------------------------- feedback, grades

def feedback(chapter_arg: str, course_dir: str | Path | None = None,
             student: str | None = None, log=print) -> Path:
    """nbgrader generate_feedback with hidden tests scrubbed from sources and outputs; the
    feedback folder of each student holds the notebooks' feedback pages only."""
    course_dir = _course_paths(course_dir)
    chapter = _chapter_in_course(course_dir, chapter_arg)
    result = run_nbgrader(course_dir, "generate_feedback", chapter, student,
                          log_name=f"feedback-{chapter}")
    if not result["success"]:
        raise CourseError(f"nbgrader generate_feedback {chapter} failed:\n" + _nbgrader_errors(result))
    out = course_dir / "feedback"
    pages = {p.stem for p in (course_dir / "source" / chapter).glob("*.ipynb")}
    for folder in out.glob(f"*/{chapter}"):
        for p in list(folder.rglob("*")):
            if p.is_file() and not (p.parent == folder and p.suffix == ".html" and p.stem in pages):
                p.unlink()
        for d in sorted((d for d in folder.rglob("*") if d.is_dir()), reverse=True):
            shutil.rmtree(d, ignore_errors=True)
    log(f"feedback written under {out}/<student>/{chapter}/")
    return out


GRADE_FIELDS = ["student", "chapter", "notebook", "grade_id", "score", "max_score", "status",
                "detail"]


def grades(course_dir: str | Path | None = None) -> list[dict]:
    """One row per student, chapter, notebook and graded cell (grade id): score, max, and the
    submission's grading status (``detail``: why, when it is not ``ok``); each file rejected
    at import gets one row with status ``rejected at import``: ``student`` is the student
    its name names (else its path in the upload), ``notebook`` its path in the upload."""
    course_dir = _course_paths(course_dir)
    from nbgrader.api import MissingEntry

    rows = []
    with _gradebook(course_dir) as gb:
        for assignment in sorted(gb.assignments, key=lambda a: a.name):
            statuses = _JsonStore(course_dir / STATE_DIR / "status" / f"{assignment.name}.json").load()
            for st in sorted(gb.students, key=lambda s: s.id):
                try:
                    sub = gb.find_submission(assignment.name, st.id)
                except MissingEntry:
                    continue
                status = statuses.get(st.id, {}).get("status", "ok")
                detail = "" if status == "ok" else str(statuses.get(st.id, {}).get("detail", ""))
                for nb in sorted(sub.notebooks, key=lambda n: n.name):
                    for g in sorted(nb.grades, key=lambda g: g.name):
                        if not g.max_score:
                            continue
                        rows.append({"student": st.id, "chapter": assignment.name,
                                     "notebook": nb.name, "grade_id": g.name,
                                     "score": float(g.score), "max_score": float(g.max_score),
                                     "status": status, "detail": detail})
            for r in rejected_at_import(course_dir, assignment.name):
                rows.append({"student": r["student"] or r["path"], "chapter": assignment.name,
                             "notebook": r["path"], "grade_id": "", "score": 0.0,
                             "max_score": 0.0, "status": "rejected at import",
                             "detail": r["detail"]})
    return rows


# --------------------------------------------------------------------------- workspace

def mark_workspace_chapter(folder: Path) -> None:
    """Mark ``folder`` as a chapter of a learner's workspace: its setup cell may then load the
    learner's passing answers from the earlier chapters next to it (:mod:`mini.yours`).  A
    class release has no such file, and reads nothing outside its folder."""
    from mini.yours import WORKSPACE_MARKER
    marker = folder / WORKSPACE_MARKER
    if not marker.exists():
        marker.write_text(json.dumps({"workspace": "..", "chapter": folder.name}) + "\n")


def workspace(ws_dir: str | Path | None = None, *, course_src: Path | None = None,
              mini_src: Path | None = None, log=print) -> Path:
    """Create or extend the learner's workspace: for each chapter of course/ with a
    notebook, the student version (as released: solutions stripped, hidden tests removed,
    the chapter's student mini inside).  Never overwrites anything: a chapter folder that
    exists only gains notebooks it lacks; the rest of it is left alone."""
    ws = Path(ws_dir or os.environ.get("MINI_WORKSPACE") or repo_root() / "workspace").resolve()
    course_src = (course_src or default_course_src()).resolve()
    mini_src = (mini_src or default_mini_src()).resolve()
    chapters = list_chapters(course_src)
    ws.mkdir(parents=True, exist_ok=True)
    gi = ws / ".gitignore"
    if not gi.exists():
        gi.write_text("# the learner's own work: never committed\n*\n")
    todo = []
    for ch in chapters:
        dest = ws / ch
        if not dest.exists():
            todo.append(ch)
        else:
            missing = [p.name for p in (course_src / ch).glob("*.ipynb") if not (dest / p.name).exists()]
            if missing:
                todo.append(ch)
    if todo:
        import tempfile
        with tempfile.TemporaryDirectory(prefix="mini-workspace-") as tmp:
            tmp_course = Path(tmp) / "course"
            tmp_src = Path(tmp) / "src"
            tmp_src.mkdir()
            for ch in todo:
                shutil.copytree(course_src / ch, tmp_src / ch,
                                ignore=shutil.ignore_patterns(*CHAPTER_IGNORE))
            init_course(tmp_course, course_src=tmp_src, mini_src=mini_src, log=lambda *_: None)
            for ch in todo:
                rel = release(ch, tmp_course, log=lambda *_: None)
                dest = ws / ch
                if not dest.exists():
                    shutil.copytree(rel, dest)
                    log(f"created {dest}")
                else:
                    for nb in sorted(rel.glob("*.ipynb")):
                        if not (dest / nb.name).exists():
                            shutil.copy2(nb, dest / nb.name)
                            log(f"added {dest / nb.name}")
    for ch in chapters:   # (workspaces made before the marker existed gain it too)
        if (ws / ch).is_dir():
            mark_workspace_chapter(ws / ch)
    return ws
