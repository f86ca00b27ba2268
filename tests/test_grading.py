"""The real pipeline: rebuilds are deterministic, and every sample submission gets its expected grade through nbgrader."""

import csv
import filecmp

from autograder.build import build
from autograder.course import ROOT
from autograder.demo import demo
from autograder.samples import samples


def test_rebuild_leaves_release_and_notebooks_unchanged(course_copy):
    build(course_copy)
    for folder in ("release", "notebooks"):
        comparison = filecmp.dircmp(ROOT / folder, course_copy.root / folder, ignore=[".ipynb_checkpoints", "__pycache__"])
        differing = list(comparison.diff_files) + [f"{d}/{f}" for d, sub in comparison.subdirs.items() for f in sub.diff_files]
        assert differing == [], f"{folder}/ changed on rebuild: {differing}"


def test_every_sample_submission_gets_its_expected_grade(course_copy):
    result = demo(course_copy)
    assert result.mismatches == []
    expected = {(s.student_id, s.assignment_id) for a in course_copy.assignment_ids() for s in samples(course_copy, a)}
    graded = {tuple(line.split()[:2]) for line in result.table.splitlines()[2:]}
    assert graded == expected
    wrong = [s for s in expected if s[0].startswith("wrong_")]
    assert len(wrong) >= 4 * len(course_copy.assignment_ids())


def test_grade_reports_each_student_and_goes_on_after_a_broken_notebook(course_copy, cli, tmp_path):
    assignment_id = course_copy.assignment_ids()[0]
    reference = next(s for s in samples(course_copy, assignment_id) if s.student_id == "reference")
    good = tmp_path / "download" / "ada" / assignment_id / f"{assignment_id}.ipynb"
    good.parent.mkdir(parents=True)
    good.write_text(__import__("nbformat").writes(reference.notebook))
    broken = tmp_path / "download" / "bea" / assignment_id / f"{assignment_id}.ipynb"
    broken.parent.mkdir(parents=True)
    broken.write_text('{"cells": [')

    process = cli("--course", str(course_copy.root), "grade", str(tmp_path / "download"))
    assert process.returncode == 0, process.stderr
    rows = {row[0]: row for row in (line.split() for line in process.stdout.splitlines()[2:4])}
    assert rows["ada"][2] == f"{reference.expected_total:g}/{sum_max(reference):g}"
    assert "not graded" in process.stdout and "not a readable notebook" in process.stdout

    with (course_copy.root / "grades.csv").open() as handle:
        grades = {row["student_id"]: row for row in csv.DictReader(handle)}
    assert float(grades["ada"]["score"]) == reference.expected_total
    with (course_copy.root / "task_results.csv").open() as handle:
        tasks = [row for row in csv.DictReader(handle) if row["student_id"] == "ada"]
    assert {row["grade_id"]: float(row["score"]) for row in tasks} == reference.expected
    assert (course_copy.root / "feedback" / "ada" / assignment_id / f"{assignment_id}.html").exists()


def sum_max(sample):
    return sum(points for points in sample_max_points(sample).values())


def sample_max_points(sample):
    from autograder.course import is_grade, grade_id

    return {grade_id(c): float(c.metadata["nbgrader"]["points"]) for c in sample.notebook.cells if is_grade(c)}


def test_grade_fails_clearly_when_it_cannot_run(cli, tmp_path):
    missing = cli("grade", str(tmp_path / "nothing-here"))
    assert missing.returncode == 2
    assert "does not exist" in missing.stderr
    (tmp_path / "empty").mkdir()
    empty = cli("grade", str(tmp_path / "empty"))
    assert empty.returncode == 2
    assert "no submissions" in empty.stderr
