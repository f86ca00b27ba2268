"""The release cache of stage ``grade``: the gradebook's grade cells kept in step with source/, generated once.

``nbgrader generate_assignment`` records an assignment's grade cells in the gradebook (what autograde grades
against) and makes the release notebook submissions are normalised to. It costs 2 to 6 s as a command and about
1.5 s of CPU as a request to a running nbgrader (:mod:`autograder.pipeline.nbgrader_process`).
:func:`update_gradebook` keeps what it generated in :data:`RELEASES`, named by :func:`source_key` (what
generate_assignment reads), with :func:`recorded_cells` (what it then recorded in the gradebook), and generates again
only when either changed.
:func:`generate_release` (command or request) is also how stages ``build`` and ``check`` generate release/.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path

import nbformat
import nbgrader
from nbgrader.api import Gradebook, MissingEntry

from ..course import (
    Course,
    CourseError,
    generate_assignment,
    gradebook_file_missing,
    hash_files,
    nbgrader_errors,
    read_notebook,
)
from .execute import STORE
from .nbgrader_process import Session


RELEASES = Path(STORE) / "releases"
"""Folder of the course directory holding the release notebooks :func:`update_gradebook` generated, by source."""


def update_gradebook(
    course: Course, assignment_id: str, *, db_url: str | None = None, nbgrader: Session | None = None
) -> nbformat.NotebookNode:
    """Record the assignment's grade cells (from source/) in the gradebook at ``db_url`` (default: the course's;
    :func:`survey` passes a scratch one), by a request to the ``nbgrader`` session where one is given (no nbgrader
    start-up, about 1.5 s of CPU), else by the ``nbgrader generate_assignment`` command.

    Generates into a scratch release folder, so release/ is left as it is. With the course's gradebook, keeps what
    it generated in :data:`RELEASES`, under :func:`source_key`, with a digest of what nbgrader then recorded in the
    gradebook (:func:`recorded_cells`); when both are there and the gradebook still holds exactly that (a run again
    on the same source/), nothing is generated (the command takes 2 to 6 s). A scratch gradebook leaves the course
    directory as it is.
    Returns the release notebook generated (the template submissions are normalised to).

    Raises:
        CourseError: nbgrader refused (its log is quoted).
    """
    if db_url is not None:
        with tempfile.TemporaryDirectory(prefix="release-") as scratch:
            folder = generate_release(course, assignment_id, Path(scratch), db_url, nbgrader)
            return read_notebook(folder / f"{assignment_id}.ipynb")
    kept = course.root / RELEASES / f"{assignment_id}-{source_key(course, assignment_id)}.ipynb"
    digest = kept.with_suffix(".gradebook")
    if kept.exists() and digest.exists() and digest.read_text() == recorded_cells(course.db_url, assignment_id):
        return read_notebook(kept)
    with tempfile.TemporaryDirectory(prefix="release-") as scratch:
        folder = generate_release(course, assignment_id, Path(scratch), course.db_url, nbgrader)
        generated = folder / f"{assignment_id}.ipynb"
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(generated, kept)
        digest.write_text(recorded_cells(course.db_url, assignment_id))
        return read_notebook(kept)


def generate_release(
    course: Course, assignment_id: str, release_dir: Path, db_url: str, nbgrader: Session | None
) -> Path:
    """Generate ``release_dir/<id>/`` from source/, recorded in the gradebook at ``db_url``: by a request to the
    ``nbgrader`` session where one is given (no nbgrader start-up), else by the ``nbgrader generate_assignment``
    command. Returns the assignment folder written.

    Raises:
        CourseError: nbgrader refused (its log is quoted), or the session's nbgrader ended.
    """
    if nbgrader is None:
        return generate_assignment(course, assignment_id, release_dir=release_dir, db_url=db_url)
    outcome = nbgrader.generate_assignment(assignment_id, release_dir=release_dir, db_url=db_url).result()
    if not outcome.success:
        quoted = nbgrader_errors(outcome.log + outcome.error) or outcome.tail().splitlines()
        raise CourseError(f"nbgrader generate_assignment {assignment_id} failed:\n  " + "\n  ".join(quoted))
    return release_dir / assignment_id


def source_key(course: Course, assignment_id: str) -> str:
    """SHA-256 (hex) of what ``nbgrader generate_assignment`` makes a release from: nbgrader's version, the
    configuration files it reads (the course's and Jupyter's), and every file of ``source/<id>/`` (its path and
    contents; editors' ``.ipynb_checkpoints`` and ``__pycache__`` left out; the course's own paths relative to it)."""
    digest = hashlib.sha256(f"{nbgrader.__version__}\0{assignment_id}\0".encode())
    files = [*course.nbgrader_config_files(), *sorted((course.source / assignment_id).rglob("*"))]
    hash_files(digest, files, root=course.root)
    return digest.hexdigest()


def recorded_cells(db_url: str, assignment_id: str) -> str:
    """SHA-256 (hex) of what the gradebook at ``db_url`` holds of the assignment's notebooks: each one's kernelspec
    and its grade, solution, task and source cells as nbgrader's ``SaveCells`` records them (names, points, cell
    types, locks, sources, checksums); empty when it holds no such assignment, or is an SQLite file not there (it
    is not created: nbgrader does that, running ``alembic``)."""
    if gradebook_file_missing(db_url):
        return ""
    with Gradebook(db_url) as gradebook:
        try:
            notebooks = gradebook.find_assignment(assignment_id).notebooks
        except MissingEntry:
            return ""
        recorded = [
            [
                notebook.name,
                notebook.kernelspec,
                sorted((c.name, c.max_score, c.cell_type) for c in notebook.grade_cells),
                sorted(c.name for c in notebook.solution_cells),
                sorted((c.name, c.max_score, c.cell_type) for c in notebook.task_cells),
                sorted((c.name, c.cell_type, c.locked, c.source, c.checksum) for c in notebook.source_cells),
            ]
            for notebook in sorted(notebooks, key=lambda notebook: notebook.name)
        ]
    return hashlib.sha256(json.dumps(recorded).encode()).hexdigest() if recorded else ""
