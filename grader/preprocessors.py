"""nbgrader preprocessors of ``mini-course`` (named in the course's nbgrader_config.py).

Autograde, in this order:

- :class:`SandboxedExecute` replaces nbgrader's ``Execute``: the kernel runs in the sandbox
  (:mod:`grader.kernel`) with the chapter's student ``mini`` (never the submitted one) and no
  grading variables in its environment.  Hidden-test regions are not run in the kernel
  (their verdicts come from :class:`TrustedVerdicts`).  A cell that kills the kernel
  (``os._exit``, a crash, the memory limit) or hangs past its timeout -- even one that
  ignores interrupts -- scores 0: the kernel is restarted, the cells that ran before are
  replayed, and grading goes on.  The notebook as a whole has a wall-clock budget, and the
  output kept per cell and per notebook is capped in bytes.
- :class:`TrustedVerdicts` computes the hidden tests' points in the trusted process
  (:func:`grader.grading.grade_notebook`: the notebook's answers run in the sandboxed worker
  and only plain data comes back) and writes them into the test cells: the check's message
  as the cell's output, and the score as nbgrader reads it (full points: no error; none: an
  error; partial credit: an ``execute_result`` holding the points).

Feedback:

- :class:`ScrubHiddenTests` removes hidden-test regions from the source of test cells AND
  from their outputs (nbgrader's default feedback shows both), keeps for each error only
  ``ename: evalue``, and caps every cell's output in bytes.
"""
from __future__ import annotations

import copy
import json
import shutil
import tempfile
import time
from pathlib import Path

from nbclient.exceptions import DeadKernelError
from nbclient.util import run_sync
from nbformat.notebooknode import NotebookNode
from nbgrader import utils
from nbgrader.preprocessors import NbGraderPreprocessor
from nbgrader.preprocessors.execute import Execute
from traitlets import Dict, Float, Integer, Unicode

from grader.grading import BEGIN_HIDDEN, END_HIDDEN, hidden_region_lines, split_hidden

__all__ = ["SandboxedExecute", "ResilientExecute", "TrustedVerdicts", "ScrubHiddenTests",
           "hidden_lines", "remove_hidden", "cap_outputs", "make_sandbox"]

hidden_lines = hidden_region_lines


def _error_output(ename: str, evalue: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=evalue,
                        traceback=[f"{ename}: {evalue}"])


def _stream(text: str, name: str = "stdout") -> NotebookNode:
    return NotebookNode(output_type="stream", name=name, text=text)


def remove_hidden(source: str) -> str:
    """``source`` without its hidden-test regions (markers included)."""
    return "\n".join(split_hidden(source)[0])


def _output_size(out) -> int:
    try:
        return len(json.dumps(out, default=str))
    except (TypeError, ValueError):  # pragma: no cover
        return 0


def cap_outputs(outputs: list, limit: int) -> list:
    """Outputs whose JSON size adds up to at most ``limit`` bytes; a longer one is cut (text)
    or dropped, and one note says how much was left out."""
    kept, used, dropped = [], 0, 0
    for out in outputs:
        size = _output_size(out)
        if used + size <= limit:
            kept.append(out)
            used += size
            continue
        room = limit - used
        if out.get("output_type") == "stream" and room > 200:
            text = str(out.get("text", ""))[: room - 200]
            kept.append(_stream(text, out.get("name", "stdout")))
            used = limit
        dropped += size
    if dropped:
        kept.append(_stream(f"\n... output truncated: {dropped:,} more bytes not kept ...\n"))
    return kept


def _course_paths_from(resources: dict) -> tuple[Path | None, str]:
    """(course root, assignment) of the notebook nbgrader is processing: its folder is
    ``<root>/autograded/<student>/<assignment>``."""
    path = (resources or {}).get("metadata", {}).get("path") or ""
    assignment = (resources or {}).get("nbgrader", {}).get("assignment") or ""
    if not path or not assignment:
        return None, assignment
    p = Path(path).resolve()
    return (p.parents[2] if len(p.parents) >= 3 else None), assignment


def make_sandbox(kind: str):
    """The :class:`grader.sandbox.Sandbox` for a configured kind (``bwrap``, ``none``,
    ``auto``)."""
    from grader.sandbox import Sandbox
    import shutil as _sh
    if kind == "none":
        return Sandbox.none()
    if kind == "bwrap":
        return Sandbox("bwrap", bwrap=_sh.which("bwrap"))
    return Sandbox.detect()


class SandboxedExecute(Execute):
    """nbgrader's Execute with the kernel in the sandbox, surviving cells that kill, hang or
    exhaust the kernel (see the module docstring)."""

    max_restarts = Integer(8, help="Give up on a notebook (remaining cells score 0) after "
                                   "this many kernel restarts").tag(config=True)
    error_on_timeout = Dict(default_value={
        "ename": "CellTimeoutError",
        "evalue": "the cell did not finish within its time limit and was interrupted",
        "traceback": ["CellTimeoutError: the cell did not finish within its time limit and was "
                      "interrupted"]}).tag(config=True)
    sandbox = Unicode("auto", help="'bwrap', 'none' (no confinement) or 'auto'").tag(config=True)
    mini_dir = Unicode("", help="The chapter's student copy of mini (source/<chapter>/mini), "
                                "read-only as mini/ in the kernel's folder").tag(config=True)
    support_dir = Unicode("", help="Folder whose other files (data, not notebooks, not mini) "
                                   "are copied next to the notebook").tag(config=True)
    memory_limit = Unicode("6G", help="Memory limit of the kernel's sandbox, e.g. '6G'").tag(config=True)
    procs_limit = Integer(512, help="Processes and threads of the kernel's sandbox").tag(config=True)
    notebook_timeout = Float(1800.0, help="Wall-clock seconds for the whole notebook").tag(config=True)
    max_output_bytes = Integer(100_000, help="Output kept per cell, in bytes").tag(config=True)
    max_notebook_output_bytes = Integer(2_000_000, help="Output kept per notebook, in "
                                                        "bytes").tag(config=True)
    report_path = Unicode("", help="Append what happened (timeouts, restarts) here, as JSON "
                                   "lines").tag(config=True)
    cache_dir = Unicode("", help="A writable C++ build cache shared with the hidden-check "
                                 "worker of the same submission").tag(config=True)

    # ------------------------------------------------------------------ the kernel
    def create_kernel_manager(self):
        from grader.kernel import SandboxKernelManager
        from grader.sandbox import Limits, parse_memory
        if not self.kernel_name:
            self.kernel_name = self.nb.metadata.get("kernelspec", {}).get("name") or "python3"
        readonly = {}
        if self.mini_dir:
            readonly[Path(self.mini_dir)] = "mini"
        self.km = SandboxKernelManager(
            sandbox=self._box, scratch=self._scratch, readonly=readonly,
            limits=Limits(memory=parse_memory(self.memory_limit), procs=self.procs_limit or None),
            cache_dir=Path(self.cache_dir) if self.cache_dir else None,
            kernel_name=self.kernel_name, config=self.config)
        return self.km

    def _prepare_scratch(self) -> Path:
        scratch = Path(tempfile.mkdtemp(prefix="mk-", dir="/tmp" if Path("/tmp").is_dir() else None))
        if self.support_dir:
            src = Path(self.support_dir)
            for p in sorted(src.iterdir()) if src.is_dir() else []:
                if p.name == "mini" or p.suffix == ".ipynb" or p.name.startswith("."):
                    continue
                if p.is_dir():
                    shutil.copytree(p, scratch / p.name, symlinks=False)
                elif p.is_file():
                    shutil.copy2(p, scratch / p.name)
        return scratch

    # ------------------------------------------------------------------ output caps
    def process_message(self, msg, cell, cell_index):
        kind = msg.get("msg_type", "")
        if kind in ("stream", "display_data", "execute_result", "error"):
            size = _output_size(msg.get("content", {}))
            used = self._cell_bytes.get(cell_index, 0)
            if used + size > self.max_output_bytes or \
                    self._nb_bytes + size > self.max_notebook_output_bytes:
                self._dropped[cell_index] = self._dropped.get(cell_index, 0) + size
                if kind == "error":  # keep the error's name: it decides the score
                    content = msg.get("content", {})
                    cell.outputs.append(_error_output(str(content.get("ename", "Error"))[:200],
                                                      str(content.get("evalue", ""))[:2000]))
                return None
            self._cell_bytes[cell_index] = used + size
            self._nb_bytes += size
        return super().process_message(msg, cell, cell_index)

    # ------------------------------------------------------------------ the loop
    def preprocess(self, nb, resources=None, km=None):
        from nbclient import NotebookClient
        from nbclient.exceptions import CellTimeoutError

        root, assignment = _course_paths_from(resources)
        if root is not None and not self.mini_dir:  # nbgrader run by hand on the course
            self.mini_dir = str(root / "source" / assignment / "mini")
        if root is not None and not self.support_dir:
            self.support_dir = str(root / "source" / assignment)
        self._box = make_sandbox(self.sandbox)
        self._scratch = self._prepare_scratch()
        self._cell_bytes, self._dropped, self._nb_bytes = {}, {}, 0
        self.events: list[dict] = []
        started = time.monotonic()
        cell_timeout = self.timeout

        def timeout_func(cell):
            left = self.notebook_timeout - (time.monotonic() - started)
            return max(1, int(min(cell_timeout or left, left)))

        NotebookClient.__init__(self, nb, None)
        self.timeout_func = timeout_func
        # A last resort: whatever nbclient waits for, the kernel dies when the notebook's
        # budget (and a grace period) is over, which ends every wait on it.
        self._watchdog_fired = False

        def watchdog():
            self._watchdog_fired = True
            proc = getattr(getattr(self.km, "provisioner", None), "sandbox_process", None)
            if proc is not None:
                proc.kill()

        import threading
        timer = threading.Timer(self.notebook_timeout + 60, watchdog)
        timer.daemon = True
        timer.start()
        self.reset_execution_trackers()
        self._check_assign_resources(resources)
        replay: list[int] = []
        restarts = 0
        try:
            with self.setup_kernel():
                assert self.kc
                info_msg = self.wait_for_reply(self.kc.kernel_info())
                if info_msg:
                    self.nb.metadata["language_info"] = info_msg["content"]["language_info"]
                index = 0
                cells = self.nb.cells
                while index < len(cells):
                    cell = cells[index]
                    if time.monotonic() - started >= self.notebook_timeout or self._watchdog_fired:
                        self.events.append({"cell": index, "event": "budget"})
                        self._give_up(index, "not run: the time budget for this notebook "
                                             f"({self.notebook_timeout:g} s) ran out")
                        break
                    broken = self._run_cell(cell, resources, index)
                    if broken and (self._watchdog_fired or
                                   time.monotonic() - started >= self.notebook_timeout):
                        self.events.append({"cell": index, "event": "budget"})
                        self._give_up(index + 1, "not run: the time budget for this notebook "
                                                 f"({self.notebook_timeout:g} s) ran out")
                        break
                    if broken:
                        restarts += 1
                        self.log.warning("cell %d %s; restarting the kernel (%d)", index, broken, restarts)
                        if restarts > self.max_restarts or not self._restart_and_replay(replay):
                            self._give_up(index + 1, "not run: the kernel kept dying or hanging "
                                                     "in earlier cells")
                            break
                    elif cell.cell_type == "code" and not any(
                            o.get("ename") == "CellTimeoutError" for o in cell.get("outputs", [])):
                        replay.append(index)
                    index += 1
        finally:
            timer.cancel()
            if self.km is not None and hasattr(self.km, "memory_exceeded") and \
                    self.km.memory_exceeded() and not any(e["event"] == "memory" for e in self.events):
                self.events.append({"cell": None, "event": "memory"})
            for i, n in self._dropped.items():
                if i < len(self.nb.cells):
                    self.nb.cells[i].setdefault("outputs", []).append(
                        _stream(f"\n... output truncated: {n:,} more bytes not kept ...\n"))
            if self.km is not None and hasattr(self.km, "cleanup_connection_dir"):
                self.km.cleanup_connection_dir()
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._write_report(resources, restarts, time.monotonic() - started)
        self.set_widgets_metadata()
        return self.nb, self.resources

    def _run_cell(self, cell, resources, index) -> str:
        """Execute one cell (hidden-test regions left out); '' or why the kernel is broken."""
        from nbclient.exceptions import CellTimeoutError
        source = cell.get("source", "")
        strip = cell.cell_type == "code" and BEGIN_HIDDEN in source
        if strip:
            cell.source = remove_hidden(source)
        broken = ""
        try:
            self.preprocess_cell(cell, resources, index)
        except DeadKernelError:
            broken = "died"
        except CellTimeoutError:
            broken = "timeout"
        except Exception as e:  # noqa: BLE001 - anything else from talking to the kernel
            self.log.warning("cell %d: %s: %s", index, type(e).__name__, e)
            broken = "died"
        finally:
            if strip:
                cell.source = source
        timed_out = any(o.get("output_type") == "error" and o.get("ename") == "CellTimeoutError"
                        for o in cell.get("outputs", []))
        if broken == "timeout" and not timed_out:
            cell.setdefault("outputs", []).append(_error_output(
                "CellTimeoutError", "the cell did not finish in time and ignored the interrupt; "
                                    "the grader restarted the kernel and went on"))
            timed_out = True
        if timed_out:
            self.events.append({"cell": index, "event": "timeout"})
        if broken == "died":
            memory = self.km is not None and self.km.memory_exceeded()
            self.events.append({"cell": index, "event": "memory" if memory else "died"})
            why = ("the kernel ran out of memory (the limit is " + self.memory_limit + ")"
                   if memory else "the kernel died (os._exit, a crash, or the memory limit)")
            cell.setdefault("outputs", []).append(_error_output(
                "DeadKernelError", f"{why} while running this cell; the grader restarted it and "
                                   f"went on with the next cell"))
        if not broken and timed_out and not self._responsive():
            broken = "timeout"  # the interrupt did not stop it
        return broken

    def _write_report(self, resources, restarts, seconds) -> None:
        if not self.report_path:
            return
        notebook = (resources or {}).get("nbgrader", {}).get("notebook", "")
        with open(self.report_path, "a") as f:
            f.write(json.dumps({"kind": "execute", "notebook": notebook, "events": self.events,
                                "restarts": restarts, "seconds": round(seconds, 3)}) + "\n")

    def _responsive(self, wait: float = 3.0) -> bool:
        """True when the kernel answers a trivial execute within ``wait`` seconds."""
        from queue import Empty
        try:
            msg_id = self.kc.execute("pass", silent=True, store_history=False)
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                try:
                    msg = run_sync(self.kc.shell_channel.get_msg)(timeout=0.5)
                except Empty:
                    continue
                if msg["parent_header"].get("msg_id") == msg_id:
                    return True
        except Exception:  # noqa: BLE001
            return False
        return False

    def _restart_and_replay(self, replay: list[int]) -> bool:
        try:
            run_sync(self.km.restart_kernel)(now=True)
            try:
                self.kc.stop_channels()
            except Exception:  # pragma: no cover
                pass
            self.kc = None
            self.start_new_kernel_client()
            for i in replay:
                shadow = copy.deepcopy(self.nb.cells[i])
                shadow.source = remove_hidden(shadow.source)
                self.execute_cell(shadow, i, store_history=False)
                if any(o.get("ename") == "CellTimeoutError" for o in shadow.get("outputs", [])):
                    return False
        except Exception as e:  # noqa: BLE001 - the kernel could not be restarted
            self.log.error("could not restart the kernel: %s", e)
            return False
        return True

    def _give_up(self, start: int, why: str) -> None:
        for cell in self.nb.cells[start:]:
            if cell.cell_type == "code" and cell.source.strip():
                cell.outputs = [_error_output("NotRunError", why)]


#: The old name (course directories made before the sandbox name it in their config).
ResilientExecute = SandboxedExecute


class TrustedVerdicts(NbGraderPreprocessor):
    """Hidden-test points from the trusted grader, written into the test cells (see the
    module docstring).  Runs after :class:`SandboxedExecute`, before ``SaveAutoGrades``."""

    source_dir = Unicode("", help="source/<chapter>: the instructor's notebooks").tag(config=True)
    mini_dir = Unicode("", help="The chapter's student copy of mini").tag(config=True)
    sandbox = Unicode("auto", help="'bwrap', 'none' or 'auto'").tag(config=True)
    secret = Unicode("", help="The course's seed secret (inputs of the checks)").tag(config=True)
    check_timeout = Float(60.0, help="Seconds per hidden check").tag(config=True)
    notebook_timeout = Float(1800.0, help="Seconds for all hidden checks of a notebook").tag(config=True)
    memory_limit = Unicode("4G", help="Memory limit of the worker's sandbox").tag(config=True)
    procs_limit = Integer(512, help="Processes and threads of the worker's sandbox").tag(config=True)
    report_path = Unicode("", help="Append the verdicts here, as JSON lines").tag(config=True)
    cache_dir = Unicode("", help="The C++ build cache shared with the kernel").tag(config=True)

    def preprocess(self, nb, resources):
        import nbformat
        from grader.grading import grade_notebook
        from grader.sandbox import Limits, parse_memory

        notebook = resources["nbgrader"]["notebook"]
        root, assignment = _course_paths_from(resources)
        if root is not None:  # nbgrader run by hand on the course: the course's own paths
            if not self.source_dir:
                self.source_dir = str(root / "source" / assignment)
            if not self.mini_dir:
                self.mini_dir = str(root / "source" / assignment / "mini")
            if not self.secret and (root / ".mini-grader" / "secret").exists():
                self.secret = (root / ".mini-grader" / "secret").read_text().strip()
        source = nbformat.read(str(Path(self.source_dir) / f"{notebook}.ipynb"), as_version=4)
        grade = grade_notebook(
            nb, source, sandbox=make_sandbox(self.sandbox),
            mini_dir=Path(self.mini_dir) if self.mini_dir else None,
            secret=self.secret or None, check_timeout=self.check_timeout,
            limits=Limits(memory=parse_memory(self.memory_limit), procs=self.procs_limit or None),
            notebook_budget=self.notebook_timeout,
            cache_dir=Path(self.cache_dir) if self.cache_dir else None)
        for cell in nb.cells:
            gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
            if gid in grade.cells and cell.cell_type == "code":
                cell.outputs = self._outputs(cell.get("outputs", []), grade.cells[gid])
        if self.report_path:
            with open(self.report_path, "a") as f:
                f.write(json.dumps({
                    "kind": "verdicts", "notebook": notebook, "status": grade.status,
                    "statuses": grade.statuses, "seconds": round(grade.seconds, 3),
                    "cells": {g: {"points": c.points, "max_points": c.max_points,
                                  "verdicts": [v.to_dict() for v in c.verdicts]}
                              for g, c in grade.cells.items()}}) + "\n")
        return nb, resources

    @staticmethod
    def _outputs(kernel_outputs: list, verdict) -> list:
        """The test cell's outputs: what the visible tests printed (their errors as text),
        then the hidden tests' verdict in the form nbgrader scores."""
        outs = []
        for o in kernel_outputs:
            kind = o.get("output_type")
            if kind == "error":
                if o.get("ename") in ("CellTimeoutError", "DeadKernelError", "NotRunError"):
                    text = f"{o.get('ename')}: {o.get('evalue', '')}"
                elif o.get("ename") == "KeyboardInterrupt":
                    text = "interrupted: the cell ran out of time"
                else:
                    text = f"visible test: {o.get('ename', 'Error')}: {o.get('evalue', '')}"
                outs.append(_stream(text.rstrip() + "\n"))
            elif kind == "stream":
                outs.append(_stream(str(o.get("text", "")), "stdout"))
            elif kind == "execute_result":
                outs.append(NotebookNode(output_type="display_data", data=o.get("data", {}),
                                         metadata=o.get("metadata", {})))
            else:
                outs.append(o)
        points, max_points = round(verdict.points, 6), verdict.max_points
        if points >= max_points:
            slots = ", ".join(v.slot_id for v in verdict.verdicts)
            outs.append(_stream(f"{slots}: hidden tests passed ({max_points:g} of "
                                f"{max_points:g} points)\n"))
        elif points <= 0:
            outs.append(_error_output("HiddenTestFailed", verdict.message))
        else:
            outs.append(_stream(f"hidden tests: {points:g} of {max_points:g} points\n"
                                f"{verdict.message}\n"))
            outs.append(NotebookNode(output_type="execute_result", execution_count=None,
                                     metadata={}, data={"text/plain": repr(float(points))}))
        return outs


class ScrubHiddenTests(NbGraderPreprocessor):
    """Remove hidden tests from feedback: source, tracebacks and any output line that
    repeats a hidden-test line.  Errors keep ``ename: evalue`` (the check's message).  Every
    cell's output is capped in bytes."""

    min_line_length = Integer(8, help="Hidden lines shorter than this are not searched for "
                                      "in outputs (too generic)").tag(config=True)
    max_output_bytes = Integer(100_000, help="Output kept per cell in feedback, in "
                                             "bytes").tag(config=True)

    def preprocess_cell(self, cell, resources, cell_index):
        if cell.cell_type != "code":
            return cell, resources
        hidden = hidden_lines(cell.source)
        is_test = utils.is_grade(cell) and not utils.is_solution(cell)
        if hidden:
            cell.source = remove_hidden(cell.source)
        if hidden or is_test:
            needles = [h for h in hidden if len(h) >= self.min_line_length]
            needles += [BEGIN_HIDDEN, END_HIDDEN]

            def clean(text: str) -> str:
                return "\n".join(line for line in text.split("\n")
                                 if not any(n in line for n in needles))

            for out in cell.get("outputs", []):
                kind = out.get("output_type")
                if kind == "error":
                    out["evalue"] = clean(str(out.get("evalue", "")))
                    out["traceback"] = [f"{out.get('ename', 'Error')}: {out['evalue']}"]
                elif kind == "stream":
                    out["text"] = clean(out.get("text", ""))
                elif kind in ("execute_result", "display_data"):
                    data = out.get("data", {})
                    for mime in list(data):
                        if isinstance(data[mime], str):
                            data[mime] = clean(data[mime])
        cell.outputs = cap_outputs(cell.get("outputs", []), self.max_output_bytes)
        return cell, resources
