"""Hostile fixtures really fool the kernel: executed without the verdict, the cells they must lose show no error.
Escapes really work where stock nbgrader runs kernels (in the course directory), and fail in the sandbox.

(That the real pipeline scores those cells 0 is checked with every other sample, in test_samples_graded.)
"""

import copy
import multiprocessing
import shutil
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor

import pytest

from autograder.pipeline.batch import default_workers
from autograder.pipeline.reference import execute_notebook
from autograder.course import CHECKS_MODULE, ROOT, Course, grade_id
from autograder.pipeline.execute import Execute
from autograder.authoring.samples import samples

ALL = [s for a in Course(ROOT).assignment_ids() for s in samples(Course(ROOT), a)]
HOSTILE = [s for s in ALL if s.student_id.startswith("hostile_")]
ESCAPES = [s for s in ALL if s.student_id.startswith("escape_")]


def test_there_are_hostile_fixtures():
    assert len(HOSTILE) >= 5


@pytest.fixture(scope="module")
def executed_plainly(tmp_path_factory) -> Iterator[dict[str, Future]]:
    """Every hostile sample executed in a plain kernel (no sandbox, no verdict) in a folder of its own with
    checks.py, as many at a time as the grader runs (:func:`autograder.pipeline.batch.default_workers`):
    ``{id: future}``."""
    pool = ProcessPoolExecutor(default_workers(), mp_context=multiprocessing.get_context("spawn"))
    futures = {}
    for sample in HOSTILE:
        folder = tmp_path_factory.mktemp("hostile")
        shutil.copy(CHECKS_MODULE, folder / "checks.py")
        env = {"COURSE_DEVICE": "cpu"}
        futures[sample_id(sample)] = pool.submit(execute_notebook, sample.notebook, cwd=folder, env=env)
    yield futures
    pool.shutdown(cancel_futures=True)


def sample_id(sample) -> str:
    return f"{sample.assignment_id}/{sample.student_id}"


@pytest.mark.parametrize("sample", HOSTILE, ids=[sample_id(s) for s in HOSTILE])
def test_the_trick_hides_every_failure_from_the_kernel(sample, executed_plainly):
    assert failing(executed_plainly[sample_id(sample)].result(), sample) == {}


def failing(executed, sample) -> dict[str, list[str]]:
    """The cells a sample must lose that show an error after ``executed``: ``{grade_id: [ename, ...]}``."""
    lost = {name for name, score in sample.expected.items() if score == 0}
    errors = {
        grade_id(cell): [output.ename for output in cell.outputs if output.output_type == "error"]
        for cell in executed.cells
        if cell.cell_type == "code" and grade_id(cell) in lost
    }
    return {name: names for name, names in errors.items() if names}


@pytest.mark.parametrize("sample", ESCAPES, ids=[sample_id(s) for s in ESCAPES])
def test_the_escape_works_in_the_course_directory_and_fails_in_the_sandbox(sample, course_copy):
    """In the course directory (as stock nbgrader runs kernels) it earns its cells; in the sandbox it does not."""
    folder = course_copy.root / "autograded" / "escaper" / sample.assignment_id
    folder.mkdir(parents=True)
    shutil.copy(CHECKS_MODULE, folder / "checks.py")
    unsandboxed = execute_notebook(sample.notebook, cwd=folder, env={"COURSE_DEVICE": "cpu"})
    resources = {"metadata": {"path": str(folder)}}
    sandboxed, _ = Execute(timeout=60).preprocess(copy.deepcopy(sample.notebook), resources)
    assert failing(unsandboxed, sample) == {}
    code_cells = {grade_id(cell) for cell in sample.notebook.cells if cell.cell_type == "code"}
    assert set(failing(sandboxed, sample)) == {n for n, score in sample.expected.items() if score == 0} & code_cells
