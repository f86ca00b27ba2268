"""Stage ``intake``: read a download of submissions and place it in nbgrader's submitted/ folder.

A download is a folder or a zip of one, shaped
``[wrapper/]<student_id>/<assignment_id>/<notebook>.ipynb`` (the shape LMS
exports and ``nbgrader zip_collect`` produce). Anything else in it is
reported, never silently graded.
"""

from __future__ import annotations

import shutil
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import nbformat
from nbformat import NotebookNode

from . import structure
from .course import Course, CourseError

IGNORED_PARTS = {".ipynb_checkpoints", "__MACOSX", "__pycache__"}
TIMESTAMP = "timestamp.txt"
"""nbgrader's record of when a submission was made (read by autograde for late penalties)."""


@dataclass
class Submission:
    """One student's work for one assignment, as found in the download."""

    student_id: str
    assignment_id: str
    folder: Path
    notes: list[str] = field(default_factory=list)
    """What intake did to it (e.g. a renamed notebook, repairs), shown to the instructor."""
    status: str = "ok"
    """``ok``, ``repaired``, ``review`` or ``invalid notebook``: see :func:`place`."""


@dataclass
class Intake:
    submissions: list[Submission]
    ignored: list[str]
    """Paths in the download that are not ``<student>/<assignment>/<notebook>.ipynb``, with the reason."""


@contextmanager
def opened(download: Path) -> Iterator[Path]:
    """Yield a folder holding the download: the folder itself, or a zip safely extracted to a temp folder.

    Raises:
        CourseError: the path does not exist, or is neither a folder nor a
            readable zip, or the zip has members that escape its folder.
    """
    if download.is_dir():
        yield download
        return
    if not download.is_file():
        raise CourseError(f"{download} does not exist")
    if not zipfile.is_zipfile(download):
        raise CourseError(f"{download} is neither a folder nor a zip file")
    with tempfile.TemporaryDirectory(prefix="submissions-") as scratch, zipfile.ZipFile(download) as archive:
        for member in archive.namelist():
            path = PurePosixPath(member)
            if path.is_absolute() or ".." in path.parts:
                raise CourseError(f"{download}: member {member!r} would be extracted outside its folder")
        archive.extractall(scratch)
        yield Path(scratch)


def find_submissions(folder: Path, *, assignment_ids: list[str]) -> Intake:
    """Find ``<student_id>/<assignment_id>/`` folders holding notebooks, at any depth under ``folder``.

    An assignment folder whose one notebook is not named ``<assignment_id>.ipynb``
    (a browser's ``01_tensors (1).ipynb``) is still graded, and says so in
    its notes.
    """
    found: dict[tuple[str, str], Submission] = {}
    ignored = []
    for notebook in sorted(folder.rglob("*.ipynb")):
        relative = notebook.relative_to(folder)
        if IGNORED_PARTS & set(relative.parts):
            continue
        parts = relative.parts
        if len(parts) < 3 or parts[-2] not in assignment_ids:
            ignored.append(f"{relative}: not <student_id>/<assignment_id>/<notebook>.ipynb with a known assignment id")
            continue
        student_id, assignment_id = parts[-3], parts[-2]
        if student_id.startswith("."):
            ignored.append(f"{relative}: student id may not start with '.'")
            continue
        key = (student_id, assignment_id)
        if key not in found:
            found[key] = Submission(student_id=student_id, assignment_id=assignment_id, folder=notebook.parent)
    return Intake(submissions=[found[key] for key in sorted(found)], ignored=ignored)


def place(course: Course, submission: Submission, *, release: NotebookNode) -> Path:
    """Write a submission, validated and normalised, to ``submitted/<student>/<assignment>/``.

    The notebook graded is ``<assignment_id>.ipynb``; a folder's only
    notebook under another name (a browser's ``01_tensors (1).ipynb``) is
    taken with a note. It is rebuilt on the structure of ``release`` by
    :func:`autograder.structure.normalise`, and ``submission.status`` says
    what happened: ``ok``, ``repaired`` (notes say what), ``review`` (its code
    touches the grading machinery: graded as usual, to be read by a person) or
    ``invalid notebook`` (graded as the unchanged release, so every autograded
    cell scores 0).
    Other files are not copied, so nothing a student adds (a ``torch.py``, a
    ``checks.py``) can shadow a module the tests import; only nbgrader's
    ``timestamp.txt`` (the submission time, for late penalties) is kept.
    The previous autograded/ and feedback/ copies of this submission are
    removed, so nbgrader grades exactly the new work; grades kept in the
    gradebook (manual grades included) stay.
    """
    destination = course.root / "submitted" / submission.student_id / submission.assignment_id
    if destination.exists():
        shutil.rmtree(destination)
    destination.mkdir(parents=True)
    expected = f"{submission.assignment_id}.ipynb"
    notebooks = sorted(p for p in submission.folder.glob("*.ipynb") if p.is_file())
    chosen = submission.folder / expected if (submission.folder / expected).is_file() else None
    if chosen is None and len(notebooks) == 1:
        chosen = notebooks[0]
        submission.notes.append(f"notebook {chosen.name!r} graded as {expected!r}")
    if chosen is None:
        names = ", ".join(p.name for p in notebooks)
        submission.notes.append(f"no {expected} among the notebooks submitted ({names}): graded as blank")
        normalised = structure.Normalised(notebook=structure.blank(release), readable=False)
    else:
        normalised = structure.normalise_file(chosen, release=release)
    nbformat.write(normalised.notebook, destination / expected)
    submission.notes.extend(normalised.repairs)
    if normalised.review:
        submission.notes.append(f"touches the grading machinery, read it: {'; '.join(normalised.review[:5])}")
    submission.status = (
        "invalid notebook"
        if not normalised.readable
        else "review"
        if normalised.review
        else "repaired"
        if normalised.repairs
        else "ok"
    )

    skipped = []
    for path in sorted(p for p in submission.folder.rglob("*") if p.is_file() and p != chosen):
        relative = path.relative_to(submission.folder)
        if relative == Path(TIMESTAMP):
            shutil.copy(path, destination / TIMESTAMP)
        elif not IGNORED_PARTS & set(relative.parts) and relative != Path("checks.py"):
            skipped.append(str(relative))
    if skipped:
        submission.notes.append(f"files not graded: {', '.join(skipped[:10])}{' ...' if len(skipped) > 10 else ''}")
    for stage in ("autograded", "feedback"):
        stale = course.root / stage / submission.student_id / submission.assignment_id
        if stale.exists():
            shutil.rmtree(stale)
    return destination
