"""nbgrader preprocessors used by ``mini-course`` (named in the course's nbgrader_config.py).

- :class:`ResilientExecute` replaces nbgrader's ``Execute`` at autograde: when a cell kills
  the kernel (``os._exit``, a crash, the memory limit) or times out, the cell records an
  error (so its tests score 0), the kernel is restarted, the cells that ran before are
  replayed to rebuild the state, and grading goes on with the next cell.  The kernel runs
  under an address-space limit (``memory_limit``).
- :class:`ScrubHiddenTests` is added to ``GenerateFeedback``: it removes hidden-test regions
  from the source of test cells AND from their outputs (nbgrader's default feedback shows
  both: the source, and the hidden lines in tracebacks), keeping for each error only
  ``ename: evalue``, i.e. the check's message.
"""
from __future__ import annotations

import copy

from nbclient.exceptions import DeadKernelError
from nbclient.util import run_sync
from nbformat.notebooknode import NotebookNode
from nbgrader import utils
from nbgrader.preprocessors import NbGraderPreprocessor
from nbgrader.preprocessors.execute import Execute
from traitlets import Float, Integer, Unicode

__all__ = ["ResilientExecute", "ScrubHiddenTests", "hidden_lines"]

BEGIN_HIDDEN = "BEGIN HIDDEN TESTS"
END_HIDDEN = "END HIDDEN TESTS"


def _error_output(ename: str, evalue: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=evalue,
                        traceback=[f"{ename}: {evalue}"])


class ResilientExecute(Execute):
    """nbgrader's Execute, surviving cells that kill, hang or exhaust the kernel."""

    max_restarts = Integer(8, help="Give up on a notebook (remaining cells score 0) after "
                                   "this many kernel restarts").tag(config=True)
    memory_limit = Unicode("6G", help="Address-space limit of the kernel (RLIMIT_AS), e.g. "
                                      "'6G'; '' for none").tag(config=True)
    check_timeout = Float(60.0, help="Seconds per hidden check (MINI_GRADER_TIMEOUT in the "
                                     "kernel)").tag(config=True)
    check_memory = Unicode("4G", help="Memory limit of a hidden check's subprocess "
                                      "(MINI_GRADER_MEMORY in the kernel)").tag(config=True)
    submission_dir = Unicode("", help="Set by `mini-course autograde`: where run_check saves "
                                      "the functions it checked, for the re-check").tag(config=True)

    async def async_start_new_kernel(self, **kwargs):
        import os
        env = dict(kwargs.pop("env", None) or os.environ)
        env["MINI_GRADER_TIMEOUT"] = repr(float(self.check_timeout))
        env["MINI_GRADER_MEMORY"] = self.check_memory
        env.pop("MINI_GRADER_SUBMISSION_DIR", None)
        if self.submission_dir:
            env["MINI_GRADER_SUBMISSION_DIR"] = self.submission_dir
        kwargs["env"] = env
        return await super().async_start_new_kernel(**kwargs)

    start_new_kernel = run_sync(async_start_new_kernel)

    def preprocess(self, nb, resources=None, km=None):
        from nbclient import NotebookClient

        NotebookClient.__init__(self, nb, km)
        self.reset_execution_trackers()
        self._check_assign_resources(resources)
        replay: list[int] = []
        restarts = 0
        with self.setup_kernel():
            assert self.kc
            info_msg = self.wait_for_reply(self.kc.kernel_info())
            if info_msg:
                self.nb.metadata["language_info"] = info_msg["content"]["language_info"]
            self._prepare_kernel()
            index = 0
            cells = self.nb.cells
            while index < len(cells):
                cell = cells[index]
                broken = ""
                try:
                    self.preprocess_cell(cell, resources, index)
                except DeadKernelError:
                    broken = "died"
                else:
                    if any(o.get("output_type") == "error" and o.get("ename") == "CellTimeoutError"
                           for o in cell.get("outputs", [])):
                        broken = "timeout"
                if broken == "died":
                    cell.setdefault("outputs", []).append(_error_output(
                        "DeadKernelError",
                        "the kernel died while running this cell (os._exit, a crash, or the "
                        "memory limit); the grader restarted it and went on with the next cell"))
                if broken == "timeout" and self._responsive():
                    broken = ""  # the interrupt stopped it: the kernel and its state are fine
                if broken:
                    restarts += 1
                    self.log.warning("cell %d %s; restarting the kernel (%d)", index, broken, restarts)
                    if restarts > self.max_restarts or not self._restart_and_replay(replay):
                        self._give_up(index + 1)
                        break
                if not broken and cell.cell_type == "code" and not any(
                        o.get("ename") == "CellTimeoutError" for o in cell.get("outputs", [])):
                    replay.append(index)
                index += 1
        self.set_widgets_metadata()
        return self.nb, self.resources

    # ------------------------------------------------------------------ helpers
    def _prepare_kernel(self) -> None:
        limit = self.memory_limit.strip()
        if not limit:
            return
        from grader.sandbox import parse_memory
        n = parse_memory(limit)
        if not n:
            return
        code = ("try:\n import resource as _r; _r.setrlimit(_r.RLIMIT_AS, (%d, %d)); del _r\n"
                "except Exception:\n pass\n" % (n, n))
        msg_id = self.kc.execute(code, silent=True, store_history=False)
        self.wait_for_reply(msg_id)

    def _responsive(self, wait: float = 3.0) -> bool:
        """True when the kernel answers a trivial execute within ``wait`` seconds."""
        try:
            msg_id = self.kc.execute("pass", silent=True, store_history=False)
            deadline = wait
            while deadline > 0:
                reply = self.wait_for_reply_quick(msg_id, 0.5)
                if reply is not None:
                    return True
                deadline -= 0.5
        except Exception:  # noqa: BLE001
            return False
        return False

    def wait_for_reply_quick(self, msg_id: str, timeout: float):
        from queue import Empty
        try:
            while True:
                msg = run_sync(self.kc.shell_channel.get_msg)(timeout=timeout)
                if msg["parent_header"].get("msg_id") == msg_id:
                    return msg
        except Empty:
            return None

    def _restart_and_replay(self, replay: list[int]) -> bool:
        try:
            run_sync(self.km.restart_kernel)(now=True)
            try:
                self.kc.stop_channels()
            except Exception:  # pragma: no cover
                pass
            self.kc = None
            self.start_new_kernel_client()
            self._prepare_kernel()
            for i in replay:
                shadow = copy.deepcopy(self.nb.cells[i])
                self.execute_cell(shadow, i, store_history=False)
                if any(o.get("ename") == "CellTimeoutError" for o in shadow.get("outputs", [])):
                    return False
        except DeadKernelError:
            return False
        except Exception as e:  # pragma: no cover - kernel could not be restarted
            self.log.error("could not restart the kernel: %s", e)
            return False
        return True

    def _give_up(self, start: int) -> None:
        for cell in self.nb.cells[start:]:
            if cell.cell_type == "code" and cell.source.strip():
                cell.outputs = [_error_output(
                    "NotRunError", "not run: the kernel kept dying or hanging in earlier cells")]


def hidden_lines(source: str) -> list[str]:
    """The stripped lines of the hidden-test regions of a cell's source."""
    out, inside = [], False
    for line in source.split("\n"):
        if BEGIN_HIDDEN in line:
            inside = True
        elif END_HIDDEN in line:
            inside = False
        elif inside and line.strip():
            out.append(line.strip())
    return out


def _remove_hidden(source: str) -> str:
    out, inside = [], False
    for line in source.split("\n"):
        if BEGIN_HIDDEN in line:
            inside = True
        elif END_HIDDEN in line:
            inside = False
        elif not inside:
            out.append(line)
    return "\n".join(out)


class ScrubHiddenTests(NbGraderPreprocessor):
    """Remove hidden tests from feedback: source, tracebacks and any output line that
    repeats a hidden-test line.  Errors keep ``ename: evalue`` (the check's message)."""

    min_line_length = Integer(8, help="Hidden lines shorter than this are not searched for "
                                      "in outputs (too generic)").tag(config=True)

    def preprocess_cell(self, cell, resources, cell_index):
        if cell.cell_type != "code":
            return cell, resources
        hidden = hidden_lines(cell.source)
        is_test = utils.is_grade(cell) and not utils.is_solution(cell)
        if hidden:
            cell.source = _remove_hidden(cell.source)
        if not (hidden or is_test):
            return cell, resources
        needles = [h for h in hidden if len(h) >= self.min_line_length]
        needles += ["BEGIN HIDDEN TESTS", "END HIDDEN TESTS"]

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
        return cell, resources
