"""Sample submissions are composed from source/ and release/, and the wrong-answer file is validated."""

import pytest

from autograder import samples as samples_module
from autograder.course import ROOT, Course, CourseError, is_solution
from autograder.samples import samples


def test_reference_is_release_with_the_source_solutions():
    course = Course(ROOT)
    assignment_id = course.assignment_ids()[0]
    found = {s.student_id: s for s in samples(course, assignment_id)}
    reference, release = found["reference"], found["unchanged_release"]
    assert [c.source for c in reference.notebook.cells if not is_solution(c)] == [
        c.source for c in release.notebook.cells if not is_solution(c)
    ]
    assert all("NotImplementedError" not in c.source for c in reference.notebook.cells if is_solution(c))
    assert sum(release.expected.values()) == 0 < sum(reference.expected.values())


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"name": "silent", "cell": "x", "loses": [], "source": ""}, "loses no test cell"),
        ({"name": "typo", "cell": "no_such_cell", "loses": ["no_such_test"], "source": ""}, "names unknown cells"),
    ],
)
def test_a_wrong_answer_must_name_real_cells_and_lose_something(monkeypatch, entry, message):
    monkeypatch.setattr(samples_module, "variants", lambda assignment_id: [("wrong", entry)])
    course = Course(ROOT)
    with pytest.raises(CourseError, match=message):
        samples(course, course.assignment_ids()[0])
