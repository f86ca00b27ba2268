"""Reading an LMS download: folders, zips, wrappers, strays and hostile zip members."""

import zipfile

import nbformat
import pytest

from autograder.course import ROOT, Course, CourseError, read_notebook
from autograder.intake import find_submissions, opened, place

IDS = ["01_tensors", "02_strides"]


def make_download(root, files):
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_finds_students_at_any_depth_and_reports_strays(tmp_path):
    download = make_download(
        tmp_path,
        {
            "export-2026/alice/01_tensors/01_tensors.ipynb": "{}",
            "export-2026/alice/01_tensors/data.csv": "1,2",
            "export-2026/bob/02_strides/02_strides.ipynb": "{}",
            "export-2026/bob/02_strides/.ipynb_checkpoints/02_strides-checkpoint.ipynb": "{}",
            "export-2026/carol/homework/01_tensors.ipynb": "{}",
            "stray.ipynb": "{}",
        },
    )
    found = find_submissions(download, assignment_ids=IDS)
    assert [(s.student_id, s.assignment_id) for s in found.submissions] == [
        ("alice", "01_tensors"),
        ("bob", "02_strides"),
    ]
    assert len(found.ignored) == 2
    assert any("carol/homework" in line for line in found.ignored)


def test_zip_is_extracted_and_escaping_members_refused(tmp_path):
    archive = tmp_path / "download.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        handle.writestr("alice/01_tensors/01_tensors.ipynb", "{}")
    with opened(archive) as folder:
        assert [s.student_id for s in find_submissions(folder, assignment_ids=IDS).submissions] == ["alice"]
    hostile = tmp_path / "hostile.zip"
    with zipfile.ZipFile(hostile, "w") as handle:
        handle.writestr("../../evil/01_tensors/01_tensors.ipynb", "{}")
    with pytest.raises(CourseError, match="outside its folder"):
        with opened(hostile):
            pass
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(CourseError, match="neither a folder nor a zip"):
        with opened(tmp_path / "notes.txt"):
            pass
    with pytest.raises(CourseError, match="does not exist"):
        with opened(tmp_path / "missing"):
            pass


def test_place_takes_a_lone_misnamed_notebook_drops_other_files_and_clears_old_results(tmp_path):
    course = Course(tmp_path / "course")
    release = read_notebook(ROOT / "release" / "01_tensors" / "01_tensors.ipynb")
    download = make_download(
        tmp_path / "download",
        {
            "alice/01_tensors/01_tensors (1).ipynb": nbformat.writes(release),
            "alice/01_tensors/torch.py": "raise SystemExit('shadowed')",
            "alice/01_tensors/checks.py": "",
            "alice/01_tensors/timestamp.txt": "2026-11-30 10:00:00 UTC",
        },
    )
    stale = course.root / "autograded" / "alice" / "01_tensors"
    stale.mkdir(parents=True)
    submission = find_submissions(download, assignment_ids=IDS).submissions[0]
    placed = place(course, submission, release=release)
    assert sorted(p.name for p in placed.iterdir()) == ["01_tensors.ipynb", "timestamp.txt"]
    assert submission.notes == [
        "notebook '01_tensors (1).ipynb' graded as '01_tensors.ipynb'",
        "files not graded: torch.py",
    ]
    assert submission.status == "ok"
    assert not stale.exists()


def test_place_grades_an_unreadable_notebook_as_the_blank_release(tmp_path):
    release = read_notebook(ROOT / "release" / "01_tensors" / "01_tensors.ipynb")
    download = make_download(tmp_path / "download", {"bea/01_tensors/01_tensors.ipynb": '{"cells": ['})
    submission = find_submissions(download, assignment_ids=IDS).submissions[0]
    placed = place(Course(tmp_path / "course"), submission, release=release)
    assert submission.status == "invalid notebook"
    assert submission.notes[0].startswith("not a readable notebook: the file is not valid JSON")
    graded = read_notebook(placed / "01_tensors.ipynb")
    assert [c.source for c in graded.cells] == [c.source for c in release.cells]


def test_log_excerpt_quotes_the_exception_of_exactly_that_submission(tmp_path):
    from autograder.grade import _log_excerpt

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
