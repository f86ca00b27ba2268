"""Hostile fixtures really fool the kernel: executed without the verdict, the cells they must lose show no error.

(That the real pipeline scores those cells 0 is checked with every other sample, in test_grading.)
"""

import shutil

import pytest

from autograder.build import execute_notebook
from autograder.course import CHECKS_MODULE, ROOT, Course, grade_id
from autograder.samples import samples

HOSTILE = [
    s for a in Course(ROOT).assignment_ids() for s in samples(Course(ROOT), a) if s.student_id.startswith("hostile_")
]


def test_there_are_hostile_fixtures():
    assert len(HOSTILE) >= 5


@pytest.mark.parametrize("sample", HOSTILE, ids=[f"{s.assignment_id}/{s.student_id}" for s in HOSTILE])
def test_the_trick_hides_every_failure_from_the_kernel(sample, tmp_path):
    shutil.copy(CHECKS_MODULE, tmp_path / "checks.py")
    executed = execute_notebook(sample.notebook, cwd=tmp_path, env={"COURSE_DEVICE": "cpu"})
    lost = {name for name, score in sample.expected.items() if score == 0}
    errors = {
        grade_id(cell): [output.ename for output in cell.outputs if output.output_type == "error"]
        for cell in executed.cells
        if cell.cell_type == "code" and grade_id(cell) in lost
    }
    assert {name: names for name, names in errors.items() if names} == {}
