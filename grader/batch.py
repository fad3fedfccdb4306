"""Autograding a class: one child process per submission, one writer of the gradebook.

``mini-course autograde`` (:func:`grader.course.autograde`) runs, for each student,
``python -m grader.batch SPEC.json RESULT.json`` -- a child that grades that one
submission with nbgrader in a **private** copy of the course: its own gradebook copy,
submitted folder (the student's notebooks only) and output folder.  The child runs the
notebook in the sandboxed kernel (:class:`grader.preprocessors.SandboxedExecute`) and the
hidden checks against the sandboxed worker (:class:`grader.preprocessors.TrustedVerdicts`),
then writes a JSON result: status, scores, what happened.  The parent -- the only process
that writes the real ``gradebook.db`` -- copies that student's rows and autograded notebooks
into the course as soon as the child ends (:func:`merge_student`), so children grade in
parallel (``--jobs``), a crashed or killed child costs only its own submission, and an
interrupted run keeps every student finished before the interruption.

Statuses (the autograde summary and the grades CSV): ``ok``, ``timeout`` (a cell, a check or
the notebook's budget ran out), ``memory`` (a sandbox hit its memory limit), ``crashed``
(the kernel or worker died, or grading itself failed), ``invalid notebook`` (not a readable
notebook), ``rejected at import``.
"""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = ["GradeSpec", "grade_one", "merge_student", "backup_gradebook", "status_of", "STATUSES"]

STATUSES = ("ok", "timeout", "memory", "crashed", "invalid notebook", "rejected at import")

AUTOGRADE_PREPROCESSORS = [
    "grader.preprocessors.SandboxedExecute",
    "grader.preprocessors.TrustedVerdicts",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]


@dataclass
class GradeSpec:
    """Everything a child needs to grade one submission (JSON-able)."""
    course_dir: str
    chapter: str
    student: str
    private_root: str
    gradebook_copy: str
    sandbox: str                 # "bwrap" or "none"
    mini_dir: str                # the staged student copy of mini for the chapter
    secret: str
    cell_timeout: float = 120.0
    check_timeout: float = 60.0
    notebook_timeout: float = 1800.0
    kernel_memory: str = "6G"
    check_memory: str = "4G"
    procs: int = 512
    extra_config: dict = field(default_factory=dict)


def status_of(events: list[str]) -> str:
    """The status of a submission from what happened while grading it."""
    for status, causes in (("memory", ("memory",)), ("timeout", ("timeout", "budget")),
                           ("crashed", ("died", "crashed", "protocol"))):
        if any(e in causes for e in events):
            return status
    return "ok"


# --------------------------------------------------------------------------- the child

def grade_one(spec: GradeSpec) -> dict:
    """Grade ``spec.student``'s submission in the private course at ``spec.private_root``.
    Returns ``{"status", "detail", "notebooks": {name: {...}}, "seconds"}``."""
    import nbformat

    start = time.monotonic()
    course = Path(spec.course_dir)
    root = Path(spec.private_root)
    chapter, student = spec.chapter, spec.student
    sub_src = course / "submitted" / student / chapter
    sub_dst = root / "submitted" / student / chapter
    sub_dst.mkdir(parents=True)
    (root / "source" / chapter).mkdir(parents=True)
    for sub in ("release", "autograded", "feedback"):
        (root / sub).mkdir(exist_ok=True)
    notebooks = sorted(p.stem for p in (course / "source" / chapter).glob("*.ipynb"))
    invalid = []
    for name in notebooks:
        src = sub_src / f"{name}.ipynb"
        if not src.is_file():
            continue
        try:
            nb = nbformat.read(str(src), as_version=4)
            nbformat.validate(nb)
        except Exception as e:  # noqa: BLE001 - anything that is not a notebook
            invalid.append(f"{name}.ipynb: {type(e).__name__}")
            continue
        shutil.copyfile(src, sub_dst / f"{name}.ipynb")
    if (sub_src / "timestamp.txt").is_file():
        shutil.copyfile(sub_src / "timestamp.txt", sub_dst / "timestamp.txt")
    shutil.copyfile(spec.gradebook_copy, root / "gradebook.db")
    report = root / "report.jsonl"
    source_dir = course / "source" / chapter
    config = {
        "CourseDirectory.db_url": f"sqlite:///{root / 'gradebook.db'}",
        "Autograde.autograde_preprocessors": AUTOGRADE_PREPROCESSORS,
        "Execute.timeout": int(spec.cell_timeout),
        "Execute.interrupt_on_timeout": True,
        "Execute.extra_arguments": ["--IPKernelApp.log_level=ERROR"],
        "SandboxedExecute.sandbox": spec.sandbox,
        "SandboxedExecute.mini_dir": spec.mini_dir,
        "SandboxedExecute.support_dir": str(source_dir),
        "SandboxedExecute.memory_limit": spec.kernel_memory,
        "SandboxedExecute.procs_limit": int(spec.procs),
        "SandboxedExecute.notebook_timeout": float(spec.notebook_timeout),
        "SandboxedExecute.report_path": str(report),
        "SandboxedExecute.cache_dir": str(root / "cache"),
        "TrustedVerdicts.cache_dir": str(root / "cache"),
        "TrustedVerdicts.source_dir": str(source_dir),
        "TrustedVerdicts.mini_dir": spec.mini_dir,
        "TrustedVerdicts.sandbox": spec.sandbox,
        "TrustedVerdicts.secret": spec.secret,
        "TrustedVerdicts.check_timeout": float(spec.check_timeout),
        "TrustedVerdicts.notebook_timeout": float(spec.notebook_timeout),
        "TrustedVerdicts.memory_limit": spec.check_memory,
        "TrustedVerdicts.procs_limit": int(spec.procs),
        "TrustedVerdicts.report_path": str(report),
    }
    config.update(spec.extra_config)
    error = ""
    if any((sub_dst / f"{n}.ipynb").exists() for n in notebooks):
        from grader.course import run_nbgrader
        try:
            result = run_nbgrader(course, "autograde", chapter, student, config=config,
                                  root=root)
            if not result.get("success"):
                error = _errors(result)
        except Exception as e:  # noqa: BLE001
            error = f"{type(e).__name__}: {e}\n{traceback.format_exc()[-2000:]}"
    events, verdicts, seconds = [], {}, {}
    if report.exists():
        for line in report.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("kind") == "execute":
                events += [e.get("event", "") for e in rec.get("events", [])]
                seconds[rec.get("notebook", "")] = rec.get("seconds")
            elif rec.get("kind") == "verdicts":
                events += list(rec.get("statuses", []))
                verdicts[rec.get("notebook", "")] = rec.get("cells", {})
    graded = sorted(p.stem for p in (root / "autograded" / student / chapter).glob("*.ipynb")) \
        if (root / "autograded" / student / chapter).is_dir() else []
    status = status_of(events)
    detail = ""
    if invalid:
        status, detail = "invalid notebook", "; ".join(invalid)
    elif error and not graded:
        status, detail = "crashed", error.strip().splitlines()[-1][:500] if error.strip() else "crashed"
    elif error:
        detail = error.strip().splitlines()[-1][:500]
    return {"status": status, "detail": detail, "events": events, "graded": graded,
            "verdicts": verdicts, "error": error[-4000:], "seconds": round(time.monotonic() - start, 3),
            "kernel_seconds": seconds}


def _errors(result: dict) -> str:
    text = result.get("log", "") + "\n" + result.get("error", "")
    lines = [l for l in text.splitlines() if "[ERROR]" in l or "Error" in l]
    return "\n".join(lines[-15:]) or text[-2000:]


def main(argv: list[str] | None = None) -> int:
    """``python -m grader.batch SPEC.json RESULT.json``."""
    argv = sys.argv[1:] if argv is None else argv
    spec = GradeSpec(**json.loads(Path(argv[0]).read_text()))
    try:
        result = grade_one(spec)
    except Exception as e:  # noqa: BLE001 - reported to the parent, never raised
        result = {"status": "crashed", "detail": f"{type(e).__name__}: {e}", "events": [],
                  "graded": [], "verdicts": {}, "error": traceback.format_exc()[-4000:]}
    tmp = Path(argv[1] + ".part")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, argv[1])
    return 0


# --------------------------------------------------------------------------- the parent

def backup_gradebook(course_dir: Path, stamp: str) -> Path | None:
    """A consistent copy of ``gradebook.db`` in ``.mini-grader/backup/`` (sqlite's backup
    API, so a copy taken while another process reads it is still whole)."""
    db = course_dir / "gradebook.db"
    if not db.exists():
        return None
    dest_dir = course_dir / ".mini-grader" / "backup"
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / f"gradebook-{stamp}.db"
    src = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        dst = sqlite3.connect(str(dest))
        try:
            src.backup(dst)
        finally:
            dst.close()
    finally:
        src.close()
    return dest


def merge_student(course_dir: Path, chapter: str, student: str, private_root: Path,
                  result: dict, course_id: str) -> tuple[float, float]:
    """Copy ``student``'s results of ``chapter`` from the private course into the real one:
    the autograded notebooks (replacing the old ones) and the gradebook rows (scores,
    comments, timestamp, late penalties), in one transaction.  Returns (score, max)."""
    from nbgrader.api import Gradebook, MissingEntry

    src_dir = private_root / "autograded" / student / chapter
    dst_dir = course_dir / "autograded" / student / chapter
    graded = sorted(src_dir.glob("*.ipynb")) if src_dir.is_dir() else []
    if graded:
        tmp = dst_dir.with_name(dst_dir.name + ".part")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        for nb in graded:                       # the notebooks only: nothing else is copied
            shutil.copyfile(nb, tmp / nb.name)
        old = dst_dir.with_name(dst_dir.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        if dst_dir.exists():
            os.replace(dst_dir, old)
        os.replace(tmp, dst_dir)
        shutil.rmtree(old, ignore_errors=True)
    private_db = private_root / "gradebook.db"
    real = f"sqlite:///{course_dir / 'gradebook.db'}"
    rows = {}
    timestamp = None
    penalties = {}
    if graded and private_db.exists():
        with Gradebook(f"sqlite:///{private_db}", course_id=course_id) as pgb:
            try:
                sub = pgb.find_submission(chapter, student)
                timestamp = sub.timestamp
                for nb in sub.notebooks:
                    penalties[nb.name] = nb.late_submission_penalty
                    for g in nb.grades:
                        rows[(nb.name, g.name, "grade")] = (g.auto_score, g.needs_manual_grade)
                    for c in nb.comments:
                        rows[(nb.name, c.name, "comment")] = (c.auto_comment, None)
            except MissingEntry:
                pass
    with Gradebook(real, course_id=course_id) as gb:
        gb.update_or_create_student(student)
        kwargs = {"timestamp": timestamp} if timestamp is not None else {}
        sub = gb.update_or_create_submission(chapter, student, **kwargs)
        for nb in sub.notebooks:
            if nb.name in penalties:
                nb.late_submission_penalty = penalties[nb.name]
            for g in nb.grades:
                found = rows.get((nb.name, g.name, "grade"))
                if found is not None:
                    g.auto_score, g.needs_manual_grade = found
                else:  # not graded (missing, invalid or crashed): no points, nothing to review
                    g.auto_score = 0.0 if g.max_score else g.auto_score
                    g.needs_manual_grade = False
            for c in nb.comments:
                found = rows.get((nb.name, c.name, "comment"))
                if found is not None:
                    c.auto_comment = found[0]
        gb.db.commit()
        sub = gb.find_submission(chapter, student)
        return float(sub.score), float(sub.max_score)


def spec_json(spec: GradeSpec) -> str:
    return json.dumps(asdict(spec))


if __name__ == "__main__":  # pragma: no cover - the child process
    sys.exit(main())
