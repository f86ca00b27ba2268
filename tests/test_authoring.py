"""docs/authoring.md's worked example, step by step, on a copy of the course: the cells, the opening's counts,
the sample answers and the commands are read from the guide itself.

The copy's tests/submissions/01_tensors.toml holds the example's sample answers only (the course's own are
graded by tests/test_samples_graded.py), so that ``demo --all 01_tensors`` grades seven notebooks, not forty.
"""

import json
import re
import shlex

import nbformat

from autograder.course import ROOT, grade_id, read_notebook

GUIDE = ROOT / "docs" / "authoring.md"
ASSIGNMENT = "01_tensors"
AFTER = "task_3_1_hwc_to_chw"
COMMAND = [".venv/bin/python", "-m", "autograder"]


def example(name: str) -> str:
    """The fenced block after ``<!-- worked example: NAME -->`` in the guide."""
    found = re.search(rf"<!-- worked example: {name} -->\n```\w*\n(.*?)```", GUIDE.read_text(), re.DOTALL)
    assert found, f"docs/authoring.md has no worked example block {name!r}"
    return found.group(1)


def test_the_authoring_guides_worked_example_builds_checks_and_grades_as_it_says(course_copy, cli):
    # 1. The cells, after the test cell the guide names.
    assert f"(`{AFTER}`)" in GUIDE.read_text()
    path = course_copy.source_notebook(ASSIGNMENT)
    source = read_notebook(path)
    after = next(index for index, cell in enumerate(source.cells) if grade_id(cell) == AFTER)
    solution = nbformat.v4.new_code_cell(example("solution").rstrip("\n"))
    solution.metadata["nbgrader"] = json.loads(example("solution metadata"))
    tests = nbformat.v4.new_code_cell(example("tests").rstrip("\n"))
    tests.metadata["nbgrader"] = json.loads(example("tests metadata"))
    heading = nbformat.v4.new_markdown_cell(example("heading").rstrip("\n"))
    source.cells[after + 1 : after + 1] = [heading, solution, tests]
    # 2. The opening.
    for line in example("opening").splitlines():
        old, new = line.split(" -> ")
        assert old in source.cells[0].source
        source.cells[0].source = source.cells[0].source.replace(old, new)
    nbformat.write(source, path)
    # 3. The sample answers.
    samples = course_copy.root / "tests" / "submissions" / f"{ASSIGNMENT}.toml"
    samples.parent.mkdir(parents=True)
    samples.write_text(example("samples"))
    # 4. The commands, in order.
    outputs = []
    for line in example("commands").splitlines():
        words = shlex.split(line)
        assert words[:3] == COMMAND, line
        process = cli("--course", str(course_copy.root), *words[3:])
        assert process.returncode == 0, f"{line}\n{process.stdout}\n{process.stderr}"
        outputs.append(process.stdout)
    built, checked, demo, mutated = outputs

    assert f"wrote release/{ASSIGNMENT}" in built
    release = read_notebook(course_copy.release_notebook(ASSIGNMENT))
    stub = next(cell for cell in release.cells if grade_id(cell) == "task_3_2_add_batch_dim_solution")
    assert "raise NotImplementedError()" in stub.source and "unsqueeze" not in stub.source
    assert "check passed" in checked
    header, row = [line for line in demo.splitlines() if line.startswith(("assignment", ASSIGNMENT))][:2]
    cells = dict(zip(re.split(r"\s{2,}", header.strip()), re.split(r"\s{2,}", row.strip())))
    assert (cells["wrong answers caught"], cells["valid alternatives kept"]) == ("3/3", "2/2"), demo
    assert "all sample submissions got their expected grades" in demo
    (total,) = [line.split() for line in mutated.splitlines() if line.startswith(ASSIGNMENT)]
    assert int(total[-4]) > 0 and total[-2] == "0", mutated  # killed, survived
