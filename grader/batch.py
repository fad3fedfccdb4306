"""Autograding a class: one child process per submission, one writer of the gradebook.

``mini-course autograde`` (:func:`grader.course.autograde`) keeps ``--jobs`` children
(``python -m grader.batch --serve``, each grading one submission after another: importing
nbgrader costs seconds, paid once per child) and hands each student to one of them.  A child
grades that one submission with nbgrader in a **private** copy of the course: its own
gradebook copy, submitted folder (the student's notebooks only) and output folder.  The child runs the
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

__all__ = ["GradeSpec", "Grader", "grade_one", "merge_student", "backup_gradebook", "status_of",
           "STATUSES"]

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
    invalid, notes = [], []
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
        released = course / "release" / chapter / f"{name}.ipynb"   # what the student received
        if not released.is_file():
            released = course / "source" / chapter / f"{name}.ipynb"
        fixed = normalize_metadata(nb, nbformat.read(str(released), as_version=4))
        if fixed:
            notes.append(f"{name}.ipynb: nbgrader metadata restored ({', '.join(fixed[:5])})")
        nbformat.write(nb, str(sub_dst / f"{name}.ipynb"))
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
        from grader.course import _nbgrader_errors, run_nbgrader
        try:
            result = run_nbgrader(course, "autograde", chapter, student, config=config,
                                  root=root)
            if not result.get("success"):
                error = _nbgrader_errors(result)
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
    elif notes:
        detail = "; ".join(notes)[:500]
    return {"status": status, "detail": detail, "events": events, "graded": graded,
            "verdicts": verdicts, "error": error[-4000:], "seconds": round(time.monotonic() - start, 3),
            "kernel_seconds": seconds}


def normalize_metadata(nb, source) -> list[str]:
    """Make ``nb``'s nbgrader metadata the released notebook's (``source``), in place: a cell whose grade id the source has gets the source's metadata (points,
    locks, kind); an answer cell whose grade id was changed or lost is recognised by its
    ``@implement("NN.x")``; any other cell claiming nbgrader metadata (an extra graded cell,
    say) becomes an ordinary cell.  Returns what was changed, in words."""
    import copy
    import re

    implement = re.compile(r"""@\s*(?:[\w.]+\.)?implement\(\s*(["'])(\d\d\.[A-Za-z0-9_]+)\1""")
    by_id, by_slot = {}, {}
    for cell in source.cells:
        meta = cell.get("metadata", {}).get("nbgrader")
        if meta and meta.get("grade_id"):
            by_id[meta["grade_id"]] = meta
            m = implement.search(cell.source) if meta.get("solution") else None
            if m:
                by_slot[m.group(2)] = meta["grade_id"]
    taken = {c.get("metadata", {}).get("nbgrader", {}).get("grade_id") for c in nb.cells}
    changed = []
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader")
        if meta is None:
            continue
        gid = meta.get("grade_id") if isinstance(meta, dict) else None
        if gid in by_id:
            want = by_id[gid]
            if meta != want:
                cell.metadata["nbgrader"] = copy.deepcopy(want)
                bookkeeping = ("checksum", "cell_type")   # added by nbgrader's release
                if {k: v for k, v in meta.items() if k not in bookkeeping} != \
                        {k: v for k, v in want.items() if k not in bookkeeping}:
                    changed.append(gid)
            continue
        m = implement.search(cell.get("source", ""))
        target = by_slot.get(m.group(2)) if m else None
        if target is not None and target not in taken:
            cell.metadata["nbgrader"] = copy.deepcopy(by_id[target])
            taken.add(target)
            changed.append(f"{gid or 'a cell'} -> {target}")
        else:
            del cell.metadata["nbgrader"]
            changed.append(f"{gid or 'a cell'}: not a cell of the assignment")
    return changed


def _grade_spec_file(spec_path: str, result_path: str) -> None:
    spec = GradeSpec(**json.loads(Path(spec_path).read_text()))
    try:
        result = grade_one(spec)
    except Exception as e:  # noqa: BLE001 - reported to the parent, never raised
        result = {"status": "crashed", "detail": f"{type(e).__name__}: {e}", "events": [],
                  "graded": [], "verdicts": {}, "error": traceback.format_exc()[-4000:]}
    tmp = Path(result_path + ".part")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, result_path)


def main(argv: list[str] | None = None) -> int:
    """``python -m grader.batch SPEC.json RESULT.json`` grades one submission;
    ``python -m grader.batch --serve`` grades one per line ``SPEC.json RESULT.json`` read on
    stdin, answering ``done RESULT.json`` on the file descriptor given by ``--reply-fd``
    (default: stdout) after each."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--serve":
        import faulthandler
        import signal
        # the parent asks for the stacks (into the log) before it kills an overrunning child
        faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
        fd = int(argv[2]) if len(argv) > 2 and argv[1] == "--reply-fd" else 1
        reply = os.fdopen(fd, "w", buffering=1)
        for line in sys.stdin:
            parts = line.split()
            if len(parts) != 2:
                continue
            _grade_spec_file(parts[0], parts[1])
            reply.write(f"done {parts[1]}\n")
            reply.flush()
        return 0
    _grade_spec_file(argv[0], argv[1])
    return 0


# --------------------------------------------------------------------------- the parent

class Grader:
    """One child ``python -m grader.batch --serve`` grading submissions one after another
    for a thread of the parent; replaced after ``max_jobs`` submissions, and whenever it
    dies or overruns a submission's budget (then killed with everything it started)."""

    def __init__(self, env: dict, cwd: Path, log_path: Path, max_jobs: int = 25):
        self.env, self.cwd, self.log_path, self.max_jobs = env, cwd, log_path, max_jobs
        self.proc = None
        self.reply = None
        self.served = 0

    def _start(self) -> None:
        import subprocess
        r, w = os.pipe()
        self.log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "grader.batch", "--serve", "--reply-fd", str(w)],
                stdin=subprocess.PIPE, stdout=self.log, stderr=subprocess.STDOUT, env=self.env,
                cwd=str(self.cwd), pass_fds=(w,), start_new_session=True)
        finally:
            os.close(w)
        self.reply = os.fdopen(r, "rb", buffering=0)
        self.served = 0

    def grade(self, spec_path: Path, result_path: Path, timeout: float) -> dict:
        """Grade one submission; the child's result, or a timeout/crashed result."""
        import select
        if self.proc is None or self.proc.poll() is not None or self.served >= self.max_jobs:
            self.close()
            self._start()
        self.served += 1
        try:
            self.proc.stdin.write(f"{spec_path} {result_path}\n".encode())
            self.proc.stdin.flush()
        except OSError:
            self.close()
            return {"status": "crashed", "detail": "the grading process could not be reached"}
        deadline = time.monotonic() + timeout
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            ready = select.select([self.reply], [], [], max(0.0, left))[0] if left > 0 else []
            if not ready:
                import signal
                try:  # where it was stuck, into the log, then stop it
                    os.kill(self.proc.pid, signal.SIGUSR1)
                    time.sleep(1.0)
                except OSError:
                    pass
                self.close()
                return {"status": "timeout", "detail": f"grading took longer than {timeout:g} s "
                                                       f"and was stopped"}
            chunk = self.reply.read(4096)
            if not chunk:
                code = self.proc.poll()
                self.close()
                try:
                    return json.loads(Path(result_path).read_text())
                except (OSError, ValueError):
                    return {"status": "crashed", "detail": f"the grading process ended without "
                                                           f"a result (exit status {code})"}
            line += chunk
        try:
            return json.loads(Path(result_path).read_text())
        except (OSError, ValueError):
            return {"status": "crashed", "detail": "the grading process wrote no result"}

    def close(self) -> None:
        """Stop the child: end of input, or SIGKILL for it and everything it started."""
        import signal
        if self.proc is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=0.5 if self.proc.poll() is None else 0)
            except Exception:  # noqa: BLE001 - still busy: kill it
                pass
            if self.proc.poll() is None:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError, OSError):
                    pass
                try:
                    self.proc.wait(timeout=10)
                except Exception:  # noqa: BLE001
                    pass
            self.proc = None
        if self.reply is not None:
            self.reply.close()
            self.reply = None
        if getattr(self, "log", None) is not None:
            self.log.close()
            self.log = None


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
