"""Stage ``export --lms``: one assignment's grades as the learning platform's own grade-import file.

The file is made from the gradebook (each student's score, late penalty taken as in grades.csv, and the
assignment's max score) and from what intake recorded of each student's platform identity when it graded them
(:data:`IDENTITIES_FILE`): the Canvas user id read from the download's file names, the Moodle participant number of
that assignment, the Blackboard username. Formats, as the platforms read them (sources: canvas-lms
``lib/gradebook_importer.rb`` and ``lib/gradebook_exporter.rb``; Moodle ``mod/assign/feedback/offline/
importgradeslib.php`` and ``mod/assign/feedback/file/importziplib.php``; Blackboard Learn's help "Work Offline With
Grade Data"):

- ``canvas``: the Gradebook CSV, ``Student,ID,SIS User ID,SIS Login ID,Section,<title> (<assignment id>)``, then
  ``    Points Possible`` (4 spaces), then one row per student keyed by ``ID`` (the Canvas user id). Canvas matches
  the column by the id in parentheses, else by the exact title. A blank cell *removes* a grade in Canvas, so a
  student with nothing gradable has no row at all (a warning names them). The CSV has no late or comment column.
- ``moodle``: the assignment's offline grading worksheet, ``Identifier`` (``Participant N``), ``Full name``,
  ``Email address``, ``Status``, ``Grade``, ``Maximum Grade``, ``Grade can be changed``, ``Last modified
  (submission)``, ``Last modified (grade)``, ``Feedback comments``. Moodle skips a blank grade (it never clears
  one), so a student with nothing gradable keeps a row with a blank grade and a comment saying why; late is said
  in ``Status`` and the comment (Moodle has no late column). With a feedback zip: each student's feedback page in
  ``<Full name>_<N>_assignfeedback_file/<assignment>.html`` ("Upload multiple feedback files in a zip").
- ``blackboard``: the Grade Center Work Offline upload, comma-separated with every field quoted, keyed by
  ``Username``; the grade column ``<title> [Total Pts: <max> Score] |<column id>`` (without a column id Blackboard
  makes a new text column of 0 points), then the single-column download's comment columns ``Grading Notes``,
  ``Notes Format``, ``Feedback to Learner``, ``Feedback Format`` (headers as community scripts write them, not
  confirmed against Blackboard). Exemption and late flags cannot be uploaded: late is said in the feedback. A
  student with nothing gradable has no row (what a blank does on upload is not documented); a warning names them.

A student whose platform identity is not known (graded from another platform's or nbgrader's download, or a Canvas
anonymous id) has no row, and a warning names them. Every text cell goes through :func:`autograder.spreadsheet.cell`
except Canvas's ``Student`` cell starting with ``=``, written ``="..."`` as Canvas's own exporter writes it.
"""

from __future__ import annotations

import csv
import html
import json
import re
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry

from .. import spreadsheet
from ..course import Course, CourseError, require_gradebook, write_atomically
from ..pipeline.intake.roster import Mapping
from ..pipeline.intake.submissions import Submission
from .report import MARKED_LATE, gradebook_results

PLATFORMS = ("canvas", "moodle", "blackboard")

IDENTITIES_FILE = "gradebook.platform_ids.json"
"""What intake recorded of each graded student's platform identity, kept beside the gradebook (git-ignored like it):
``{"<assignment>/<student>": {"format", "platform_id", "name", "email"[, "left_out": [why, ...]]}}``. ``left_out``:
the student was in a download of that assignment but nothing of theirs was taken (:func:`remember_identities`)."""

UNGRADABLE = ("nothing graded", "invalid notebook", "not graded")
"""Submission statuses whose score is not a grade: never exported as 0."""

CANVAS_HEADER = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
CANVAS_POINTS = "    Points Possible"
MOODLE_HEADER = [
    "Identifier",
    "Full name",
    "Email address",
    "Status",
    "Grade",
    "Maximum Grade",
    "Grade can be changed",
    "Last modified (submission)",
    "Last modified (grade)",
    "Feedback comments",
]
BLACKBOARD_HEADER = ["Last Name", "First Name", "Username"]
BLACKBOARD_COMMENTS = ["Grading Notes", "Notes Format", "Feedback to Learner", "Feedback Format"]


def remember_identities(
    course: Course, *, mappings: list[Mapping], submissions: list[Submission], left_out: dict[str, list[str]]
) -> Path:
    """Record in :data:`IDENTITIES_FILE` the platform identity of each student of one graded download, for each
    assignment graded for them; a student with nothing taken is recorded (with why) under the download's assignment
    when the download held one assignment only. Other students' records stay. Returns the file's path."""
    path = course.root / IDENTITIES_FILE
    records = _identities(course)
    by_student: dict[str, Mapping] = {}
    for mapping in mappings:
        by_student.setdefault(mapping.student.student_id, mapping)
    assignments = {s.assignment_id for s in submissions}
    pairs = [(s.assignment_id, s.student_id, None) for s in submissions]
    if len(assignments) == 1:
        (only,) = assignments
        pairs += [(only, student, reasons) for student, reasons in left_out.items()]
    for assignment_id, student_id, reasons in pairs:
        mapping = by_student.get(student_id)
        if mapping is None:
            continue
        record = {"format": mapping.format, "platform_id": mapping.platform_id, "name": mapping.name,
                  "email": mapping.email}
        if reasons is not None:
            record["left_out"] = list(reasons)
        records[f"{assignment_id}/{student_id}"] = record
    write_atomically(path, json.dumps(records, indent=1, sort_keys=True))
    return path


def _identities(course: Course) -> dict[str, dict]:
    path = course.root / IDENTITIES_FILE
    return json.loads(path.read_text()) if path.exists() else {}


@dataclass
class Student:
    """One student of the assignment, as the export sees them."""

    student_id: str
    status: str
    score: float | None
    """The gradebook's score less the late penalty (as grades.csv); None when nothing gradable was graded."""
    late: str
    """How late, as task_results.csv says it (empty: on time or not known)."""
    pending: bool
    """A written answer still waits for a hand grade (counted 0 in the score)."""
    notes: list[str]
    first_name: str = ""
    last_name: str = ""
    email: str = ""
    timestamp: datetime | None = None
    identity: dict | None = None
    """This assignment's record in :data:`IDENTITIES_FILE`, if any."""
    others: list[dict] = field(default_factory=list)
    """The student's records for other assignments (a Canvas user id or Blackboard username is course-wide)."""


@dataclass
class LmsExport:
    """What :func:`export` wrote."""

    platform: str
    path: Path
    rows: int
    """Students written."""
    warnings: list[str]
    """Each student left out and why, late marks the file cannot carry, pending hand grades, header caveats."""
    feedback_zip: Path | None = None
    pages: int = 0
    """Feedback pages in the zip."""


def export(
    course: Course,
    *,
    platform: str,
    assignment_id: str,
    output: Path | None = None,
    title: str | None = None,
    lms_assignment_id: str | None = None,
    feedback_zip: Path | None = None,
    now: datetime | None = None,
) -> LmsExport:
    """Write ``assignment_id``'s grade-import file for ``platform`` (see the module) at ``output`` (default
    ``lms_<platform>_<assignment>.csv`` in the course directory).

    ``title``: the assignment's name on the platform (default: the assignment id). ``lms_assignment_id``: the
    platform's id of it (Canvas's assignment id, Blackboard's grade column id), put in the header where the platform
    matches by it. ``feedback_zip`` (Moodle only): also write the feedback-files zip there. ``now``: the worksheet's
    ``Last modified (grade)`` (default: the time of the export).

    Raises:
        CourseError: an unknown platform, no gradebook, the assignment not in it, or a feedback zip asked of a
            platform without bulk feedback-file upload.
    """
    if platform not in PLATFORMS:
        raise CourseError(f"no export for {platform!r}: platforms are {', '.join(PLATFORMS)}")
    if feedback_zip is not None and platform != "moodle":
        raise CourseError(
            f"--feedback-zip is for Moodle's 'Upload multiple feedback files in a zip'; {platform} has no bulk "
            "feedback-file upload: return the pages in feedback/ another way"
        )
    require_gradebook(course)
    students, max_score = _students(course, assignment_id)
    output = output or course.root / f"lms_{platform}_{assignment_id}.csv"
    title = title or assignment_id
    writer = {"canvas": _canvas, "moodle": _moodle, "blackboard": _blackboard}[platform]
    result = writer(
        students,
        max_score=max_score,
        output=output,
        title=title,
        lms_id=lms_assignment_id,
        now=now or datetime.now(timezone.utc),
    )
    if feedback_zip is not None:
        result.feedback_zip = feedback_zip
        result.pages = _feedback_zip(course, students, assignment_id=assignment_id, path=feedback_zip)
    return result


def _students(course: Course, assignment_id: str) -> tuple[list[Student], float]:
    records = _identities(course)
    with Gradebook(course.db_url) as gradebook:
        try:
            max_score = float(gradebook.find_assignment(assignment_id).max_score)
        except MissingEntry:
            raise CourseError(f"no assignment {assignment_id!r} in the gradebook: grade it first") from None
        results = {r.student_id: r for r in gradebook_results(course) if r.assignment_id == assignment_id}
        students = []
        ids = set(results) | {key.split("/", 1)[1] for key in records if key.split("/", 1)[0] == assignment_id}
        for student_id in sorted(ids):
            result = results.get(student_id)
            record = records.get(f"{assignment_id}/{student_id}")
            if result is None:
                status, notes = "nothing graded", list((record or {}).get("left_out", [])) or ["no notebook taken"]
                late, pending = "", False
            else:
                status, notes = result.status or "graded", result.notes
                late, pending = result.late, result.needs_manual_grade
            score, timestamp = None, None
            if status not in UNGRADABLE:
                try:
                    submission = gradebook.find_submission(assignment_id, student_id)
                except MissingEntry:
                    status = "not graded"
                else:
                    score = max(0.0, float(submission.score) - float(submission.late_submission_penalty))
                    timestamp = submission.timestamp
            try:
                person = gradebook.find_student(student_id)
                names = person.first_name or "", person.last_name or "", person.email or ""
            except MissingEntry:
                names = "", "", ""
            others = [r for key, r in records.items() if key.endswith(f"/{student_id}") and r is not record]
            students.append(
                Student(student_id, status, score, late, pending, notes, *names, timestamp=timestamp,
                        identity=record, others=others)
            )
    return students, max_score


def _identity(student: Student, platform: str, *, course_wide: bool) -> dict | None:
    """The student's identity on ``platform``: this assignment's record, else (``course_wide``: the id is the same
    for every assignment) any record of theirs from that platform."""
    records = [student.identity] if student.identity else []
    if course_wide:
        records += student.others
    return next((r for r in records if r.get("format") == platform and r.get("platform_id")), None)


def _name(student: Student, identity: dict) -> tuple[str, str]:
    """(first, last): the gradebook's (a roster's), else the platform's full name split at its last space."""
    if student.first_name or student.last_name:
        return student.first_name, student.last_name
    first, _, last = (identity.get("name") or "").rpartition(" ")
    return first, last


def _points(value: float) -> str:
    return f"{round(value, 2):g}"


def _unknown(student: Student, platform: str, why: str = "") -> str:
    reason = why or f"not graded from a {platform} download (no {platform} identity recorded)"
    return f"{student.student_id}: left out, {reason}; enter their grade on {platform} by hand"


def _ungradable(student: Student, platform: str) -> str:
    why = "; ".join(student.notes[:3])
    return f"{student.student_id}: left out, {student.status}" + (f" ({why})" if why else "") + (
        f"; {platform} keeps whatever grade it has: enter one by hand if you mean to"
    )


def _comments(student: Student, max_score: float) -> list[str]:
    """What the student is told beside the grade."""
    if student.score is None:
        said = {"nothing graded": "No notebook of yours could be graded", "invalid notebook":
                "Your notebook could not be read", "not graded": "Your notebook could not be graded"}
        return [f"{said.get(student.status, student.status)}: no grade was entered. Contact your instructor."]
    lines = [f"Score: {_points(student.score)} of {_points(max_score)}."]
    if student.late:
        lines.append("Marked late by the platform." if student.late == MARKED_LATE else f"Late: {student.late}.")
    if student.pending:
        lines.append("Your written answer is still to be graded by hand: it counts 0 until then.")
    return lines


def _status(student: Student) -> str:
    """The instructor's line for a student: graded (and how: ``unattempted``, ``review``, ...) or why not, late,
    a hand grade pending (task_results.csv has the details)."""
    if student.score is None:
        text = student.status
    else:
        text = "graded" if student.status in ("ok", "graded") else f"graded ({student.status})"
    if student.late:
        text += f"; late ({student.late})"
    if student.pending:
        text += "; written answer to grade by hand"
    return text


def _write(path: Path, header: list[str], rows: Iterable[list], *, quoting: int = csv.QUOTE_MINIMAL) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, quoting=quoting)
        writer.writerow([spreadsheet.cell(value) for value in header])
        writer.writerows(rows)


def _canvas(students: list[Student], *, max_score: float, output: Path, title: str, lms_id: str | None,
            now: datetime) -> LmsExport:
    column = f"{title} ({lms_id})" if lms_id else title
    warnings = [] if lms_id else [
        f"no --lms-assignment-id: Canvas matches the column {title!r} by its exact title, else offers to create a "
        "new (published) assignment"
    ]
    rows, late = [], []
    for student in students:
        identity = _identity(student, "canvas", course_wide=True)
        if identity is None or not identity["platform_id"].isdigit():
            why = "a Canvas anonymous id, not a user id" if identity else ""
            warnings.append(_unknown(student, "canvas", why))
            continue
        if student.score is None:
            warnings.append(_ungradable(student, "Canvas"))
            continue
        if student.late:
            late.append(f"{student.student_id} ({student.late})")
        if student.pending:
            warnings.append(f"{student.student_id}: a written answer still waits for a hand grade (counted 0)")
        first, last = student.first_name, student.last_name
        name = f"{last}, {first}" if first and last else (last or first or identity.get("name") or "")
        cells = ["", "", "", _points(student.score)]
        rows.append([_canvas_name(name), spreadsheet.cell(identity["platform_id"]), *map(spreadsheet.cell, cells)])
    if late:
        warnings.append(
            "late (Canvas's CSV has no late column: mark them in SpeedGrader or with the Submissions API's "
            f"late_policy_status): {', '.join(late)}"
        )
    header = [*CANVAS_HEADER, column]
    _write(output, header, [[CANVAS_POINTS, "", "", "", "", _points(max_score)], *rows])
    return LmsExport("canvas", output, len(rows), warnings)


def _canvas_name(name: str) -> str:
    """Canvas's exporter's rule for a name starting with ``=`` (``="..."``: a formula whose value is the text); any
    other name through :func:`autograder.spreadsheet.cell`."""
    if name.startswith("="):
        return '="' + name.replace('"', '""') + '"'
    return spreadsheet.cell(name)


def _moodle(students: list[Student], *, max_score: float, output: Path, title: str, lms_id: str | None,
            now: datetime) -> LmsExport:
    warnings, rows = [], []
    for student in students:
        identity = _identity(student, "moodle", course_wide=False)
        if identity is None or not identity["platform_id"].isdigit():
            warnings.append(_unknown(student, "moodle", "" if identity is None else "no participant number"))
            continue
        if student.score is None:
            warnings.append(f"{student.student_id}: {student.status}: blank grade (Moodle skips it), said in the "
                            "feedback comment")
        status = _status(student)
        submitted = f"{student.timestamp:%Y-%m-%d %H:%M:%S} UTC" if student.timestamp else ""
        cells = [
            f"Participant {identity['platform_id']}",
            identity.get("name") or " ".join(filter(None, (student.first_name, student.last_name))),
            identity.get("email") or student.email,
            status,
            "" if student.score is None else f"{student.score:.2f}",
            f"{max_score:.2f}",
            "Yes",
            submitted,
            now.astimezone(timezone.utc).isoformat(timespec="seconds"),
            " ".join(_comments(student, max_score)),
        ]
        rows.append([spreadsheet.cell(value) for value in cells])
    _write(output, MOODLE_HEADER, rows)
    return LmsExport("moodle", output, len(rows), warnings)


FOLDER_UNSAFE = re.compile(r"[_/\\:*?\"<>|\x00-\x1f]")
"""What a Moodle feedback-zip folder's name part may not hold: ``_`` (Moodle splits the folder name on it) and what
Moodle's ``clean_filename`` drops."""


def _feedback_zip(course: Course, students: list[Student], *, assignment_id: str, path: Path) -> int:
    """Write Moodle's feedback-files zip: each student's feedback page (feedback/<student>/<assignment>/) in
    ``<Full name>_<participant N>_assignfeedback_file/``. Returns the pages written."""
    pages = 0
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for student in students:
            identity = _identity(student, "moodle", course_wide=False)
            page = course.root / "feedback" / student.student_id / assignment_id / f"{assignment_id}.html"
            if identity is None or not identity["platform_id"].isdigit() or student.score is None or not page.exists():
                continue
            name = FOLDER_UNSAFE.sub(" ", identity.get("name") or student.student_id).strip().lstrip(".~") or "Student"
            archive.write(page, f"{name}_{identity['platform_id']}_assignfeedback_file/{page.name}")
            pages += 1
    return pages


def _blackboard(students: list[Student], *, max_score: float, output: Path, title: str, lms_id: str | None,
                now: datetime) -> LmsExport:
    column = f"{title} [Total Pts: {_points(max_score)} Score]" + (f" |{lms_id}" if lms_id else "")
    warnings = [] if lms_id else [
        "no --lms-assignment-id: Blackboard makes the column a new text column with 0 points possible; give the "
        "grade column's id (the number after '|' in a Work Offline download's header)"
    ]
    rows = []
    for student in students:
        identity = _identity(student, "blackboard", course_wide=True)
        if identity is None:
            warnings.append(_unknown(student, "blackboard"))
            continue
        if student.score is None:
            warnings.append(_ungradable(student, "Blackboard"))
            continue
        username = identity["platform_id"]
        if spreadsheet.cell(username) != username:
            warnings.append(f"{student.student_id}: username {username!r} starts like a formula: written as text "
                            "('...), which Blackboard will not match; enter this grade by hand")
        if student.pending:
            warnings.append(f"{student.student_id}: a written answer still waits for a hand grade (counted 0)")
        first, last = _name(student, identity)
        cells = [
            last,
            first,
            username,
            _points(student.score),
            html.escape(_status(student)),
            "HTML",
            html.escape(" ".join(_comments(student, max_score))),
            "HTML",
        ]
        rows.append([spreadsheet.cell(value) for value in cells])
    _write(output, [*BLACKBOARD_HEADER, column, *BLACKBOARD_COMMENTS], rows, quoting=csv.QUOTE_ALL)
    return LmsExport("blackboard", output, len(rows), warnings)
