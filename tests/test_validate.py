"""`python -m autograder validate`: nbgrader's validation, told truthfully (which test cells fail, why, exit status)."""

import shutil
from pathlib import Path

import nbformat
import pytest

from autograder.course import ROOT, Course, grade_id, is_autograder_tests, is_multiple_choice, read_notebook
from autograder.authoring.samples import samples
from autograder.authoring.validate import RECORDED, Validation, validate

ASSIGNMENT = "01_tensors"
WRONG = ("task_2_2_zero_negatives", "def zero_negatives_(x):\n    return x.abs_()\n")
UNANSWERED = "task_3_1_hwc_to_chw"
WARNS = (
    "task_5_1_compact",
    "import warnings\n\ndef compact(t):\n    warnings.warn('counting bytes')\n"
    "    return t.clone() if t.untyped_storage().nbytes() > t.numel() * t.element_size() else t\n",
)


def reference_submission(assignment_id: str) -> nbformat.NotebookNode:
    """The release notebook with the reference solutions filled in (as the sample submissions compose it)."""
    return next(s.notebook for s in samples(Course(ROOT), assignment_id) if s.student_id == "reference")


def solved_with_mistakes(*, warning: bool = True) -> nbformat.NotebookNode:
    """01_tensors solved, except one wrong answer (WRONG), one task left as released (UNANSWERED) and,
    with ``warning``, one correct answer that warns (WARNS)."""
    release = read_notebook(ROOT / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
    notebook = reference_submission(ASSIGNMENT)
    stubs = {grade_id(c): c.source for c in release.cells}
    for cell in notebook.cells:
        name = grade_id(cell)
        if name == f"{WRONG[0]}_solution":
            cell.source = WRONG[1]
        elif name == f"{UNANSWERED}_solution":
            cell.source = stubs[name]
        elif name == f"{WARNS[0]}_solution" and warning:
            cell.source = WARNS[1]
    return notebook


@pytest.fixture(scope="module")
def student_folder(tmp_path_factory):
    """A student's copy of release/01_tensors/ holding the released, the solved and the mistaken notebook."""
    folder = tmp_path_factory.mktemp("student") / ASSIGNMENT
    shutil.copytree(ROOT / "release" / ASSIGNMENT, folder)  # checks.py is copied, not linked
    nbformat.write(reference_submission(ASSIGNMENT), folder / "solved.ipynb")
    nbformat.write(solved_with_mistakes(), folder / "mistakes.ipynb")
    return folder


def test_validate_names_the_wrong_the_unanswered_and_the_warning_cell_and_why(student_folder):
    path = student_folder / "mistakes.ipynb"
    before = path.read_bytes()
    validation = validate(path)
    assert list(validation.failed) == [WRONG[0], UNANSWERED, WARNS[0]]
    assert validation.failed[UNANSWERED].startswith("not answered yet (NotImplementedError)")
    assert validation.failed[WRONG[0]].startswith("AssertionError: x after zero_negatives_(x)")
    assert validation.failed[WARNS[0]].startswith("every check passed, but the cell wrote to the error stream")
    assert "UserWarning: counting bytes" in validation.failed[WARNS[0]]
    tests = [grade_id(c) for c in read_notebook(path).cells if is_autograder_tests(c)]
    choices = [grade_id(c) for c in read_notebook(path).cells if is_multiple_choice(c)]
    assert choices and validation.recorded == choices  # the knowledge check: not "pass", right or wrong
    assert validation.passed == [name for name in tests if name not in validation.failed and name not in choices]
    assert not validation.ok
    assert path.read_bytes() == before


def test_validate_exits_0_on_the_solved_notebook_and_1_on_the_released_one(student_folder, cli):
    count = sum(is_autograder_tests(c) for c in read_notebook(student_folder / f"{ASSIGNMENT}.ipynb").cells)
    choices = sum(is_multiple_choice(c) for c in read_notebook(student_folder / f"{ASSIGNMENT}.ipynb").cells)
    assert count > choices > 0
    solved = cli("validate", str(student_folder / "solved.ipynb"))
    assert solved.returncode == 0, solved.stdout + solved.stderr
    assert solved.stdout.strip().endswith(
        f"solved.ipynb: all {count} test cells pass ({choices} of them record a multiple-choice answer, "
        "graded after you submit)"
    )
    assert f"recorded  knowledge_check_q1: {RECORDED}" in solved.stdout and "pass  knowledge_check" not in solved.stdout
    assert solved.stderr == ""
    released = cli("validate", str(student_folder / f"{ASSIGNMENT}.ipynb"))
    assert released.returncode == 1, released.stdout + released.stderr
    assert f"{ASSIGNMENT}.ipynb: 0 of {count} test cells pass" in released.stdout
    assert released.stdout.count("FAIL  ") == count


def test_validate_says_which_test_cell_was_edited(student_folder, cli):
    notebook = read_notebook(student_folder / "solved.ipynb")
    tests = next(c for c in notebook.cells if is_autograder_tests(c))
    tests.source = "pass"
    nbformat.write(notebook, student_folder / "edited.ipynb")
    edited = cli("validate", str(student_folder / "edited.ipynb"))
    assert edited.returncode == 1
    assert f"EDITED  {grade_id(tests)}: this test cell was edited" in edited.stdout


def test_validate_says_so_when_checks_py_is_not_beside_the_notebook(student_folder, cli, tmp_path):
    alone = tmp_path / "solved.ipynb"
    shutil.copy(student_folder / "solved.ipynb", alone)
    process = cli("validate", str(alone))
    assert process.returncode == 2
    assert f"no checks.py beside {alone}" in process.stderr and "release/01_tensors/checks.py" in process.stderr
    assert "NameError" not in process.stdout + process.stderr


def test_the_knowledge_checks_questions_are_the_multiple_choice_test_cells():
    """Their visible tests check only that the answer is one of the choices, in source/ and release/ alike."""
    for assignment_id in Course(ROOT).assignment_ids():
        for path in (Course(ROOT).source_notebook(assignment_id), Course(ROOT).release_notebook(assignment_id)):
            tests = [c for c in read_notebook(path).cells if is_autograder_tests(c)]
            choices = [grade_id(c) for c in tests if is_multiple_choice(c)]
            assert choices and choices == [grade_id(c) for c in tests if grade_id(c).startswith("knowledge_check_q")]


def test_a_multiple_choice_answer_is_reported_as_recorded_not_as_passed():
    report = Validation(notebook=Path("n.ipynb"), passed=["task_1_1"], recorded=["knowledge_check_q1"]).report()
    assert report.splitlines() == [
        "pass  task_1_1",
        f"recorded  knowledge_check_q1: {RECORDED}",
        "n.ipynb: all 2 test cells pass (1 of them record a multiple-choice answer, graded after you submit)",
    ]
    failing = Validation(notebook=Path("n.ipynb"), recorded=["knowledge_check_q1"], failed={"task_1_1": "why"})
    assert failing.report().endswith(
        "n.ipynb: 1 of 2 test cells pass (1 of them record a multiple-choice answer, graded after you submit); "
        "fix the rest before you submit"
    )
