"""Stage ``execute``: nbgrader's Execute preprocessor, sandboxed, and made to survive a kernel that dies or hangs.

Kernels start in the sandbox of :mod:`autograder.kernel.sandbox`. In ``nbgrader
autograde``, a notebook that :mod:`autograder.pipeline.batch` already executed (found
in ``executed/`` by :func:`execution_key`: the same cells, folder files and
settings) is not run again: its stored outputs are taken.

Stock nbgrader gives up on a whole notebook when its kernel dies (``os._exit``,
a segfault, a kill signal) or when a cell outlives its timeout and ignores
the interrupt: the submission is "not graded" and every task is lost,
including the ones the student solved before the crash. :class:`Execute`
(registered in ``nbgrader_config.py`` in place of nbgrader's) keeps the cost to
the cells hit:

- the cell that killed or hung the kernel gets an error output
  (:data:`KERNEL_DIED` or :data:`TIMEOUT`), so a test cell scores 0 and a
  solution cell shows the student why;
- the kernel is restarted and the code cells before that cell run again,
  silently, to rebuild the state later cells need (imports, definitions);
- execution goes on with the next cell.

A cell keeps at most :attr:`Execute.max_output_bytes` of output, and the
notebook's other cells together :attr:`Execute.max_notebook_output_bytes`
(test cells, fixed in number by the release, only their own limit), a note
saying what was dropped. Every output counts, errors included (each cut to
:data:`MAX_TRACEBACK_LINES` lines first); past the limit, a cell's first
error is still kept, reduced to its name and :data:`MAX_CUT_ERROR`
characters of its message. So megabytes of prints or errors neither fill the
grader's memory nor hide a failure, and a flood in the student's cells does
not silence a later test. One message larger than
:attr:`~autograder.kernel.sandbox.SandboxedKernelManager.max_message_bytes` is not
even received (see there).

matplotlib's figures are not drawn (:attr:`Execute.draw_figures`): no test
grades one, and drawing them cost about a third of the kernels' time.

The whole notebook has :attr:`Execute.notebook_timeout` seconds: a cell may
run for nbgrader's ``timeout`` or what is left of that, whichever is less,
and cells after it are not run.

A cell that ends in time after the timeout's interrupt (a plain busy loop)
keeps nbgrader's behaviour: a ``CellTimeoutError`` output and no restart.
After :attr:`Execute.max_restarts` restarts, or when a replay fails, the
remaining code cells are not run and each gets a :data:`NOT_RUN` error.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbclient.util import ensure_async, run_sync
from nbformat import NotebookNode
from nbformat.v4 import new_output
from nbgrader.preprocessors import Execute as NbgraderExecute
from traitlets import Bool, Integer

from ..course import is_autograder_tests
from ..kernel.sandbox import ReadableMessagesChannel, SandboxedKernelManager

KERNEL_DIED = "DeadKernelError"
"""``ename`` of the error output on a cell during which the kernel died."""

TIMEOUT = "CellTimeoutError"
"""``ename`` of the error output on a cell that ran past its timeout (nbgrader's own name for it)."""

IOPUB_TIMEOUT = "Timeout waiting for IOPub output"
"""What nbclient's ``CellTimeoutError`` says when a cell's reply came but not the end of its outputs."""

DROPPED = (
    "the kernel's outputs stopped arriving (Execute.iopub_timeout after its reply): a message over the grader's size "
    "limit (SandboxedKernelManager.max_message_bytes) is dropped unread, and what the kernel sent right after it is "
    "lost; or the grading machine was too busy to receive them in time"
)
"""The message of the error output on a cell whose outputs stopped arriving (nbclient's IOPub timeout)."""

OUTPUT_MESSAGES = frozenset({"stream", "display_data", "execute_result", "error"})
"""The IOPub message types nbclient keeps as a cell's outputs (:meth:`Execute.output`)."""

NO_FIGURES = "--IPKernelApp.exec_lines=%config InlineBackend.figure_formats = set()"
"""The kernel argument that keeps matplotlib's inline backend from drawing figures (IPython's ``exec_lines`` run at
every kernel start, restarts included): a figure is then displayed as its text, ``<Figure size 700x400 with 1 Axes>``.
"""

NOT_RUN = "CellNotRunError"
"""``ename`` of the error output on a cell left unrun because the kernel could not be brought back."""


STORE = "executed"
"""Folder of the course directory holding notebooks executed ahead of nbgrader (:mod:`autograder.pipeline.batch`)."""


def execution_key(notebook: NotebookNode, files: dict[str, bytes], settings: dict[str, Any]) -> str:
    """SHA-256 (hex) of what decides a notebook's execution: its cells, its kernel, the other files in its
    folder (relative path -> contents) and the execution settings (:meth:`Execute.settings`)."""
    described = {
        "kernel": notebook.metadata.get("kernelspec", {}).get("name"),
        "cells": [[cell.cell_type, cell.source] for cell in notebook.cells],
        "files": {name: hashlib.sha256(content).hexdigest() for name, content in sorted(files.items())},
        "settings": settings,
    }
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()


def stored_path(course_root: str | Path, key: str) -> Path:
    """Where the notebook executed ahead under ``key`` is stored in a course directory."""
    return Path(course_root) / STORE / f"{key}.ipynb"


def folder_files(folder: Path) -> dict[str, bytes]:
    """The files under ``folder`` that are not notebooks (nor editor or Python caches), by relative path."""
    if not folder.is_dir():
        return {}
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
        and path.suffix != ".ipynb"
        and not {".ipynb_checkpoints", "__pycache__"} & set(path.relative_to(folder).parts)
    }


MAX_TRACEBACK_LINES = 200
MAX_TRACEBACK_LINE = 10_000
"""An error output keeps its last 200 traceback lines, each (and its message) cut to 10,000 characters."""


MAX_CUT_ERROR = 1_000
"""An error output past the output limits keeps its name and this many characters of its message, no traceback."""


def error_output(ename: str, evalue: str) -> NotebookNode:
    """An nbformat error output whose traceback is the one line ``ename: evalue``."""
    return new_output("error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


class Execute(NbgraderExecute):
    """nbgrader's ``Execute``: kernels in the sandbox, a dead or hung kernel costing only the cell it happened in.

    The kernel manager is :class:`autograder.kernel.sandbox.SandboxedKernelManager`
    (nbgrader's ``Execute`` passes its own as a keyword, which configuration
    cannot override).
    """

    iopub_timeout = Integer(
        15,
        help="Seconds to wait, after a cell's reply, for the rest of its outputs (nbclient's default: 4). On a busy "
        "machine the outputs of a cell with many check records came later than 4 s and correct cells failed; a cell "
        "whose message over the size limit was dropped waits this long for outputs that never come.",
    ).tag(config=True)

    max_restarts = Integer(
        3,
        help="How many times the kernel is restarted (and earlier cells replayed) in one notebook.",
    ).tag(config=True)

    max_output_bytes = Integer(
        2 * 2**20,
        help="Output a cell may keep, in bytes (error outputs always kept); the rest is dropped with a note.",
    ).tag(config=True)

    max_notebook_output_bytes = Integer(
        16 * 2**20, help="Output the whole notebook may keep, in bytes (error outputs always kept)."
    ).tag(config=True)

    notebook_timeout = Integer(
        600,
        help="Wall-clock seconds for the whole notebook; a cell gets at most what is left, later cells are not run.",
    ).tag(config=True)

    draw_figures = Bool(
        False,
        help="Draw matplotlib's figures (PNG) while grading. No test grades a figure, and drawing them cost about a "
        "third of the kernels' time on the course's notebooks (0.2 to 2 s a notebook); without them a figure is shown "
        "as its text in the feedback page, ``<Figure size 700x400 with 1 Axes>``.",
    ).tag(config=True)

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("kernel_manager_class", SandboxedKernelManager)
        super().__init__(**kwargs)

    def settings(self) -> dict[str, Any]:
        """What, besides the notebook and its folder, decides how it executes (part of :func:`execution_key`)."""
        names = ("timeout", "interrupt_on_timeout", "allow_errors", "max_restarts", "notebook_timeout")
        names += ("max_output_bytes", "max_notebook_output_bytes", "draw_figures")
        sandboxed = self.kernel_manager_class is SandboxedKernelManager
        isolated = sandboxed and SandboxedKernelManager(config=self.config).enabled
        return {**{name: getattr(self, name) for name in names}, "isolated": isolated}

    def preprocess(self, nb: NotebookNode, resources: dict) -> tuple[NotebookNode, dict]:
        """Execute ``nb``; in nbgrader autograde, take the outputs stored by :mod:`autograder.pipeline.batch` if its key
        is found (cells' outputs and execution counts, the kernel's language_info)."""
        stored = self._stored(nb, resources)
        if stored is None:
            return super().preprocess(nb, resources)
        for cell, executed in zip(nb.cells, stored.cells, strict=True):
            if cell.cell_type == "code":
                cell.outputs = executed.outputs
                cell.execution_count = executed.execution_count
        if "language_info" in stored.metadata:
            nb.metadata.language_info = stored.metadata.language_info
        return nb, resources

    def _stored(self, nb: NotebookNode, resources: dict) -> NotebookNode | None:
        """The notebook :mod:`autograder.pipeline.batch` executed for exactly this one (None: none, or not in
        nbgrader)."""
        root = self.config.get("CourseDirectory", {}).get("root")
        if "nbgrader" not in resources or not root:
            return None
        files = folder_files(Path(resources["metadata"]["path"]))
        path = stored_path(root, execution_key(nb, files, self.settings()))
        try:
            stored = nbformat.read(path, as_version=4)
        except (OSError, ValueError):  # not executed ahead (or a damaged file): execute it here
            return None
        self.log.info("Outputs taken from %s (executed ahead by the batch)", path.name)
        return stored

    breach: str | None = None
    """After :meth:`preprocess`: how the notebook's kernel breached its isolation (see
    :attr:`autograder.kernel.sandbox.SandboxedKernelManager.breach`), None when it did not. Such an execution is not
    stored for reuse (:mod:`autograder.pipeline.batch`)."""

    async def _async_cleanup_kernel(self) -> None:
        km = self.km
        await super()._async_cleanup_kernel()
        self.breach = getattr(km, "breach", None)

    _cleanup_kernel = run_sync(_async_cleanup_kernel)

    async def async_start_new_kernel_client(self) -> Any:
        """nbclient's kernel client; a sandboxed one's IOPub channel drops unread the outputs the running cell would
        keep nothing of (:meth:`_keeps_nothing_of`)."""
        client = await super().async_start_new_kernel_client()
        if isinstance(client.iopub_channel, ReadableMessagesChannel):
            client.iopub_channel.drops_unread = self._keeps_nothing_of
        return client

    start_new_kernel_client = run_sync(async_start_new_kernel_client)

    def _keeps_nothing_of(self, size: int, read_type: Callable[[], str | None]) -> bool:
        """Whether an IOPub message whose content is ``size`` bytes (of JSON), of the type ``read_type()`` reads
        (called only for a message that large), would change nothing in the running cell (:meth:`output`): an
        output larger than a cell may keep, while the cell has already been cut (it shows the note) with nothing
        left of its limits, and, for an error, shows an error already. The first such output of a cell is read (its
        beginning may be kept, an error keeps its name); later ones are not parsed. Not an update of a display (it
        may change other cells)."""
        if self._running is None or size <= self.max_output_bytes:
            return False
        msg_type = read_type()
        if msg_type not in OUTPUT_MESSAGES:
            return False
        index, cell = self._running
        if index not in self._cut or self._charge(index, 1, dry=True) > 0:
            return False
        return msg_type != "error" or any(output.output_type == "error" for output in cell.outputs)

    async def async_start_new_kernel(self, **kwargs: Any) -> None:
        if not self.draw_figures and getattr(self.km, "ipykernel", False) and NO_FIGURES not in self.extra_arguments:
            self.extra_arguments = [*self.extra_arguments, NO_FIGURES]
        await super().async_start_new_kernel(**kwargs)

    start_new_kernel = run_sync(async_start_new_kernel)

    def reset_execution_trackers(self) -> None:
        super().reset_execution_trackers()
        self.breach = None
        self._output_bytes: dict[int, int] = {}
        self._cut: set[int] = set()
        self._notebook_bytes = 0
        self._restarts = 0
        self._gave_up: str | None = None
        self._started: float | None = None
        self._replaying = False
        self._running: tuple[int, NotebookNode] | None = None

    def _left(self) -> float:
        """Seconds left of :attr:`notebook_timeout`, counted from the first code cell (not the kernel's start)."""
        if self._started is None:
            self._started = time.monotonic()
        return self.notebook_timeout - (time.monotonic() - self._started)

    def _get_timeout(self, cell: NotebookNode | None) -> int | None:
        timeout = super()._get_timeout(cell)
        return max(1, math.ceil(min(timeout or self._left(), self._left())))

    async def async_execute_cell(
        self,
        cell: NotebookNode,
        cell_index: int,
        execution_count: int | None = None,
        store_history: bool = True,
    ) -> NotebookNode:
        if cell.cell_type != "code" or not cell.source.strip():
            return await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        self._running = (cell_index, cell)
        if not self._gave_up and self._left() <= 0:
            self._gave_up = f"not run: the notebook ran past its {self.notebook_timeout} s limit"
        if self._gave_up:
            cell.outputs = [error_output(NOT_RUN, self._gave_up)]
            return cell
        if not await ensure_async(self.kc.is_alive()):
            # It died after the previous cell replied (a signal it caught late): that cell is not this one's fault.
            await self._restart_and_replay(cell_index)
            return await self.async_execute_cell(cell, cell_index, execution_count, store_history)
        try:
            return await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        except DeadKernelError:
            problem = error_output(KERNEL_DIED, "the kernel died while this cell ran (it exited or crashed)")
        except CellTimeoutError as error:
            problem = error_output(TIMEOUT, "the cell ran past its time limit and did not stop when interrupted")
            if IOPUB_TIMEOUT in str(error):  # its last messages never came: one over the size limit was dropped
                problem = error_output(TIMEOUT, DROPPED)
        cell.setdefault("outputs", []).append(problem)
        await self._restart_and_replay(cell_index)
        return cell

    # nbconvert's ``preprocess`` calls the synchronous ``execute_cell``, which nbclient binds to its own coroutine.
    execute_cell = run_sync(async_execute_cell)

    def output(
        self, outs: list[NotebookNode], msg: dict, display_id: str | None, cell_index: int
    ) -> NotebookNode | None:
        if self._replaying:  # a replay's outputs are thrown away: keep none, count none
            return None
        content = msg["content"]
        if msg["msg_type"] == "error":
            lines = [str(line)[:MAX_TRACEBACK_LINE] for line in content.get("traceback", [])[-MAX_TRACEBACK_LINES:]]
            content = {**content, "traceback": lines, "evalue": str(content.get("evalue", ""))[:MAX_TRACEBACK_LINE]}
            msg = {**msg, "content": content}
        size = len(str(content))
        kept = self._charge(cell_index, size)
        if kept == size:
            return super().output(outs, msg, display_id, cell_index)
        if kept > 0 and msg["msg_type"] == "stream":
            super().output(outs, {**msg, "content": {**content, "text": content["text"][:kept]}}, None, cell_index)
        if msg["msg_type"] == "error" and not any(output.output_type == "error" for output in outs):
            # An error past the limit is kept short, once per cell: the cell still shows that it failed.
            outs.append(error_output(str(content.get("ename", "Error"))[:100], content["evalue"][:MAX_CUT_ERROR]))
        self._note_cut(cell_index, outs)
        return None

    def _update_display_id(self, display_id: str, msg: dict) -> None:
        """nbclient's update of the outputs shown under ``display_id``, each replaced output counted as a new one
        of the update's size in its cell; an update that does not fit every such cell is dropped."""
        if self._replaying:
            return
        shown = self._display_id_map.get(display_id, {})
        size = len(str(msg["content"]))
        needed = {index: size * len(outputs) for index, outputs in shown.items()}
        if all(self._charge(index, bytes_, dry=True) == bytes_ for index, bytes_ in needed.items()):
            for index, bytes_ in needed.items():
                self._charge(index, bytes_)
            return super()._update_display_id(display_id, msg)
        for index in shown:
            self._note_cut(index, self.nb.cells[index].outputs)

    def _charge(self, cell_index: int, size: int, dry: bool = False) -> int:
        """Count ``size`` bytes of output against the cell's and the notebook's limits; the bytes that fit
        (``dry``: count nothing, only say)."""
        cell_used = self._output_bytes.get(cell_index, 0)
        left = self.max_output_bytes - cell_used
        test_cell = is_autograder_tests(self.nb.cells[cell_index])  # test cells are few: the release fixes them
        if not test_cell:
            left = min(left, self.max_notebook_output_bytes - self._notebook_bytes)
        kept = min(size, max(left, 0))
        if not dry:
            self._output_bytes[cell_index] = cell_used + kept
            self._notebook_bytes += 0 if test_cell else kept
        return kept

    def _note_cut(self, cell_index: int, outs: list[NotebookNode]) -> None:
        """Add, once per cell, the note that output past the limits was dropped."""
        if cell_index not in self._cut:
            self._cut.add(cell_index)
            note = (
                f"\n[output past the grader's limit dropped ({self.max_output_bytes} bytes per cell, "
                f"{self.max_notebook_output_bytes} per notebook)]\n"
            )
            outs.append(new_output("stream", name="stdout", text=note))

    async def _restart_and_replay(self, cell_index: int) -> None:
        """Start a fresh kernel and rerun the code cells before ``cell_index``, discarding their outputs.

        Cells that killed the kernel or ran past their timeout are not rerun.

        Sets ``_gave_up`` (the reason later cells are not run) when the
        restart budget is spent or a replayed cell fails to complete.
        """
        if self._restarts >= self.max_restarts:
            self._gave_up = f"not run: the kernel died or hung {self._restarts + 1} times in this notebook"
            return
        self._restarts += 1
        assert self.km is not None and self.kc is not None
        self.kc.stop_channels()
        await self.km.restart_kernel(now=True)
        await self.async_start_new_kernel_client()
        executed = self.code_cells_executed
        self._replaying = True
        try:
            for index, earlier in enumerate(self.nb.cells[:cell_index]):
                if earlier.cell_type != "code" or not earlier.source.strip() or _stopped(earlier):
                    continue
                try:
                    await NbgraderExecute.async_execute_cell(self, copy.deepcopy(earlier), index, store_history=False)
                except (DeadKernelError, CellTimeoutError):
                    self._gave_up = (
                        f"not run: after a restart, rerunning cell {index} to rebuild the kernel's state failed"
                    )
                    return
                finally:
                    self.nb.cells[index] = earlier  # nbclient stores the cell it ran (the copy) in the notebook
        finally:
            self._replaying = False
            self.code_cells_executed = executed


def _stopped(cell: NotebookNode) -> bool:
    """Whether the cell killed the kernel or ran past its timeout (its outputs say so)."""
    return any(output.get("ename") in (KERNEL_DIED, TIMEOUT) for output in cell.get("outputs", []))
