"""The class results (autograder/results/classreport.py): the summary over submissions, and report before any grading.

tests/test_grading.py grades two batches through the real pipeline and reads the files `grade` writes.
"""

import os
import subprocess
import sys

from autograder.results.classreport import ClassReport
from autograder.cli import main
from autograder.course import ROOT, run_nbgrader
from autograder.results.report import MARKED_LATE, SubmissionResult, TaskResult


def task(name, score, *, max_score=2.0, autograded=True, attempted=True, pending=False):
    return TaskResult(name, f"label of {name}", score, max_score, autograded, attempted, pending, status="")


def report_of(**tasks):
    """A ClassReport of 01_tensors: student -> that student's tasks."""
    return ClassReport([SubmissionResult(student, "01_tensors", "ok", tasks=found) for student, found in tasks.items()])


def test_tasks_are_ranked_by_pass_rate_and_pending_hand_grades_are_listed():
    report = report_of(
        ada=[task("easy", 2.0), task("hard", 2.0), task("written", 0.0, autograded=False, pending=True)],
        bea=[task("easy", 2.0), task("hard", 0.0, attempted=False), task("written", 1.5, autograded=False)],
    )
    tasks = report.tasks()
    assert [(t.grade_id, t.submissions, t.attempted, t.passed, t.pass_rate, t.mean_score) for t in tasks] == [
        ("written", 2, 2, 0, 0.0, 1.5),  # ada's answer waits for a hand grade: it neither passed nor failed
        ("hard", 2, 1, 1, 0.5, 1.0),
        ("easy", 2, 2, 2, 1.0, 2.0),
    ]
    assert [t.pending for t in tasks] == [1, 0, 0]
    assert report.scores() == {"01_tensors": {"ada": 4.0, "bea": 3.5}}
    assert [(r.student_id, t.grade_id) for r, t in report.pending()] == [("ada", "written")]
    summary = report.summary()
    assert "label of hard" in summary and "1 answer(s) to grade by hand" in summary
    assert "01_tensors ada: label of written" in summary


def test_a_task_whose_answers_all_wait_for_a_hand_grade_has_no_pass_rate_and_comes_last():
    report = report_of(
        ada=[task("written", 0.0, autograded=False, pending=True), task("hard", 0.0)],
        bea=[task("written", 0.0, autograded=False, pending=True), task("hard", 2.0)],
    )
    tasks = report.tasks()
    assert [(t.grade_id, t.pass_rate, t.mean_score, t.pending) for t in tasks] == [
        ("hard", 0.5, 1.0, 0),
        ("written", None, None, 2),
    ]
    written_row = next(line for line in report.summary().splitlines() if "label of written" in line)
    assert written_row.split()[-4:] == ["0/0", "-", "-", "2"]


def test_late_says_by_how_much_where_a_time_is_known_and_the_platform_mark_where_only_that_is():
    def late(**facts):
        return SubmissionResult("ada", "01_tensors", "ok", **facts).late

    assert late(seconds_late=6.5 * 3600) == "6h 30min"
    assert late(platform_late=True) == MARKED_LATE == "late (platform mark, no time)"
    assert late(seconds_late=90.0, platform_late=True) == "2min"  # the gradebook's time says how late
    assert late() == ""


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
