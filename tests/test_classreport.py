"""The class results (autograder/classreport.py): the summary over submissions, and report before any grading.

tests/test_grading.py grades two batches through the real pipeline and reads the files `grade` writes.
"""

import os
import subprocess
import sys

from autograder.classreport import CellResult, ClassReport
from autograder.cli import main
from autograder.course import ROOT, run_nbgrader


def cell(student, name, score, *, max_score=2.0, autograded=True, attempted=True, pending=False):
    label = f"label of {name}"
    return CellResult("01_tensors", student, name, label, autograded, score, max_score, attempted, pending, 0.0)


def test_tasks_are_ranked_by_pass_rate_and_pending_hand_grades_are_listed():
    report = ClassReport(
        [
            cell("ada", "easy", 2.0),
            cell("bea", "easy", 2.0),
            cell("ada", "hard", 2.0),
            cell("bea", "hard", 0.0, attempted=False),
            cell("ada", "written", 0.0, autograded=False, pending=True),
            cell("bea", "written", 1.5, autograded=False),
        ]
    )
    tasks = report.tasks()
    assert [(t.grade_id, t.submissions, t.attempted, t.passed, t.pass_rate, t.mean_score) for t in tasks] == [
        ("written", 2, 2, 0, 0.0, 1.5),  # ada's answer waits for a hand grade: it neither passed nor failed
        ("hard", 2, 1, 1, 0.5, 1.0),
        ("easy", 2, 2, 2, 1.0, 2.0),
    ]
    assert [t.pending for t in tasks] == [1, 0, 0]
    assert report.scores() == {"01_tensors": {"ada": 4.0, "bea": 3.5}}
    assert [(c.student_id, c.grade_id) for c in report.pending()] == [("ada", "written")]
    summary = report.summary()
    assert "label of hard" in summary and "1 answer(s) to grade by hand" in summary
    assert "01_tensors ada: label of written" in summary


def test_a_task_whose_answers_all_wait_for_a_hand_grade_has_no_pass_rate_and_comes_last():
    report = ClassReport(
        [
            cell("ada", "written", 0.0, autograded=False, pending=True),
            cell("bea", "written", 0.0, autograded=False, pending=True),
            cell("ada", "hard", 0.0),
            cell("bea", "hard", 2.0),
        ]
    )
    tasks = report.tasks()
    assert [(t.grade_id, t.pass_rate, t.mean_score, t.pending) for t in tasks] == [
        ("hard", 0.5, 1.0, 0),
        ("written", None, None, 2),
    ]
    written_row = next(line for line in report.summary().splitlines() if "label of written" in line)
    assert written_row.split()[-4:] == ["0/0", "-", "-", "2"]


def test_report_before_any_grading_says_so(course_copy, capsys):
    assert main(["--course", str(course_copy.root), "report"]) == 2
    error = capsys.readouterr().err
    assert "no gradebook.db" in error and "nothing graded yet" in error
    assert not (course_copy.root / "gradebook.db").exists()


def test_nbgrader_finds_alembic_by_the_course_config_alone_and_report_into_a_closed_pipe_exits_quietly(course_copy):
    """nbgrader_config.py is the one place that puts this environment's bin/ on PATH (nbgrader runs ``alembic`` by
    name when it creates a gradebook); ``report | head`` once ended in a BrokenPipeError traceback."""
    made = run_nbgrader(course_copy, "db", "assignment", "add", "01_tensors", env={"PATH": "/usr/bin:/bin"})
    assert made.returncode == 0, made.stdout + made.stderr
    assert (course_copy.root / "gradebook.db").exists()
    reader, writer = os.pipe()
    os.close(reader)  # the reader is gone before the report writes a line, as `head` after its lines
    try:
        command = [sys.executable, "-m", "autograder", "--course", str(course_copy.root), "report"]
        process = subprocess.run(command, cwd=ROOT, stdout=writer, stderr=subprocess.PIPE, text=True)
    finally:
        os.close(writer)
    assert (process.returncode, process.stderr) == (1, "")
