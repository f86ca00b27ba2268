"""Stage ``feedback``, on a re-run: feedback pages kept with what they were made from, and put back.

A page is generated again only when something it is made from changed
(:func:`feedback_key`): a re-run of ``grade`` on the same submissions
keeps the pages of the earlier run (about 0.8 s of CPU each, nbconvert's
HTML): they are kept, with their key, in :data:`FEEDBACK_STORE` and put back
(:func:`restore_feedback`) while the key is the same.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import shutil
from pathlib import Path
from typing import Any

from jupyter_core.paths import jupyter_path
from nbgrader.api import Comment, Grade, Gradebook, MissingEntry, SubmittedNotebook
from sqlalchemy.orm import joinedload, selectinload, undefer

from ..course import Course, hash_files, write_atomically
from .execute import STORE
from .verdict import stored_reference

FEEDBACK_STORE = Path(STORE) / "feedback"
"""Folder of the course directory where :func:`keep_feedback` keeps each submission's feedback pages, with what
they were made from."""


def feedback_key(course: Course, assignment_id: str, student_id: str) -> str | None:
    """SHA-256 (hex) of everything ``nbgrader generate_feedback`` makes one submission's feedback pages from;
    None when that cannot be known (no such assignment or submission, no reference records stored:
    :func:`autograder.pipeline.verdict.stored_reference`).

    - the files of ``autograded/<student>/<assignment>/``, each notebook without its cells' ids: intake gives
      a cell the student added a fresh id each run, and a page shows ids only as anchors (``cell-id=...``);
    - what nbgrader's ``GetGrades`` reads from the gradebook for each notebook: its score, maximum and late
      penalty, each grade cell's score and points, each answer's comment (a hand grade or comment changes it);
    - the reference's stored check records (:class:`autograder.results.feedback.HideHiddenTests` hides their expected
      values);
    - :func:`_renderer_key`: the configuration, this package's code, nbconvert's templates and the installed
      packages (nbgrader, nbconvert and what they render with).
    """
    try:
        reference = stored_reference(course, assignment_id)
    except (OSError, ValueError):  # no such assignment in source/: nbgrader says so when it is asked
        return None
    if not reference.is_file():
        return None
    digest = hashlib.sha256(f"{_renderer_key(course)}\0{assignment_id}\0{student_id}\0".encode())
    digest.update(reference.name.encode() + b"\0" + reference.read_bytes() + b"\0")
    folder = course.root / "autograded" / student_id / assignment_id
    for path in sorted(folder.rglob("*")):
        if path.suffix == ".ipynb" and path.is_file():
            notebook = json.loads(path.read_bytes())
            for cell in notebook.get("cells", []):
                cell.pop("id", None)
            digest.update(f"{path.relative_to(folder)}\0{json.dumps(notebook, sort_keys=True)}\0".encode())
        else:
            hash_files(digest, [path], root=folder)
    with Gradebook(course.db_url) as gradebook:
        grades = _graded(gradebook, assignment_id, student_id)
    if grades is None:
        return None
    digest.update(json.dumps(grades).encode())
    return digest.hexdigest()


def _graded(gradebook: Gradebook, assignment_id: str, student_id: str) -> list[list[Any]] | None:
    """For each notebook of the submission, by name: its name, score, maximum and late penalty, ``(name, score,
    maximum)`` of each grade and ``(name, comment)`` of each comment, sorted (None: no such submission).

    Read in a few queries, not through the notebooks' relationships, which load them one at a time (about 40
    queries a submission).
    """
    try:
        submission = gradebook.find_submission(assignment_id, student_id)
    except MissingEntry:
        return None
    notebooks = (
        gradebook.db.query(SubmittedNotebook)
        .filter(SubmittedNotebook.assignment_id == submission.id)
        .options(
            joinedload(SubmittedNotebook.notebook),
            undefer(SubmittedNotebook.score),
            undefer(SubmittedNotebook.max_score),
            selectinload(SubmittedNotebook.grades).options(joinedload(Grade.cell), undefer(Grade.max_score)),
            selectinload(SubmittedNotebook.comments).joinedload(Comment.cell),
        )
    )
    return [
        [
            notebook.name,
            notebook.score,
            notebook.max_score,
            notebook.late_submission_penalty,
            sorted((grade.name, grade.score, grade.max_score) for grade in notebook.grades),
            sorted((comment.name, comment.comment) for comment in notebook.comments),
        ]
        for notebook in sorted(notebooks, key=lambda notebook: notebook.name)
    ]


@functools.cache
def _renderer_key(course: Course) -> str:
    """SHA-256 (hex) of what renders every feedback page alike (read once per process): nbgrader's configuration
    files, this package's source (the course's preprocessors), the files of nbconvert's template folders, and the
    name and version of every installed distribution."""
    digest = hashlib.sha256()
    package = Path(__file__).parent.parent
    templates = [path for folder in jupyter_path("nbconvert", "templates") for path in sorted(Path(folder).rglob("*"))]
    hash_files(digest, [*course.nbgrader_config_files(), *sorted(package.rglob("*.py")), *templates], root=course.root)
    installed = sorted(f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions())
    digest.update("\n".join(installed).encode())
    return digest.hexdigest()


def restore_feedback(course: Course, assignment_id: str, student_id: str, key: str | None) -> bool:
    """Put the feedback pages an earlier run made from ``key`` (:func:`feedback_key`) back in
    ``feedback/<student>/<assignment>/`` (intake empties it for every submission it places), replacing what is
    there, as ``generate_feedback --force`` does. Returns False, changing nothing, where none are kept: no record
    of ``key`` (:func:`keep_feedback`), or the kept files are not exactly those recorded."""
    record, kept = _kept_paths(course, assignment_id, student_id)
    if key is None or not record.is_file():
        return False
    try:
        recorded = json.loads(record.read_text())
    except ValueError:
        return False
    if recorded.get("key") != key or recorded.get("files") != _file_digests(kept):
        return False
    folder = course.root / "feedback" / student_id / assignment_id
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(kept, folder)
    return True


def keep_feedback(course: Course, assignment_id: str, student_id: str, key: str | None) -> None:
    """Keep a copy of the feedback pages now in ``feedback/<student>/<assignment>/``, made from ``key``, for
    :func:`restore_feedback` (None: drop any copy kept, the pages are generated again next time)."""
    record, kept = _kept_paths(course, assignment_id, student_id)
    record.unlink(missing_ok=True)
    if kept.exists():
        shutil.rmtree(kept)
    folder = course.root / "feedback" / student_id / assignment_id
    if key is None or not folder.is_dir():
        return
    shutil.copytree(folder, kept)
    text = json.dumps({"student": student_id, "assignment": assignment_id, "key": key, "files": _file_digests(kept)})
    write_atomically(record, text)


def _kept_paths(course: Course, assignment_id: str, student_id: str) -> tuple[Path, Path]:
    """The record of a submission's kept feedback pages, and the folder holding them (in :data:`FEEDBACK_STORE`)."""
    name = hashlib.sha256(f"{student_id}\0{assignment_id}".encode()).hexdigest()
    return course.root / FEEDBACK_STORE / f"{name}.json", course.root / FEEDBACK_STORE / name


def _file_digests(folder: Path) -> dict[str, str]:
    """``{relative path: SHA-256}`` of every file in ``folder`` (none when it does not exist)."""
    paths = sorted(path for path in folder.rglob("*") if path.is_file()) if folder.is_dir() else []
    return {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest() for path in paths}
