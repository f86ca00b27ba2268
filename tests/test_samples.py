"""Sample submissions are composed from source/ and release/, and the wrong-answer file is validated."""

import pytest

from autograder.authoring import samples as samples_module
from autograder.course import ROOT, Course, CourseError, is_solution
from autograder.authoring.samples import HOSTILE_DIR, VARIANT_FILES, samples


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
    monkeypatch.setattr(samples_module, "variants", lambda assignment_id, **where: [("wrong", entry)])
    course = Course(ROOT)
    with pytest.raises(CourseError, match=message):
        samples(course, course.assignment_ids()[0])


def test_a_valid_alternative_must_keep_every_point(monkeypatch):
    course = Course(ROOT)
    assignment_id = course.assignment_ids()[0]
    reference = next(s for s in samples(course, assignment_id) if s.student_id == "reference")
    solution = next(c for c in reference.notebook.cells if is_solution(c) and c.cell_type == "code")
    entry = {"name": "same", "cell": solution.metadata["nbgrader"]["grade_id"], "source": solution.source}
    monkeypatch.setattr(samples_module, "variants", lambda assignment_id, **where: [("valid", entry)])
    valid = next(s for s in samples(course, assignment_id) if s.student_id == "valid_same")
    assert valid.expected == reference.expected
    monkeypatch.setattr(samples_module, "variants", lambda assignment_id, **where: [("valid", {**entry, "loses": ["x"]})])
    with pytest.raises(CourseError, match="is a valid alternative but loses"):
        samples(course, assignment_id)


def test_the_demo_summary_counts_samples_that_graded_as_they_must_each_hostile_class_on_its_own():
    from autograder.harness.demo import summary

    problems = {
        ("reference", "01_a"): [],
        ("wrong_x", "01_a"): ["scored 2"],
        ("wrong_y", "02_b"): [],
        ("valid_z", "02_b"): [],
        ("stops_w", "02_b"): ["has status failed"],
        ("cross_v", "02_b"): [],
    }
    header, _, *rows = summary(["01_a", "02_b"], problems).splitlines()
    titles = header.split("  ")
    columns = [dict(zip([t.strip() for t in titles if t.strip()], row.split(), strict=True)) for row in rows]
    hostile = [table for folder, table in VARIANT_FILES.values() if folder == HOSTILE_DIR]
    assert [t.strip() for t in titles if t.strip()][4:-1] == hostile
    assert [c["assignment"] for c in columns] == ["01_a", "02_b", "total"]
    assert [c["wrong answers caught"] for c in columns] == ["0/1", "1/1", "1/2"]
    assert [c["stops_kernel"] for c in columns] == ["0/0", "0/1", "0/1"]
    assert [c["harms_others"] for c in columns] == ["0/0", "1/1", "1/1"]
    assert [c["valid alternatives kept"] for c in columns] == ["0/0", "1/1", "1/1"]
    assert [c["hostile"] for c in columns] == ["0/0"] * 3


def test_the_default_demo_grades_a_wrong_answer_per_graded_cell_a_valid_alternative_and_a_hostile_of_each_class():
    from autograder.harness.demo import HOSTILE_PREFIXES, representative

    course = Course(ROOT)
    for assignment_id in course.assignment_ids():
        every = samples(course, assignment_id)
        chosen = representative(course, assignment_id)
        ids = [s.student_id for s in chosen]
        assert ids == [s.student_id for s in every if s.student_id in ids]  # a subset, in the same order
        assert ids[:2] == ["reference", "unchanged_release"]
        assert sum(i.startswith("valid_") for i in ids) == 1
        for prefix in HOSTILE_PREFIXES:
            of_class = [s.student_id for s in every if s.student_id.startswith(prefix)]
            assert [i for i in ids if i.startswith(prefix)] == of_class[:1]
        wrong = [s for s in chosen if s.student_id.startswith("wrong_")]
        full = every[0].expected
        graded = [name for name, points in full.items() if points > 0]
        shown = [n for n in graded if any(s.expected[n] < full[n] for s in every if s.student_id.startswith("wrong_"))]
        assert all(any(s.expected[name] < full[name] for s in wrong) for name in shown)
        # no wrong answer is chosen whose cells losing points an earlier chosen one already showed
        for position, sample in enumerate(wrong):
            lost = {name for name in graded if sample.expected[name] < full[name]}
            assert lost - {name for s in wrong[:position] for name in graded if s.expected[name] < full[name]}
        assert len(chosen) < len(every)
