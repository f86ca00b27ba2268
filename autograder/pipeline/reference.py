"""The reference runs: the reference solution's notebook (source/ without its markers) executed in a fresh kernel.

Stage ``build`` stores it as notebooks/<id>.ipynb (:func:`executed_reference`, :func:`write_reference`); the verdict
runs it for the check records a submission is compared with (:func:`autograder.pipeline.verdict.reference_records`).
"""

from __future__ import annotations

import copy
import os
import sysconfig
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import nbformat
from IPython.utils.path import compress_user
from nbclient import NotebookClient
from nbconvert.preprocessors import CoalesceStreamsPreprocessor

from ..course import (
    CHECKS_MODULE,
    RAISES_TAG,
    Course,
    CourseError,
    cell_number,
    raises_on_purpose,
    read_notebook,
    strip_markers,
)
from ..kernel.sandbox import SandboxedKernelManager

NBVAL_RAISES = "NBVAL_RAISES_EXCEPTION"
NBVAL_IGNORE = "NBVAL_IGNORE_OUTPUT"
REPRODUCIBLE_CPU_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MKL_CBWR": "COMPATIBLE"}
"""What makes a kernel's CPU arithmetic the same from run to run: MKL's LAPACK results (e.g.
``torch.linalg.lstsq``) change in their last bits with the number of threads and, even on one thread, with memory
alignment unless conditional numerical reproducibility is on (``MKL_CBWR=COMPATIBLE``, Intel MKL developer guide).
The kernels that re-execute notebooks/ under nbval get it too (``tests/nbval_policy.py``): a value printed to a few
decimals may lie that close to a rounding boundary."""
REFERENCE_ENV = {
    "COURSE_DEVICE": "cpu",
    "PYTHONHASHSEED": "0",
    "CUDA_VISIBLE_DEVICES": "",
    "TQDM_DISABLE": "1",
    **REPRODUCIBLE_CPU_ENV,
}
"""Environment of the kernels that execute reference notebooks (CI is CPU-only). A rebuild must
reproduce notebooks/ byte for byte."""
CELL_TIMEOUT_S = 600


def reference_cells(course: Course, assignment_id: str) -> nbformat.NotebookNode:
    """The reference notebook before execution: the source notebook with its marker lines removed."""
    notebook = nbformat.read(course.source_notebook(assignment_id), as_version=4)
    for cell in notebook.cells:
        cell.source = strip_markers(cell.source)
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    return notebook


def executed_reference(course: Course, assignment_id: str) -> nbformat.NotebookNode:
    """Execute the reference notebook in notebooks/ (links ``notebooks/checks.py`` to the helpers first).

    Raises:
        CourseError: see :func:`autograder.authoring.build.build`.
    """
    course.notebooks.mkdir(exist_ok=True)
    link = course.notebooks / "checks.py"
    if not link.exists():
        link.symlink_to(os.path.relpath(CHECKS_MODULE, course.notebooks))
    executed = execute_notebook(reference_cells(course, assignment_id), cwd=course.notebooks, env=REFERENCE_ENV)
    problems = reference_problems(executed)
    if problems:
        raise CourseError(f"reference notebook {assignment_id} is not clean:\n  " + "\n  ".join(problems))
    return executed


def write_reference(course: Course, assignment_id: str, executed: nbformat.NotebookNode) -> Path:
    """Store an executed reference notebook as notebooks/<id>.ipynb.

    File paths in tracebacks are written relative to site-packages and the
    course (also where IPython wrote them from the home folder, ``~/...``),
    and the kernel's Python version as major.minor, so the stored notebook
    does not depend on where it was built. Cells marked
    ``# NBVAL_IGNORE_OUTPUT`` (timings, benchmark plots) keep the outputs
    already stored for them while their source is unchanged, so a rebuild
    without source changes leaves notebooks/ as it was.
    """
    path = course.reference_notebook(assignment_id)
    places = {**_spellings(sysconfig.get_paths()["purelib"], "site-packages"), **_spellings(str(course.root), ".")}
    _portable_tracebacks(executed, places)
    language = executed.metadata.get("language_info", {})
    if "version" in language:
        language["version"] = ".".join(str(language["version"]).split(".")[:2])
    if path.exists():
        stored = {cell.get("id"): cell for cell in read_notebook(path).cells}
        for cell in executed.cells:
            previous = stored.get(cell.get("id"))
            if marked(cell, NBVAL_IGNORE) and previous is not None and previous.source == cell.source:
                cell.outputs = previous.outputs
    partial = path.with_name(f".{path.name}.partial")
    nbformat.write(executed, partial)
    partial.replace(path)  # atomic: the stored notebook is the old one or the new one, whole
    return path


def _spellings(path: str, portable: str) -> dict[str, str]:
    """``{path: portable}``, and the same for ``path`` as IPython writes it in a traceback when it is under the home
    folder (``~/...``)."""
    under_home = compress_user(path)
    return {path: portable} | ({under_home: portable} if under_home.startswith("~" + os.sep) else {})


def _portable_tracebacks(notebook: nbformat.NotebookNode, replacements: dict[str, str]) -> None:
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                lines = output.traceback
                for old, new in replacements.items():
                    lines = [line.replace(old, new) for line in lines]
                output.traceback = lines


def marked(cell: nbformat.NotebookNode, marker: str) -> bool:
    """Whether a code cell carries an nbval marker comment (``# NBVAL_...``) on a line of its own."""
    return cell.cell_type == "code" and any(
        line.strip().lstrip("#").strip() == marker for line in cell.source.splitlines()
    )


def execute_notebook(
    notebook: nbformat.NotebookNode, *, cwd: Path, env: dict[str, str], sandboxed: bool = False
) -> nbformat.NotebookNode:
    """Execute a copy of ``notebook`` in a fresh kernel started in ``cwd`` with ``env`` added.

    ``sandboxed``: the kernel runs (forked where it can be) in the sandbox of
    :mod:`autograder.kernel.sandbox`, which is faster as root; by default it is a plain local process.

    Errors do not stop execution (they are stored as outputs); no timing
    metadata is recorded; consecutive stream outputs are merged, since how
    the kernel happens to flush stdout must not change the stored notebook.
    """
    notebook = copy.deepcopy(notebook)
    with _environment(env):
        client = NotebookClient(
            notebook,
            timeout=CELL_TIMEOUT_S,
            kernel_name="python3",
            allow_errors=True,
            record_timing=False,
            shutdown_kernel="immediate",
            extra_arguments=["--IPKernelApp.log_level=ERROR"],  # not the kernel's TCP warning on our stderr
            resources={"metadata": {"path": str(cwd)}},
            **({"kernel_manager_class": SandboxedKernelManager} if sandboxed else {}),
        )
        client.execute()
    notebook, _ = CoalesceStreamsPreprocessor().preprocess(notebook, {})
    return notebook


@contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.update(env)
    os.environ.pop("MPLBACKEND", None)  # the kernel must use the inline backend
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def reference_problems(notebook: nbformat.NotebookNode) -> list[str]:
    """Why an executed reference notebook cannot be stored (empty when it can)."""
    problems = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        where = f"{cell_number(index)} (id {cell.get('id', '?')})"
        tagged = raises_on_purpose(cell)
        errors = [o for o in cell.outputs if o.output_type == "error"]
        if errors and not tagged:
            problems.append(f"{where} raised {errors[0].ename}: {errors[0].evalue} (not tagged {RAISES_TAG})")
        if tagged and not errors:
            problems.append(f"{where} is tagged {RAISES_TAG} but raised nothing")
        if any(o.output_type == "stream" and o.name == "stderr" for o in cell.outputs):
            problems.append(f"{where} wrote to stderr (nbgrader scores such a test cell 0; nbval compares it)")
    return problems
