"""`python -m autograder check`: it passes on the course, and finds what it promises to find."""

import json

import nbformat

from autograder.pipeline.reference import reference_problems
from autograder.authoring.check import (
    grade_id_findings,
    hidden_oracle_findings,
    leak_findings,
    reference_findings,
    source_findings,
    stated_count_findings,
)
from autograder.cli import main
from autograder.course import grade_id, is_autograder_tests, raises_on_purpose, read_notebook, task_headings


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
    hidden = "\n### BEGIN HIDDEN TESTS\ncheck_equal(f(2), label='f(2)')\n### END HIDDEN TESTS"
    notebook.cells[1].source += hidden
    notebook.cells[4].source += hidden
    assert source_findings(notebook) == [
        "grade cell 'f_tests' (cell 2) has no points",
        "solution cell 'g_solution' (cell 3) has no autograder-tests cell after it",
        "grade_id 'f_tests' is used by cell 2 and cell 5: nbgrader refuses it",
        "solution cell 'h_solution' (cell 6) has no ### BEGIN SOLUTION region",
        "autograder-tests cell 'h_tests' (cell 7) has no ### BEGIN HIDDEN TESTS section",
    ]


def test_hidden_tests_that_hand_the_kernel_an_expected_value_are_named_with_their_line():
    """After the marker no expected-taking check gets an expected value, and no name is left unread (a leftover
    expected value, its oracle function, or an object only written into); the visible tests keep theirs."""
    source = "\n".join([
        "check_equal(f(1), 2, label='visible, with its expected value')",  # 1
        "### BEGIN HIDDEN TESTS",
        "x = torch.arange(3)",
        "check_equal(f(x), label='f(x)')",
        "check_close(f(x), x + 1, label='f(x) close')",  # 5: positional
        "check_shape(f(x), expected=(3,), label='f(x).shape')",  # 6: keyword
        "check_dtype(*pair, label='unpacked')",  # 7: unpacked
        "expected = x + 1",  # 8: never read
        "canvas = torch.zeros(3)",  # 9: only written into
        "canvas[1] = canvas[0] + 1",
        "def oracle(t):",  # 11: never called
        "    return t + 1",
        "class Fake:",
        "    shape = (3,)",  # a class's attributes are read through it
        "for _ in range(2):",
        "    check_device(f(Fake()), label='device')",
        "### END HIDDEN TESTS",
    ])
    assert [line for line, _ in hidden_oracle_findings(source)] == [5, 6, 7, 8, 9, 11]
    problems = dict(hidden_oracle_findings(source))
    assert problems[5] == "check_close is given an expected value: a hidden check takes none"
    assert problems[8] == "'expected' is assigned and never read: a hidden test keeps no expected value"
    assert hidden_oracle_findings(source.split("### BEGIN HIDDEN TESTS")[0]) == []


def test_check_fails_on_a_hidden_check_given_an_expected_value_or_a_leftover_one(course_copy, cli):
    """The course passes (``test_check_passes_on_the_course...``); one expected argument or one unread
    ``expected = ...`` planted in a hidden test fails it, naming the notebook, the cell's grade_id and the line."""
    path = course_copy.source_notebook("01_tensors")
    source = read_notebook(path)
    cell = next(cell for cell in source.cells if is_autograder_tests(cell))
    hidden = "### BEGIN HIDDEN TESTS\n"
    calls = [line for line in cell.source.split(hidden)[1].splitlines() if line.lstrip().startswith("check_equal(")]
    call = next(line for line in calls if "), label=" in line)
    indent = call[: len(call) - len(call.lstrip())]  # a check inside a `with check_group(...)` block
    planted = call.replace("), label=", "), torch.zeros(1), label=", 1)
    cell.source = cell.source.replace(call, f"{planted}\n{indent}expected = torch.zeros(1)", 1)
    nbformat.write(source, path)
    line = cell.source.splitlines().index(planted) + 1
    where = f"source/01_tensors: autograder-tests cell {grade_id(cell)!r} (cell {source.cells.index(cell) + 1}"

    checked = cli("--course", str(course_copy.root), "check", "01_tensors")
    assert checked.returncode == 1, checked.stdout + checked.stderr
    findings = [finding for finding in checked.stdout.splitlines() if finding.startswith(where)]
    assert [finding.rsplit(", line ", 1)[1] for finding in findings] == [
        f"{line}: check_equal is given an expected value: a hidden check takes none",
        f"{line + 1}: 'expected' is assigned and never read: a hidden test keeps no expected value",
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
        "cell 1 holds solution code: 'return x + 1'",
        "cell 2 holds hidden test code: 'secret()'",
        "cell 2 holds the marker '### END HIDDEN TESTS'",
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

    failed = cli("--course", str(course_copy.root), "check", assignment_id)  # the assignment planted in
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
        "cell 1 is marked NBVAL_RAISES_EXCEPTION but not tagged raises-exception (Run All stops there)",
        "cell 2 is tagged raises-exception but not marked NBVAL_RAISES_EXCEPTION for the student",
    ]


def test_build_names_a_reference_cell_that_writes_to_stderr_counting_cells_from_1():
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_markdown_cell("# A"), nbformat.v4.new_code_cell("warn()", id="warns")]
    notebook.cells[1].outputs = [nbformat.v4.new_output("stream", name="stderr", text="UserWarning: ...")]
    assert reference_problems(notebook) == [
        "cell 2 (id warns) wrote to stderr (nbgrader scores such a test cell 0; nbval compares it)"
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
    task = task_headings(stored)[index]
    place = f"cell {index + 1}" + (f", under {task.title!r}" if task else "")  # as an author counts, from 1
    assert (
        f"notebooks/{assignment_id}.ipynb: {place} raises but is not tagged raises-exception "
        "(Run All would stop there)"
    ) in reference_findings(course_copy, assignment_id)


def task_notebook(opening, *cells):
    """A notebook opening with ``opening`` (markdown) and then ``cells``."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_markdown_cell(opening), *cells]
    return notebook


HIDDEN = "\n### BEGIN HIDDEN TESTS\ncheck_equal(f(2), 3, label='f(2)')\n### END HIDDEN TESTS"


def test_source_findings_name_a_test_cell_that_ends_in_a_value_nbgrader_would_read_as_partial_credit():
    def helper(body):
        return nbformat.v4.new_code_cell(f"def {body}")

    notebook = task_notebook(
        "# A",
        helper("silent(x):\n    check_equal(x, 1, label='x')"),
        helper("loud(x):\n    return x + 1"),
        make_solution_cell("f_solution"),
        make_tests_cell("ends_in_a_value", source="r = f(1)" + HIDDEN + "\nr.sum()"),
        make_tests_cell("ends_in_a_check", source="r = f(1)" + HIDDEN),
        make_tests_cell("ends_in_a_silenced_value", source="r = f(1)" + HIDDEN + "\nr;  # silenced\n# the end"),
        make_tests_cell("ends_in_a_silent_helper", source="r = f(1)" + HIDDEN + "\nsilent(r)"),
        make_tests_cell("ends_in_a_helper_with_a_value", source="r = f(1)" + HIDDEN + "\nloud(r)"),
        make_tests_cell("ends_in_a_print", source="%time r = f(1)" + HIDDEN + "\nprint(r)"),
    )
    findings = [f for f in source_findings(notebook) if "bare expression" in f]
    assert findings == [
        f"autograder-tests cell {name!r} (cell {index}) ends in the bare expression {last!r}: nbgrader reads a "
        "number shown as the cell's value as partial credit (assign it, or end with a check)"
        for name, index, last in [("ends_in_a_value", 5, "r.sum()"), ("ends_in_a_helper_with_a_value", 9, "loud(r)")]
    ]


def test_source_findings_name_grade_ids_not_derived_from_the_task_heading():
    notebook = task_notebook(
        "# A",
        nbformat.v4.new_markdown_cell("### Task 2.3 - contiguous strides\n\nWrite `f`."),
        make_solution_cell("cell-9f8e7d6c5b4a3f2e"),
        make_tests_cell("task_2_3_contiguous_strides", source="check_equal(f(1), 2, label='f(1)')" + HIDDEN),
        nbformat.v4.new_markdown_cell("#### Hint\n\n```\n# Task 9.9 - not a heading\n```"),
        make_tests_cell("task_2_30_more", source="check_equal(f(1), 2, label='f(1)')" + HIDDEN),
        nbformat.v4.new_markdown_cell("## Knowledge check"),
        make_tests_cell("knowledge_check_q1", source="check_equal(answer_q1, 'a', label='q1')" + HIDDEN),
        make_tests_cell("cell-0123456789abcdef", source="check_equal(answer_q2, 'a', label='q2')" + HIDDEN),
    )
    assert grade_id_findings(notebook) == [
        "grade_id 'cell-9f8e7d6c5b4a3f2e' (cell 3) is not derived from its heading 'Task 2.3 - contiguous strides': "
        "name it task_2_3_<what it does>",
        "grade_id 'task_2_30_more' (cell 6) is not derived from its heading 'Task 2.3 - contiguous strides': "
        "name it task_2_3_<what it does>",
        "grade_id 'cell-0123456789abcdef' (cell 9) is JupyterLab's made-up id: name it after what it grades",
    ]


def test_source_findings_name_an_opening_whose_task_count_or_points_disagree_with_the_grade_cells():
    def task(number, points=2):
        return [
            nbformat.v4.new_markdown_cell(f"### Task {number} - something\n\nWrite `f`."),
            make_solution_cell(f"task_{number.replace('.', '_')}_f_solution"),
            make_tests_cell(
                f"task_{number.replace('.', '_')}_f", points=points, source="check_equal(f(1), 2, label='f')" + HIDDEN
            ),
        ]

    opening = "# A\n\n**How this notebook is graded**\n- There are two tasks, 2 points each. 4 points in all."
    assert stated_count_findings(task_notebook(opening, *task("1.1"), *task("1.2"))) == []
    added = task_notebook(opening, *task("1.1"), *task("1.2"), *task("2.1", points=3))
    assert stated_count_findings(added) == [
        "the opening says 'There are two tasks', but 3 task(s) have test cells",
        "the opening says '4 points in all', but the grade cells give 7 points",
    ]
    assert stated_count_findings(task_notebook("# A\n\nNo counts here.", *task("1.1"))) == []


def built_files(course):
    """Every file of release/ and notebooks/ -> its bytes."""
    return {p: p.read_bytes() for p in [*course.release.rglob("*"), *course.notebooks.rglob("*")] if p.is_file()}


def test_check_of_one_assignment_names_a_repeated_grade_id_and_build_keeps_the_release(course_copy, cli):
    course = str(course_copy.root)
    source = read_notebook(course_copy.source_notebook("01_tensors"))
    tests = [cell for cell in source.cells if is_autograder_tests(cell)]
    repeated = grade_id(tests[0])
    tests[1].metadata["nbgrader"]["grade_id"] = repeated
    nbformat.write(source, course_copy.source_notebook("01_tensors"))
    cells = [index for index, cell in enumerate(source.cells) if grade_id(cell) == repeated]
    second_task = task_headings(source)[cells[1]].title
    before = built_files(course_copy)

    checked = cli("--course", course, "check", "01_tensors")
    assert checked.returncode == 1, checked.stdout + checked.stderr
    lines = checked.stdout.splitlines()
    assert lines[0] == (
        f"source/01_tensors: grade_id {repeated!r} is used by cell {cells[0] + 1} and cell {cells[1] + 1}, "
        f"under {second_task!r}: nbgrader refuses it"
    )
    assert any(line.startswith("release/01_tensors: not compared: nbgrader generate_assignment") for line in lines)
    assert f"ValidationError: Duplicate grade id: {repeated}" in checked.stdout
    # notebooks/ is stale against the edited source, but build would refuse it: no finding says to run build
    assert "notebooks/01_tensors.ipynb is stale" in checked.stdout and "build refuses this source" in checked.stdout
    assert "run build" not in checked.stdout and "run `python -m autograder build`" not in checked.stdout
    others = [other for other in course_copy.assignment_ids() if other != "01_tensors"]
    assert not [other for other in others if other in checked.stdout]  # only the assignment asked for

    built = cli("--course", course, "build", "01_tensors")
    assert built.returncode == 2
    assert f"Duplicate grade id: {repeated}" in built.stderr
    assert "Traceback" not in built.stderr  # nbgrader's cause, not the tail of its log
    assert built_files(course_copy) == before
    assert not list(course_copy.root.glob(".build-*"))



def test_check_refuses_an_assignment_the_course_does_not_have(course_copy, capsys):
    assert main(["--course", str(course_copy.root), "check", "01_tensor"]) == 2
    assert "no assignment 01_tensor in" in capsys.readouterr().err


def test_check_names_groups_whose_points_do_not_sum_to_the_cells_or_that_raise_on_the_reference():
    from autograder.authoring.check import group_problem
    from autograder.kernel import checks

    def executed(points, *groups):
        checks.records.clear()
        for name, group_points, error in groups:
            with checks.check_group(name, points=group_points):
                checks.check_equal(1, 1, label=name)
                if error:
                    raise error("on the reference")
        cell = make_tests_cell("task_1_1_f", points=points)
        cell.outputs = [nbformat.v4.new_output("display_data", data={checks.RECORD_MIME_TYPE: list(checks.records)})]
        checks.records.clear()
        return cell

    assert group_problem(executed(3, ("main behaviour", 2, None), ("edge cases", 1, None))) is None
    assert group_problem(executed(1)) is None
    assert group_problem(executed(4, ("main behaviour", 2, None), ("edge cases", 1, None))) == (
        "has groups whose points ('main behaviour' 2, 'edge cases' 1) sum to 3, not the cell's 4 points"
    )
    assert group_problem(executed(2, ("main behaviour", 1, None), ("main behaviour", 2, None))) == (
        "declares group 'main behaviour' with different points"
    )
    assert group_problem(executed(2, ("main behaviour", 2, KeyError))) == (
        "raises KeyError in group 'main behaviour' on the reference"
    )
