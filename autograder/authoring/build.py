"""Stage ``build``: regenerate release/ (nbgrader generate_assignment) and notebooks/ (executed references).

Both are derived from source/ only, deterministically: a rebuild with no
source change leaves git clean (same cell ids, no timing metadata, kernels
started with a fixed environment).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..course import Course
from ..pipeline.nbgrader_process import Session
from ..pipeline.reference import executed_reference, write_reference
from ..pipeline.releases import generate_release


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
    generate_assignment and returns it (:func:`autograder.pipeline.releases.generate_release`; raises CourseError where
    nbgrader refuses, its log quoted).

    Every request goes to one nbgrader process (:class:`autograder.pipeline.nbgrader_process.Session`: nbgrader
    starts once, not once per assignment) and is recorded in one throwaway gradebook, so nbgrader creates a gradebook
    (runs ``alembic``) once; it keeps the assignments apart there. The course's gradebook is not touched.
    """
    with Session(course) as nbgrader, tempfile.TemporaryDirectory(prefix="nbgrader-db-") as scratch:
        db_url = f"sqlite:///{Path(scratch) / 'gradebook.db'}"
        yield lambda assignment_id, destination: generate_release(course, assignment_id, destination, db_url, nbgrader)
