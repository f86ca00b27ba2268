"""The gradebook on PostgreSQL (a course whose nbgrader configuration sets ``CourseDirectory.db_url``): one Blackboard
download (one late submission, one on time), with a due date, graded into a course on SQLite and into a course on a
real PostgreSQL server (Debian's, started here with :mod:`autograder.deploy.postgres`, stopped at the end), a hand
grade given in each through nbgrader's gradebook API, then ``report`` and the platform export: every file is the
same on both."""

import csv
import getpass
import shutil
import subprocess
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import psutil
import pytest
from nbgrader.api import Gradebook

from conftest import run_cli
from downloads import ASSIGNMENT, build, notebooks
from autograder.course import ROOT, Course, copy_course, run_nbgrader
from autograder.deploy import postgres
from autograder.grading.grade import grade
from autograder.pipeline.execute import STORE
from autograder.results.lms import export

DUE = "2026-11-30 12:00:00 UTC"
NOW = datetime(2026, 12, 5, 12, 0, tzinfo=timezone.utc)
LATE, ON_TIME = "alovelace", "bbronte"
"""The download's students: the reference solution after the due date, the unchanged release before it."""
EXIT_DELAY_US = 1_000_000
"""How long strace holds the server's main process at its exit (microseconds)."""
RESULTS = ("grades.csv", "task_results.csv", "class_results.csv", f"lms_blackboard_{ASSIGNMENT}.csv")


@pytest.fixture(scope="module")
def server():
    folder = Path(tempfile.mkdtemp(prefix="gradebook-postgres-"))
    folder.chmod(0o711)  # the server's account passes through to its data and socket folders
    server = postgres.Server(folder / "data", folder / "socket")
    postgres.start(server, [getpass.getuser()])
    yield server
    postgres.stop(server)
    shutil.rmtree(folder)


@pytest.fixture(scope="module")
def graded(server, tmp_path_factory) -> dict[str, Course]:
    """``{"sqlite": course, "postgres": course}``, each graded, hand graded, reported and exported; grades.csv as
    ``grade`` left it is kept as ``grades_before_report.csv``. The second grading takes the notebooks the first one
    executed (the same notebooks: the course's store of executions, keyed by content)."""
    root = tmp_path_factory.mktemp("gradebooks")
    download = build("blackboard", root / "download", *notebooks(Course(ROOT))).path
    courses = {}
    for name in ("sqlite", "postgres"):
        course = copy_course(Course(ROOT), root / name)
        if name == "postgres":
            with open(course.root / "nbgrader_config.py", "a", encoding="utf-8") as config:
                config.write(f"\nc.CourseDirectory.db_url = {server.url!r}\n")
            shutil.copytree(courses["sqlite"].root / STORE, course.root / STORE)  # executions reused: grading is faster
        assert run_nbgrader(course, "db", "assignment", "add", ASSIGNMENT, f"--duedate={DUE}").returncode == 0
        grade(course, download)
        shutil.copy(course.root / "grades.csv", course.root / "grades_before_report.csv")
        with Gradebook(course.db_url) as gradebook:
            submission = gradebook.find_submission(ASSIGNMENT, LATE)
            for grade_cell in (g for notebook in submission.notebooks for g in notebook.grades):
                if grade_cell.auto_score is None:
                    grade_cell.manual_score = grade_cell.max_score
            gradebook.db.commit()
        process = run_cli("--course", str(course.root), "report")
        assert process.returncode == 0, process.stderr
        blackboard = {"title": "01 Tensors", "lms_assignment_id": "777", "now": NOW}
        export(course, platform="blackboard", assignment_id=ASSIGNMENT, **blackboard)
        courses[name] = course
    return courses


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as file:
        return list(csv.DictReader(file))


def test_the_course_names_the_postgres_gradebook(graded, server):
    assert graded["postgres"].db_url == server.url
    assert graded["sqlite"].db_url == f"sqlite:///{graded['sqlite'].root / 'gradebook.db'}"
    assert not (graded["postgres"].root / "gradebook.db").exists()
    with Gradebook(server.url) as gradebook:
        assert sorted(s.student.id for s in gradebook.assignment_submissions(ASSIGNMENT)) == [LATE, ON_TIME]


@pytest.mark.parametrize("name", RESULTS)
def test_the_same_results_on_sqlite_and_postgres(graded, name):
    assert _rows(graded["postgres"].root / name) == _rows(graded["sqlite"].root / name)


def test_the_hand_grade_and_the_late_submission_show(graded):
    course = graded["postgres"]
    before = {row["student_id"]: float(row["score"]) for row in _rows(course.root / "grades_before_report.csv")}
    after = {row["student_id"]: float(row["score"]) for row in _rows(course.root / "grades.csv")}
    assert after[LATE] > before[LATE] and after[ON_TIME] == before[ON_TIME]
    late = {row["student_id"]: row["late"] for row in _rows(course.root / "task_results.csv")}
    assert late[LATE] and not late[ON_TIME]


def test_stopping_the_server_leaves_no_process(server):
    """The server removes ``postmaster.pid`` on its way out, before its main process exits, and ``pg_ctl stop -w``
    returns then. Here strace delays that process's ``exit_group`` by a second, so that a stop which returns with
    ``pg_ctl`` leaves it running."""
    assert server.running
    main = psutil.Process(int((server.data / "postmaster.pid").read_text().split()[0]))
    processes = [main, *main.children(recursive=True)]
    assert len(processes) > 1  # the server and its workers
    delay = ["-e", "trace=exit_group", "-e", f"inject=exit_group:delay_enter={EXIT_DELAY_US}"]
    with subprocess.Popen(["strace", "-qq", "-o", "/dev/null", *delay, "-p", str(main.pid)]) as tracer:
        deadline = time.monotonic() + 10
        while _tracer(main) == 0 and time.monotonic() < deadline and tracer.poll() is None:
            time.sleep(0.01)
        assert _tracer(main) == tracer.pid
        assert postgres.stop(server)
        assert not server.running
        assert [process for process in processes if process.is_running() and process.status() != "zombie"] == []
        assert tracer.wait(timeout=10) == 0


def _tracer(process: psutil.Process) -> int:
    """The pid of the process tracing ``process`` (0: none)."""
    status = Path(f"/proc/{process.pid}/status").read_text(encoding="utf-8")
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("TracerPid:")))
