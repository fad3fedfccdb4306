"""The mini-course command line: parsing, chapter spellings, errors as exit codes."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from pathlib import Path

from grader.cli import build_parser, main
from grader.course import CourseError


def test_every_command_parses():
    p = build_parser()
    assert p.parse_args(["init", "d", "--force"]).force
    assert p.parse_args(["release", "03", "--course-dir", "x"]).course_dir == "x"
    assert p.parse_args(["release", "03", "--refresh"]).refresh
    assert p.parse_args(["import", "3", "subs.zip"]).path == "subs.zip"
    assert p.parse_args(["autograde", "03_strides", "--student", "alice"]).student == "alice"
    assert p.parse_args(["feedback", "03"]).chapter == "03"
    assert p.parse_args(["grades", "--csv", "g.csv"]).csv == "g.csv"
    assert p.parse_args(["check", "03", "nb.ipynb"]).notebook == "nb.ipynb"
    assert p.parse_args(["workspace", "--dir", "w"]).dir == "w"
    assert p.parse_args(["sync-solutions", "--check"]).check
    with pytest.raises(SystemExit):
        p.parse_args([])


def test_user_errors_exit_2_with_a_message(tmp_path, capsys):
    assert main(["release", "03", "--course-dir", str(tmp_path)]) == 2
    assert "not a mini-course directory" in capsys.readouterr().err
    assert main(["check", "42"]) == 2
    assert "unknown chapter" in capsys.readouterr().err


def test_console_entry_point_runs():
    proc = subprocess.run([sys.executable, "-c", "from grader.cli import main; raise SystemExit(main(['--help']))"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "mini-course" in proc.stdout


def test_native_windows_is_told_to_use_wsl2(capsys):
    assert main(["check", "03"], platform="win32") == 2
    err = capsys.readouterr().err
    assert "WSL2" in err and "wsl --install -d Ubuntu" in err and "make lab" in err


# --------------------------------------------------------------------------- bad input

def _tiny_course(tmp_path: Path) -> Path:
    """Just enough of a course directory for the commands that read no gradebook."""
    from grader_helpers import FIXTURE_CHAPTER, FIXTURE_COURSE
    d = tmp_path / "course"
    (d / "source" / FIXTURE_CHAPTER).mkdir(parents=True)
    shutil.copy(FIXTURE_COURSE / FIXTURE_CHAPTER / "fixture.ipynb", d / "source" / FIXTURE_CHAPTER)
    (d / "nbgrader_config.py").write_text("c = get_config()\nc.CourseDirectory.course_id = 'mini'\n")
    (d / ".mini-course.json").write_text(json.dumps(
        {"course_id": "mini", "course_src": str(FIXTURE_COURSE), "mini_src": str(tmp_path)}))
    return d


def _run(capsys, *argv) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    return code, captured.err


def test_every_path_argument_gets_a_clean_error(tmp_path, capsys):
    d = _tiny_course(tmp_path)
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    nowhere = tmp_path / "nowhere"
    cases = [
        (["grades", "--csv", nowhere / "g.csv", "--course-dir", d], f"the folder {nowhere} does not exist"),
        (["grades", "--csv", tmp_path, "--course-dir", d], "is a folder"),
        (["grades", "--course-dir", d], "gradebook.db is missing"),
        (["release", "03", "--course-dir", nowhere], "not a mini-course directory"),
        (["import", "03", nowhere, "--course-dir", d], "does not exist"),
        (["import", "03", a_file, "--course-dir", d], "neither a folder nor a .zip"),
        (["init", a_file], "exists and is not a directory"),
        (["init", tmp_path / "new", "--course-src", nowhere], "no chapters with notebooks"),
        (["workspace", "--dir", a_file], str(a_file)),
        (["build", "--course-src", nowhere], "no chapter sources"),
        (["sync-solutions", "--course-src", nowhere], "no chapters with notebooks"),
        (["lab", nowhere], "does not exist"),
    ]
    for argv, needle in cases:
        code, err = _run(capsys, *argv)
        assert code == 2 and needle in err, (argv, code, err)


def test_corrupt_course_files_get_a_clean_error(tmp_path, capsys):
    from grader import course
    d = _tiny_course(tmp_path)
    (d / "gradebook.db").write_bytes(b"this is not sqlite" * 100)
    code, err = _run(capsys, "grades", "--course-dir", d)
    assert code == 2 and "cannot be opened as a gradebook" in err and "backup" in err
    (d / "nbgrader_config.py").write_text("c = get_config(\n")
    with pytest.raises(CourseError, match="nbgrader_config.py does not run: SyntaxError"):
        course.load_nbgrader_config(d)
    (d / ".mini-course.json").write_text("{truncated")
    code, err = _run(capsys, "import", "03", tmp_path, "--course-dir", d)
    assert code == 2 and ".mini-course.json cannot be read" in err and "init --force" in err


@pytest.mark.parametrize("make", ["missing", "folder", "text file", "not json"])
def test_check_of_a_bad_notebook_is_a_clean_error(make, tmp_path, capsys, monkeypatch):
    from grader_helpers import FIXTURE_COURSE
    monkeypatch.setenv("MINI_COURSE_SRC", str(FIXTURE_COURSE))
    nb = tmp_path / ("x.txt" if make == "text file" else "x.ipynb")
    if make == "folder":
        nb.mkdir()
    elif make != "missing":
        nb.write_text("{not json")
    code, err = _run(capsys, "check", "03", nb)
    assert code == 2 and str(nb) in err, err


def test_check_never_grades_the_instructors_notebook(tmp_path, capsys, monkeypatch):
    """No workspace notebook: an error that says how to make one, never a score."""
    from grader_helpers import FIXTURE_COURSE
    monkeypatch.setenv("MINI_COURSE_SRC", str(FIXTURE_COURSE))
    for ws in (tmp_path / "none", tmp_path / "empty"):
        (tmp_path / "empty" / "03_fixture").mkdir(parents=True, exist_ok=True)
        monkeypatch.setenv("MINI_WORKSPACE", str(ws))
        code = main(["check", "03"])
        captured = capsys.readouterr()
        assert code == 2
        assert "total" not in captured.out and "checking" not in captured.out
        assert "make lab" in captured.err and "mini-course workspace" in captured.err


# --------------------------------------------------------------------------- import

def _zip_with_a_corrupt_member(path: Path, members: dict[str, bytes], corrupt: str,
                               times: dict[str, tuple] | None = None) -> None:
    import zipfile
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            info = zipfile.ZipInfo(name, date_time=(times or {}).get(name, (2026, 11, 30, 12, 0, 0)))
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    with zipfile.ZipFile(path) as z:
        info = z.getinfo(corrupt)
    raw = bytearray(path.read_bytes())
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    for i in range(start + 5, start + min(info.compress_size, 60)):
        raw[i] ^= 0x5A                               # damage the deflate stream
    path.write_bytes(bytes(raw))


def test_import_survives_corrupt_members_and_names_duplicates_by_path(tmp_path, capsys):
    from grader import course
    from grader_helpers import FIXTURE_CHAPTER, FIXTURE_COURSE
    d = _tiny_course(tmp_path)
    good = (FIXTURE_COURSE / FIXTURE_CHAPTER / "fixture.ipynb").read_bytes()
    newer = good.replace(b"Fixture chapter", b"Fixture chapter (newer)")
    z = tmp_path / "lms.zip"
    _zip_with_a_corrupt_member(z, {
        "subs/alice_fixture.ipynb": good,
        "subs/bob_fixture.ipynb": good,
        "subs/a/erin_fixture.ipynb": good,
        "subs/b/erin-fixture.ipynb": newer,
        "subs/c/dan_fixture.ipynb": good,
        "subs/d/dan.ipynb": newer,
    }, corrupt="subs/bob_fixture.ipynb", times={
        "subs/a/erin_fixture.ipynb": (2026, 11, 29, 9, 0, 0),
        "subs/b/erin-fixture.ipynb": (2026, 11, 30, 10, 0, 0)})
    code = main(["import", "03", str(z), "--course-dir", str(d)])
    out = capsys.readouterr().out
    assert code == 0 and "Traceback" not in out
    sub = d / "submitted"
    assert (sub / "alice" / FIXTURE_CHAPTER / "fixture.ipynb").read_bytes() == good
    assert not (sub / "bob").exists()                           # corrupt: rejected, rest imported
    assert "subs/bob_fixture.ipynb: corrupt in the zip" in out
    # The newer of two files for one student wins; both are named by their paths.
    assert (sub / "erin" / FIXTURE_CHAPTER / "fixture.ipynb").read_bytes() == newer
    line = next(l for l in out.splitlines() if l.startswith("rejected: subs/a/erin_fixture.ipynb"))
    assert "kept subs/b/erin-fixture.ipynb (2026-11-30 10:00:00)" in line
    assert "skipped subs/a/erin_fixture.ipynb (2026-11-29 09:00:00)" in line
    # Equal times: neither is imported, the instructor chooses.
    assert not (sub / "dan").exists()
    assert "subs/c/dan_fixture.ipynb" in out and "subs/d/dan.ipynb" in out
    rejected = {r["path"]: r for r in course.rejected_at_import(d, FIXTURE_CHAPTER)}
    assert set(rejected) == {"subs/bob_fixture.ipynb", "subs/a/erin_fixture.ipynb",
                             "subs/c/dan_fixture.ipynb", "subs/d/dan.ipynb"}
    assert rejected["subs/a/erin_fixture.ipynb"]["student"] == "erin"
    # Importing the upload again, repaired, replaces its rejections.
    import zipfile
    with zipfile.ZipFile(z, "w") as zz:
        zz.writestr("subs/bob_fixture.ipynb", good)
    assert main(["import", "03", str(z), "--course-dir", str(d)]) == 0
    capsys.readouterr()
    assert course.rejected_at_import(d, FIXTURE_CHAPTER) == []
    assert (sub / "bob" / FIXTURE_CHAPTER / "fixture.ipynb").exists()


@pytest.mark.parametrize("upload", ["empty zip", "empty folder", "folder of other files"])
def test_import_of_nothing_says_so(upload, tmp_path, capsys):
    import zipfile
    d = _tiny_course(tmp_path)
    path = tmp_path / "upload"
    if upload == "empty zip":
        path = tmp_path / "upload.zip"
        zipfile.ZipFile(path, "w").close()
    else:
        path.mkdir()
        if upload == "folder of other files":
            (path / "notes.txt").write_text("x")
    code, err = _run(capsys, "import", "03", path, "--course-dir", d)
    assert code == 2 and "holds no submissions" in err and "<student>_<notebook>.ipynb" in err
    assert not (d / "submitted").exists()
