"""Mutation testing of the reference solutions (autograder/authoring/mutants.py): the mutator's operators, the
reviewed list of equivalent mutants, and one assignment's table run for real (01_tensors: every mutant killed or
listed)."""

from __future__ import annotations

import ast

import pytest

from autograder.course import ROOT, Course, grade_id, read_notebook
from autograder.authoring.mutants import equivalent_mutants, mutate, run, table, tasks

SOLUTION = '''def scale(x, factor=2):
    """Docstring: never mutated."""
    ### BEGIN SOLUTION
    if x.numel() < 1 and not x.is_floating_point():
        raise ValueError(f"empty: {x.numel() + 1}")
    y = torch.zeros(3, dtype=torch.float32, device=x.device)
    y.add_(x.sum(dim=-1, keepdim=True) * factor)
    return y.view(3, 1).contiguous()
    ### END SOLUTION
'''


@pytest.fixture(scope="module")
def mutants_of_solution():
    return {mutant.id: mutant for mutant in mutate(SOLUTION)}


@pytest.mark.parametrize(
    "mutant_id, changed_line",
    [
        ("arithmetic: x.sum(dim=-1, keepdim=True) * factor -> x.sum(dim=-1, keepdim=True) / factor",
         "y.add_(x.sum(dim=-1, keepdim=True) / factor)"),
        ("comparison: x.numel() < 1 -> x.numel() <= 1", "if x.numel() <= 1 and (not x.is_floating_point()):"),
        ("boolean: x.numel() < 1 and (not x.is_floating_point()) -> x.numel() < 1 or not x.is_floating_point()",
         "if x.numel() < 1 or not x.is_floating_point():"),
        ("not: x.numel() < 1 and (not x.is_floating_point()) -> x.numel() < 1 and x.is_floating_point()",
         "if x.numel() < 1 and x.is_floating_point():"),
        ("negation: x.sum(dim=-1, keepdim=True) -> x.sum(dim=1, keepdim=True)", "y.add_(x.sum(dim=1, keepdim=True) * factor)"),
        ("constant: x.sum(dim=-1, keepdim=True) -> x.sum(dim=-1, keepdim=False)", "y.add_(x.sum(dim=-1, keepdim=False) * factor)"),
        ("constant: x.numel() < 1 -> x.numel() < 2", "if x.numel() < 2 and (not x.is_floating_point()):"),
        ("dtype: torch.zeros(3, dtype=torch.float32, device=x.device) -> torch.zeros(3, dtype=torch.float64, device=x.device)",
         "y = torch.zeros(3, dtype=torch.float64, device=x.device)"),
        ("in-place: y.add_(x.sum(dim=-1, keepdim=True) * factor) -> y.add(x.sum(dim=-1, keepdim=True) * factor)",
         "y.add(x.sum(dim=-1, keepdim=True) * factor)"),
        ("method: y.view(3, 1) -> y.reshape(3, 1)", "return y.reshape(3, 1).contiguous()"),
        ("unwrap call: y.view(3, 1).contiguous() -> y.view(3, 1)", "return y.view(3, 1)"),
        ("drop keyword: torch.zeros(3, dtype=torch.float32, device=x.device) -> torch.zeros(3, dtype=torch.float32)",
         "y = torch.zeros(3, dtype=torch.float32)"),
        ("swap arguments: y.view(3, 1) -> y.view(1, 3)", "return y.view(1, 3).contiguous()"),
        ("return input: return y.view(3, 1).contiguous() -> return x", "return x"),
        ("remove statement: raise ValueError(f'empty: {x.numel() + 1}') -> pass", "pass"),
    ],
)
def test_each_operator_makes_the_mutant_its_id_names(mutants_of_solution, mutant_id, changed_line):
    """The id says the change, and the mutated cell holds exactly that change (the line as ast.unparse writes it)."""
    assert mutant_id in mutants_of_solution, sorted(mutants_of_solution)
    mutant = mutants_of_solution[mutant_id]
    original = ast.unparse(ast.parse(SOLUTION)).splitlines()
    changed = [line.strip() for line in mutant.source.splitlines() if line not in original]
    assert changed == [changed_line]


def test_mutants_leave_the_docstring_the_signature_and_messages_alone(mutants_of_solution):
    ids = list(mutants_of_solution)
    assert len(ids) == len(set(ids))
    for mutant in mutants_of_solution.values():
        function = ast.parse(mutant.source).body[0]
        assert (function.name, [a.arg for a in function.args.args]) == ("scale", ["x", "factor"])
        assert ast.get_docstring(function) == "Docstring: never mutated."
        assert "f'empty: {x.numel() + 1}'" in mutant.source or mutant.operator == "remove statement"
        assert "factor=2" in mutant.source  # a default argument is outside the solution markers


def test_every_listed_equivalent_mutant_is_still_a_mutant_of_its_task():
    """The list cannot go stale silently: each id names a mutant of the current solution cell (a run also reports
    a listed mutant that the tests now kill)."""
    course = Course(ROOT)
    listed = equivalent_mutants()
    cells = {}
    for assignment_id in course.assignment_ids():
        notebook = read_notebook(course.source_notebook(assignment_id))
        cells.update({grade_id(notebook.cells[answer]): notebook.cells[answer].source for answer, _ in tasks(course, assignment_id)})
    assert set(listed) <= set(cells)
    for task, entries in listed.items():
        ids = {mutant.id for mutant in mutate(cells[task])}
        assert not set(entries) - ids, f"{task}: listed but no longer mutants: {sorted(set(entries) - ids)}"


@pytest.fixture(scope="module")
def tensors_mutation_table():
    return run(Course(ROOT), selection=["01_tensors"])


def test_no_mutant_of_01_tensors_survives_unless_listed_as_equivalent(tensors_mutation_table):
    results = tensors_mutation_table
    assert [r.task for r in results] == [
        "task_1_1_one_hot_solution",
        "task_2_1_center_crop_solution",
        "task_2_2_zero_negatives_solution",
        "task_3_1_hwc_to_chw_solution",
        "task_4_1_numpy_to_tensor_solution",
        "task_4_2_to_numpy_solution",
        "task_5_1_compact_solution",
        "task_6_1_standardize_rows_solution",
        "task_6_2_collate_solution",
        "knowledge_check_answers",
    ]
    assert all(r.tests for r in results)
    report = table(results)
    assert "SURVIVED" not in report and "STALE" not in report, report
    assert sum(r.count("killed", "killed by the verdict") for r in results) > 100
    assert sum(r.count("equivalent") for r in results) == sum(len(equivalent_mutants().get(r.task, {})) for r in results)


def test_a_survivor_not_listed_and_a_stale_listing_are_reported():
    """One task, with a made-up equivalent list: the real equivalent mutant, not listed, survives; a listed mutant
    the tests kill, and a listed id that is no mutant, are stale; so the command would exit 1. The task is named by
    its test cell's grade_id, as grades.csv names it (tests/test_authoring.py names one by its solution's)."""
    killed = "in-place: x.masked_fill_(x < 0, 0) -> x.masked_fill(x < 0, 0)"
    listing = {"task_2_2_zero_negatives_solution": {killed: "wrongly listed", "constant: no such mutant": "stale"}}
    (result,) = run(Course(ROOT), selection=["task_2_2_zero_negatives"], equivalent=listing)
    assert (result.assignment_id, result.tests) == ("01_tensors", ["task_2_2_zero_negatives"])
    assert [o.mutant.id for o in result.survivors] == ["comparison: x < 0 -> x <= 0"]
    assert result.stale == [
        f"{killed} (listed as equivalent, but killed by the verdict)",  # its group ends quietly in the kernel
        "constant: no such mutant (listed as equivalent, no such mutant)",
    ]
    assert result.count("killed", "killed by the verdict") == len(result.outcomes) - 1
    report = table([result])
    assert "SURVIVED task_2_2_zero_negatives_solution: comparison: x < 0 -> x <= 0" in report
    assert f"STALE task_2_2_zero_negatives_solution: {killed}" in report
