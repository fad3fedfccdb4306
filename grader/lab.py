"""``mini-course lab``: JupyterLab on the learner's workspace or on an instructor's course.

nbgrader's server extensions (formgrader above all) read ``nbgrader_config.py`` from the
directory the server was *started in*, not from ``--ServerApp.root_dir``.  So an
instructor's Lab starts with the course directory as its working directory, and formgrader
finds the course, its gradebook and its configuration.

The learner's Lab (no course directory: the workspace, what ``make lab`` opens) has no use
for nbgrader's instructor tools, which would only confuse (a "Formgrader" that finds no
course, "Create Assignment" on the student's own notebook), nor for the exchange-based
assignment and course lists (a workspace has no exchange).  They are switched off for that
Lab only -- the server extensions and their JupyterLab plugins -- through a configuration
folder added to ``JUPYTER_CONFIG_PATH`` (it ranks above the environment's own
configuration, below the user's).  The Validate button stays.
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from grader.course import CourseError

__all__ = ["LabLaunch", "lab_launch", "LEARNER_OFF_SERVER", "LEARNER_OFF_PLUGINS"]

#: nbgrader's server extensions switched off in the learner's Lab (validate stays on).
LEARNER_OFF_SERVER = ("nbgrader.server_extensions.formgrader",
                      "nbgrader.server_extensions.assignment_list",
                      "nbgrader.server_extensions.course_list")
#: nbgrader's JupyterLab plugins switched off there (the menu lists only the tools above).
LEARNER_OFF_PLUGINS = ("@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment",
                       "@jupyter/nbgrader:assignment-list", "@jupyter/nbgrader:course-list",
                       "@jupyter/nbgrader:menu")
LEARNER_CONFIG = ".mini-lab"   # inside the workspace (hidden in Lab's file browser)


@dataclass
class LabLaunch:
    """How to start Lab: run ``argv`` in ``cwd`` with ``env``; ``mode`` is ``learner``,
    ``instructor`` (a course directory) or ``folder`` (any other folder, e.g. course/)."""
    argv: list[str]
    cwd: Path
    env: dict[str, str]
    mode: str
    notes: list[str] = field(default_factory=list)


def _learner_config(ws: Path) -> Path:
    """Write (again, every time: it is ours) the learner's Jupyter configuration folder."""
    cfg = ws / LEARNER_CONFIG
    (cfg / "labconfig").mkdir(parents=True, exist_ok=True)
    server = {"ServerApp": {"jpserver_extensions": {name: False for name in LEARNER_OFF_SERVER}}}
    page = {"disabledExtensions": {name: True for name in LEARNER_OFF_PLUGINS}}
    for path, data in ((cfg / "jupyter_server_config.json", server),
                       (cfg / "labconfig" / "page_config.json", page)):
        text = json.dumps(data, indent=2) + "\n"
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    (cfg / "README.txt").write_text(
        "Written by `mini-course lab` on every start: nbgrader's instructor tools are "
        "switched off in the learner's JupyterLab. Edits here are overwritten.\n")
    return cfg


def lab_launch(course_dir: str | Path | None = None, extra_args: list[str] | None = None,
               *, workspace_dir: str | Path | None = None, log=print) -> LabLaunch:
    """The command that opens ``course_dir`` in JupyterLab (see the module docstring);
    without ``course_dir``, the learner's workspace (created or extended first)."""
    env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)      # nbgrader shells out to alembic
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    notes: list[str] = []
    if course_dir is None:
        from grader.course import workspace
        folder = workspace(workspace_dir, log=log)
        mode = "learner"
        cfg = _learner_config(folder)
        env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(
            [str(cfg)] + [p for p in env.get("JUPYTER_CONFIG_PATH", "").split(os.pathsep) if p])
    else:
        folder = Path(course_dir).expanduser().resolve()
        if not folder.exists():
            raise CourseError(f"{course_dir} does not exist (create a course with "
                              f"`mini-course init {course_dir}`)")
        if not folder.is_dir():
            raise CourseError(f"{course_dir} is not a folder")
        if (folder / "nbgrader_config.py").is_file():
            mode = "instructor"
            notes.append(f"formgrader: Nbgrader > Formgrader, on the course in {folder}")
        else:
            mode = "folder"
            notes.append(f"{folder} has no nbgrader_config.py, so formgrader will find no "
                         f"course here; open a course directory (`mini-course init DIR`) for it")
    argv = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={folder}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        argv.append("--allow-root")
    argv += list(extra_args or [])
    return LabLaunch(argv, folder, env, mode, notes)


def run_lab(launch: LabLaunch, log=print) -> None:  # pragma: no cover - replaces this process
    """Start Lab in ``launch.cwd`` (replacing this process: Ctrl-C stops Lab directly)."""
    for note in launch.notes:
        log(note)
    log(f"Opening JupyterLab on {launch.cwd}/ (stop it with Ctrl-C)")
    os.chdir(launch.cwd)
    os.execve(launch.argv[0], launch.argv, launch.env)
