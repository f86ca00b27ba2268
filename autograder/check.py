"""Stage ``check``: is the course consistent? Lists findings; no findings means it is.

Findings: release/ or notebooks/ stale against source/ (compared ignoring
cell ids, outputs and execution metadata), a release notebook holding
solution code, hidden tests or their markers, a reference notebook not fully
executed or with stderr, a grade cell without points, repeated grade_ids, a
solution code cell with no autograder-tests cell after it, a solution or
autograder-tests cell without its BEGIN SOLUTION / BEGIN HIDDEN TESTS markers,
and a cell that raises on purpose without the ``raises-exception`` tag
(JupyterLab's Run All, like nbgrader, stops at the first error of an untagged cell).
"""

from __future__ import annotations

import filecmp
import tempfile
from pathlib import Path

import nbformat

from .build import NBVAL_RAISES, generate_release, marked, reference_cells
from .checks import RECORD_VERSION
from .course import (
    CHECKS_MODULE,
    HIDDEN_TEST_MARKERS,
    MARKERS,
    RAISES_TAG,
    SOLUTION_MARKERS,
    Course,
    grade_id,
    is_autograded_answer,
    is_autograder_tests,
    is_grade,
    raises_on_purpose,
    read_notebook,
    regions,
)
from .verdict import cell_records


def check(course: Course) -> list[str]:
    """Return the findings for every assignment of ``course`` (empty when all is well)."""
    findings = []
    for assignment_id in course.assignment_ids():
        source = read_notebook(course.source_notebook(assignment_id))
        findings += [f"source/{assignment_id}: {f}" for f in source_findings(source)]
        findings += release_findings(course, assignment_id, source)
        findings += reference_findings(course, assignment_id)
    return findings


def source_findings(notebook: nbformat.NotebookNode) -> list[str]:
    """Grade cells without points, repeated grade_ids, solution cells with no tests after them,
    cells whose solution or hidden tests are not marked (nbgrader would then release them), and
    cells whose ``# NBVAL_RAISES_EXCEPTION`` marker and ``raises-exception`` tag disagree."""
    findings = []
    seen: dict[str, int] = {}
    for index, cell in enumerate(notebook.cells):
        cell_id = grade_id(cell)
        if cell_id is not None:
            if cell_id in seen:
                findings.append(f"grade_id {cell_id!r} is used by cells {seen[cell_id]} and {index}")
            seen.setdefault(cell_id, index)
        if is_grade(cell):
            points = cell.metadata["nbgrader"].get("points")
            if not isinstance(points, (int, float)) or points <= 0:
                findings.append(f"grade cell {cell_id!r} (cell {index}) has no points")
        if is_autograder_tests(cell) and HIDDEN_TEST_MARKERS[0] not in cell.source:
            findings.append(f"autograder-tests cell {cell_id!r} (cell {index}) has no {HIDDEN_TEST_MARKERS[0]} section")
        if is_autograded_answer(cell) and SOLUTION_MARKERS[0] not in cell.source:
            findings.append(f"solution cell {cell_id!r} (cell {index}) has no {SOLUTION_MARKERS[0]} region")
        if is_autograded_answer(cell):
            following = next((c for c in notebook.cells[index + 1 :] if c.cell_type == "code"), None)
            if following is None or not is_autograder_tests(following):
                findings.append(f"solution cell {cell_id!r} (cell {index}) has no autograder-tests cell after it")
        if marked(cell, NBVAL_RAISES) and not raises_on_purpose(cell):
            findings.append(f"cell {index} is marked {NBVAL_RAISES} but not tagged {RAISES_TAG} (Run All stops there)")
        if raises_on_purpose(cell) and not marked(cell, NBVAL_RAISES):
            findings.append(f"cell {index} is tagged {RAISES_TAG} but not marked {NBVAL_RAISES} for the student")
    return findings


def release_findings(course: Course, assignment_id: str, source: nbformat.NotebookNode) -> list[str]:
    """Staleness against a fresh nbgrader generate_assignment, and leaked solutions or hidden tests."""
    released = course.release / assignment_id
    if not course.release_notebook(assignment_id).exists():
        return [f"release/{assignment_id}: missing; run `python -m autograder build`"]
    findings = []
    release = read_notebook(course.release_notebook(assignment_id))
    findings += [f"release/{assignment_id}: {f}" for f in leak_findings(source, release)]
    with tempfile.TemporaryDirectory(prefix="release-check-") as scratch:
        fresh = generate_release(course, assignment_id, destination=Path(scratch))
        fresh_files = {p.relative_to(fresh) for p in fresh.rglob("*") if p.is_file()}
        release_files = {p.relative_to(released) for p in released.rglob("*") if p.is_file()}
        for name in sorted(fresh_files ^ release_files):
            side = "missing from" if name in fresh_files else "not generated from source into"
            findings.append(f"release/{assignment_id}: {name} is {side} release/ (stale; run build)")
        for name in sorted(fresh_files & release_files):
            if name.suffix == ".ipynb":
                difference = first_difference(read_notebook(fresh / name), read_notebook(released / name))
                if difference:
                    findings.append(f"release/{assignment_id}/{name} is stale ({difference}); run build")
            elif not filecmp.cmp(fresh / name, released / name, shallow=False):
                findings.append(f"release/{assignment_id}/{name} is stale; run build")
    return findings


def leak_findings(source: nbformat.NotebookNode, release: nbformat.NotebookNode) -> list[str]:
    """Markers, solution lines or hidden-test lines of ``source`` found in ``release``.

    A line counts as leaked when it is in a solution or hidden-test region
    of the source and nowhere else in the source (so a line the release is
    meant to show, such as a function's ``def`` line, never counts).
    """
    secret: dict[str, str] = {}
    public_lines = set()
    for cell in source.cells:
        for region, line in regions(cell.source):
            if region is None:
                public_lines.add(line.strip())
            elif line.strip() and not line.strip().startswith("#"):
                secret.setdefault(line.strip(), f"{region} code")
    findings = []
    for index, cell in enumerate(release.cells):
        for line in cell.source.splitlines():
            stripped = line.strip()
            if stripped in MARKERS:
                findings.append(f"cell {index} holds the marker {stripped!r}")
            elif stripped in secret and stripped not in public_lines:
                findings.append(f"cell {index} holds {secret[stripped]}: {stripped!r}")
    return findings


def reference_findings(course: Course, assignment_id: str) -> list[str]:
    """Staleness of notebooks/<id>.ipynb against source/, unexecuted cells, stderr, test cells without records."""
    path = course.reference_notebook(assignment_id)
    where = f"notebooks/{assignment_id}.ipynb"
    if not path.exists():
        return [f"{where}: missing; run `python -m autograder build`"]
    findings = []
    if not (course.notebooks / "checks.py").exists():
        findings.append(f"notebooks/checks.py is missing (a link to {CHECKS_MODULE.name}); run build")
    stored = read_notebook(path)
    difference = first_difference(reference_cells(course, assignment_id), stored, notebook_metadata=False)
    if difference:
        findings.append(f"{where} is stale ({difference}); run build")
    for index, cell in enumerate(stored.cells):
        if cell.cell_type != "code":
            continue
        if cell.get("execution_count") is None:
            findings.append(f"{where}: cell {index} has not been executed")
        if any(o.output_type == "stream" and o.name == "stderr" for o in cell.outputs):
            findings.append(f"{where}: cell {index} has stderr output")
        if any(o.output_type == "error" for o in cell.outputs) and not raises_on_purpose(cell):
            findings.append(f"{where}: cell {index} raises but is not tagged {RAISES_TAG} (Run All would stop there)")
        if is_autograder_tests(cell) and not cell_records(cell):
            findings.append(
                f"{where}: test cell {grade_id(cell)} records no check (use the helpers in checks.py), "
                "so the verdict outside the kernel cannot judge it"
            )
        elif is_autograder_tests(cell) and any(r.get("version") != RECORD_VERSION for r in cell_records(cell)):
            findings.append(f"{where}: test cell {grade_id(cell)} holds old check records; run build")
    return findings


def first_difference(
    expected: nbformat.NotebookNode, actual: nbformat.NotebookNode, *, notebook_metadata: bool = True
) -> str | None:
    """Where two notebooks differ, ignoring cell ids, outputs, execution counts and execution metadata.

    Returns a short description of the first difference, or None.
    """
    if notebook_metadata and expected.metadata != actual.metadata:
        return "notebook metadata differs"
    if len(expected.cells) != len(actual.cells):
        return f"{len(actual.cells)} cells instead of {len(expected.cells)}"
    for index, (want, have) in enumerate(zip(expected.cells, actual.cells)):
        if want.cell_type != have.cell_type:
            return f"cell {index} is {have.cell_type} instead of {want.cell_type}"
        if want.source != have.source:
            return f"cell {index} source differs"
        if _metadata(want) != _metadata(have):
            return f"cell {index} metadata differs"
    return None


def _metadata(cell: nbformat.NotebookNode) -> dict:
    return {key: value for key, value in cell.metadata.items() if key != "execution"}
