"""Autograde a synthetic class of honest submissions and time it; grade it again and compare.

    python benchmarks/bench_autograde.py --students 100 --jobs 2 --chapter 03 --runs 3

Creates a course in a temporary folder, releases the chapter, submits ``--students`` copies
of the instructor's solution notebook (each with its own comment line, so no two files are
the same), autogrades them all in sandboxes ``--jobs`` at a time, and prints the wall time,
the time per submission and the statuses.  Then it grades the same class again
(``--runs`` in all, each from scratch: ``restart``) and says whether every run's grades CSV
is byte-for-byte the same.  Not a test: a measurement (the goal: 100 submissions of chapter
03 in at most 5 minutes on 2 cores).  Where a cgroup-v1 ``cpuacct`` controller is writable
(as root), it also prints the CPU seconds every process of the run used, sandboxes included:
on a busy machine that says more than the wall time.
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import io
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def quiet(*_a, **_k):
    pass


class CpuMeter:
    """CPU seconds of this process and everything it starts (cgroup v1 cpuacct), or None."""

    def __init__(self):
        import os
        self.path = Path(f"/sys/fs/cgroup/cpuacct/mini-bench-{os.getpid()}")
        try:
            self.path.mkdir()
            (self.path / "cgroup.procs").write_text(str(os.getpid()))
        except OSError:
            self.path = None

    def seconds(self) -> float | None:
        if self.path is None:
            return None
        return int((self.path / "cpuacct.usage").read_text()) / 1e9

    def close(self) -> None:
        import os
        if self.path is not None:
            try:
                Path("/sys/fs/cgroup/cpuacct/cgroup.procs").write_text(str(os.getpid()))
                self.path.rmdir()
            except OSError:
                pass


def csv_text(rows) -> str:
    from grader.course import GRADE_FIELDS
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=GRADE_FIELDS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return out.getvalue()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--students", type=int, default=100)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--chapter", default="03")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--keep", action="store_true", help="keep the course folder and print it")
    a = p.parse_args()

    from grader import course
    tmp = Path(tempfile.mkdtemp(prefix="bench-autograde-"))
    meter = CpuMeter()
    try:
        d = tmp / "course"
        t0 = time.perf_counter()
        course.init_course(d, log=quiet)
        chapter = course._chapter_in_course(d, a.chapter)
        course.release(chapter, d, log=quiet)
        setup = time.perf_counter() - t0
        inbox = tmp / "inbox"
        inbox.mkdir()
        for nb_path in sorted((d / "source" / chapter).glob("*.ipynb")):
            for i in range(a.students):
                nb = nbformat.read(str(nb_path), as_version=4)
                nb.cells.insert(0, nbformat.v4.new_markdown_cell(f"submitted by student {i:03d}"))
                nbformat.write(nb, str(inbox / f"s{i:03d}_{nb_path.stem}.ipynb"))
        course.import_submissions(chapter, inbox, d, log=quiet)
        import os
        print(f"course ready in {setup:.1f} s: {a.students} submissions of {chapter}, "
              f"--jobs {a.jobs}, {os.cpu_count()} cores, load average "
              f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} (other work on the machine "
              f"slows the runs down)")
        digests, times = [], []
        for run in range(a.runs):
            start, cpu0 = time.perf_counter(), meter.seconds()
            results = course.autograde(chapter, d, jobs=a.jobs, restart=True, log=quiet)
            wall = time.perf_counter() - start
            cpu = None if cpu0 is None else meter.seconds() - cpu0
            times.append(wall)
            statuses = {}
            for r in results.values():
                statuses[r.status] = statuses.get(r.status, 0) + 1
            scores = sorted({r.score for r in results.values()})
            text = csv_text(course.grades(d))
            digests.append(hashlib.sha256(text.encode()).hexdigest())
            print(f"run {run + 1}: {wall:.1f} s for {len(results)} submissions "
                  f"(load average {os.getloadavg()[0]:.1f}) "
                  f"({wall / max(1, len(results)):.2f} s each, wall); statuses {statuses}; "
                  f"totals {scores}; grades CSV sha256 {digests[-1][:16]}")
            if cpu is not None:
                print(f"       CPU: {cpu:.0f} s in all, {cpu / max(1, len(results)):.2f} s per "
                      f"submission: {cpu / 2:.0f} s of wall time on 2 idle cores")
        same = len(set(digests)) == 1
        print(f"{a.runs} runs: grades CSV identical: {'yes' if same else 'NO'}; "
              f"fastest {min(times):.1f} s, slowest {max(times):.1f} s")
        if a.keep:
            print(f"course kept in {d}")
        return 0 if same else 1
    finally:
        meter.close()
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
