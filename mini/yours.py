"""Your mini: which parts of mini run your code, chapter to chapter.

A chapter's setup cell calls :func:`use_your_code`::

    MY_CODE = None   # "mine" | "references"; None: $MINI_MY_CODE, else the default here
    your_mini = use_your_code(MY_CODE, chapter="05")

In the learner's workspace (``mini-course workspace``; its chapter folders carry a
``.mini-workspace.json``) the default is **mine where it passes**: your answers from the
earlier chapters' notebooks of the workspace, read as text by grade id, are checked by their
visible and hidden checks (``grader.own``, which needs the course repository) and the ones
that pass are registered into their slots; every other slot runs mini's catch-up reference,
with one line saying why.  Anywhere else (a class release, the course's own notebooks,
autograding) the default is **references only**, and nothing outside the chapter's folder is
ever read: a classmate's machine is not a learner's own.

:func:`table` shows, for every slot of the chapters so far, whether it runs your code, with
a small picture of mini's layers; :func:`share` says how many of the ops a profiled run
executed ran your code (counted by :mod:`mini.utils.profiler`).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["use_your_code", "table", "share", "setting", "MINE", "REFERENCES", "ENV",
           "WORKSPACE_MARKER"]

MINE = "mine"               # my code where it passes its checks
REFERENCES = "references"   # mini's references only
ENV = "MINI_MY_CODE"
#: Written by ``mini-course workspace`` into each chapter folder of a learner's workspace.
WORKSPACE_MARKER = ".mini-workspace.json"
_WORDS = {MINE: ("mine", "mine where it passes", "my code", "my code where it passes", "yours"),
          REFERENCES: ("references", "references only", "reference", "ref")}

# mini's layers, bottom up (the packages under mini/), and what each holds
LAYERS = [("ndarray", "strided arrays, views"), ("backends", "C++ kernels"),
          ("autograd", "graph, backward"), ("ops", "differentiable ops, convolution"),
          ("nn", "modules, init, losses"), ("optim", "optimizers, schedules"),
          ("utils", "checkpoints, data"), ("distributed", "collectives")]

# What the setup cell decided: {"setting", "chapter", "loaded": {slot: notebook},
# "why": {slot: reason it runs the reference}}
_STATE: dict = {"setting": REFERENCES, "chapter": None, "loaded": {}, "why": {}}
#: True while an earlier chapter's cells are being loaded: their setup cell's own call of
#: use_your_code must not load (or print) anything.
LOADING = [False]


def setting(value: str | None = None, *, in_workspace: bool) -> str:
    """The setting in force: ``value`` (the setup cell's), else ``$MINI_MY_CODE``, else
    ``"mine"`` in a workspace and ``"references"`` elsewhere.  A word it does not know is
    an error that lists the ones it does."""
    for given, where in ((value, "the setup cell's MY_CODE"), (os.environ.get(ENV), f"${ENV}")):
        if given is None or given == "":
            continue
        word = str(given).strip().lower()
        for name, words in _WORDS.items():
            if word in words:
                return name
        raise ValueError(f"{where} is {given!r}: use \"mine\" (your code where it passes its "
                         f"checks) or \"references\" (mini's references only)")
    return MINE if in_workspace else REFERENCES


def _chapter_folder() -> Path:
    """The folder of the ``mini`` this kernel imported (a workspace or release chapter
    folder holds its own copy of mini)."""
    import mini
    return Path(mini.__file__).resolve().parent.parent


def _workspace_of(folder: Path) -> dict | None:
    """The workspace marker of ``folder`` (None in a class release, the course's notebooks,
    or while nbgrader executes the notebook)."""
    if os.environ.get("NBGRADER_EXECUTION"):
        return None
    marker = folder / WORKSPACE_MARKER
    if not marker.is_file():
        return None
    try:
        data = json.loads(marker.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def use_your_code(value: str | None = None, *, chapter: str | int, show: bool = True) -> dict:
    """Decide which earlier slots run your code (see the module docstring), register the
    passing ones, print the table (``show``), and return what was decided."""
    if LOADING[0]:
        return dict(_STATE)
    chapter = f"{int(chapter):02d}"
    folder = _chapter_folder()
    ws = _workspace_of(folder)
    mode = setting(value, in_workspace=ws is not None)
    loaded, why = {}, {}
    if mode == MINE and ws is None:
        note = ("this folder is not part of your workspace (a class release or the course's "
                "own notebooks): it loads nothing from outside its folder, references only")
    elif mode == MINE:
        try:
            from grader.own import load_earlier_chapters
        except ImportError:
            note = ("checking your earlier answers needs the course repository (grader); "
                    "references only")
        else:
            root = (folder / ws.get("workspace", "..")).resolve()
            loaded, why = load_earlier_chapters(root, chapter)
            note = "your code where it passes its checks; mini's reference elsewhere"
    else:
        note = "mini's references only"
    _STATE.update(setting=mode, chapter=chapter, loaded=loaded, why=why, note=note)
    if show:
        print(table(upto=chapter, this_chapter=False))
    return dict(_STATE)


def _slots_upto(chapter: str, this_chapter: bool) -> list[str]:
    from mini.exercises import slots
    c = int(chapter)
    return sorted(s for s in slots() if int(s[:2]) < c or (this_chapter and int(s[:2]) == c))


def status(slot: str, chapter: str | None = None) -> tuple[str, str]:
    """(``"yours"`` / ``"reference"`` / ``"not written"``, where from or why); ``chapter``:
    the notebook's chapter (its own slots are yours once their cell has run)."""
    from mini import exercises as ex
    if slot in ex._ACTIVE:
        return "yours", _STATE["loaded"].get(slot, "this notebook")
    if ex.runs_reference(slot):
        why = _STATE["why"].get(slot)
        if why is None and chapter is not None and slot[:2] == chapter:
            why = "mini's own solution (this copy of mini has it): run your cell to use yours"
        elif why is None:
            why = "references only" if _STATE["setting"] == REFERENCES else "not written yet"
        return "reference", why
    return "not written", "write it in this notebook"


def _layer(slot: str) -> str:
    from mini.exercises import slots
    parts = slots()[slot].module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def table(upto: str | int | None = None, this_chapter: bool = True) -> str:
    """Which slots of the chapters so far run your code: a picture of mini's layers, then
    one row per slot.  ``this_chapter``: include the chapter's own slots (the payoff's
    table; the setup cell's shows the earlier chapters only)."""
    chapter = f"{int(upto):02d}" if upto is not None else _STATE["chapter"] or "99"
    rows = [(s, _layer(s)) + status(s, chapter) for s in _slots_upto(chapter, this_chapter)]
    lines = [f"Your mini ({'chapters before ' + chapter if not this_chapter else 'so far'}): "
             f"{_STATE.get('note', 'what runs in this notebook')}"]
    if not rows:
        return lines[0] + "\n  (no earlier chapters: everything you build starts here)"
    counts = {layer: [r[2] == "yours" for r in rows if r[1] == layer] for layer, _ in LAYERS}
    widest = max(len(c) for c in counts.values())
    lines.append(f"  mini's layers, bottom up{'':<{widest + 26}}yours / slots")
    for layer, what in reversed(LAYERS):
        mine = counts[layer]
        if not mine:
            continue
        bar = "#" * sum(mine) + "." * (len(mine) - sum(mine))   # one mark per slot
        lines.append(f"  {layer:<12}{what:<34}{bar:<{widest + 2}}{sum(mine):>2} / {len(mine)}")
    width = max(len(r[0]) for r in rows)
    lines.append("")
    for slot, layer, state, why in rows:
        lines.append(f"  {slot:<{width}}  {layer:<11} {state:<11} {why}".rstrip())
    return "\n".join(lines)


def share(prof) -> str:
    """One line: how many of the ops ``prof`` (a :class:`mini.utils.profiler.Profile`)
    recorded ran your code."""
    total = prof.num_ops
    mine = prof.learner_ops()
    pct = 100.0 * mine / total if total else 0.0
    return (f"{mine:,} of the {total:,} ops this run executed ({pct:.0f}%) ran your code "
            f"(counted by mini's profiler: your function ran inside the op, or called it)")
