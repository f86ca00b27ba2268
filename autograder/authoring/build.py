"""Stage ``build``: regenerate release/ (nbgrader generate_assignment) and notebooks/ (executed references).

Both are derived from source/ only, deterministically: a rebuild with no
source change leaves git clean (same cell ids, no timing metadata, kernels
started with a fixed environment).
"""

from __future__ import annotations

import copy
import ctypes
import os
import shutil
import sysconfig
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbconvert.preprocessors import CoalesceStreamsPreprocessor

from .course import (
    CHECKS_MODULE,
    RAISES_TAG,
    Course,
    CourseError,
    cell_number,
    raises_on_purpose,
    read_notebook,
    strip_markers,
)
from .releases import generate_release
from .sandbox import SandboxedKernelManager
from .session import Session

NBVAL_RAISES = "NBVAL_RAISES_EXCEPTION"
NBVAL_IGNORE = "NBVAL_IGNORE_OUTPUT"
REFERENCE_ENV = {
    "COURSE_DEVICE": "cpu",
    "PYTHONHASHSEED": "0",
    "CUDA_VISIBLE_DEVICES": "",
    "TQDM_DISABLE": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "MKL_CBWR": "COMPATIBLE",
}
"""Environment of the kernels that execute reference notebooks (CI is CPU-only). A rebuild must
reproduce notebooks/ byte for byte, and MKL's LAPACK results (e.g. ``torch.linalg.lstsq``) change in
their last bits with the number of threads and, even on one thread, with memory alignment unless
conditional numerical reproducibility is on (``MKL_CBWR=COMPATIBLE``, Intel MKL developer guide)."""
CELL_TIMEOUT_S = 600


def build(course: Course, *, assignment_ids: list[str] | None = None) -> list[Path]:
    """Regenerate release/<id>/ and notebooks/<id>.ipynb for each assignment.

    Returns the paths written. Each assignment's release folder and reference
    notebook are replaced only once both were made: on any error the old
    ones are left as they were (see :func:`replace_folder`).

    Raises:
        CourseError: nbgrader generate_assignment failed, or a reference
            notebook raised in a cell not tagged ``raises-exception``, did not
            raise in one so tagged, or wrote to stderr; an id is not an assignment of the course.
    """
    written = []
    chosen = course.chosen(assignment_ids)
    with release_generator(course) as generate:
        for assignment_id in chosen:
            # nbgrader deletes the release folder of an assignment it fails on: generate beside it (first: it is
            # quick), execute the reference, and only when both succeeded put them in place.
            with tempfile.TemporaryDirectory(prefix=".build-", dir=course.root) as scratch:
                fresh = generate(assignment_id, Path(scratch))
                reference = executed_reference(course, assignment_id)
                written.append(replace_folder(fresh, course.release / assignment_id))
            written.append(write_reference(course, assignment_id, reference))
    return written


RENAME_EXCHANGE = 2
"""``renameat2`` flag (Linux 3.15, glibc 2.28): swap two paths in one step (rename(2))."""
AT_FDCWD = -100


def replace_folder(new: Path, old: Path) -> Path:
    """Put folder ``new`` in the place of ``old`` (created if missing), then delete what was at ``old``.

    Where the kernel and filesystem allow, the two are exchanged atomically
    (``renameat2(RENAME_EXCHANGE)``), so ``old`` always holds a whole
    assignment; elsewhere ``old`` is renamed aside first, and is missing
    only between two renames. Both must be on one filesystem.

    Returns ``old``.
    """
    old.parent.mkdir(parents=True, exist_ok=True)
    if not old.exists():
        new.rename(old)
        return old
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        exchanged = libc.renameat2(AT_FDCWD, os.fsencode(new), AT_FDCWD, os.fsencode(old), RENAME_EXCHANGE) == 0
    except AttributeError:  # no renameat2 in this C library
        exchanged = False
    if not exchanged:
        aside = new.with_name(new.name + ".old")
        old.rename(aside)
        new.rename(old)
        new = aside
    shutil.rmtree(new)
    return old


@contextmanager
def release_generator(course: Course) -> Iterator[Callable[[str, Path], Path]]:
    """While entered, ``generate(assignment_id, destination)`` makes ``destination/<id>/`` from source/ by nbgrader's
    generate_assignment and returns it (:func:`autograder.releases.generate_release`; raises CourseError where
    nbgrader refuses, its log quoted).

    Every request goes to one nbgrader process (:class:`autograder.session.Session`: nbgrader starts once, not once
    per assignment) and is recorded in one throwaway gradebook, so nbgrader creates a gradebook (runs ``alembic``)
    once; it keeps the assignments apart there. The course's gradebook is not touched.
    """
    with Session(course) as nbgrader, tempfile.TemporaryDirectory(prefix="nbgrader-db-") as scratch:
        db_url = f"sqlite:///{Path(scratch) / 'gradebook.db'}"
        yield lambda assignment_id, destination: generate_release(course, assignment_id, destination, db_url, nbgrader)


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
        CourseError: see :func:`build`.
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
    course, so the stored notebook does not depend on where it was built.
    Cells marked ``# NBVAL_IGNORE_OUTPUT`` (timings, benchmark plots) keep the
    outputs already stored for them while their source is unchanged, so a
    rebuild without source changes leaves notebooks/ as it was.
    """
    path = course.reference_notebook(assignment_id)
    _portable_tracebacks(executed, {sysconfig.get_paths()["purelib"]: "site-packages", str(course.root): "."})
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
    :mod:`autograder.sandbox`, which is faster as root; by default it is a plain local process.

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
