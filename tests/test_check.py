"""`python -m autograder check`: it passes on the course, and finds what it promises to find."""

import json

import nbformat

from autograder.check import leak_findings, reference_findings, source_findings
from autograder.course import grade_id, is_autograder_tests, raises_on_purpose, read_notebook


def make_tests_cell(grade_id, points=1, source="check_equal(f(1), 2, label='f(1)')"):
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["nbgrader"] = {
        "grade": True,
        "solution": False,
        "locked": True,
        "grade_id": grade_id,
        "points": points,
        "schema_version": 3,
        "task": False,
    }
    return cell


def make_solution_cell(grade_id, source="def f(x):\n    ### BEGIN SOLUTION\n    return x + 1\n    ### END SOLUTION"):
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["nbgrader"] = {
        "grade": False,
        "solution": True,
        "locked": False,
        "grade_id": grade_id,
        "schema_version": 3,
        "task": False,
    }
    return cell


def test_source_findings_name_each_structural_problem():
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        make_solution_cell("f_solution"),
        make_tests_cell("f_tests", points=0),
        make_solution_cell("g_solution"),
        nbformat.v4.new_code_cell("print('demo')"),
        make_tests_cell("f_tests"),
        make_solution_cell("h_solution", source="def h():\n    return 1"),
        make_tests_cell("h_tests", source="check_equal(h(), 1, label='h()')"),
    ]
    hidden = "\n### BEGIN HIDDEN TESTS\ncheck_equal(f(2), 3, label='f(2)')\n### END HIDDEN TESTS"
    notebook.cells[1].source += hidden
    notebook.cells[4].source += hidden
    assert source_findings(notebook) == [
        "grade cell 'f_tests' (cell 1) has no points",
        "solution cell 'g_solution' (cell 2) has no autograder-tests cell after it",
        "grade_id 'f_tests' is used by cells 1 and 4",
        "solution cell 'h_solution' (cell 5) has no ### BEGIN SOLUTION region",
        "autograder-tests cell 'h_tests' (cell 6) has no ### BEGIN HIDDEN TESTS section",
    ]


def test_leak_findings_ignore_lines_the_release_is_meant_to_show():
    source = nbformat.v4.new_notebook()
    source.cells = [
        make_solution_cell("f_solution"),
        make_tests_cell("t", source="x = 1\n### BEGIN HIDDEN TESTS\nsecret()\n### END HIDDEN TESTS"),
    ]
    release = nbformat.v4.new_notebook()
    release.cells = [
        nbformat.v4.new_code_cell("def f(x):\n    raise NotImplementedError()"),
        nbformat.v4.new_code_cell("x = 1"),
    ]
    assert leak_findings(source, release) == []
    release.cells[0].source += "\n    return x + 1"
    release.cells[1].source += "\nsecret()\n### END HIDDEN TESTS"
    assert leak_findings(source, release) == [
        "cell 0 holds solution code: 'return x + 1'",
        "cell 1 holds hidden test code: 'secret()'",
        "cell 1 holds the marker '### END HIDDEN TESTS'",
    ]


def test_check_passes_on_the_course_and_fails_on_a_planted_solution_line(course_copy, cli):
    passed = cli("--course", str(course_copy.root), "check")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "check passed" in passed.stdout

    assignment_id = course_copy.assignment_ids()[0]
    source = read_notebook(course_copy.source_notebook(assignment_id))
    solution_line = next(
        line.strip()
        for cell in source.cells
        for line in cell.source.split("### BEGIN SOLUTION", 1)[-1].splitlines()
        if "### BEGIN SOLUTION" in cell.source and line.strip().startswith("return")
    )
    path = course_copy.release_notebook(assignment_id)
    planted = json.loads(path.read_text())
    stub = next(
        cell
        for cell in planted["cells"]
        if cell["cell_type"] == "code" and cell["metadata"].get("nbgrader", {}).get("solution")
    )
    stub["source"] = "".join(stub["source"]).replace("raise NotImplementedError()", solution_line)
    path.write_text(json.dumps(planted, indent=1))

    failed = cli("--course", str(course_copy.root), "check")
    assert failed.returncode == 1
    assert f"holds solution code: {solution_line!r}" in failed.stdout
    assert "is stale" in failed.stdout


def test_reference_findings_name_a_test_cell_whose_checks_record_nothing(course_copy):
    assignment_id = course_copy.assignment_ids()[0]
    path = course_copy.reference_notebook(assignment_id)
    stored = read_notebook(path)
    assert reference_findings(course_copy, assignment_id) == []
    tests = next(cell for cell in stored.cells if is_autograder_tests(cell))
    tests.outputs = [o for o in tests.outputs if o.output_type != "display_data"]
    nbformat.write(stored, path)
    assert reference_findings(course_copy, assignment_id) == [
        f"notebooks/{assignment_id}.ipynb: test cell {grade_id(tests)} records no check (use the helpers in "
        "checks.py), so the verdict outside the kernel cannot judge it"
    ]


def test_source_findings_name_a_raising_cell_whose_marker_and_tag_disagree():
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell("# NBVAL_RAISES_EXCEPTION\ntorch.zeros(2).view(3)"),
        nbformat.v4.new_code_cell("torch.zeros(2).view(3)", metadata={"tags": ["raises-exception"]}),
        nbformat.v4.new_code_cell("# NBVAL_RAISES_EXCEPTION\n1 / 0", metadata={"tags": ["raises-exception"]}),
    ]
    assert source_findings(notebook) == [
        "cell 0 is marked NBVAL_RAISES_EXCEPTION but not tagged raises-exception (Run All stops there)",
        "cell 1 is tagged raises-exception but not marked NBVAL_RAISES_EXCEPTION for the student",
    ]


def test_every_cell_that_raises_on_purpose_is_tagged_in_source_release_and_notebooks(course_copy):
    for assignment_id in course_copy.assignment_ids():
        reference = read_notebook(course_copy.reference_notebook(assignment_id))
        raising = [i for i, c in enumerate(reference.cells) if any(o.output_type == "error" for o in c.get("outputs", []))]
        assert raising, assignment_id
        for notebook in (reference, *map(read_notebook, (course_copy.source_notebook(assignment_id), course_copy.release_notebook(assignment_id)))):
            assert [i for i, c in enumerate(notebook.cells) if raises_on_purpose(c)] == raising, assignment_id


def test_reference_findings_name_a_raising_cell_without_the_tag(course_copy):
    assignment_id = course_copy.assignment_ids()[0]
    path = course_copy.reference_notebook(assignment_id)
    stored = read_notebook(path)
    index, cell = next((i, c) for i, c in enumerate(stored.cells) if raises_on_purpose(c))
    cell.metadata["tags"].remove("raises-exception")
    nbformat.write(stored, path)
    assert (
        f"notebooks/{assignment_id}.ipynb: cell {index} raises but is not tagged raises-exception "
        "(Run All would stop there)"
    ) in reference_findings(course_copy, assignment_id)
