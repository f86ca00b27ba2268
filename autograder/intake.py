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

from .course import Course, CourseError, read_notebook

IGNORED_PARTS = {".ipynb_checkpoints", "__MACOSX", "__pycache__"}


@dataclass
class Submission:
    """One student's work for one assignment, as found in the download."""

    student_id: str
    assignment_id: str
    folder: Path
    notes: list[str] = field(default_factory=list)
    """What intake did to it (e.g. a renamed notebook), shown to the instructor."""


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


def place(course: Course, submission: Submission) -> Path:
    """Copy a submission to ``submitted/<student>/<assignment>/``, replacing what was there.

    The notebook is named ``<assignment_id>.ipynb`` (renamed with a note if
    it was the folder's only notebook under another name), and
    a notebook nbformat cannot read is noted (nbgrader will not grade it).
    A ``timestamp.txt`` in the download (nbgrader's submission time, used
    for late penalties) is kept; none is invented.
    The previous autograded/ and feedback/ copies of this submission are
    removed, so nbgrader grades exactly the new work; grades kept in the
    gradebook (manual grades included) stay.
    """
    destination = course.root / "submitted" / submission.student_id / submission.assignment_id
    if destination.exists():
        shutil.rmtree(destination)
    shutil.copytree(submission.folder, destination, ignore=shutil.ignore_patterns(*IGNORED_PARTS))
    expected = destination / f"{submission.assignment_id}.ipynb"
    notebooks = sorted(destination.glob("*.ipynb"))
    if not expected.exists() and len(notebooks) == 1:
        notebooks[0].rename(expected)
        submission.notes.append(f"notebook {notebooks[0].name!r} renamed to {expected.name!r}")
    elif not expected.exists():
        names = ", ".join(p.name for p in notebooks)
        submission.notes.append(f"no {expected.name} among the notebooks submitted ({names})")
    if expected.exists():
        try:
            read_notebook(expected)
        except CourseError as error:
            cause = error.__cause__
            submission.notes.append(
                f"{expected.name} is not a readable notebook ({type(cause).__name__}: {cause})"[:300]
            )
    for stage in ("autograded", "feedback"):
        stale = course.root / stage / submission.student_id / submission.assignment_id
        if stale.exists():
            shutil.rmtree(stale)
    return destination
