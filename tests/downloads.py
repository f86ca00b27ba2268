"""A corpus of downloads in the shapes platforms produce, built from the course's own notebooks.

Each builder gives the files of one download holding the reference solution
(``work``) and the unchanged release (``blank``) under the platform's naming
rule (see :mod:`autograder.intake.shapes` for where each rule comes from), and
what intake must make of it: course student id -> the file graded;
:func:`build` writes it.
Nothing here is committed as data: the notebooks come from release/ and
source/ through :func:`autograder.samples.samples`, so they never go stale.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from dataclasses import dataclass
from pathlib import Path

import nbformat

from autograder.course import Course
from autograder.samples import samples

ASSIGNMENT = "01_tensors"


@dataclass(frozen=True)
class Download:
    path: Path
    format: str
    expected: dict[str, str]
    """Course student id -> the manifest name of the notebook graded for ASSIGNMENT."""


def notebooks(course: Course) -> tuple[str, str]:
    """(reference solution, unchanged release) of ASSIGNMENT, as notebook JSON text."""
    found = {s.student_id: s for s in samples(course, ASSIGNMENT)}
    return nbformat.writes(found["reference"].notebook), nbformat.writes(found["unchanged_release"].notebook)


def write(root: Path, files: dict[str, str | bytes]) -> Path:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return root


def zipped(folder: Path, archive: Path) -> Path:
    """``folder``'s files in a zip at ``archive``, paths relative to ``folder`` (as platforms zip a download)."""
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as handle:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                handle.write(path, path.relative_to(folder).as_posix())
    return archive


def hashes(root: Path) -> dict[str, str]:
    """SHA-256 of every file under ``root`` (a file: itself), by relative path."""
    paths = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    digest = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}
    return {str(p.relative_to(root) if root.is_dir() else p.name): value for p, value in digest.items()}


Files = dict[str, str | bytes]


def nbgrader_layout(work: str, blank: str) -> tuple[Files, dict[str, str]]:
    """nbgrader's submitted/ layout under a wrapper; nbgrader's timestamp.txt beside ada's notebook."""
    files = {
        "export/ada/01_tensors/01_tensors.ipynb": work,
        "export/ada/01_tensors/timestamp.txt": "2026-11-30 10:00:00.000000 UTC",
        "export/bea/01_tensors/01_tensors (1).ipynb": blank,
    }
    return files, {"ada": "export/ada/01_tensors/01_tensors.ipynb", "bea": "export/bea/01_tensors/01_tensors (1).ipynb"}


def canvas(work: str, blank: str) -> tuple[Files, dict[str, str]]:
    """Canvas Download Submissions: flat, ``<lastnamefirstname>[_LATE]_<user id>_<file id>_<name>``."""
    files = {"lovelaceada_1001_5001_01_tensors.ipynb": work, "brontebea_LATE_1002_5002_01_tensors-1.ipynb": blank}
    return files, {"lovelaceada_1001": "lovelaceada_1001_5001_01_tensors.ipynb", "brontebea_1002": list(files)[1]}


def moodle(work: str, blank: str) -> tuple[Files, dict[str, str]]:
    """Moodle Download all submissions: ``<Full Name>_<id>_assignsubmission_file_/<file>``; a planted timestamp.txt."""
    files = {
        "Ada Lovelace_31_assignsubmission_file_/01_tensors.ipynb": work,
        "Béa Brontë_32_assignsubmission_file_/01_tensors.ipynb": blank,
        "Béa Brontë_32_assignsubmission_file_/timestamp.txt": "2020-01-01 00:00:00 UTC",
    }
    ada, bea = list(files)[:2]
    return files, {"Ada_Lovelace_31": ada, "Bea_Bronte_32": bea}


def moodle_namings(work: str, blank: str) -> dict[str, tuple[Files, dict[str, str]]]:
    """Moodle's three namings of one download, by ``mod/assign/classes/downloader.php``: in folders (the
    default since 3.1) ``<Full Name>_<id>_assignsubmission_file/`` (Moodle 4) or ``..._file_/`` (Moodle 3),
    and with "Download submissions in folders" off, flat ``<Full Name>_<id>_assignsubmission_file_<file>``."""
    namings = {"moodle 4 folders": "{}_assignsubmission_file/", "moodle 3 folders": "{}_assignsubmission_file_/"}
    namings["flat"] = "{}_assignsubmission_file_"
    found = {}
    for naming, pattern in namings.items():
        ada, bea = (pattern.format(who) + "01_tensors.ipynb" for who in ("Ada Lovelace_31", "Béa Brontë_32"))
        found[naming] = {ada: work, bea: blank}, {"Ada_Lovelace_31": ada, "Bea_Bronte_32": bea}
    return found


BLACKBOARD_RECEIPT = """Name: {name} ({user})
Assignment: 01 Tensors
Date Submitted: {when}
Current Grade: Needs Grading

Submission Field:
There is no student submission text data for this assignment.

Comments:
There are no student comments for this assignment.

Files:
\tOriginal filename: 01_tensors.ipynb
\tFilename: 01 Tensors_{user}_attempt_{stamp}_01_tensors.ipynb
"""


def blackboard(work: str, blank: str) -> tuple[Files, dict[str, str]]:
    """Blackboard Assignment File Download: ada's two attempts (the later one is her work) and a receipt each."""
    files = {}
    for user, name, stamp, when, text in (
        ("alovelace", "Ada Lovelace", "2026-11-29-09-00-00", "Sunday, 29 November 2026 09:00:00 GMT", blank),
        ("alovelace", "Ada Lovelace", "2026-11-30-18-30-00", "Monday, 30 November 2026 18:30:00 GMT", work),
        ("bbronte", "Bea Bronte", "2026-11-30-08-00-00", "Monday, 30 November 2026 08:00:00 GMT", blank),
    ):
        files[f"01 Tensors_{user}_attempt_{stamp}_01_tensors.ipynb"] = text
        files[f"01 Tensors_{user}_attempt_{stamp}.txt"] = BLACKBOARD_RECEIPT.format(
            name=name, user=user, stamp=stamp, when=when
        )
    expected = {
        "alovelace": "01 Tensors_alovelace_attempt_2026-11-30-18-30-00_01_tensors.ipynb",
        "bbronte": "01 Tensors_bbronte_attempt_2026-11-30-08-00-00_01_tensors.ipynb",
    }
    return files, expected


def blackboard_usernames(work: str, blank: str, *, receipts: bool = True) -> tuple[Files, dict[str, str]]:
    """A Blackboard download whose assignment name and usernames hold ``_`` and spaces; receipts in local zones.

    ``jane_smith`` and ``bob_smith`` share the last part ``smith``; ``jane_smith``'s receipt is in EST (15:15
    UTC), ``bob_smith``'s in MEZ (09:15 UTC), ``amy_li``'s in a zone no one can resolve (``XYZ``).
    """
    files: Files = {}
    prefix = "Tensors HW_1"
    for user, name, when, text in (
        ("jane_smith", "Jane Smith", "Monday, November 30, 2026 10:15:22 AM EST", work),
        ("bob_smith", "Bob Smith", "Montag, 30. November 2026 10:15:22 MEZ", blank),
        ("amy_li", "Amy Li", "Monday, November 30, 2026 10:15:22 AM XYZ", work),
    ):
        stamp = "2026-11-30-10-15-22"
        files[f"{prefix}_{user}_attempt_{stamp}_01_tensors.ipynb"] = text
        if receipts:
            receipt = BLACKBOARD_RECEIPT.replace("01 Tensors_", f"{prefix}_")
            files[f"{prefix}_{user}_attempt_{stamp}.txt"] = receipt.format(name=name, user=user, stamp=stamp, when=when)
    return files, {user: f"{prefix}_{user}_attempt_2026-11-30-10-15-22_01_tensors.ipynb" for user in
                   ("jane_smith", "bob_smith", "amy_li")}


def canvas_names(work: str, blank: str) -> tuple[Files, dict[str, str]]:
    """Canvas name parts with hyphens and non-ASCII letters (Canvas keeps word characters and ``-``)."""
    files = {"smith--jane_1234_5678_01_tensors.ipynb": work, "müllerjosé_7777_1111_01_tensors.ipynb": blank}
    return files, {"smith_jane_1234": list(files)[0], "mullerjose_7777": list(files)[1]}


def canvas_anonymous(work: str, blank: str) -> tuple[Files, dict[str, str]]:
    """Canvas with anonymous grading on: ``anon_<anonymous id>`` where the name and user id were, ``LATE_`` before it
    (canvas-lms ``ContentZipper#get_filename``); an all-digit anonymous id is still anonymous."""
    files = {"anon_Xk3pQ_5678_01_tensors.ipynb": work, "LATE_anon_48213_1111_01_tensors.ipynb": blank}
    return files, {"anon_Xk3pQ": list(files)[0], "anon_48213": list(files)[1]}


GRADESCOPE_METADATA = """submission_7001:
  :submitters:
  - :name: Ada Lovelace
    :sid: '1001'
    :email: ada@example.edu
  :created_at: 2026-11-30 10:15:00.000000000 -08:00
  :score: 0.0
  :history: []
submission_7002:
  :submitters:
  - :name: Bea Bronte
    :sid: '1002'
    :email: bea@example.edu
  - :name: Kim Lee
    :sid: Kim [2]
    :email: kim@example.edu
  :created_at: 2026-11-30 09:00:00.000000000 -08:00
  :score: 0.0
  :history: []
"""


def gradescope(work: str, blank: str) -> tuple[Files, dict[str, str]]:
    """Gradescope Export Submissions: ``submission_<id>/`` folders and submission_metadata.yml (one group)."""
    folder = "assignment_123_export"
    files = {
        f"{folder}/submission_metadata.yml": GRADESCOPE_METADATA,
        f"{folder}/submission_7001/01_tensors.ipynb": work,
        f"{folder}/submission_7002/01_tensors.ipynb": blank,
    }
    _, ada, group = list(files)
    return files, {"1001": ada, "1002": group, "Kim_2-" + _hash("Kim [2]"): group}


def zip_collect(work: str, blank: str) -> tuple[Files, dict[str, str]]:
    """nbgrader zip_collect's ``downloaded/01_tensors/`` with a Canvas zip in archive/ and its extracted copy."""
    platform, graded = canvas(work, blank)
    files: Files = {f"downloaded/{ASSIGNMENT}/archive/submissions.zip": zip_bytes(platform)}
    files |= {f"downloaded/{ASSIGNMENT}/extracted/{name}": text for name, text in platform.items()}
    return files, {student: f"{list(files)[0]}!{name}" for student, name in graded.items()}


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:6]


SHAPES = {
    "nbgrader": nbgrader_layout,
    "canvas": canvas,
    "moodle": moodle,
    "blackboard": blackboard,
    "gradescope": gradescope,
    "zip_collect": zip_collect,
}
"""Format name -> builder."""


def build(shape: str, root: Path, work: str, blank: str) -> Download:
    """Write the download of ``shape`` at ``root``."""
    files, expected = SHAPES[shape](work, blank)
    return Download(write(root, files), "zip_collect (canvas)" if shape == "zip_collect" else shape, expected)


def zip_bytes(files: Files) -> bytes:
    """A zip holding ``files`` (name -> content), as bytes."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as handle:
        for name, content in files.items():
            handle.writestr(name, content)
    return buffer.getvalue()
