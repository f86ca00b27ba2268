"""One nbgrader process answers a run's requests in order; its failures are outcomes, its end an error."""

import csv
import os
import signal
import sys
from pathlib import Path

import nbgrader.api
import pytest
from nbgrader.api import Gradebook
from sqlalchemy.sql.compiler import SQLCompiler

from autograder.course import CourseError
from autograder.grading.session import feedback_processes
from autograder.pipeline.nbgrader_process import Session, reuse_engines


def test_requests_are_answered_in_order_a_failed_one_says_why_and_those_left_when_nbgrader_ends_fail(course_copy):
    with Session(course_copy) as nbgrader:
        missing = nbgrader.autograde("01_tensors", "nobody")
        export = nbgrader.export(course_copy.root / "grades.csv")
        later = nbgrader.generate_feedback("01_tensors", "nobody")
        assert not missing.result().success
        assert "No notebooks were matched" in missing.result().log and "NbGraderException" in missing.result().error
        assert export.result().success and not later.result().success
        with (course_copy.root / "grades.csv").open() as handle:
            assert next(csv.reader(handle))[:4] == ["assignment", "duedate", "timestamp", "student_id"]

        os.kill(nbgrader._process.pid, signal.SIGKILL)
        nbgrader._process.wait()
        with pytest.raises(CourseError, match=r"nbgrader ended \(exit -9\)"):
            nbgrader.autograde("01_tensors", "nobody").result(timeout=60)


def test_one_feedback_process_serves_two_workers():
    """A page costs about a third of a notebook's execution, a process more 1.0 to 1.3 s of CPU to start."""
    assert [feedback_processes(workers) for workers in (1, 2, 3, 4, 16)] == [1, 1, 2, 2, 8]


def test_gradebooks_of_one_url_share_an_engine_whose_statements_compile_once_and_each_close_leaves_it_usable(
    tmp_path, monkeypatch
):
    """``reuse_engines`` (the nbgrader process calls it first): nbgrader's ``Gradebook`` makes a new engine per
    opening, so each compiled its queries again; here a second opening compiles none, and a gradebook opened after
    another was closed (its engine's pool disposed) reads and writes."""
    monkeypatch.setattr(nbgrader.api, "create_engine", nbgrader.api.create_engine)  # restored after the test
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")  # nbgrader's alembic
    reuse_engines()
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    compiled: list[str] = []
    monkeypatch.setattr(SQLCompiler, "__init__", recorded(SQLCompiler.__init__, compiled))
    with Gradebook(url) as first:
        first.add_student("student1")
        first.find_student("student1")
        engine, compiled_first = first.engine, len(compiled)
    with Gradebook(url) as second:
        second.find_student("student1")
        second.add_student("student2")
        assert second.engine is engine and len(compiled) == compiled_first
    with Gradebook(f"sqlite:///{tmp_path / 'other.db'}") as other:
        assert other.engine is not engine and other.students == []
    with Gradebook(url) as third:
        assert [student.id for student in third.students] == ["student1", "student2"]


def recorded(init, compiled: list[str]):
    """``init`` (a compiler's ``__init__``), each call recorded in ``compiled``."""

    def compile_recorded(self, *args, **kwargs):
        compiled.append(type(self).__name__)
        return init(self, *args, **kwargs)

    return compile_recorded
