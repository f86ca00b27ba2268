"""Structure before execution: each way a submitted notebook can be broken or tampered with, repaired fairly."""

import copy
import json

import nbformat
import pytest

from autograder.course import ROOT, grade_id, is_autograder_tests, is_solution, read_notebook
from autograder.pipeline.structure import normalise, normalise_file
from hostile.malformed_notebooks import MALFORMED

RELEASE = read_notebook(ROOT / "release" / "01_tensors" / "01_tensors.ipynb")
SOLUTION = next(c for c in RELEASE.cells if is_solution(c) and c.cell_type == "code")
TESTS = next(c for c in RELEASE.cells if is_autograder_tests(c))
WRITTEN = next(c for c in RELEASE.cells if is_solution(c) and c.cell_type == "markdown")
ANSWER = "def one_hot(labels, num_classes):\n    return 'my answer'\n"


def student_notebook():
    """A student's copy: the release with one solution filled in and some output stored."""
    notebook = copy.deepcopy(RELEASE)
    cell = find(notebook, grade_id(SOLUTION))
    cell.source = ANSWER
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="ran\n")]
    cell.execution_count = 3
    return notebook


def find(notebook, name):
    return next(c for c in notebook.cells if grade_id(c) == name)


def normalised(notebook):
    return normalise(nbformat.writes(notebook).encode(), release=RELEASE)


def sources(notebook):
    return [(c.cell_type, c.source) for c in notebook.cells]


def expected_sources(**replaced):
    return [(c.cell_type, replaced.get(grade_id(c), c.source)) for c in RELEASE.cells]


def test_an_honest_submission_keeps_its_answers_and_loses_only_stored_outputs():
    result = normalised(student_notebook())
    assert result.readable and result.repairs == []
    assert sources(result.notebook) == expected_sources(**{grade_id(SOLUTION): ANSWER})
    assert all(c.outputs == [] and c.execution_count is None for c in result.notebook.cells if c.cell_type == "code")


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"", "the file is empty"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b'{"cells": [', "not valid JSON"),
        (b"[1, 2]", "not a Jupyter notebook"),
        (b'{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": "none"}', ""),
    ],
    ids=["empty_file", "not_utf8", "truncated_json", "json_list", "cells_not_a_list"],
)
def test_an_unreadable_file_is_graded_as_the_blank_release_with_the_reason(raw, reason):
    result = normalise(raw, release=RELEASE)
    assert not result.readable
    assert result.repairs[0].startswith("not a readable notebook") and reason in result.repairs[0]
    assert sources(result.notebook) == expected_sources()
    assert result.notebook.metadata["autograder"]["unreadable"] == result.repairs[0]  # for the feedback page


def test_an_nbformat_3_notebook_is_converted_and_keeps_its_answer():
    cell = {"cell_type": "code", "input": "x = 1", "language": "python", "outputs": [], "metadata": {}}
    v3 = {"nbformat": 3, "nbformat_minor": 0, "metadata": {}, "worksheets": [{"cells": [cell], "metadata": {}}]}
    result = normalise(json.dumps(v3).encode(), release=RELEASE)
    assert result.readable
    assert "converted from nbformat 3 to nbformat 4" in result.repairs
    assert ("code", "x = 1") in sources(result.notebook)


def test_an_edited_test_cell_is_restored():
    notebook = student_notebook()
    find(notebook, grade_id(TESTS)).source = "pass"
    result = normalised(notebook)
    assert sources(result.notebook) == expected_sources(**{grade_id(SOLUTION): ANSWER})
    assert result.repairs == [f"{grade_id(TESTS)} was edited: the release's version is graded"]


def test_deleted_cells_come_back_and_a_deleted_solution_is_graded_as_its_stub():
    notebook = student_notebook()
    notebook.cells = [c for c in notebook.cells if grade_id(c) not in (grade_id(TESTS), grade_id(SOLUTION))]
    result = normalised(notebook)
    assert sources(result.notebook) == expected_sources()
    assert f"cell {grade_id(SOLUTION)!r} was deleted: its empty stub is graded" in result.repairs
    assert f"cell {grade_id(TESTS)!r} was deleted: the release's is graded" in result.repairs


def test_added_cells_keep_their_place_and_lose_metadata_that_changes_execution():
    notebook = student_notebook()
    helper = nbformat.v4.new_code_cell(
        "def helper():\n    return 1",
        metadata={"tags": ["skip-execution"], "nbgrader": {"grade": True, "grade_id": "mine", "points": 99}},
    )
    position = notebook.cells.index(find(notebook, grade_id(SOLUTION)))
    notebook.cells.insert(position, helper)
    result = normalised(notebook)
    index = next(i for i, c in enumerate(result.notebook.cells) if c.source == helper.source)
    assert grade_id(result.notebook.cells[index + 1]) == grade_id(SOLUTION)
    assert result.notebook.cells[index].metadata == {}
    assert "unknown grade_id 'mine' (changed or invented): the cell runs as an added cell" in result.repairs
    assert "added cell: execution tags ['skip-execution'] removed" in result.repairs


def test_a_duplicated_grade_cell_runs_as_an_added_cell_after_the_graded_first_copy():
    notebook = student_notebook()
    solution = find(notebook, grade_id(SOLUTION))
    second = copy.deepcopy(solution)
    second.id = "my-copy"
    second.source = "def one_hot(labels, num_classes):\n    return 'second try'\n"
    notebook.cells.insert(notebook.cells.index(solution) + 1, second)
    result = normalised(notebook)
    graded = [c for c in result.notebook.cells if grade_id(c) == grade_id(SOLUTION)]
    assert [c.source for c in graded] == [ANSWER]
    assert second.source in [c.source for c in result.notebook.cells]
    assert f"grade cell {grade_id(SOLUTION)!r} appears more than once: the first copy is graded" in result.repairs


def test_retyped_cells_metadata_kernelspec_and_order_come_from_the_release():
    notebook = student_notebook()
    tests = find(notebook, grade_id(TESTS))
    tests.metadata["nbgrader"]["points"] = 100
    tests.metadata["tags"] = ["raises-exception"]
    written = find(notebook, grade_id(WRITTEN))
    written_index = notebook.cells.index(written)
    notebook.cells[written_index] = nbformat.v4.new_code_cell(
        "My written answer.", metadata=written.metadata, id=written.id
    )
    solution = find(notebook, grade_id(SOLUTION))
    notebook.cells.remove(solution)
    notebook.cells.append(solution)
    notebook.metadata["kernelspec"] = {"name": "evil", "display_name": "evil", "language": "python"}
    result = normalised(notebook)
    assert sources(result.notebook) == expected_sources(
        **{grade_id(SOLUTION): ANSWER, grade_id(WRITTEN): "My written answer."}
    )
    assert [c.metadata for c in result.notebook.cells] == [c.metadata for c in RELEASE.cells]
    assert result.notebook.metadata == RELEASE.metadata
    assert set(result.repairs) == {
        f"{grade_id(TESTS)}: changed nbgrader metadata or execution tags were reset",
        f"{grade_id(WRITTEN)} was changed from markdown to code: restored",
        "cells were moved: graded in the release's order",
        "notebook metadata kernelspec changed: the release's is used",
    }


def test_the_result_is_a_valid_notebook():
    nbformat.validate(normalised(student_notebook()).notebook)
    json.dumps(normalised(student_notebook()).notebook)


def test_code_that_touches_the_grading_machinery_is_quoted_for_review():
    notebook = student_notebook()
    find(notebook, grade_id(SOLUTION)).source = "import checks\n" + ANSWER
    result = normalised(notebook)
    assert result.repairs == []
    assert len(result.review) == 1 and result.review[0].endswith(": line 1: imports the module checks ('import checks')")
    index = next(i for i, cell in enumerate(result.notebook.cells) if grade_id(cell) == grade_id(SOLUTION))
    assert result.review[0].startswith(f"cell {index + 1}: ")  # counted from 1, as the instructor counts them
    assert normalised(student_notebook()).review == []


@pytest.mark.parametrize("field", ["cell_metadata"], ids=["cell_metadata_is_a_list"])
def test_fields_of_the_wrong_json_type_give_the_blank_release_not_a_crash(field):
    data = json.loads(nbformat.writes(student_notebook()))
    if field == "kernelspec":
        data["metadata"]["kernelspec"] = "evil"
    else:
        data["cells"][3]["metadata"] = ["evil"]
    result = normalise(json.dumps(data).encode(), release=RELEASE)
    assert not result.readable and result.repairs[0].startswith("not a readable notebook: ")


def test_a_kernelspec_of_the_wrong_type_is_replaced_and_the_answers_kept():
    data = json.loads(nbformat.writes(student_notebook()))
    data["metadata"]["kernelspec"] = "evil"
    result = normalise(json.dumps(data).encode(), release=RELEASE)
    assert result.readable and result.repairs == ["notebook metadata kernelspec changed: the release's is used"]
    assert sources(result.notebook) == expected_sources(**{grade_id(SOLUTION): ANSWER})


def test_a_demonstration_cell_keeps_the_releases_raises_exception_tag():
    notebook = student_notebook()
    demos = [c for c in notebook.cells if "raises-exception" in c.metadata.get("tags", [])]
    assert demos, "the release tags its demonstration cells"
    demos[0].metadata["tags"] = []
    result = normalised(notebook)
    assert [c.metadata for c in result.notebook.cells] == [c.metadata for c in RELEASE.cells]
    assert f"cell {demos[0].id}: changed nbgrader metadata or execution tags were reset" in result.repairs


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_hostile_file_is_one_invalid_notebook_not_a_crash(name, tmp_path):
    path = tmp_path / "01_tensors.ipynb"
    path.write_bytes(MALFORMED[name](RELEASE))
    result = normalise_file(path, release=RELEASE)
    assert not result.readable and result.repairs[0].startswith("not a readable notebook: ")
    assert sources(result.notebook) == expected_sources()
