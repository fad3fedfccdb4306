"""``mini-course``: the course's command line.

Instructors::

    mini-course init ~/mini-course-2026          # nbgrader course directory, outside the repo
    cd ~/mini-course-2026
    mini-course release 03                       # release/03_strides/ to hand out
    mini-course import 03 ~/Downloads/submissions.zip
                                                 # or, on a shared server (nbgrader's exchange):
                                                 # release 03 --exchange, then collect 03
    mini-course autograde 03                     # every submission, in sandboxes, in parallel;
                                                 # --student S for one, --jobs N
    mini-course feedback 03                      # feedback/<student>/03_strides/*.html
    mini-course grades --csv grades.csv

    mini-course lab ~/mini-course-2026           # JupyterLab on the course, formgrader working

Learners and self-learners::

    mini-course lab                              # JupyterLab on my workspace (= make lab)
    mini-course workspace                        # workspace/NN_topic/ student notebooks
    mini-course check 03                         # run my notebook, table of what passes
    mini-course export ~/my-mini                 # my mini as a package, with mini's tests

Authors and maintainers::

    mini-course build [CHAPTER] [--check]        # course/NN_topic/*.ipynb from course/sources/
    mini-course sync-solutions [--check]         # notebook solution cells == mini's references

Instructor commands take ``--course-dir DIR`` (default: ``$MINI_COURSE_DIR`` or the current
directory).  CHAPTER is ``03``, ``3`` or ``03_strides``.
"""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from grader.course import CourseError

__all__ = ["main", "build_parser"]


def _cmd_init(a) -> int:
    from grader.course import init_course
    init_course(a.dir, force=a.force, course_id=a.course_id, cell_timeout=a.cell_timeout,
                check_timeout=a.check_timeout, check_memory=a.check_memory, exchange=a.exchange,
                kernel_memory=a.kernel_memory, notebook_timeout=a.notebook_timeout,
                course_src=Path(a.course_src) if a.course_src else None)
    return 0


def _cmd_release(a) -> int:
    from grader.course import release
    release(a.chapter, a.course_dir, refresh=a.refresh, exchange=a.exchange)
    return 0


def _cmd_collect(a) -> int:
    from grader.course import collect
    collect(a.chapter, a.course_dir)
    return 0


def _cmd_import(a) -> int:
    from grader.course import import_submissions
    report = import_submissions(a.chapter, a.path, a.course_dir)
    # 1: nothing of the upload could be used (every file rejected).
    return 1 if report.rejected and not (report.imported or report.replaced or report.unchanged) else 0


def _cmd_autograde(a) -> int:
    from grader.course import autograde
    autograde(a.chapter, a.course_dir, student=a.student, jobs=a.jobs, no_sandbox=a.no_sandbox,
              restart=a.restart)
    return 0


def _cmd_feedback(a) -> int:
    from grader.course import feedback
    feedback(a.chapter, a.course_dir, student=a.student)
    return 0


def _cmd_grades(a) -> int:
    from grader.course import grades
    out = Path(a.csv).expanduser() if a.csv else None
    if out is not None:    # before the gradebook is read: a typo costs nothing
        if out.is_dir():
            raise CourseError(f"--csv {a.csv} is a folder: give a file name, e.g. {out / 'grades.csv'}")
        if not out.parent.is_dir():
            raise CourseError(f"--csv {a.csv}: the folder {out.parent} does not exist")
    rows = grades(a.course_dir)
    if out is not None:
        from grader.course import GRADE_FIELDS
        tmp = out.with_name(f".{out.name}.part")
        try:
            with open(tmp, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=GRADE_FIELDS)
                w.writeheader()
                w.writerows(rows)
            tmp.replace(out)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise CourseError(f"--csv {a.csv}: cannot write it ({e.strerror})") from None
        print(f"wrote {len(rows)} rows to {a.csv}")
    if not rows:
        print("no grades yet (run `mini-course autograde CHAPTER`)")
        return 0
    heads = ("student", "chapter", "grade_id", "score", "max_score", "status")
    table = [heads] + [(r["student"], r["chapter"], r["grade_id"], f"{r['score']:g}",
                        f"{r['max_score']:g}", r["status"]) for r in rows]
    widths = [max(len(t[i]) for t in table) for i in range(len(heads))]
    for t in table:
        print("  ".join(t[i].ljust(widths[i]) for i in range(len(heads))).rstrip())
    totals: dict[tuple[str, str], list] = {}
    for r in rows:
        acc = totals.setdefault((r["student"], r["chapter"]), [0.0, 0.0, r["status"]])
        acc[0] += r["score"]
        acc[1] += r["max_score"]
    print()
    for (student, chapter), (score, mx, status) in sorted(totals.items()):
        print(f"{student}  {chapter}  total {score:g} / {mx:g}" + ("" if status == "ok" else f"  [{status}]"))
    return 0


def _cmd_check(a) -> int:
    """Exit 0: every notebook of the chapter earns full marks; 1: some point is missing;
    2: nothing could be checked (no notebook, one that does not run)."""
    from grader.course import default_course_src, list_chapters, repo_root, resolve_chapter
    from grader.selfcheck import check_notebook, format_table, score
    import os

    course_src = default_course_src()
    chapter = resolve_chapter(a.chapter, list_chapters(course_src))
    if a.notebook:
        targets = [Path(a.notebook).expanduser()]
    else:
        # Only the learner's own notebooks: never course/ (the instructor's answers would
        # score full marks for work the learner did not do).
        ws = Path(os.environ.get("MINI_WORKSPACE") or repo_root() / "workspace") / chapter
        targets = sorted(ws.glob("*.ipynb")) if ws.is_dir() else []
        if not targets:
            raise CourseError(
                f"no notebook of {chapter} in your workspace ({ws}): make your copy with "
                f"`make lab` (it opens it in JupyterLab) or `mini-course workspace`, do the "
                f"exercises, then check again; or name a notebook: "
                f"`mini-course check {chapter[:2]} PATH.ipynb`")
    for nb in targets:
        if not nb.is_file():
            raise CourseError(f"{nb} is not a notebook file" if nb.exists()
                              else f"{nb} does not exist")
        if nb.suffix != ".ipynb":
            raise CourseError(f"{nb} is not a notebook (.ipynb)")
    status = 0
    for nb in targets:
        instructor = course_src / chapter / nb.name
        if not instructor.exists():
            # A renamed copy (strides-Copy1.ipynb): the chapter's notebook if it has one only.
            own = sorted((course_src / chapter).glob("*.ipynb"))
            instructor = own[0] if len(own) == 1 else None
            if instructor is None:
                print(f"note: {nb.name} is none of {chapter}'s notebooks "
                      f"({', '.join(p.name for p in own)}): only its visible tests are run",
                      file=sys.stderr)
        print(f"checking {nb} ...", flush=True)
        try:
            results = check_notebook(nb, instructor, timeout=a.timeout)
        except Exception as e:  # noqa: BLE001 - the notebook could not run at all
            print(f"error: could not run {nb}: {type(e).__name__}: {e}", file=sys.stderr)
            status = 2
            continue
        print(format_table(results))
        earned, total = score(results)
        if earned < total and status == 0:
            status = 1
    return status


def _cmd_lab(a) -> int:
    from grader.lab import lab_launch, run_lab
    directory, extra = a.dir, list(a.jupyter_args or [])
    if directory is not None and directory.startswith("-"):   # `lab -- --port 8890`
        directory, extra = None, [directory] + extra
    if extra[:1] == ["--"]:
        extra = extra[1:]
    launch = lab_launch(directory, extra, log=lambda msg: print(msg, file=sys.stderr))
    run_lab(launch, log=lambda msg: print(msg, file=sys.stderr))
    return 0  # pragma: no cover - run_lab replaces this process


def _cmd_workspace(a) -> int:
    from grader.course import workspace
    path = workspace(a.dir, log=lambda msg: print(msg, file=sys.stderr))
    print(path)  # the only line on stdout: `WS=$(mini-course workspace)`
    return 0


def _cmd_export(a) -> int:
    from grader.own import export
    export(a.dir, a.workspace, log=lambda msg: print(msg, file=sys.stderr))
    return 0


def _cmd_sync(a) -> int:
    from grader.course import default_course_src, default_mini_src, list_chapters
    from grader.solutions import reference_regions, sync_notebook

    course_src = Path(a.course_src) if a.course_src else default_course_src()
    if not list_chapters(course_src):
        raise CourseError(f"no chapters with notebooks in {course_src}")
    refs = reference_regions(default_mini_src())
    differing = []
    for chapter in list_chapters(course_src):
        for nb in sorted((course_src / chapter).glob("*.ipynb")):
            for slot in sync_notebook(nb, refs, write=not a.check):
                differing.append(f"{nb.relative_to(course_src.parent)}: {slot}")
    for d in differing:
        print(("differs: " if a.check else "updated: ") + d)
    if a.check and differing:
        print("solution cells differ from mini's references: run `mini-course sync-solutions`",
              file=sys.stderr)
        return 1
    if not differing:
        print("all notebook solution regions match mini's references")
    return 0


def _cmd_build(a) -> int:
    from grader.course import default_course_src, resolve_chapter
    from grader.notebook_build import SourceError, build_chapter, chapter_sources

    course_src = Path(a.course_src).resolve() if a.course_src else default_course_src()
    chapters = list(chapter_sources(course_src))
    if not chapters:
        raise CourseError(f"no chapter sources in {course_src / 'sources'}")
    todo = [resolve_chapter(a.chapter, chapters)] if a.chapter else chapters
    differing = []
    for chapter in todo:
        try:
            differing += build_chapter(chapter, course_src, check=a.check)
        except SourceError as e:
            print(f"mini-course build: {e}", file=sys.stderr)
            return 2
    if a.check:
        for path in differing:
            print(f"out of date: {path.relative_to(course_src.parent)}")
        if differing:
            which = f" {todo[0][:2]}" if a.chapter else ""
            print(f"the notebooks differ from their sources: run `mini-course build{which}`",
                  file=sys.stderr)
            return 1
        print("every notebook is what its source builds")
    elif not differing:
        print("every notebook was up to date")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mini-course", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("init", help="create an instructor course directory (nbgrader layout)")
    s.add_argument("dir")
    s.add_argument("--force", action="store_true",
                   help="re-initialize a non-empty directory (replaced files are backed up)")
    s.add_argument("--course-id", default="mini")
    s.add_argument("--cell-timeout", type=int, default=120, help="seconds per cell at autograde")
    s.add_argument("--check-timeout", type=float, default=60, help="seconds per hidden check")
    s.add_argument("--check-memory", default="4G", help="memory limit of a hidden check")
    s.add_argument("--kernel-memory", default="6G", help="memory limit of the grading kernel")
    s.add_argument("--notebook-timeout", type=float, default=1800,
                   help="seconds for a whole notebook at autograde (its cells, then its checks)")
    s.add_argument("--course-src", help="folder of chapters (default: the repository's course/)")
    s.add_argument("--exchange", default=None, metavar="DIR",
                   help="nbgrader's exchange folder, for `release --exchange` and `collect` "
                        "(shared servers: students fetch and submit there)")
    s.set_defaults(func=_cmd_init)

    def course_opt(s):
        s.add_argument("--course-dir", default=None,
                       help="course directory (default: $MINI_COURSE_DIR or the current directory)")

    s = sub.add_parser("release", help="generate the student version of a chapter")
    s.add_argument("chapter")
    s.add_argument("--refresh", action="store_true",
                   help="first re-copy source/<chapter> from the repository's course/ and mini "
                        "(the old one is backed up)")
    s.add_argument("--exchange", action="store_true",
                   help="also publish it to nbgrader's exchange (Exchange.root in "
                        "nbgrader_config.py) for students to fetch")
    course_opt(s)
    s.set_defaults(func=_cmd_release)

    s = sub.add_parser("collect", help="collect submissions from nbgrader's exchange into submitted/")
    s.add_argument("chapter")
    course_opt(s)
    s.set_defaults(func=_cmd_collect)

    s = sub.add_parser("import", help="import submissions (folder or .zip, <student>_<notebook>.ipynb)")
    s.add_argument("chapter")
    s.add_argument("path")
    course_opt(s)
    s.set_defaults(func=_cmd_import)

    s = sub.add_parser("autograde", help="autograde submissions of a chapter (in sandboxes)")
    s.add_argument("chapter")
    s.add_argument("--student", default=None)
    s.add_argument("--jobs", "-j", type=int, default=None,
                   help="submissions graded at once (default: the number of cores)")
    s.add_argument("--restart", action="store_true",
                   help="grade everyone again, even after an interrupted run")
    s.add_argument("--no-sandbox", action="store_true",
                   help="grade without bubblewrap: student code runs with YOUR rights "
                        "(only for code you trust)")
    course_opt(s)
    s.set_defaults(func=_cmd_autograde)

    s = sub.add_parser("feedback", help="generate feedback without hidden tests")
    s.add_argument("chapter")
    s.add_argument("--student", default=None)
    course_opt(s)
    s.set_defaults(func=_cmd_feedback)

    s = sub.add_parser("grades", help="scores per student, chapter and exercise")
    s.add_argument("--csv", default=None, help="also write them to this CSV file")
    course_opt(s)
    s.set_defaults(func=_cmd_grades)

    s = sub.add_parser("check", help="run my notebook and show what passes")
    s.add_argument("chapter")
    s.add_argument("notebook", nargs="?", default=None)
    s.add_argument("--timeout", type=int, default=120, help="seconds per cell")
    s.set_defaults(func=_cmd_check)

    s = sub.add_parser("lab", help="open JupyterLab: on a course directory (formgrader works "
                                   "there), else on the learner's workspace",
                       description="Open JupyterLab.  With COURSE_DIR (a course made by "
                                   "`mini-course init`): Lab runs in that directory, so "
                                   "nbgrader's formgrader finds its nbgrader_config.py.  "
                                   "Without it: the learner's workspace (created on first "
                                   "use), without nbgrader's instructor tools (Validate stays). "
                                   "Arguments after `--` go to jupyter lab.")
    s.add_argument("dir", nargs="?", default=None, metavar="COURSE_DIR")
    s.add_argument("jupyter_args", nargs=argparse.REMAINDER,
                   help="after --: arguments for jupyter lab (e.g. -- --port 8890 --no-browser)")
    s.set_defaults(func=_cmd_lab)

    s = sub.add_parser("workspace", help="create/extend the learner's workspace; prints its "
                                         "path on stdout (progress goes to stderr)")
    s.add_argument("--dir", default=None, help="default: workspace/ at the repository root")
    s.set_defaults(func=_cmd_workspace)

    s = sub.add_parser("export", help="write your mini as a Python package: mini with your "
                                      "code in every slot you wrote, a README of what is "
                                      "whose, and mini's tests (run `pytest` there)")
    s.add_argument("dir", help="a new (or empty) folder")
    s.add_argument("--workspace", default=None,
                   help="default: $MINI_WORKSPACE or workspace/ at the repository root")
    s.set_defaults(func=_cmd_export)

    s = sub.add_parser("build", help="build the chapter notebooks from their sources "
                                     "(course/sources/NN_topic/*.md)")
    s.add_argument("chapter", nargs="?", default=None, help="one chapter (default: all)")
    s.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 when a notebook differs from a fresh build")
    s.add_argument("--course-src", default=None,
                   help="folder of chapters (default: the repository's course/)")
    s.set_defaults(func=_cmd_build)

    s = sub.add_parser("sync-solutions", help="notebook solution cells := mini's references")
    s.add_argument("--check", action="store_true", help="only compare; exit 1 on differences")
    s.add_argument("--course-src", default=None)
    s.set_defaults(func=_cmd_sync)
    return p


#: What native Windows users are told (the README's Windows line says the same).
WINDOWS_MESSAGE = (
    "mini-course needs Linux or macOS (the grader's sandbox and mini's C++ kernels use "
    "them); native Windows is not supported. Use WSL2: in PowerShell run "
    "`wsl --install -d Ubuntu`, open Ubuntu, run `sudo apt install make g++ python3-venv git`, "
    "clone the repository inside Ubuntu (under ~, not /mnt/c) and run `make lab` there.")


def main(argv: list[str] | None = None, platform: str | None = None) -> int:
    if (platform or sys.platform) == "win32":
        print(f"mini-course: {WINDOWS_MESSAGE}", file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except CourseError as e:
        print(f"mini-course: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        # A path the user gave (or one under it) that cannot be read or written: say which
        # and why, not a traceback.
        where = f"{e.filename}: " if e.filename else ""
        print(f"mini-course {args.command}: {where}{e.strerror or e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
