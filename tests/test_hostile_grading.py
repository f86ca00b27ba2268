"""Hostile submissions of 01_tensors graded together through the real pipeline (one module-scoped run):
self-scorers earn exactly what the verdict gives, malformed files are each one student's invalid notebook.

The stored executions (``executed/``, the kernel's outputs before the verdict) show that each trick works
on stock nbgrader: scored by ``determine_grade`` as they came from the kernel, they earn points they must not.
"""

import nbformat
import pytest
from nbgrader.utils import determine_grade

from autograder.course import ROOT, Course, copy_course, grade_id, is_autograder_tests, is_solution
from autograder.demo import mismatches_of
from autograder.execute import STORE
from autograder.grade import grade
from autograder.samples import samples, write_download
from hostile.malformed_notebooks import MALFORMED

ASSIGNMENT = "01_tensors"
SCORED = [s for s in samples(Course(ROOT), ASSIGNMENT) if s.student_id.startswith("scored_")]
FILES = ["json_nested_200000_deep", "attachment_of_the_wrong_type", "binary_png_bytes"]
"""Malformed files among the graded (every one of MALFORMED is checked in test_structure)."""


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    scratch = tmp_path_factory.mktemp("hostile")
    course = copy_course(Course(ROOT), scratch / "course")
    download = write_download(SCORED, scratch / "download")
    release = nbformat.read(ROOT / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    for name in FILES:
        path = download / f"malformed_{name}" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
        path.parent.mkdir(parents=True)
        path.write_bytes(MALFORMED[name](release))
    grading = grade(course, download)
    return course, {result.student_id: result for result in grading.results}


def test_there_are_self_scorers():
    assert len(SCORED) >= 4


@pytest.mark.parametrize("sample", SCORED, ids=[s.student_id for s in SCORED])
def test_a_self_scorer_earns_exactly_what_the_verdict_gives(graded, sample):
    _, results = graded
    assert mismatches_of(results[sample.student_id], sample) == []


@pytest.mark.parametrize("sample", SCORED, ids=[s.student_id for s in SCORED])
def test_the_trick_earns_points_from_stock_nbgrader(graded, sample):
    course, _ = graded
    answers = solutions(sample.notebook)
    executed = [
        notebook
        for path in sorted((course.root / STORE).glob("*.ipynb"))
        for notebook in [nbformat.read(path, as_version=4)]
        if solutions(notebook) == answers
    ]
    assert len(executed) == 1
    unearned = {
        grade_id(cell): determine_grade(cell)[0]
        for cell in executed[0].cells
        if is_autograder_tests(cell) and determine_grade(cell)[0] > sample.expected[grade_id(cell)]
    }
    assert unearned != {}


@pytest.mark.parametrize("name", FILES)
def test_a_malformed_file_is_one_invalid_notebook_and_the_batch_is_graded(graded, name):
    _, results = graded
    result = results[f"malformed_{name}"]
    assert result.status == "invalid notebook" and result.score == 0 and result.tasks
    assert len(results) == len(SCORED) + len(FILES)


def solutions(notebook):
    return [cell.source for cell in notebook.cells if is_solution(cell)]
