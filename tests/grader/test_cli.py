"""The mini-course command line: parsing, chapter spellings, errors as exit codes."""
from __future__ import annotations

import subprocess
import sys

import pytest

from grader.cli import build_parser, main


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
