"""``mini-course lab``: formgrader works on a course directory; the learner's Lab has no
instructor tools but keeps Validate.  The end-to-end tests start a real Jupyter server
with the command ``mini-course lab`` would run and ask it over HTTP."""
from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from grader.cli import build_parser, main
from grader.lab import LEARNER_OFF_PLUGINS, LEARNER_OFF_SERVER, lab_launch
from grader_helpers import FIXTURE_CHAPTER, FIXTURE_COURSE

TOKEN = "mini-lab-test"
quiet = lambda *a, **k: None  # noqa: E731


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


class _Server:
    """The launch's command with a port, a token and no browser, until the block ends."""

    def __init__(self, launch, log: Path):
        self.port = _free_port()
        argv = launch.argv + ["--no-browser", f"--port={self.port}", "--ServerApp.ip=127.0.0.1",
                              f"--IdentityProvider.token={TOKEN}"]
        self.log = log.open("wb")
        self.proc = subprocess.Popen(argv, cwd=launch.cwd, env=launch.env, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        self.base = f"http://127.0.0.1:{self.port}"

    def __enter__(self):
        deadline = time.monotonic() + 180      # a loaded 2-core machine starts it slowly
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, "the Jupyter server exited"
            try:
                urllib.request.urlopen(f"{self.base}/api/status?token={TOKEN}", timeout=5)
                return self
            except (urllib.error.URLError, OSError):
                time.sleep(0.5)
        raise AssertionError("the Jupyter server did not answer within 180 s")

    def get(self, path: str) -> tuple[int, str]:
        return _get(f"{self.base}{path}{'&' if '?' in path else '?'}token={TOKEN}")

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def _page_config(html: str) -> dict:
    start = html.index('id="jupyter-config-data"')
    start = html.index(">", start) + 1
    return json.loads(html[start:html.index("</script>", start)])


# --------------------------------------------------------------------------- the command

def test_lab_arguments_parse():
    p = build_parser()
    assert p.parse_args(["lab"]).dir is None
    assert p.parse_args(["lab", "c", "--", "--port", "8890"]).jupyter_args == ["--port", "8890"]


def test_lab_on_a_course_runs_in_the_course_directory(tmp_path):
    course_dir = tmp_path / "c"
    course_dir.mkdir()
    (course_dir / "nbgrader_config.py").write_text("c = get_config()\n")
    launch = lab_launch(course_dir, ["--port", "8890"])
    assert launch.mode == "instructor" and launch.cwd == course_dir.resolve()
    assert f"--ServerApp.root_dir={course_dir.resolve()}" in launch.argv
    assert launch.argv[-2:] == ["--port", "8890"]
    assert "JUPYTER_CONFIG_PATH" not in launch.env or ".mini-lab" not in launch.env["JUPYTER_CONFIG_PATH"]
    # Any other folder opens too, with a note that formgrader needs a course directory.
    plain = lab_launch(tmp_path)
    assert plain.mode == "folder" and "no nbgrader_config.py" in plain.notes[0]


def test_lab_bad_directory_is_a_clean_error(tmp_path, capsys):
    assert main(["lab", str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "file").write_text("x")
    assert main(["lab", str(tmp_path / "file")]) == 2
    assert "is not a folder" in capsys.readouterr().err


# --------------------------------------------------------------------------- end to end

@pytest.mark.nbgrader
@pytest.mark.slow
def test_formgrader_finds_the_course(graded_fixture, tmp_path):
    """Started from anywhere, `mini-course lab COURSE` gives a formgrader that lists the
    chapter and its graded submissions (nbgrader reads nbgrader_config.py from the cwd)."""
    course_dir = tmp_path / "course"
    shutil.copytree(graded_fixture.course_dir, course_dir)
    launch = lab_launch(course_dir)
    with _Server(launch, tmp_path / "server.log") as server:
        status, body = server.get("/formgrader/api/assignments")
        assert status == 200, body[:500]
        assignments = {a["name"]: a for a in json.loads(body)}
        assert assignments[FIXTURE_CHAPTER]["num_submissions"] == len(graded_fixture.scores)
        assert assignments[FIXTURE_CHAPTER]["max_score"] == 16.0
        page = _page_config(server.get("/lab")[1])
        assert not set(LEARNER_OFF_PLUGINS) & set(page.get("disabledExtensions", []))


@pytest.mark.nbgrader
@pytest.mark.slow
def test_the_learners_lab_has_no_instructor_tools_but_validates(graded_fixture, tmp_path,
                                                               monkeypatch):
    monkeypatch.setenv("MINI_COURSE_SRC", str(FIXTURE_COURSE))
    ws = tmp_path / "workspace"
    shutil.copytree(graded_fixture.release_dir, ws / FIXTURE_CHAPTER)   # nothing to create
    launch = lab_launch(None, workspace_dir=ws, log=quiet)
    assert launch.mode == "learner" and launch.cwd == ws.resolve()
    with _Server(launch, tmp_path / "server.log") as server:
        page = _page_config(server.get("/lab")[1])
        assert set(LEARNER_OFF_PLUGINS) <= set(page["disabledExtensions"])
        assert "@jupyter/nbgrader:validate-assignment" not in page["disabledExtensions"]
        assert server.get("/formgrader")[0] == 404
        # Validate's server extension answers: it validates the learner's blank notebook.
        nb = f"{FIXTURE_CHAPTER}/fixture.ipynb"
        req = urllib.request.Request(f"{server.base}/assignments/validate",
                                     data=f"path={nb}".encode(), method="POST",
                                     headers={"Authorization": f"token {TOKEN}"})
        with urllib.request.urlopen(req, timeout=120) as r:
            result = json.loads(r.read().decode())
        assert result["success"], result
        failed = result["value"]["failed"]            # the blank's visible tests fail
        assert failed and any("compact_strides" in f["source"] for f in failed)
    log = (tmp_path / "server.log").read_text()
    for name in LEARNER_OFF_SERVER:
        assert f"{name} | extension was successfully loaded" not in log
