"""A corpus of downloads in the shapes platforms produce, built from the course's own notebooks.

Each builder gives the files of one download holding the reference solution
(``work``) and the unchanged release (``blank``) under the platform's naming
rule (see :mod:`autograder.pipeline.intake.shapes` for where each rule comes from), and
what intake must make of it: course student id -> the file graded;
:func:`build` writes it.
Nothing here is committed as data: the notebooks come from release/ and
source/ through :func:`autograder.authoring.samples.samples`, so they never go stale.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import nbformat

from autograder.course import Course
from autograder.authoring.samples import samples

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


def blackboard_attempt(user: str, name: str, stamp: str, notebook: str) -> Files:
    """One Blackboard attempt of 01_tensors.ipynb and its receipt (``Date Submitted:`` the stamp's time, GMT)."""
    when = datetime.strptime(stamp, "%Y-%m-%d-%H-%M-%S").strftime("%A, %d %B %Y %H:%M:%S GMT")
    attempt = f"01 Tensors_{user}_attempt_{stamp}"
    receipt = BLACKBOARD_RECEIPT.format(name=name, user=user, stamp=stamp, when=when)
    return {f"{attempt}_01_tensors.ipynb": notebook, f"{attempt}.txt": receipt}


def blackboard(work: str, blank: str) -> tuple[Files, dict[str, str]]:
    """Blackboard Assignment File Download: ada's two attempts (the later one is her work) and a receipt each."""
    files: Files = {}
    for user, name, stamp, text in (
        ("alovelace", "Ada Lovelace", "2026-11-29-09-00-00", blank),
        ("alovelace", "Ada Lovelace", "2026-11-30-18-30-00", work),
        ("bbronte", "Bea Bronte", "2026-11-30-08-00-00", blank),
    ):
        files |= blackboard_attempt(user, name, stamp, text)
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


@dataclass(frozen=True)
class Impersonation:
    """A download in a platform's real layout where a student's own upload names another student's submission."""

    files: Files
    expected: dict[str, str]
    """Course student id -> the manifest name of the notebook graded: every student keeps their own work."""
    planted: dict[str, str]
    """Manifest name of each file named as another's -> the uploader it stays with (its submission is review)."""


LATER = "2030-01-01 00:00:00 UTC"
"""A time after every real one: a planted copy with it would win the copy-choosing rule."""


def impersonations(work: str, blank: str) -> dict[str, Impersonation]:
    """Attacks, by name: an attacker plants their blank notebook (or a time, a receipt, an empty zip) named as a
    victim's submission (inside their own folder, their own zip, their own file name), beside the victim's work."""
    nb, moodle_dir, bb = "01_tensors/01_tensors.ipynb", "{}_assignsubmission_file/", "01 Tensors_{}_attempt_{}"
    ada, bea = moodle_dir.format("Ada Lovelace_31"), moodle_dir.format("Béa Brontë_32")
    canvas_ada = "lovelaceada_1001_5001_work.zip"
    late_bb = bb.format("bbronte", "2026-12-01-00-00-00")
    attack_zip = bb.format("alovelace", "2026-11-30-18-30-00") + "_work.zip"
    zoe_zip = bb.format("zoe", "2026-11-30-09-00-00") + "_work.zip"
    found = {
        "nbgrader: a folder named as another student's, with nbgrader's timestamp.txt": Impersonation(
            {f"alice/{nb}": blank, f"alice/01_tensors/bob/{nb}": blank, f"bob/{nb}": work,
             "alice/01_tensors/bob/01_tensors/timestamp.txt": LATER,
             "alice/01_tensors/bob/01_tensors/more.zip": zip_bytes({})},
            {"alice": f"alice/01_tensors/bob/{nb}", "bob": f"bob/{nb}"},
            dict.fromkeys([f"alice/01_tensors/bob/{nb}", *(f"alice/01_tensors/bob/01_tensors/{name}" for name in
                                                           ("timestamp.txt", "more.zip"))], "alice"),
        ),
        "nbgrader: a zip whose members are another student's folder, names differing in case": Impersonation(
            {f"export/alice/{nb}": blank, f"export/bob/{nb}": work,
             "export/alice/01_tensors/work.zip": zip_bytes({f"bob/{nb}": blank, f"Bob/{nb}": blank})},
            {"alice": f"export/alice/01_tensors/work.zip!bob/{nb}", "bob": f"export/bob/{nb}"},
            dict.fromkeys([f"export/alice/01_tensors/work.zip!bob/{nb}", f"export/alice/01_tensors/work.zip!Bob/{nb}"],
                          "alice"),
        ),
        "nbgrader: a zip holding zip_collect's downloaded/<id>/archive/ (it hid every other student)": Impersonation(
            {f"alice/{nb}": blank, f"bob/{nb}": work,
             "alice/01_tensors/work.zip": zip_bytes({f"downloaded/01_tensors/archive/bob/{nb}": blank})},
            {"alice": f"alice/01_tensors/work.zip!downloaded/01_tensors/archive/bob/{nb}", "bob": f"bob/{nb}"},
            {f"alice/01_tensors/work.zip!downloaded/01_tensors/archive/bob/{nb}": "alice"},
        ),
        "moodle: a student's folder inside another's, and one with Arabic-Indic digits": Impersonation(
            {f"{ada}01_tensors.ipynb": blank, f"{ada}Béa Brontë_32_assignsubmission_file/01_tensors.ipynb": blank,
             f"{ada}Béa Brontë_٣٢_assignsubmission_file/01_tensors.ipynb": blank, f"{bea}01_tensors.ipynb": work},
            {"Ada_Lovelace_31": f"{ada}Béa Brontë_٣٢_assignsubmission_file/01_tensors.ipynb",
             "Bea_Bronte_32": f"{bea}01_tensors.ipynb"},
            {f"{ada}Béa Brontë_32_assignsubmission_file/01_tensors.ipynb": "Ada_Lovelace_31",
             f"{ada}Béa Brontë_٣٢_assignsubmission_file/01_tensors.ipynb": "Ada_Lovelace_31"},
        ),
        "moodle: a zip in a student's folder holding another's folder": Impersonation(
            {f"{ada}01_tensors.ipynb": blank, f"{bea}01_tensors.ipynb": work,
             f"{ada}work.zip": zip_bytes({f"{bea}01_tensors.ipynb": blank})},
            {"Ada_Lovelace_31": f"{ada}work.zip!{bea}01_tensors.ipynb", "Bea_Bronte_32": f"{bea}01_tensors.ipynb"},
            {f"{ada}work.zip!{bea}01_tensors.ipynb": "Ada_Lovelace_31"},
        ),
        "moodle flat: a file handed in under another student's flat name": Impersonation(
            {"Ada Lovelace_31_assignsubmission_file_Béa Brontë_32_assignsubmission_file_01_tensors.ipynb": blank,
             "Ada Lovelace_31_assignsubmission_file_01_tensors.ipynb": blank,
             "Béa Brontë_32_assignsubmission_file_01_tensors.ipynb": work},
            {"Ada_Lovelace_31": "Ada Lovelace_31_assignsubmission_file_01_tensors.ipynb",
             "Bea_Bronte_32": "Béa Brontë_32_assignsubmission_file_01_tensors.ipynb"},
            {"Ada Lovelace_31_assignsubmission_file_Béa Brontë_32_assignsubmission_file_01_tensors.ipynb":
             "Ada_Lovelace_31"},
        ),
        "canvas: a student's zip holding files named as another's (a later -9, capitals, a folder)": Impersonation(
            {"lovelaceada_1001_5002_01_tensors.ipynb": blank, "brontebea_1002_5003_01_tensors.ipynb": work,
             canvas_ada: zip_bytes({"brontebea_1002_5003_01_tensors-9.ipynb": blank,
                                    "sub/BronteBea_1002_5003_01_tensors.ipynb": blank})},
            {"lovelaceada_1001": "lovelaceada_1001_5002_01_tensors.ipynb",
             "brontebea_1002": "brontebea_1002_5003_01_tensors.ipynb"},
            {f"{canvas_ada}!brontebea_1002_5003_01_tensors-9.ipynb": "lovelaceada_1001",
             f"{canvas_ada}!sub/BronteBea_1002_5003_01_tensors.ipynb": "lovelaceada_1001"},
        ),
        "canvas, anonymous: an anonymous student's zip holding another anonymous id's upload": Impersonation(
            {"anon_Xk3pQ_5678_01_tensors.ipynb": blank, "LATE_anon_48213_1111_01_tensors.ipynb": work,
             "anon_Xk3pQ_5679_work.zip": zip_bytes({"anon_48213_1111_01_tensors-1.ipynb": blank})},
            {"anon_Xk3pQ": "anon_Xk3pQ_5678_01_tensors.ipynb", "anon_48213": "LATE_anon_48213_1111_01_tensors.ipynb"},
            {"anon_Xk3pQ_5679_work.zip!anon_48213_1111_01_tensors-1.ipynb": "anon_Xk3pQ"},
        ),
        "blackboard: an attempt's zip holding another's later attempt and its receipt": Impersonation(
            {**blackboard_attempt("bbronte", "Bea Bronte", "2026-11-30-08-00-00", work),
             **blackboard_attempt("alovelace", "Ada Lovelace", "2026-11-30-18-30-00", blank),
             attack_zip: zip_bytes(blackboard_attempt("bbronte", "Ada Lovelace", "2026-12-01-00-00-00", blank))},
            {"alovelace": f"{bb.format('alovelace', '2026-11-30-18-30-00')}_01_tensors.ipynb",
             "bbronte": f"{bb.format('bbronte', '2026-11-30-08-00-00')}_01_tensors.ipynb"},
            {f"{attack_zip}!{late_bb}_01_tensors.ipynb": "alovelace", f"{attack_zip}!{late_bb}.txt": "alovelace"},
        ),
        "blackboard: a receipt in an attempt's zip giving another's attempt to the uploader": Impersonation(
            {**blackboard_attempt("bbronte", "Bea Bronte", "2026-11-30-08-00-00", work),
             **blackboard_attempt("zoe", "Zoe Zed", "2026-11-30-09-00-00", blank),
             zoe_zip: zip_bytes({f"{bb.format('bbronte', '2026-11-30-08-00-00')}.txt": BLACKBOARD_RECEIPT.format(
                 name="Zoe Zed", user="zoe", stamp="2026-11-30-08-00-00", when="Friday, 1 January 2030")})},
            {"zoe": f"{bb.format('zoe', '2026-11-30-09-00-00')}_01_tensors.ipynb",
             "bbronte": f"{bb.format('bbronte', '2026-11-30-08-00-00')}_01_tensors.ipynb"},
            {f"{zoe_zip}!{bb.format('bbronte', '2026-11-30-08-00-00')}.txt": "zoe"},
        ),
        "zip_collect: a student's zip inside the platform's zip in archive/": Impersonation(
            {"downloaded/01_tensors/archive/submissions.zip": zip_bytes({
                "lovelaceada_1001_5002_01_tensors.ipynb": blank, "brontebea_1002_5003_01_tensors.ipynb": work,
                canvas_ada: zip_bytes({"brontebea_1002_5003_01_tensors-1.ipynb": blank})})},
            {"lovelaceada_1001": f"downloaded/01_tensors/archive/submissions.zip!{canvas_ada}!"
                                 "brontebea_1002_5003_01_tensors-1.ipynb",
             "brontebea_1002": "downloaded/01_tensors/archive/submissions.zip!brontebea_1002_5003_01_tensors.ipynb"},
            {f"downloaded/01_tensors/archive/submissions.zip!{canvas_ada}!brontebea_1002_5003_01_tensors-1.ipynb":
             "lovelaceada_1001"},
        ),
    }
    found |= gradescope_impersonations(work, blank)
    return found


def gradescope_record(folder: str, created_at: str, *submitters: tuple[str, str, str]) -> str:
    """One submission of a ``submission_metadata.yml``, as Export Submissions writes it: ``submitters`` are
    (name, sid, email)."""
    people = "".join(f"  - :name: {name}\n    :sid: '{sid}'\n    :email: {email}\n" for name, sid, email in submitters)
    return f"{folder}:\n  :submitters:\n{people}  :created_at: {created_at}\n  :score: 0.0\n  :history: []\n"


EVE = ("Eve Mallory", "1003", "eve@example.edu")
GRADESCOPE_SWAP = gradescope_record("submission_7001", "2026-11-30 10:15:00.000000000 -08:00", EVE) + gradescope_record(
    "submission_7003", "2030-01-01 10:15:00.000000000 -08:00", ("Ada Lovelace", "1001", "ada@example.edu")
)
"""A ``submission_metadata.yml`` Eve (submission_7003) writes, giving her folder Ada's identity and Ada's hers."""


def gradescope_export(work: str, blank: str) -> tuple[Files, dict[str, str]]:
    """:func:`gradescope` with a third submission, Eve Mallory's (1003): her blank notebook."""
    files, expected = gradescope(work, blank)
    eve = gradescope_record("submission_7003", "2026-11-30 11:00:00.000000000 -08:00", EVE)
    files["assignment_123_export/submission_metadata.yml"] = GRADESCOPE_METADATA + eve
    files["assignment_123_export/submission_7003/01_tensors.ipynb"] = blank
    return files, {**expected, "1003": "assignment_123_export/submission_7003/01_tensors.ipynb"}


def gradescope_impersonations(work: str, blank: str) -> dict[str, Impersonation]:
    """Gradescope attacks by Eve (submission_7003): her own metadata file, another submission's folder (a
    group's) inside hers, and a zip holding both."""
    files, expected = gradescope_export(work, blank)
    eve = "assignment_123_export/submission_7003/"
    return {
        f"gradescope: {attack}": Impersonation(
            {**files, **planted},
            {**expected, "1003": next((name for name in names if name.endswith(".ipynb")), expected["1003"])},
            dict.fromkeys(names, "1003"),
        )
        for attack, planted, names in (
            ("a submission_metadata.yml in a student's folder", {f"{eve}submission_metadata.yml": GRADESCOPE_SWAP},
             [f"{eve}submission_metadata.yml"]),
            ("a group's submission folder inside another's", {f"{eve}submission_7002/01_tensors.ipynb": blank},
             [f"{eve}submission_7002/01_tensors.ipynb"]),
            ("a zip holding metadata and another's folder",
             {f"{eve}work.zip": zip_bytes({"submission_metadata.yml": GRADESCOPE_SWAP,
                                           "submission_7001/01_tensors.ipynb": blank})},
             [f"{eve}work.zip!submission_metadata.yml", f"{eve}work.zip!submission_7001/01_tensors.ipynb"]),
        )
    }


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
