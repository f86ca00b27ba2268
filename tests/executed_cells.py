"""Scratch notebooks run cell by cell through the course's executor (real sandboxed kernels, a 2 s cell timeout)."""

import tempfile
from pathlib import Path
from typing import Any

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook
from traitlets.config import Config

from autograder.pipeline.execute import Execute

SETUP = "import os, signal, time\nstate = 'kept'"
SHOW_STATE = "print(state)"


def run(*sources: str, **options: Any) -> list[nbformat.NotebookNode]:
    """The cells of :func:`run_with_executor` after execution."""
    return run_with_executor(*sources, **options)[0]


def run_with_executor(
    *sources: str,
    max_restarts: int = 3,
    notebook_timeout: int = 600,
    folder: Path | None = None,
    tests: frozenset[int] = frozenset(),
    timeout: int = 2,
    fork: bool = True,
    sandbox: dict | None = None,
    draw_figures: bool = False,
) -> tuple[list[nbformat.NotebookNode], Execute]:
    """Execute one code cell per source (and a markdown cell first) with a ``timeout`` per cell (default 2 s).

    Returns the cells after execution, and the executor (its ``breach``, say). ``sandbox``: more settings of
    the ``SandboxedKernelManager`` (its limits, say). ``draw_figures``: see :attr:`Execute.draw_figures`.

    The kernel starts in the sandbox, in a copy of ``folder`` (default: an empty one). Sources whose
    index is in ``tests`` become nbgrader autograder-tests cells.
    """
    cells = [new_code_cell(source) for source in sources]
    for index in tests:
        cells[index].metadata.nbgrader = {"grade": True, "solution": False, "grade_id": f"test_{index}", "points": 1}
    notebook = new_notebook(cells=[new_markdown_cell("# scratch"), *cells])
    notebook.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    executor = Execute(
        timeout=timeout,
        shutdown_kernel="immediate",
        max_restarts=max_restarts,
        notebook_timeout=notebook_timeout,
        draw_figures=draw_figures,
        config=Config({"SandboxedKernelManager": {"fork": fork, **(sandbox or {})}}),
    )
    with tempfile.TemporaryDirectory() as empty:
        executed, _ = executor.preprocess(notebook, {"metadata": {"path": str(folder or empty)}})
    return executed.cells[1:], executor


def enames(cell) -> list[str]:
    return [output.ename for output in cell.outputs if output.output_type == "error"]


def printed(cell) -> str:
    return "".join(output.get("text", "") for output in cell.outputs if output.output_type == "stream")
