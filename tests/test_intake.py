"""Intake: the downloads platforms produce, every file accounted for, nothing changed, nothing lost."""

import csv
import functools
import io
import os
import stat
import sys
import zipfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pytest
from nbgrader.api import Gradebook
from downloads import (
    ASSIGNMENT,
    SHAPES,
    Download,
    blackboard_usernames,
    build,
    canvas_anonymous,
    impersonations,
    canvas_names,
    gradescope_record,
        hashes,
    moodle_namings,
    nbgrader_layout,
    notebooks,
    write,
    zip_bytes,
    zipped,
)
from autograder.course import ROOT, Course, CourseError, copy_course, is_grade, read_notebook, run_nbgrader
from autograder.grading.grade import Grading, _enrol, grade
from autograder.pipeline.intake.submissions import opened, place, refuse_course_folders, write_manifest
from autograder.pipeline.intake import archives
from autograder.pipeline.intake.archives import MAX_MEMBER_BYTES, MAX_MEMBERS
from autograder.pipeline.intake.roster import Roster, map_student, safe_id, write_mapping
from autograder.results.classreport import ClassReport, class_report, write_class_report
from autograder.results.report import (
    GRADES_COLUMNS,
    MARKED_LATE,
    QuotedCsvExport,
    SubmissionResult,
    TaskResult,
    write_task_results,
)
from autograder.authoring.samples import samples

COURSE = Course(ROOT)


@functools.cache
def release(assignment_id):
    return read_notebook(ROOT / "release" / assignment_id / f"{assignment_id}.ipynb")


@pytest.fixture(scope="module")
def work_and_blank():
    """(reference solution, unchanged release) of 01_tensors as notebook text."""
    return notebooks(COURSE)


def take(download, **options):
    with opened(download, course=COURSE, release=release, **options) as found:
        return found


def taken(folder, files):
    """What intake takes from a download of ``files`` (name -> content) written at ``folder``."""
    return take(write(folder, files))


def files_in(download):
    """What the manifest must list: every file, a zip's members as ``zip!member`` (the download's own zip: members)."""
    if download.is_file():
        return sorted(members(download.read_bytes(), prefix=""))
    found = []
    for path in sorted(p for p in download.rglob("*") if p.is_file()):
        name = path.relative_to(download).as_posix()
        found.append(name)
        if path.suffix == ".zip":
            found += members(path.read_bytes(), prefix=f"{name}!")
    return sorted(found)


def members(data, *, prefix):
    found = []
    with zipfile.ZipFile(io.BytesIO(data)) as handle:
        for member in handle.namelist():
            if not member.endswith("/"):
                found.append(f"{prefix}{member}")
                if member.endswith(".zip"):
                    found += members(handle.read(member), prefix=f"{prefix}{member}!")
    return found


@pytest.mark.parametrize("packed", [False, True], ids=["folder", "zip"])
@pytest.mark.parametrize("shape", SHAPES)
def test_each_shape_maps_every_student_and_lists_every_file_once(tmp_path, shape, packed, work_and_blank):
    download = build(shape, tmp_path / "download", *work_and_blank)
    path = zipped(download.path, tmp_path / "download.zip") if packed else download.path
    before = hashes(path)
    found = take(path)
    assert found.format == download.format and download.format.split()[0] in found.detected
    assert {s.student_id: s.source for s in found.submissions} == download.expected
    assert {s.assignment_id for s in found.submissions} == {ASSIGNMENT}
    assert [row.file for row in found.manifest] == files_in(path)
    assert hashes(path) == before


def test_format_forces_a_shape_and_says_so(tmp_path, work_and_blank):
    download = build("canvas", tmp_path / "download", *work_and_blank)
    forced = take(download.path, format="moodle")
    assert forced.detected == "format: moodle (as --format says)" and forced.submissions == []
    assert {row.status for row in forced.manifest} == {"not taken"}
    assert all("not in the moodle shape" in row.note for row in forced.manifest)
    with pytest.raises(CourseError, match="unknown format 'webct'"):
        take(download.path, format="webct")
    with pytest.raises(CourseError, match="holds no downloaded/<assignment_id>/archive/"):
        take(download.path, format="zip_collect")


def test_unreadable_gradescope_metadata_is_said_and_nothing_is_taken(tmp_path, work_and_blank):
    download = build("gradescope", tmp_path / "download", *work_and_blank).path
    (download / "assignment_123_export" / "submission_metadata.yml").write_text("submission_7001: [unclosed")
    found = take(download, format="gradescope")
    assert "its metadata cannot be read" in found.detected and found.submissions == []
    assert {row.status for row in found.manifest} == {"not taken"}


def test_a_gradescope_folder_the_metadata_does_not_list_is_not_taken_and_says_why(tmp_path, work_and_blank):
    """Such a folder was "not in the gradescope shape", which it is; its notebook is not graded under a made-up id."""
    download = build("gradescope", tmp_path / "download", *work_and_blank)
    write(download.path, {"assignment_123_export/submission_7003/01_tensors.ipynb": work_and_blank[0]})
    found = take(download.path)
    assert found.format == "gradescope"
    assert {s.student_id: s.source for s in found.submissions} == download.expected
    (row,) = [row for row in found.manifest if "submission_7003" in row.file]
    assert (row.status, row.student_id) == ("not taken", "")
    assert row.note.startswith("submission_7003/ is a Gradescope submission folder but submission_metadata.yml "
                               "does not list it: whose work it is is not known, so it is not taken")


def test_times_come_from_the_platform_or_nbgrader_never_from_a_student(tmp_path, work_and_blank):
    blackboard = take(build("blackboard", tmp_path / "bb", *work_and_blank).path)
    ada = next(s for s in blackboard.submissions if s.student_id == "alovelace")
    assert ada.timestamp == datetime(2026, 11, 30, 18, 30, tzinfo=timezone.utc)
    assert ada.review and "2 copies handed in" in ada.notes[0] and "(the latest submission time)" in ada.notes[0]
    receipts = [row for row in blackboard.manifest if row.file.endswith(".txt")]
    assert len(receipts) == 3 and {row.status for row in receipts} == {"platform metadata"}

    gradescope = take(build("gradescope", tmp_path / "gs", *work_and_blank).path)
    times = {s.student_id: s.timestamp for s in gradescope.submissions}
    assert times["1001"] == datetime(2026, 11, 30, 18, 15, tzinfo=timezone.utc)  # 10:15 at -08:00

    nbgrader = take(build("nbgrader", tmp_path / "nb", *work_and_blank).path)
    assert {s.student_id: s.timestamp for s in nbgrader.submissions} == {
        "ada": datetime(2026, 11, 30, 10, tzinfo=timezone.utc),
        "bea": None,
    }

    canvas = take(build("canvas", tmp_path / "canvas", *work_and_blank).path)
    late = {s.student_id: s for s in canvas.submissions}["brontebea_1002"]
    assert late.timestamp is None and "late: the platform marked it late" in late.notes[-1]

    moodle = take(build("moodle", tmp_path / "moodle", *work_and_blank).path)
    assert all(s.timestamp is None for s in moodle.submissions)
    planted = next(row for row in moodle.manifest if row.file.endswith("timestamp.txt"))
    assert planted.status == "not taken" and "not trusted" in planted.note


@pytest.mark.parametrize("receipts", [True, False], ids=["receipts", "no receipts"])
def test_blackboard_usernames_with_underscores_stay_apart(tmp_path, receipts, work_and_blank):
    """``jane_smith`` and ``bob_smith`` were both read as ``smith``: one student's work was lost."""
    files, expected = blackboard_usernames(*work_and_blank, receipts=receipts)
    found = taken(tmp_path / "download", files)
    assert {s.student_id: s.source for s in found.submissions} == expected
    assert all(not s.review for s in found.submissions)
    if receipts:
        names = {m.platform_id: m.name for m in found.mappings}
        assert names == {"jane_smith": "Jane Smith", "bob_smith": "Bob Smith", "amy_li": "Amy Li"}


def test_blackboard_receipt_times_in_local_zones_are_resolved_and_unknown_ones_not_used(tmp_path, work_and_blank):
    found = taken(tmp_path / "download", blackboard_usernames(*work_and_blank)[0])
    times = {s.student_id: s.timestamp for s in found.submissions}
    assert times == {
        "jane_smith": datetime(2026, 11, 30, 15, 15, 22, tzinfo=timezone.utc),  # 10:15:22 AM EST
        "bob_smith": datetime(2026, 11, 30, 9, 15, 22, tzinfo=timezone.utc),  # 10:15:22 MEZ
        "amy_li": None,
    }
    (amy,) = [row.note for row in found.manifest if row.file.endswith("amy_li_attempt_2026-11-30-10-15-22.txt")]
    assert amy == "Blackboard receipt of amy_li: Date Submitted is in an unknown time zone 'XYZ': the time is not used"


def test_canvas_names_with_hyphens_and_non_ascii_letters_are_taken(tmp_path, work_and_blank):
    files, expected = canvas_names(*work_and_blank)
    found = taken(tmp_path / "download", files)
    assert found.format == "canvas"
    assert {s.student_id: s.source for s in found.submissions} == expected
    assert {row.status for row in found.manifest} == {"graded"}


def test_canvas_anonymous_names_are_taken_under_their_anonymous_ids_and_late_is_kept(tmp_path, work_and_blank):
    files, expected = canvas_anonymous(*work_and_blank)
    found = taken(tmp_path / "download", files)
    assert found.format == "canvas"
    assert {s.student_id: s.source for s in found.submissions} == expected
    late = {s.student_id: any(note.startswith("late: ") for note in s.notes) for s in found.submissions}
    assert late == {"anon_Xk3pQ": False, "anon_48213": True}
    assert {row.status for row in found.manifest} == {"graded"}


def test_canvas_resubmission_suffixes_are_its_naming_not_a_near_miss(tmp_path, work_and_blank):
    work, blank = work_and_blank
    files = {"parkmin_1007_8001_01_tensors-1.ipynb": work, "kimlee_1006_8002_01_tensors-2.ipynb": blank}
    found = taken(tmp_path / "download", files)
    assert found.format == "canvas"
    assert sorted(s.student_id for s in found.submissions) == ["kimlee_1006", "parkmin_1007"]
    assert [note for s in found.submissions for note in s.notes if "did you mean" in note] == []


@pytest.mark.parametrize("naming", ["moodle 4 folders", "moodle 3 folders", "flat"])
def test_moodle_downloads_in_folders_or_flat_are_taken(tmp_path, naming, work_and_blank):
    files, expected = moodle_namings(*work_and_blank)[naming]
    found = taken(tmp_path / "download", files)
    assert found.format == "moodle"
    assert {s.student_id: s.source for s in found.submissions} == expected
    assert {row.status for row in found.manifest} == {"graded"}


def test_a_zipped_nbgrader_submitted_folder_keeps_its_submission_times(tmp_path, work_and_blank):
    files, _ = nbgrader_layout(*work_and_blank)
    download = zipped(write(tmp_path / "download", files), tmp_path / "submitted.zip")
    times = {s.student_id: s.timestamp for s in take(download).submissions}
    assert times == {"ada": datetime(2026, 11, 30, 10, tzinfo=timezone.utc), "bea": None}


def test_a_student_with_only_a_refused_or_empty_archive_keeps_a_row(tmp_path, work_and_blank):
    work, _ = work_and_blank
    download = write(
        tmp_path / "download",
        {
            "ada/01_tensors/01_tensors.ipynb": work,
            "bea/01_tensors/bomb.zip": bomb(),
            "cy/01_tensors/escape.zip": zip_bytes({"../01_tensors.ipynb": work}),
            "dee/01_tensors/nested.zip": nested_too_deep(work),
            "eve/01_tensors/empty.zip": zip_bytes({}),
            "fay/01_tensors/answers.pdf": b"%PDF-1.4",
        },
    )
    found = take(download)
    assert [s.student_id for s in found.submissions] == ["ada"]
    assert sorted(m.student.student_id for m in found.mappings) == ["ada", "bea", "cy", "dee", "eve", "fay"]
    reasons = found.left_out
    assert "zip bomb" in reasons["bea"][0] and "outside its folder" in reasons["cy"][0]
    assert reasons["dee"] == [
        "dee/01_tensors/nested.zip!deeper.zip!deeper.zip!deeper.zip (archive refused: archive nested more than 3 deep)"
    ]
    assert reasons["eve"] == ["eve/01_tensors/empty.zip (the archive holds no file)"]
    assert reasons["fay"] == ["answers.pdf"]
    rows = {row.file: row for row in found.manifest}
    assert (rows["bea/01_tensors/bomb.zip"].status, rows["bea/01_tensors/bomb.zip"].student_id) == ("refused", "bea")


def test_a_canvas_resubmission_wins_a_tie_over_the_first_upload(tmp_path, work_and_blank):
    work, _ = work_and_blank
    files = {"lovelaceada_1001_5001_01_tensors.ipynb": work, "lovelaceada_1001_5001_01_tensors-1.ipynb": work}
    (ada,) = taken(tmp_path / "download", files).submissions
    assert ada.source == "lovelaceada_1001_5001_01_tensors-1.ipynb" and ada.review
    assert "(Canvas's later upload)" in ada.notes[-1]  # no time, the same answers: not the time rule


def test_copies_grade_the_latest_then_the_most_answered_and_ask_for_review(tmp_path, work_and_blank):
    work, blank = work_and_blank
    copies = {
        "section1/ada/01_tensors/01_tensors.ipynb": blank,
        "section2/ada/01_tensors/01_tensors.ipynb": work,
        "cy/01_tensors/01_tensors.ipynb": blank,
        "cy/01_tensors/01_tensors_final.ipynb": work,
    }
    found = taken(tmp_path / "download", copies)
    chosen = {s.student_id: s for s in found.submissions}
    assert chosen["ada"].source == "section2/ada/01_tensors/01_tensors.ipynb"
    assert chosen["cy"].source == "cy/01_tensors/01_tensors_final.ipynb"
    assert all(s.review for s in found.submissions)
    status = {row.file: row.status for row in found.manifest}
    assert status["section1/ada/01_tensors/01_tensors.ipynb"] == "copy not graded"
    assert status["cy/01_tensors/01_tensors.ipynb"] == "copy not graded"
    placed = place(Course(tmp_path / "course"), chosen["cy"], release=release(ASSIGNMENT))
    assert chosen["cy"].status == "review"
    assert "not graded: cy/01_tensors/01_tensors.ipynb" in chosen["cy"].notes[-1]
    assert "(the most answered solution cells)" in chosen["cy"].notes[-1]
    twins = taken(tmp_path / "twins", {"section1/bo/01_tensors/01_tensors.ipynb": work,
                                       "section2/bo/01_tensors/01_tensors.ipynb": work})
    (bo,) = twins.submissions
    assert bo.source == "section2/bo/01_tensors/01_tensors.ipynb" and "(the last by name)" in bo.notes[-1]
    assert (placed / "01_tensors.ipynb").read_text() != blank


def test_near_misses_are_graded_with_a_hint_and_unknown_assignments_listed(tmp_path, work_and_blank):
    names = ["ada/01_Tensors/01_tensors.ipynb", "bea/01_tensors/01_tensors (1).ipynb", "cy/01_tensor/01_tensor.ipynb"]
    found = taken(tmp_path / "download", dict.fromkeys([*names, "cy/homework/notes.ipynb"], work_and_blank[0]))
    assert [(s.student_id, s.assignment_id) for s in found.submissions] == [("ada", ASSIGNMENT), ("bea", ASSIGNMENT)]
    assert "did you mean 01_tensors? graded as 01_tensors" in found.submissions[0].notes[0]
    rows = {row.file: row for row in found.manifest}
    assert rows["cy/01_tensor/01_tensor.ipynb"].status == "not taken"
    assert rows["cy/01_tensor/01_tensor.ipynb"].note.startswith("no assignment '01_tensor': did you mean 01_tensors? (")
    assert "assignments are 01_tensors, 02_strides" in rows["cy/homework/notes.ipynb"].note



ATTACKS = list(impersonations("work", "blank"))


@pytest.mark.parametrize("attack", ATTACKS)
def test_a_name_inside_a_student_upload_never_gives_the_file_to_another_student(tmp_path, attack, work_and_blank):
    """Such files were graded as the named student's work (a later time, a Canvas -N, the planted metadata won):
    they stay the uploader's, noted on the row and the uploader's submission (review); the victim is untouched."""
    case = impersonations(*work_and_blank)[attack]
    download = write(tmp_path / "download", case.files)
    found = take(download)
    assert {s.student_id: s.source for s in found.submissions} == case.expected
    assert [row.file for row in found.manifest] == files_in(download)
    rows = {row.file: row for row in found.manifest}
    for planted, uploader in case.planted.items():
        assert rows[planted].student_id == uploader
        assert f"named inside {uploader}'s own upload as " in rows[planted].note
    for submission in found.submissions:
        attacker = submission.student_id in case.planted.values()
        claims = [note for note in submission.notes if "own upload as" in note]
        assert submission.review == attacker and len(claims) == attacker * len(case.planted)
        assert not attacker or claims[0].endswith("kept as this student's, read it")


def test_a_planted_gradescope_metadata_swaps_no_identity_time_or_email(tmp_path, work_and_blank):
    """The first submission_metadata.yml anywhere was read: Eve's own one gave Ada's work, time and e-mail to Eve."""
    case = impersonations(*work_and_blank)["gradescope: a submission_metadata.yml in a student's folder"]
    found = take(write(tmp_path / "download", case.files))
    assert found.format == "gradescope"
    emails = {m.student.student_id: m.email for m in found.mappings}
    assert emails == {"1001": "ada@example.edu", "1002": "bea@example.edu", "1003": "eve@example.edu",
                      "Kim_2-" + safe_id("Kim [2]").rsplit("-", 1)[1]: "kim@example.edu"}
    times = {s.student_id: s.timestamp for s in found.submissions}
    assert times["1001"] == datetime(2026, 11, 30, 18, 15, tzinfo=timezone.utc)
    assert times["1003"] == datetime(2026, 11, 30, 19, tzinfo=timezone.utc)
    rows = {row.file: row for row in found.manifest}
    assert rows["assignment_123_export/submission_metadata.yml"].status == "platform metadata"
    planted = rows["assignment_123_export/submission_7003/submission_metadata.yml"]
    assert (planted.status, planted.student_id) == ("not taken", "1003")
    assert planted.note.startswith("not a notebook") and "as submission_metadata.yml: " in planted.note


def test_assignment_option_grades_a_whole_download_as_one_assignment(tmp_path, work_and_blank):
    download = write(tmp_path / "download", {"doejohn_7_8_homework.ipynb": work_and_blank[0]})
    assert take(download).submissions == []
    (taken_one,) = take(download, assignment=ASSIGNMENT).submissions
    assert (taken_one.student_id, taken_one.assignment_id) == ("doejohn_7", ASSIGNMENT)
    assert taken_one.notes[0] == "named 'homework.ipynb': graded as 01_tensors (--assignment)"
    with pytest.raises(CourseError, match="no such assignment in source/: 99_x"):
        take(download, assignment="99_x")


@functools.cache
def bomb():
    """A zip whose one member expands past MAX_MEMBER_BYTES (257 KiB compressed)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as handle:
        with handle.open("01_tensors.ipynb", "w", force_zip64=True) as member:
            for _ in range(MAX_MEMBER_BYTES // (1 << 20) + 1):
                member.write(b" " * (1 << 20))
    return buffer.getvalue()


def nested_too_deep(notebook):
    """A zip holding ``notebook`` as 01_tensors.ipynb four zips deep (one more than MAX_DEPTH)."""
    nested = zip_bytes({"01_tensors.ipynb": notebook})
    for _ in range(3):
        nested = zip_bytes({"deeper.zip": nested})
    return nested


def test_archives_inside_are_opened_within_bounds_and_a_bad_one_does_not_stop_the_batch(tmp_path, work_and_blank):
    work, _ = work_and_blank
    download = write(
        tmp_path / "download",
        {
            "ada/01_tensors/work.zip": zip_bytes({"work/01_tensors.ipynb": work}),
            "bea/01_tensors/bomb.zip": bomb(),
            "cy/01_tensors/escape.zip": zip_bytes({"../../../cy/01_tensors/01_tensors.ipynb": work}),
            "dee/01_tensors/nested.zip": nested_too_deep(work),
            "lovelaceada_1001_5001_work.zip": zip_bytes({"01_tensors.ipynb": work}),
        },
    )
    before = hashes(download)
    found = take(download)
    graded = [(s.student_id, s.source) for s in found.submissions]
    assert graded == [("ada", "ada/01_tensors/work.zip!work/01_tensors.ipynb")]
    rows = {row.file: row for row in found.manifest}
    assert rows["ada/01_tensors/work.zip"].status == "archive opened"
    assert rows["bea/01_tensors/bomb.zip"].status == "refused" and "zip bomb" in rows["bea/01_tensors/bomb.zip"].note
    assert "outside its folder" in rows["cy/01_tensors/escape.zip"].note
    too_deep = rows["dee/01_tensors/nested.zip!deeper.zip!deeper.zip!deeper.zip"]
    assert too_deep.status == "refused" and "nested more than 3 deep" in too_deep.note
    assert rows["dee/01_tensors/nested.zip!deeper.zip!deeper.zip"].status == "archive opened"
    assert hashes(download) == before
    # In a flat platform shape, the archive's own name says whose its members are.
    canvas = take(download, format="canvas")
    assert [(s.student_id, s.source) for s in canvas.submissions] == [
        ("lovelaceada_1001", "lovelaceada_1001_5001_work.zip!01_tensors.ipynb")
    ]


def test_a_hostile_member_of_the_download_zip_is_refused_alone_and_a_large_zip_is_read(tmp_path, work_and_blank):
    """One ``../`` or link member, or more than 5000 members, refused the whole download."""
    work, _ = work_and_blank
    files = {f"filler/{n}.txt": "" for n in range(MAX_MEMBERS)}
    files |= {"ada/01_tensors/01_tensors.ipynb": work, "../../evil/01_tensors/01_tensors.ipynb": work}
    hostile = tmp_path / "hostile.zip"
    hostile.write_bytes(zip_bytes(files))
    with zipfile.ZipFile(hostile, "a") as handle:
        link = zipfile.ZipInfo("bea/01_tensors/01_tensors.ipynb")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        handle.writestr(link, "/etc/passwd")
    found = take(hostile)
    assert [(s.student_id, s.source) for s in found.submissions] == [("ada", "ada/01_tensors/01_tensors.ipynb")]
    rows = {row.file: row for row in found.manifest}
    assert len(rows) == MAX_MEMBERS + 3
    escape = rows["../../evil/01_tensors/01_tensors.ipynb"]
    assert (escape.status, escape.student_id) == ("refused", "evil") and "outside its folder" in escape.note
    link = rows["bea/01_tensors/01_tensors.ipynb"]
    assert (link.status, link.student_id) == ("refused", "bea") and "is a link" in link.note


LOG = b"".join(b"epoch %d: loss 0.125000, accuracy 0.968750\n" % (n % 10) for n in range(100_000))
"""An honest training log of 4.2 MB that compresses about 800 times."""


def corrupt(data, member):
    """The zip ``data`` with one byte of ``member``'s compressed bytes changed (its CRC then fails)."""
    with zipfile.ZipFile(io.BytesIO(data)) as handle:
        info = handle.getinfo(member)
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra) + 5
    return data[:start] + bytes([data[start] ^ 0xFF]) + data[start + 1:]


def test_one_member_s_problem_in_the_download_zip_refuses_that_member_alone(tmp_path, monkeypatch, work_and_blank):
    """A member past a ratio of its compressed size (an honest log compresses ~800x), one whose name is too long
    for the file system, a file where another member needs a folder, a corrupt member: each refused the whole
    platform zip, so no student was graded. Now each is refused alone (or, inside a student's own archive, that
    archive), measured as it is extracted, and every other student is graded."""
    monkeypatch.setattr(archives, "MAX_MEMBER_BYTES", 5 << 20)
    monkeypatch.setattr(archives, "MAX_BYTES", 12 << 20)
    work, blank = work_and_blank
    nb, long_name = "01_tensors/01_tensors.ipynb", "x" * 300 + ".ipynb"
    files = {
        f"ada/{nb}": work,
        f"bea/{nb}": blank,
        "bea/01_tensors/train.log": LOG,
        f"cy/{nb}": b"{" + b" " * (6 << 20) + b"}",  # 6 MiB of notebook: past the member bound
        f"dee/{nb}": work,
        f"dee/01_tensors/{long_name}": blank,
        f"eve/{nb}": work,
        f"eve/{nb}/checkpoint.ipynb": blank,
        f"fay/{nb}": work,
        "gus/01_tensors/weights.bin": b"\x00" * (4 << 20),
        f"hal/{nb}": blank,
        "hal/01_tensors/work.zip": zip_bytes({"01_tensors.ipynb": work, "train.log": LOG[: 1 << 20]}),
        f"ivy/{nb}": blank,
        "ivy/01_tensors/work.zip": zip_bytes({"01_tensors.ipynb": work, long_name: blank}),
        "jo/01_tensors/data.bin": b"\x01" * (4 << 20),  # past the download's 12 MiB with the members before it
        f"jo/{nb}": work,
    }
    download = tmp_path / "gradebook.zip"
    download.write_bytes(corrupt(zip_bytes(files), f"fay/{nb}"))
    found = take(download)
    assert {s.student_id: s.source for s in found.submissions} == {
        "ada": f"ada/{nb}", "bea": f"bea/{nb}", "dee": f"dee/{nb}", "eve": f"eve/{nb}",
        "hal": "hal/01_tensors/work.zip!01_tensors.ipynb", "ivy": f"ivy/{nb}", "jo": f"jo/{nb}",
    }
    rows = {row.file: (row.status, row.student_id, row.note) for row in found.manifest}
    assert rows["bea/01_tensors/train.log"] == ("not taken", "bea", "not a notebook: not graded, not copied")
    assert rows[f"cy/{nb}"] == ("refused", "cy", f"refused: '{'cy/' + nb}' expands past {5 << 20} bytes "
                                                 "(a zip bomb, or too big to grade)")
    assert rows[f"dee/01_tensors/{long_name}"] == (
        "refused", "dee", f"refused: member 'dee/01_tensors/{long_name}' cannot be extracted (File name too long)")
    assert rows[f"eve/{nb}/checkpoint.ipynb"] == (
        "refused", "eve", f"refused: member 'eve/{nb}/checkpoint.ipynb' cannot be extracted (File exists)")
    status, student, note = rows[f"fay/{nb}"]  # the reason is zlib's, in its words
    assert (status, student) == ("refused", "fay")
    assert note.startswith(f"refused: member 'fay/{nb}' cannot be extracted (")
    assert rows["gus/01_tensors/weights.bin"] == ("not taken", "gus", "not a notebook: not graded, not copied")
    assert rows["hal/01_tensors/work.zip"][:2] == ("archive opened", "")
    assert rows["hal/01_tensors/work.zip!train.log"][:2] == ("not taken", "hal")
    assert rows["ivy/01_tensors/work.zip"] == (
        "refused", "ivy", f"archive refused: member '{long_name}' cannot be extracted (File name too long)")
    assert rows["jo/01_tensors/data.bin"] == (
        "refused", "jo", f"refused: 'jo/01_tensors/data.bin' takes the download past {12 << 20} bytes extracted")
    inner = ["hal/01_tensors/work.zip!01_tensors.ipynb", "hal/01_tensors/work.zip!train.log"]
    assert sorted(rows) == sorted([*files, *inner])
    assert {student: notes for student, notes in found.left_out.items()} == {
        "cy": [f"cy/{nb} ({rows[f'cy/{nb}'][2]})"], "fay": [f"fay/{nb} ({rows[f'fay/{nb}'][2]})"],
        "gus": ["weights.bin"],
    }


GRADESCOPE_BOMB = "".join(f"  :laugh{n}: &laugh{n} [{', '.join([f'*laugh{n - 1}'] * 9)}]\n" for n in range(1, 10))
"""Nine fields of a record, each nine times the one before: ``laugh9`` stands for 9**9 strings ("billion
laughs"), written in 600 characters."""


def test_a_malformed_gradescope_record_refuses_only_its_submission_folder(tmp_path, work_and_blank):
    """A record without :submitters:, a submitter that is not a mapping, fields that are a list or a mapping, or an
    alias bomb in a field stopped the whole metadata (or hung turning the bomb into text): nothing was graded.
    Each now leaves only its own folder untaken, saying why, and the honest records are read."""
    work, blank = work_and_blank
    metadata = gradescope_record("submission_7001", "2026-11-30 10:15:00 -08:00",
                                 ("Ada Lovelace", "1001", "ada@example.edu"))
    metadata += "submission_7002:\n  :created_at: 2026-11-30 10:15:00 -08:00\n  :score: 0.0\n"
    metadata += "submission_7003:\n  :submitters:\n  - Bea Bronte\n"
    metadata += "submission_7004:\n  :submitters:\n  - :name: [Cy, Young]\n    :sid: '1004'\n    :email: {a: b}\n"
    metadata += "submission_7005:\n  :laugh0: &laugh0 [lol]\n" + GRADESCOPE_BOMB + (
        "  :submitters:\n  - :name: *laugh9\n    :sid: '1005'\n  :created_at: *laugh9\n")
    metadata += gradescope_record("submission_7006", "2026-11-30 11:00:00 -08:00", ("Fay Fox", "1006", "fay@x.edu"))
    files = {"export/submission_metadata.yml": metadata}
    files |= {f"export/submission_700{n}/01_tensors.ipynb": work if n == 1 else blank for n in range(1, 7)}
    found = take(write(tmp_path / "download", files))
    assert found.format == "gradescope" and "cannot be read" not in found.detected
    assert {s.student_id: s.source for s in found.submissions} == {
        "1001": "export/submission_7001/01_tensors.ipynb", "1006": "export/submission_7006/01_tensors.ipynb"}
    rows = {row.file: (row.status, row.student_id, row.note) for row in found.manifest}
    assert rows["export/submission_metadata.yml"] == ("platform metadata", "", (
        "Gradescope metadata: submitters and times of 2 submission(s); 4 record(s) not read: submission_7002, "
        "submission_7003, submission_7004, submission_7005"))
    why = {2: "its record has no :submitters: list", 3: "a submitter is not a mapping of :name:, :sid: and :email:",
           4: "its :email is not a single value", 5: "its :created_at is not a single value"}
    for n, reason in why.items():
        assert rows[f"export/submission_700{n}/01_tensors.ipynb"] == ("not taken", "", (
            f"submission_700{n}/ is a Gradescope submission folder but its record in submission_metadata.yml "
            f"cannot be read ({reason}): whose work it is is not known, so it is not taken (Export Submissions "
            "lists every submission there: export again, or grade it by hand)"))


def test_two_members_of_one_name_are_both_listed_and_the_later_is_graded(tmp_path, work_and_blank):
    """A zip holding two members of one name (a file added to a zip again is appended) was extracted over itself:
    the earlier member vanished from the manifest. Both are listed; the later one, what unzipping leaves, is read
    and graded, the earlier is extracted apart and not taken, saying why."""
    work, blank = work_and_blank
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as handle, pytest.warns(UserWarning, match="Duplicate name"):
        handle.writestr("01_tensors.ipynb", work)
        handle.writestr("01_tensors.ipynb", blank)
    download = io.BytesIO()
    with zipfile.ZipFile(download, "w") as handle, pytest.warns(UserWarning, match="Duplicate name"):
        handle.writestr("lovelaceada_1001_5001_01_tensors.ipynb", blank)
        handle.writestr("brontebea_1002_5002_work.zip", inner.getvalue())
        handle.writestr("lovelaceada_1001_5001_01_tensors.ipynb", work)
        handle.writestr("lovelaceada_1001_5001_01_tensors.ipynb", blank + " ")
        handle.writestr("lovelaceada_1001_5001_01_tensors.ipynb", work + " ")
    (tmp_path / "submissions.zip").write_bytes(download.getvalue())
    ada, bea = "lovelaceada_1001_5001_01_tensors.ipynb", "brontebea_1002_5002_work.zip"
    with opened(tmp_path / "submissions.zip", course=COURSE, release=release) as found:
        graded = {s.student_id: (s.source, s.notebook.read_text()) for s in found.submissions}
        listed = {row.file: (row.status, row.student_id, row.note) for row in found.manifest}
    assert graded == {"lovelaceada_1001": (ada, work + " "), "brontebea_1002": (f"{bea}!01_tensors.ipynb", blank)}
    replaced = ("not taken: a later member of the same name is what extracting the archive leaves (unzip tools "
                "overwrite), so that one is read; this one was extracted apart")
    assert listed == {
        ada: ("graded", "lovelaceada_1001", ""),
        **{f"{ada} [member {n} of 4 so named]": ("not taken", "lovelaceada_1001", replaced) for n in (1, 2, 3)},
        bea: ("archive opened", "", "archive opened (2 members)"),
        f"{bea}!01_tensors.ipynb": ("graded", "brontebea_1002", ""),
        f"{bea}!01_tensors.ipynb [member 1 of 2 so named]": ("not taken", "brontebea_1002", replaced),
    }


def test_an_unreadable_download_is_refused_with_a_message(tmp_path):
    (tmp_path / "broken.zip").write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises(CourseError, match="broken.zip: cannot be read"):
        take(tmp_path / "broken.zip")
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(CourseError, match="neither a folder nor a zip"):
        take(tmp_path / "notes.txt")
    with pytest.raises(CourseError, match="does not exist"):
        take(tmp_path / "missing")


def test_the_course_own_folders_are_refused_as_a_download(tmp_path, cli, work_and_blank):
    """``nbgrader zip_collect`` then ``grade submitted/`` replaced every notebook there with the blank release."""
    course = copy_course(COURSE, tmp_path / "course")
    submitted = write(
        course.root / "submitted",
        {"ada/01_tensors/01_tensors.ipynb": work_and_blank[0], "ada/01_tensors/timestamp.txt": "2026-11-30 10:00 UTC"},
    )
    before = hashes(submitted)
    process = cli("--course", str(course.root), "grade", str(submitted))
    assert process.returncode == 2 and "is the course's own submitted/ folder" in process.stderr
    assert hashes(submitted) == before
    (course.root / "autograded").mkdir()
    for folder in (submitted / "ada" / "01_tensors", course.root / "autograded", course.root):
        with pytest.raises(CourseError, match="grading writes there") as refusal:
            refuse_course_folders(course, folder)
        assert "zip_collect's downloaded/<assignment_id>/archive/" in str(refusal.value)
    refuse_course_folders(course, tmp_path / "elsewhere")


def test_safe_ids_are_kept_and_unsafe_ones_mapped_apart_and_stable():
    assert safe_id("ada") == "ada" and safe_id("s-1.2_x") == "s-1.2_x"
    odd = ["Kim [2]", "Kim 2", "O'Brien, Pat", 'say "hi"', "a/b", "Zoë", "*", ".hidden"]
    mapped = [safe_id(text) for text in odd]
    assert len(set(mapped)) == len(odd) and mapped == [safe_id(text) for text in odd]
    assert all(safe_id(m) == m and not set(m) & set(" ,'\"/[]*?") and m.isascii() for m in mapped)


def test_roster_maps_platform_ids_emails_and_names_and_the_mapping_is_written(tmp_path, work_and_blank):
    roster_csv = tmp_path / "roster.csv"
    with roster_csv.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["student_id", "platform_id", "email", "first_name", "last_name"])
        writer.writerow(["s001", "1001", "", "Ada", 'Lovelace, "Jr."'])
        writer.writerow(["s002", "", "", "Bea", "Bronte"])
    roster = Roster.read(roster_csv)
    found = take(build("canvas", tmp_path / "download", *work_and_blank).path, roster=roster)
    assert sorted(s.student_id for s in found.submissions) == ["s001", "s002"]
    ada = next(m for m in found.mappings if m.student.student_id == "s001")
    assert ada.student.last_name == 'Lovelace, "Jr."' and ada.source == "roster"
    stranger = map_student(roster, format="canvas", platform_id="9", name="doejohn", email="")
    assert stranger.student.student_id == "doejohn_9" and stranger.source == "derived, not in the roster"
    write_mapping([*found.mappings, stranger], tmp_path / "student_ids.csv")
    with (tmp_path / "student_ids.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["student_id"], r["platform_id"], r["from"]) for r in rows] == [
        ("s002", "1002", "roster"),
        ("s001", "1001", "roster"),
        ("doejohn_9", "9", "derived, not in the roster"),
    ]
    formula = map_student(None, format="gradescope", platform_id="=HYPERLINK(1)", name="@SUM(A1)", email="-1+2")
    write_mapping([formula], tmp_path / "formula.csv")
    (row,) = read_csv(tmp_path / "formula.csv")
    assert (row["platform_id"], row["name"], row["email"]) == ("'=HYPERLINK(1)", "'@SUM(A1)", "'-1+2")
    (tmp_path / "bad.csv").write_text("id,name\n1,x\n")
    with pytest.raises(CourseError, match="needs a header row with student_id"):
        Roster.read(tmp_path / "bad.csv")


def read_rows(path):
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.reader(handle))


HOSTILE_GRADESCOPE = gradescope_record(
    "submission_7001", "2026-11-30 10:15:00 -08:00", ("Ada Lovelace", "1001", "ada@example.edu")
) + """submission_7002:
  :submitters:
  - :name: "@SUM(1+1)*cmd|' /C calc'!A0"
    :sid: '1002'
    :email: "+1@example.edu"
  :created_at: 2026-11-30 10:15:00 -08:00
"""
"""A Gradescope export whose second submitter wrote a formula as their name and e-mail on the platform."""


def test_every_csv_makes_a_hostile_platform_text_text_and_keeps_honest_cells(tmp_path, monkeypatch, work_and_blank):
    """A name, e-mail or file name a student wrote on the platform (a Canvas or Moodle name, Gradescope's metadata),
    a roster's names, or a task's heading starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return was
    run as a formula by a spreadsheet opening task_results.csv, grades.csv or class_results.csv: every CSV now
    writes it with a leading ``'``; honest text and the scores are written as before."""
    work, blank = work_and_blank
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")  # nbgrader's alembic
    canvas = take(write(tmp_path / "canvas", {"-cmd_1003_5001_01_tensors.ipynb": work,
                                              "lovelaceada_1001_5002_01_tensors.ipynb": blank}))
    moodle_files = {"=HYPERLINK(1) Eve_33_assignsubmission_file/01_tensors.ipynb": work,
                    "Ada Lovelace_31_assignsubmission_file/01_tensors.ipynb": blank}
    moodle = take(write(tmp_path / "moodle", moodle_files))
    gradescope = take(write(tmp_path / "gradescope", {"export/submission_metadata.yml": HOSTILE_GRADESCOPE,
                                                      "export/submission_7001/01_tensors.ipynb": work,
                                                      "export/submission_7002/01_tensors.ipynb": blank}))
    roster = Roster.read(roster_of(tmp_path, ["student_id", "platform_id", "first_name", "last_name", "email"],
                                   ["s1", "1001", "Ada", "Lovelace", "ada@example.edu"],
                                   ["s3", "1003", "=evil", "@Tab", "-x@example.edu"]))
    rostered = take(tmp_path / "canvas", roster=roster)
    for name, found in (("canvas", canvas), ("moodle", moodle), ("gradescope", gradescope), ("roster", rostered)):
        write_manifest(found.manifest, tmp_path / f"{name}-manifest.csv")
        write_mapping(found.mappings, tmp_path / f"{name}-ids.csv")
    assert read_rows(tmp_path / "canvas-manifest.csv")[1:] == [
        ["'-cmd_1003_5001_01_tensors.ipynb", "graded", "cmd_1003", "01_tensors", ""],
        ["lovelaceada_1001_5002_01_tensors.ipynb", "graded", "lovelaceada_1001", "01_tensors", ""],
    ]
    assert read_rows(tmp_path / "canvas-ids.csv")[1:] == [
        ["cmd_1003", "canvas", "1003", "'-cmd", "", "derived"],
        ["lovelaceada_1001", "canvas", "1001", "lovelaceada", "", "derived"],
    ]
    assert [row[:2] for row in read_rows(tmp_path / "moodle-manifest.csv")[1:]] == [
        ["'=HYPERLINK(1) Eve_33_assignsubmission_file/01_tensors.ipynb", "graded"],
        ["Ada Lovelace_31_assignsubmission_file/01_tensors.ipynb", "graded"],
    ]
    assert [row[:4] for row in read_rows(tmp_path / "moodle-ids.csv")[1:]] == [
        ["HYPERLINK_1_Eve_33", "moodle", "33", "'=HYPERLINK(1) Eve"],
        ["Ada_Lovelace_31", "moodle", "31", "Ada Lovelace"],
    ]
    assert read_rows(tmp_path / "gradescope-ids.csv")[1:] == [
        ["1001", "gradescope", "1001", "Ada Lovelace", "ada@example.edu", "derived"],
        ["1002", "gradescope", "1002", "'@SUM(1+1)*cmd|' /C calc'!A0", "'+1@example.edu", "derived"],
    ]
    # grades.csv: the gradebook's students as grade enrols them (the roster's names, the platform's e-mail).
    course = Course(tmp_path / "course")
    course.root.mkdir()
    with Gradebook(course.db_url) as gradebook:
        gradebook.add_assignment(ASSIGNMENT)
    for found in (gradescope, rostered):
        _enrol(course, found)
    export = QuotedCsvExport()
    export.to = str(tmp_path / "grades.csv")
    with Gradebook(course.db_url) as gradebook:
        export.export(gradebook)
    text = (tmp_path / "grades.csv").read_bytes().decode()
    assert "01_tensors,,,1001,,,ada@example.edu,0.0,0.0,0.0,0.0\r\n" in text  # honest rows: as before
    assert "01_tensors,,,s1,Lovelace,Ada,ada@example.edu,0.0,0.0,0.0,0.0\r\n" in text
    assert sorted(row[3:] for row in read_rows(tmp_path / "grades.csv")[1:]) == [
        ["1001", "", "", "ada@example.edu", "0.0", "0.0", "0.0", "0.0"],
        ["1002", "", "", "'+1@example.edu", "0.0", "0.0", "0.0", "0.0"],
        ["s1", "Lovelace", "Ada", "ada@example.edu", "0.0", "0.0", "0.0", "0.0"],
        ["s3", "'@Tab", "'=evil", "'-x@example.edu", "0.0", "0.0", "0.0", "0.0"],
    ]
    # task_results.csv and class_results.csv: a task's heading and the notes are text too; scores stay numbers.
    tasks = [TaskResult("t1", "=1+1 task", 2.0, 3.0, True, True, False, "failed"),
             TaskResult("t2", "Task 2 - strides", 3.0, 3.0, True, True, False, "ok")]
    results = [SubmissionResult("s3", ASSIGNMENT, "ok", ["\t-1 point: late"], tasks=tasks)]
    write_task_results(results, tmp_path / "task_results.csv")
    assert read_rows(tmp_path / "task_results.csv")[1:] == [
        [ASSIGNMENT, "s3", "t1", "'=1+1 task", "autograded", "2", "3", "true", "false", "failed", "", "ok",
         "'\t-1 point: late"],
        [ASSIGNMENT, "s3", "t2", "Task 2 - strides", "autograded", "3", "3", "true", "false", "ok", "", "ok",
         "'\t-1 point: late"],
    ]
    write_class_report(course, ClassReport(results))
    assert [row[:4] for row in read_rows(course.root / "class_results.csv")[1:]] == [
        [ASSIGNMENT, "t1", "'=1+1 task", "autograded"], [ASSIGNMENT, "t2", "Task 2 - strides", "autograded"]
    ]


def roster_of(folder, *rows):
    """A roster CSV of ``rows`` (the header first) at ``folder``/roster.csv."""
    path = folder / "roster.csv"
    with path.open("w", newline="") as handle:
        csv.writer(handle).writerows(rows)
    return path


def test_roster_mistakes_never_merge_two_students_silently(tmp_path, work_and_blank):
    header = ["student_id", "platform_id"]
    with pytest.raises(CourseError, match=r"platform_id given to more than one row.*'1001' on rows 2, 3"):
        Roster.read(roster_of(tmp_path, header, ["s1", "1001"], ["s2", "1001"], ["s3", "1002"]))
    # Both Canvas users mapped to s1: graded as one student, said loudly.
    both = Roster.read(roster_of(tmp_path, header, ["s1", "1001"], ["s1", "1002"]))
    found = take(build("canvas", tmp_path / "canvas", *work_and_blank).path, roster=both)
    (s1,) = found.submissions
    assert s1.review and "platform ids 1001, 1002 all map to s1 in the roster" in s1.notes[-1]
    graded = [row.note for row in found.manifest if row.status == "graded"]
    assert len(graded) == 1 and "all map to s1 in the roster" in graded[0]
    # A roster id equal to another student's derived id: the derived one is made unique.
    taken_id = Roster.read(roster_of(tmp_path, header, ["brontebea_1002", "1001"]))
    found = take(build("canvas", tmp_path / "canvas2", *work_and_blank).path, roster=taken_id)
    ids = {m.platform_id: m.student.student_id for m in found.mappings}
    assert ids["1001"] == "brontebea_1002" and ids["1002"].startswith("brontebea_1002-")
    assert len({s.student_id for s in found.submissions}) == 2


def test_place_writes_the_normalised_notebook_and_platform_time_only(tmp_path, work_and_blank):
    work, blank = work_and_blank
    course = Course(tmp_path / "course")
    download = write(
        tmp_path / "download",
        {
            "alice/01_tensors/01_tensors (1).ipynb": blank,
            "alice/01_tensors/torch.py": "raise SystemExit('shadowed')",
            "alice/01_tensors/timestamp.txt": "2026-11-30 10:00:00 UTC",
            "bea/01_tensors/01_tensors.ipynb": '{"cells": [',
        },
    )
    stale = course.root / "autograded" / "alice" / "01_tensors"
    stale.mkdir(parents=True)
    alice, bea = take(download).submissions
    placed = place(course, alice, release=release(ASSIGNMENT))
    assert sorted(p.name for p in placed.iterdir()) == ["01_tensors.ipynb", "timestamp.txt"]
    assert (placed / "timestamp.txt").read_text() == "2026-11-30 10:00:00.000000 UTC"
    assert alice.notes == ["notebook '01_tensors (1).ipynb' graded as '01_tensors.ipynb'", "files not graded: torch.py"]
    assert alice.status == "unattempted" and not stale.exists()
    graded = place(course, bea, release=release(ASSIGNMENT))
    assert bea.status == "invalid notebook"
    assert bea.notes[0].startswith("not a readable notebook: the file is not valid JSON")
    assert [c.source for c in read_notebook(graded / "01_tensors.ipynb").cells] == [
        c.source for c in release(ASSIGNMENT).cells
    ]


def test_log_excerpt_quotes_the_exception_of_exactly_that_submission(tmp_path):
    from autograder.grading.grade import _log_excerpt

    log = "\n".join(
        [
            f"[AutogradeApp | ERROR] There was an error processing assignment: {tmp_path}/submitted/alice2/01_tensors",
            "[AutogradeApp | ERROR] Traceback (most recent call last):",
            '      File "x.py", line 1, in <module>',
            "    nbclient.exceptions.DeadKernelError: Kernel died",
            f"[AutogradeApp | ERROR] There was an error processing assignment: {tmp_path}/submitted/al/01_tensors",
            "[AutogradeApp | ERROR] Traceback (most recent call last):",
            "    nbformat.reader.NotJSONError: Notebook does not appear to be JSON: ''",
            "[AutogradeApp | INFO] Writing 10 bytes",
        ]
    )
    assert _log_excerpt(log, tmp_path / "submitted" / "al" / "01_tensors") == (
        "nbgrader: nbformat.reader.NotJSONError: Notebook does not appear to be JSON: ''"
    )
    assert _log_excerpt(log, tmp_path / "submitted" / "alice2" / "01_tensors").endswith("DeadKernelError: Kernel died")
    assert "by hand" in _log_excerpt(log, tmp_path / "submitted" / "bo" / "01_tensors")


def test_dry_run_prints_every_file_and_grades_nothing(tmp_path, cli, work_and_blank):
    course = copy_course(COURSE, tmp_path / "course")
    folder = build("canvas", tmp_path / "download", *work_and_blank).path
    download = zipped(write(folder, {"lovelaceada_1001_5003_notes.txt": "see my notebook"}), tmp_path / "s.zip")
    process = cli("--course", str(course.root), "grade", "--dry-run", str(download))
    assert process.returncode == 0, process.stderr
    assert process.stdout.startswith("format: canvas detected (2 of 2 notebook(s)")
    for name in files_in(download):
        assert name in process.stdout
    assert "brontebea_1002" in process.stdout and "dry run: nothing graded" in process.stdout
    # The table lists every file: the counts below it announced "... 1 more in the manifest", but none was left.
    assert process.stdout.endswith("\n\n3 file(s): 2 graded, 1 not taken\ndry run: nothing graded\n")
    assert sorted(p.name for p in course.root.iterdir()) == ["nbgrader_config.py", "source"]


# One real grading run (nbgrader, sandbox) of a mixed Blackboard download, shared by the tests below.

DUE = "2026-11-30 12:00:00 UTC"


@pytest.fixture(scope="module")
def graded_blackboard(tmp_path_factory, work_and_blank):
    """A Blackboard zip graded with a roster and a due date: ada's two attempts (the later, late one is her work),
    bea's blank, kim's blank beside her final in one attempt, jdoe's text file and no notebook, zoe's empty zip."""
    from conftest import run_cli

    work, blank = work_and_blank
    root = tmp_path_factory.mktemp("graded")
    course = copy_course(COURSE, root / "course")
    assert run_nbgrader(course, "db", "assignment", "add", ASSIGNMENT, f"--duedate={DUE}").returncode == 0
    attempt = "01 Tensors_{}_attempt_2026-11-30-09-00-00_{}"
    folder = build("blackboard", root / "download", work, blank).path
    write(
        folder,
        {
            attempt.format("klee", "01_tensors.ipynb"): blank,
            attempt.format("klee", "01_tensors_final.ipynb"): work,
            attempt.format("jdoe", "notes.txt"): "I could not open Jupyter",
            attempt.format("zoe", "work.zip"): zip_bytes({}),
        },
    )
    download = zipped(folder, root / "gradebook_01_tensors.zip")
    roster = write(
        root,
        {"roster.csv": 'student_id,platform_id,first_name,last_name\ns001,alovelace,Ada,"Lovelace, ""Jr."""\n'
         "Kim [2],klee,Kim,Lee\n"},
    )
    before = hashes(download)
    process = run_cli("--course", str(course.root), "grade", "--roster", str(roster / "roster.csv"), str(download))
    return course, process, before, download


def read_csv(path):
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_a_graded_download_is_untouched_and_every_file_is_in_the_manifest(graded_blackboard):
    course, process, before, download = graded_blackboard
    assert process.returncode == 0, process.stderr
    assert hashes(download) == before
    assert "format: blackboard detected" in process.stdout
    assert "10 file(s): 1 archive opened, 2 copy not graded, 3 graded, 1 not taken, 3 platform metadata" in process.stdout
    manifest = read_csv(course.root / "manifest.csv")
    assert sorted(row["file"] for row in manifest) == files_in(download)
    kim, name = safe_id("Kim [2]"), "01 Tensors_{}_attempt_{}_{}".format
    assert {row["file"]: (row["status"], row["student_id"]) for row in manifest if row["file"].endswith(".ipynb")} == {
        name("alovelace", "2026-11-29-09-00-00", "01_tensors.ipynb"): ("copy not graded", "s001"),
        name("alovelace", "2026-11-30-18-30-00", "01_tensors.ipynb"): ("graded", "s001"),
        name("bbronte", "2026-11-30-08-00-00", "01_tensors.ipynb"): ("graded", "bbronte"),
        name("klee", "2026-11-30-09-00-00", "01_tensors.ipynb"): ("copy not graded", kim),
        name("klee", "2026-11-30-09-00-00", "01_tensors_final.ipynb"): ("graded", kim),
    }
    assert {row["status"] for row in manifest if row["file"].endswith("00.txt")} == {"platform metadata"}


def test_a_graded_download_gives_grades_and_statuses_an_instructor_can_act_on(graded_blackboard):
    course, process, _, _ = graded_blackboard
    full = next(s for s in samples(COURSE, ASSIGNMENT) if s.student_id == "reference").expected_total
    grades = read_csv(course.root / "grades.csv")
    assert list(grades[0]) == GRADES_COLUMNS
    by_id = {row["student_id"]: row for row in grades}
    kim = safe_id("Kim [2]")
    assert sorted(by_id) == sorted(["s001", "bbronte", kim, "jdoe", "zoe"])
    assert by_id["s001"]["last_name"] == 'Lovelace, "Jr."' and by_id["s001"]["first_name"] == "Ada"
    assert by_id["s001"]["timestamp"].startswith("2026-11-30 18:30:00")
    assert float(by_id["s001"]["score"]) == full and float(by_id[kim]["score"]) == full
    assert float(by_id["bbronte"]["score"]) == 0 and float(by_id["jdoe"]["score"]) == 0
    tasks = read_csv(course.root / "task_results.csv")
    bea = [row for row in tasks if row["student_id"] == "bbronte"]
    assert {row["submission_status"] for row in bea} == {"unattempted"}
    assert {row["status"] for row in bea if row["kind"] == "autograded"} == {"unattempted"}
    assert "late" not in bea[0]["notes"]
    ada = [row for row in tasks if row["student_id"] == "s001"]
    assert {row["submission_status"] for row in ada} == {"review"} and "late by 6h 30min (nbgrader)" in ada[0]["notes"]
    assert {row["late"] for row in ada} == {"6h 30min"} and {row["late"] for row in bea} == {""}
    assert {row["submission_status"] for row in tasks if row["student_id"] == kim} == {"review"}
    assert [row["submission_status"] for row in tasks if row["student_id"] == "jdoe"] == ["nothing graded"]
    (zoe,) = [row for row in tasks if row["student_id"] == "zoe"]
    assert zoe["submission_status"] == "nothing graded" and "work.zip (the archive holds no file)" in zoe["notes"]
    mapping = {row["student_id"]: row["from"] for row in read_csv(course.root / "student_ids.csv")}
    stranger = "derived, not in the roster"
    made_safe = "roster (its id 'Kim [2]' made safe)"
    assert mapping == {"s001": "roster", kim: made_safe, "bbronte": stranger, "jdoe": stranger, "zoe": stranger}


# Each other shape graded end to end (nbgrader, sandbox) in one course copy, one after the other: the notebooks are
# the same in every download, so after the first run the batch finds them executed (autograder/pipeline/execute.py's
# execution_key) and an extra shape costs little more than nbgrader's passes; only a submission with a time
# (nbgrader's ada, Gradescope's two) runs again, its timestamp.txt being a file of its folder. Blackboard is graded
# above.

PACKED = {"canvas": "zip", "moodle": "folder", "zip_collect": "folder", "nbgrader": "folder", "gradescope": "zip"}
"""Shape -> how its download is graded here (each shape is read both ways at intake level above)."""
WORK = {"canvas": "lovelaceada_1001", "moodle": "Ada_Lovelace_31", "zip_collect": "zc-ada", "nbgrader": "ada",
        "gradescope": "1001"}
"""Shape -> the student who handed in the reference solution; every other student of its download, the release."""
ZIP_COLLECT_ROSTER = {"lovelaceada_1001": ("zc-ada", "1001"), "brontebea_1002": ("zc-bea", "1002")}
"""zip_collect holds the Canvas download graded first: a roster gives its students ids of their own
(derived id -> (course id, Canvas user id))."""


@dataclass
class GradedShape:
    """One download graded, and what the course folder held right after (the next run rewrites the CSVs)."""

    download: Download
    path: Path
    """The folder or zip graded."""
    before: dict[str, str]
    after: dict[str, str]
    """Its files' hashes before and after grading."""
    grading: Grading
    expected: dict[str, str]
    """Course student id -> the file graded (the roster's ids for zip_collect)."""
    manifest: list[dict[str, str]]
    student_ids: list[dict[str, str]]
    grades: list[dict[str, str]]
    tasks: list[dict[str, str]]
    """manifest.csv, student_ids.csv, grades.csv, task_results.csv as csv.DictReader read them."""


@pytest.fixture(scope="module")
def graded_shapes(tmp_path_factory, work_and_blank):
    root = tmp_path_factory.mktemp("shapes")
    course = copy_course(COURSE, root / "course")
    roster = Roster([{"student_id": sid, "platform_id": pid} for sid, pid in ZIP_COLLECT_ROSTER.values()])
    runs = {}
    for shape, packing in PACKED.items():
        download = build(shape, root / shape, *work_and_blank)
        path = zipped(download.path, root / f"{shape}.zip") if packing == "zip" else download.path
        before = hashes(path)
        grading = grade(course, path, roster=roster if shape == "zip_collect" else None)
        expected = download.expected
        if shape == "zip_collect":
            expected = {ZIP_COLLECT_ROSTER[derived][0]: source for derived, source in expected.items()}
        csvs = [read_csv(p) for p in (grading.manifest_csv, grading.student_ids_csv, grading.grades_csv)]
        runs[shape] = GradedShape(download, path, before, hashes(path), grading, expected, *csvs,
                                  read_csv(grading.task_results_csv))
    return runs


@pytest.mark.parametrize("shape", PACKED)
def test_each_shape_graded_lists_every_file_once_and_changes_none(graded_shapes, shape):
    run = graded_shapes[shape]
    assert run.grading.intake.format == run.download.format
    assert run.after == run.before
    assert sorted(row["file"] for row in run.manifest) == files_in(run.path)
    graded = {sid: row["file"] for row in run.manifest if row["status"] == "graded" for sid in
              row["student_id"].split(" + ")}
    assert graded == run.expected


@pytest.mark.parametrize("shape", PACKED)
def test_each_shape_graded_maps_its_students_and_grades_them(graded_shapes, shape):
    run = graded_shapes[shape]
    source = "roster" if shape == "zip_collect" else "derived"
    assert sorted((row["student_id"], row["from"]) for row in run.student_ids) == sorted(
        (student, source) for student in run.expected)
    reference = next(s for s in samples(COURSE, ASSIGNMENT) if s.student_id == "reference")
    full = reference.expected_total  # autograded points; the written answer waits for a person
    points = sum(float(cell.metadata["nbgrader"]["points"]) for cell in reference.notebook.cells if is_grade(cell))
    assert list(run.grades[0]) == GRADES_COLUMNS
    grades = {row["student_id"]: row for row in run.grades if row["student_id"] in run.expected}
    assert sorted(grades) == sorted(run.expected)
    assert {sid: float(row["score"]) for sid, row in grades.items()} == {
        sid: full if sid == WORK[shape] else 0.0 for sid in run.expected}
    assert {float(row["max_score"]) for row in grades.values()} == {points}
    status = {row["student_id"]: row["submission_status"] for row in run.tasks}
    assert status == {sid: "ok" if sid == WORK[shape] else "unattempted" for sid in run.expected}
    blank = [row for row in run.tasks if row["student_id"] != WORK[shape] and row["kind"] == "autograded"]
    assert blank and {row["status"] for row in blank} == {"unattempted"}


def test_graded_shapes_keep_the_platform_times_and_canvas_late_mark(graded_shapes):
    """Canvas's download carries no submission time, only ``_LATE_``: the late student is still said to be late."""
    times = {shape: {row["student_id"]: row["timestamp"] for row in run.grades if row["student_id"] in run.expected}
             for shape, run in graded_shapes.items()}
    assert times["nbgrader"] == {"ada": "2026-11-30 10:00:00", "bea": ""}
    assert times["gradescope"]["1001"] == "2026-11-30 18:15:00"  # 10:15 at -08:00
    assert set(times["canvas"].values()) == set(times["moodle"].values()) == {""}
    for shape, late in (("canvas", "brontebea_1002"), ("zip_collect", "zc-bea")):
        notes = {row["student_id"]: row["notes"] for row in graded_shapes[shape].tasks}
        assert "late: the platform marked it late" in notes[late] and "late" not in notes[WORK[shape]]


def test_the_platform_late_mark_stays_in_every_task_results_file_through_later_batches(graded_shapes):
    """Canvas gives no time, only ``_LATE_``: the batch's task results say late (the platform's mark, no time), and
    so do the class results after the four batches graded since in the same course (the gradebook has no field
    for the mark; a time is never made up)."""
    canvas = graded_shapes["canvas"]
    late = {row["student_id"]: row["late"] for row in canvas.tasks}
    assert (late["brontebea_1002"], late[WORK["canvas"]]) == (MARKED_LATE, "")
    course = Course(canvas.grading.task_results_csv.parent)
    write_class_report(course, class_report(course))
    every = read_csv(course.root / "task_results_all.csv")
    assert {row["student_id"] for row in every if row["late"]} == {"brontebea_1002", "zc-bea"}
    assert {row["late"] for row in every if row["late"]} == {MARKED_LATE}
    bea = [row for row in every if row["student_id"] == "brontebea_1002"]
    assert {row["submission_status"] for row in bea} == {"unattempted"} and "platform marked it late" in bea[0]["notes"]


def test_graded_shapes_share_executions_of_the_same_notebooks(graded_shapes):
    """Moodle's and zip_collect's downloads hold the notebooks Canvas's did, without times: none runs again."""
    batches = {shape: run.grading.batch for shape, run in graded_shapes.items()}
    assert batches["canvas"].executed == 2 and batches["canvas"].stored == 0
    for shape in ("moodle", "zip_collect"):
        assert (batches[shape].executed, batches[shape].stored) == (0, 2)


# One real grading run (nbgrader, sandbox) of a Gradescope export in which Eve (submission_7003) planted her own
# submission_metadata.yml (giving her folder Ada's identity and a later time), the group's submission_7002/ folder,
# and a zip holding Ada's submission_7001/ and another metadata file: every one of them is Eve's.

EVE_ATTACKS = [attack for attack in ATTACKS if attack.startswith("gradescope: ")]


@pytest.fixture(scope="module")
def graded_impersonations(tmp_path_factory, work_and_blank):
    from conftest import run_cli

    root = tmp_path_factory.mktemp("impersonations")
    course = copy_course(COURSE, root / "course")
    cases = [impersonations(*work_and_blank)[attack] for attack in EVE_ATTACKS]
    files = functools.reduce(lambda found, case: found | case.files, cases, {})
    download = zipped(write(root / "download", files), root / "assignment_123_export.zip")
    before = hashes(download)
    process = run_cli("--course", str(course.root), "grade", str(download))
    return course, process, before, download


def test_a_graded_export_gives_no_student_another_one_s_work_grade_or_time(graded_impersonations):
    course, process, before, download = graded_impersonations
    assert process.returncode == 0, process.stderr
    assert hashes(download) == before and "format: gradescope detected" in process.stdout
    kim, eve = safe_id("Kim [2]"), "assignment_123_export/submission_7003/"
    manifest = {row["file"]: (row["status"], row["student_id"]) for row in read_csv(course.root / "manifest.csv")}
    assert manifest == {
        "assignment_123_export/submission_metadata.yml": ("platform metadata", ""),
        "assignment_123_export/submission_7001/01_tensors.ipynb": ("graded", "1001"),
        "assignment_123_export/submission_7002/01_tensors.ipynb": ("graded", f"1002 + {kim}"),
        f"{eve}01_tensors.ipynb": ("copy not graded", "1003"),
        f"{eve}submission_7002/01_tensors.ipynb": ("copy not graded", "1003"),
        f"{eve}submission_metadata.yml": ("not taken", "1003"),
        f"{eve}work.zip": ("archive opened", ""),
        f"{eve}work.zip!submission_7001/01_tensors.ipynb": ("graded", "1003"),
        f"{eve}work.zip!submission_metadata.yml": ("not taken", "1003"),
    }
    full = next(s for s in samples(COURSE, ASSIGNMENT) if s.student_id == "reference").expected_total
    grades = {row["student_id"]: row for row in read_csv(course.root / "grades.csv")}
    assert {sid: float(row["score"]) for sid, row in grades.items()} == {"1001": full, "1002": 0, kim: 0, "1003": 0}
    assert {sid: row["timestamp"][:19] for sid, row in grades.items()} == {
        "1001": "2026-11-30 18:15:00", "1002": "2026-11-30 17:00:00", kim: "2026-11-30 17:00:00",
        "1003": "2026-11-30 19:00:00"}
    assert {sid: row["email"] for sid, row in grades.items()} == {
        "1001": "ada@example.edu", "1002": "bea@example.edu", kim: "kim@example.edu", "1003": "eve@example.edu"}
    tasks = read_csv(course.root / "task_results.csv")
    status = {row["student_id"]: row["submission_status"] for row in tasks}
    assert status == {"1001": "ok", "1002": "unattempted", kim: "unattempted", "1003": "review"}
    (eve_notes,) = {row["notes"] for row in tasks if row["student_id"] == "1003"}
    assert eve_notes.count("own upload as") == 4 and "submission_7001" in eve_notes
    assert all("own upload" not in row["notes"] for row in tasks if row["student_id"] != "1003")


# Three real grading runs (nbgrader, sandbox) in one course: ada and bea, then bea again alone, then cy alone.


def course_state(course, student_id):
    """What grading keeps of one student: their grades.csv row as written, their gradebook score, and every file of
    theirs under submitted/, autograded/ and feedback/ (content and modification time)."""
    line = next(line for line in course.root.joinpath("grades.csv").read_bytes().splitlines()
                if line.split(b",")[3] == student_id.encode())
    with Gradebook(course.db_url) as gradebook:
        score = gradebook.find_submission(ASSIGNMENT, student_id).score
    files = {
        path.relative_to(course.root).as_posix(): (path.read_bytes(), path.stat().st_mtime_ns)
        for stage in ("submitted", "autograded", "feedback")
        for path in sorted((course.root / stage / student_id).rglob("*"))
        if path.is_file()
    }
    return line, score, files


@pytest.fixture(scope="module")
def regraded(tmp_path_factory, work_and_blank):
    work, blank = work_and_blank
    root = tmp_path_factory.mktemp("regraded")
    course = copy_course(COURSE, root / "course")
    nb = f"{ASSIGNMENT}/{ASSIGNMENT}.ipynb"
    downloads = [
        {f"ada/{nb}": work, f"ada/{ASSIGNMENT}/timestamp.txt": "2026-11-30 10:00:00 UTC", f"bea/{nb}": blank},
        {f"bea/{nb}": work},
        {f"cy/{nb}": blank},
    ]
    states = []
    for number, files in enumerate(downloads):
        grade(course, write(root / f"download{number}", files))
        students = ("ada", "bea", "cy")[: max(2, number + 1)]
        states.append({student: course_state(course, student) for student in students})
    return states


def test_a_re_grade_changes_only_the_students_in_its_download(regraded):
    """Only a student's own submission in the download graded changes their grade: every other student's
    grades.csv row stays byte for byte, their gradebook score and their files untouched."""
    first, second, third = regraded
    reference = next(s for s in samples(COURSE, ASSIGNMENT) if s.student_id == "reference")
    full = reference.expected_total
    points = sum(float(cell.metadata["nbgrader"]["points"]) for cell in reference.notebook.cells if is_grade(cell))
    assert first["ada"][:2] == (f"{ASSIGNMENT},,2026-11-30 10:00:00,ada,,,,{full},0.0,{full},{points}".encode(), full)
    assert first["bea"][1] == 0 and second["bea"][1] == full and third["cy"][1] == 0
    assert second["ada"] == third["ada"] == first["ada"]
    assert third["bea"] == second["bea"]
