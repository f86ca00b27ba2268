"""A grade given by hand stays final through re-grading while its answer is unchanged
(autograder/pipeline/handgrades.py).

nbgrader's own SaveAutoGrades flags every hand-graded cell as needing a manual grade again on each autograde;
tests/test_grading.py shows the fix through a real re-run of ``grade``; here each case of the rule, on a real
gradebook, with the written answer of the 01_tensors release notebook.
"""

import copy
import os
import sys
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook
from traitlets.config import Config

from autograder.course import ROOT, Course, grade_id, is_grade, is_solution, read_notebook
from autograder.pipeline.handgrades import ANSWERS_FILE, EARLIER_ANSWER, KeepHandGrades

ASSIGNMENT = "01_tensors"


def test_a_hand_grade_stays_final_until_the_answer_changes(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))  # alembic
    release = read_notebook(Course(ROOT).release_notebook(ASSIGNMENT))
    written = next(cell for cell in release.cells if is_grade(cell) and is_solution(cell))
    name = grade_id(written)
    db_url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with Gradebook(db_url) as gradebook:
        gradebook.add_assignment(ASSIGNMENT)
        gradebook.add_notebook(ASSIGNMENT, ASSIGNMENT)
        gradebook.add_grade_cell(name, ASSIGNMENT, ASSIGNMENT, max_score=2, cell_type="markdown")
        gradebook.add_solution_cell(name, ASSIGNMENT, ASSIGNMENT)
        gradebook.add_student("ada")
        gradebook.add_submission(ASSIGNMENT, "ada")
    resources = {"nbgrader": {"notebook": ASSIGNMENT, "assignment": ASSIGNMENT, "student": "ada", "db_url": db_url}}
    config = Config({"CourseDirectory": {"root": str(tmp_path)}})

    def autograde(answer: str) -> bool:
        """One autograde of ada's notebook holding ``answer``; returns the grade's needs_manual_grade."""
        cell = copy.deepcopy(written)
        cell.source = answer
        KeepHandGrades(config=config).preprocess(nbformat.v4.new_notebook(cells=[cell]), copy.deepcopy(resources))
        with Gradebook(db_url) as gradebook:
            return gradebook.find_grade(name, ASSIGNMENT, ASSIGNMENT, "ada").needs_manual_grade

    def score() -> float:
        with Gradebook(db_url) as gradebook:
            return gradebook.find_grade(name, ASSIGNMENT, ASSIGNMENT, "ada").score

    def grade_by_hand(score: float, comment: str | None = None) -> None:
        """What formgrader's PUT /formgrader/api/grade/<id> (and /comment/<id>, given a ``comment``) does."""
        with Gradebook(db_url) as gradebook:
            grade = gradebook.find_grade(name, ASSIGNMENT, ASSIGNMENT, "ada")
            grade.manual_score, grade.needs_manual_grade = score, False
            if comment is not None:
                gradebook.find_comment(name, ASSIGNMENT, ASSIGNMENT, "ada").manual_comment = comment
            gradebook.db.commit()

    def comment() -> str:
        with Gradebook(db_url) as gradebook:
            return gradebook.find_comment(name, ASSIGNMENT, ASSIGNMENT, "ada").comment

    assert autograde("Use from_numpy to share memory.") is True  # not graded yet
    grade_by_hand(1.5, "Say when the shared memory surprises you.")
    assert autograde("Use from_numpy to share memory.") is False  # stock nbgrader: True
    assert autograde("Use from_numpy to share memory.") is False
    assert score() == 1.5
    assert autograde("A new answer, handed in later.") is True  # the hand grade was for another answer
    assert score() == 0  # and no longer counts (in grades.csv either): the new answer is not graded yet
    assert comment() == EARLIER_ANSWER + "Say when the shared memory surprises you."  # its comment says so
    assert autograde("A new answer, handed in later.") is True  # still not graded again
    grade_by_hand(2)
    assert autograde("A new answer, handed in later.") is False
    assert score() == 2
    assert autograde("A third answer.") is True  # changed again: the comment, marked already, is marked once
    assert comment() == EARLIER_ANSWER + "Say when the shared memory surprises you."
    assert (tmp_path / ANSWERS_FILE).exists()
