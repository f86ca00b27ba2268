"""``export --lms``: a Canvas, a Moodle and a Blackboard download graded through the real pipeline, then each
platform's grade-import file compared field by field with the documented format (tests/lms/<platform>_expected.csv,
written from the platforms' import rules, not from the output).

One course copy grades the three downloads one after the other (the notebooks are the same, so executions are
reused); each export is taken right after its download is graded, and Canvas's once more at the end, when the
gradebook also holds the Moodle and Blackboard students (no Canvas identity)."""

import csv
import io
import zipfile
from datetime import datetime, timezone
from pathlib import Path

import pytest
from nbgrader.api import Gradebook

from downloads import ASSIGNMENT, blackboard_attempt, build, notebooks, write
from autograder.course import ROOT, Course, copy_course, run_nbgrader
from autograder.grading.grade import grade
from autograder.results.lms import BLACKBOARD_COMMENTS, CANVAS_HEADER, MOODLE_HEADER, export

COURSE = Course(ROOT)
EXPECTED = Path(__file__).parent / "lms"
DUE = "2026-11-30 12:00:00 UTC"
NOW = datetime(2026, 12, 5, 12, 0, tzinfo=timezone.utc)
FULL, POINTS = 26.0, 28.0
"""The reference's autograded points of 01_tensors, and the assignment's max score (the written answer's 2 points
wait for a hand grade)."""


def extra_files(platform, work, blank):
    """Beyond tests/downloads.py's download: a student with a hostile name (the reference solution) and one who
    handed in no notebook; Moodle also an unreadable notebook."""
    if platform == "canvas":
        return {"=2+3_1003_5003_01_tensors.ipynb": work, "doejohn_1004_5004_notes.txt": "no notebook"}
    if platform == "moodle":
        return {
            '=HYPERLINK("x")_33_assignsubmission_file_/01_tensors.ipynb': work,
            "John Doe_34_assignsubmission_file_/notes.txt": "no notebook",
            "Ivy Invalid_35_assignsubmission_file_/01_tensors.ipynb": "{not a notebook",
        }
    return {
        **blackboard_attempt("eve", 'Eve =HYPERLINK("x")', "2026-11-30-09-00-00", work),
        "01 Tensors_jdoe_attempt_2026-11-30-09-00-00_notes.txt": "no notebook",
    }


EXPORT = {
    "canvas": {"title": "01 Tensors", "lms_assignment_id": "4242"},
    "moodle": {},
    "blackboard": {"title": "01 Tensors", "lms_assignment_id": "777"},
}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from conftest import run_cli

    work, blank = notebooks(COURSE)
    root = tmp_path_factory.mktemp("lms")
    course = copy_course(COURSE, root / "course")
    assert run_nbgrader(course, "db", "assignment", "add", ASSIGNMENT, f"--duedate={DUE}").returncode == 0
    done = {}
    for platform in ("canvas", "moodle", "blackboard"):
        download = build(platform, root / platform, work, blank).path
        write(download, extra_files(platform, work, blank))
        grade(course, download)
        options = {"feedback_zip": root / "feedback.zip"} if platform == "moodle" else {}
        done[platform] = export(course, platform=platform, assignment_id=ASSIGNMENT, output=root / f"{platform}.csv",
                                now=NOW, **EXPORT[platform], **options)
    args = ["--course", str(course.root), "export", "--lms", "canvas", ASSIGNMENT, "--title", "01 Tensors"]
    process = run_cli(*args, "--lms-assignment-id", "4242", "--output", str(root / "canvas_again.csv"))
    return course, root, done, process


def rows(path):
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.reader(handle))


@pytest.mark.parametrize("platform", ["canvas", "moodle", "blackboard"])
def test_each_platform_file_is_the_documented_format_cell_for_cell(exported, platform):
    _, root, _, _ = exported
    assert rows(root / f"{platform}.csv") == rows(EXPECTED / f"{platform}_expected.csv")


def test_canvas_gradebook_csv(exported):
    _, root, done, _ = exported
    header, points, *students = rows(root / "canvas.csv")
    assert header == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "01 Tensors (4242)"]
    assert header[:5] == CANVAS_HEADER
    assert points == ["    Points Possible", "", "", "", "", "28"]
    by_id = {row[1]: row for row in students}
    assert {uid: float(row[5]) for uid, row in by_id.items()} == {"1001": FULL, "1002": 0.0, "1003": FULL}
    assert by_id["1003"][0] == '="=2+3"'  # Canvas's own exporter's form: a formula whose value is the name
    assert "1004" not in by_id and all(row[5] != "" for row in students)  # a blank would remove a Canvas grade
    warnings = "\n".join(done["canvas"].warnings)
    assert "doejohn_1004: left out, nothing graded" in warnings
    assert "late (Canvas's CSV has no late column" in warnings and "brontebea_1002 (late" in warnings


def test_moodle_worksheet_and_feedback_zip(exported):
    _, root, done, _ = exported
    header, *students = rows(root / "moodle.csv")
    assert header == MOODLE_HEADER
    by_participant = {row[0]: dict(zip(header, row)) for row in students}
    assert {p: row["Grade"] for p, row in by_participant.items()} == {
        "Participant 31": "26.00", "Participant 32": "0.00", "Participant 33": "26.00", "Participant 34": "",
        "Participant 35": ""}
    assert {row["Maximum Grade"] for row in by_participant.values()} == {"28.00"}
    assert by_participant["Participant 33"]["Full name"] == "'=HYPERLINK(\"x\")"
    assert by_participant["Participant 34"]["Status"] == "nothing graded"
    assert "No notebook of yours could be graded" in by_participant["Participant 34"]["Feedback comments"]
    assert by_participant["Participant 35"]["Status"] == "invalid notebook"
    assert by_participant["Participant 31"]["Last modified (grade)"] == "2026-12-05T12:00:00+00:00"
    with zipfile.ZipFile(root / "feedback.zip") as archive:
        names = sorted(archive.namelist())
        assert names == [
            "=HYPERLINK( x )_33_assignfeedback_file/01_tensors.html",
            "Ada Lovelace_31_assignfeedback_file/01_tensors.html",
            "Béa Brontë_32_assignfeedback_file/01_tensors.html",
        ]
        for name in names:  # Moodle's importer: at most 5 parts on "_", the 2nd the participant number
            folder = name.split("/")[0].split("_", 4)
            assert folder[1].isdigit() and folder[2:] == ["assignfeedback", "file"]
        assert b"<html" in archive.read(names[1]).lower()
    assert done["moodle"].pages == 3


def test_blackboard_work_offline_upload(exported):
    _, root, done, _ = exported
    text = (root / "blackboard.csv").read_text(encoding="utf-8")
    assert all(line.startswith('"') and line.endswith('"') for line in text.splitlines())  # every field quoted
    header, *students = rows(root / "blackboard.csv")
    assert header == ["Last Name", "First Name", "Username", "01 Tensors [Total Pts: 28 Score] |777",
                      *BLACKBOARD_COMMENTS]
    by_user = {row[2]: dict(zip(header, row)) for row in students}
    assert {user: float(row[header[3]]) for user, row in by_user.items()} == {
        "alovelace": FULL, "bbronte": 0.0, "eve": FULL}
    assert "late (6h 30min)" in by_user["alovelace"]["Grading Notes"]
    assert "Late: 6h 30min." in by_user["alovelace"]["Feedback to Learner"]
    assert "late" not in by_user["bbronte"]["Grading Notes"]
    assert by_user["eve"]["Last Name"] == "'=HYPERLINK(\"x\")"
    assert "jdoe: left out, nothing graded" in "\n".join(done["blackboard"].warnings)


def test_students_of_another_platform_are_left_out_with_a_warning_naming_them(exported):
    _, root, _, process = exported
    assert process.returncode == 0, process.stderr
    assert rows(root / "canvas_again.csv") == rows(root / "canvas.csv")
    for student in ("Ada_Lovelace_31", "alovelace", "eve"):
        assert f"warning: {student}: left out, not graded from a canvas download" in process.stdout
    assert "canvas: 3 student(s) in" in process.stdout


def test_a_feedback_zip_for_a_platform_without_one_is_refused(exported, cli):
    course, root, _, _ = exported
    process = cli("--course", str(course.root), "export", "--lms", "canvas", ASSIGNMENT, "--feedback-zip",
                  str(root / "x.zip"))
    assert process.returncode == 2 and "no bulk feedback-file upload" in process.stderr


def test_report_exports_grades_csv_again_with_a_hand_grade(exported, cli):
    """A hand grade given in the gradebook (as formgrader does) is in grades.csv after ``report``, without
    ``nbgrader export``, and in the next LMS export. Runs last: it changes the shared course."""
    course, root, _, _ = exported
    with Gradebook(course.db_url) as gradebook:
        notebook = gradebook.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, "lovelaceada_1001")
        (written,) = [g for g in notebook.grades if g.needs_manual_grade]  # the written answer
        written.manual_score = written.max_score
        gradebook.db.commit()
    process = cli("--course", str(course.root), "report")
    assert process.returncode == 0, process.stderr
    grades = {row["student_id"]: row for row in csv.DictReader(io.StringIO((course.root / "grades.csv").read_text()))}
    assert float(grades["lovelaceada_1001"]["score"]) == POINTS
    again = export(course, platform="canvas", assignment_id=ASSIGNMENT, output=root / "hand.csv", title="01 Tensors")
    assert {row[1]: row[5] for row in rows(again.path)[2:]}["1001"] == "28"
