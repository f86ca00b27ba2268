"""Stage ``validate``: a student's last check before submitting, with nbgrader's own validator.

``nbgrader validate`` runs the notebook as grading will (``NBGRADER_EXECUTION`` set) and lists the
test cells that fail, but it exits 0 either way (nbgrader issue 1908), cuts every line at 90
characters and does not say why a cell whose checks all pass failed when the cause is text on the
error stream (a warning). This stage runs the same :class:`nbgrader.validator.Validator` and reports
each test cell by its grade_id: passed, or failed with the error's last line or the stderr text. A
multiple-choice question's test cell (:func:`autograder.course.is_multiple_choice`) that passes says its
answer is recorded, not that it passed: its visible tests check only that the answer is one of the
choices, and which choice is right is graded after submission.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbgrader.validator import Validator
from traitlets.config import Config

from ..course import CourseError, grade_id, is_autograder_tests, is_multiple_choice, read_notebook


RECORDED = "your answer is one of the choices; whether it is right is graded after you submit"
"""What the report says of a multiple-choice question whose answer is one of its choices."""


@dataclass
class Validation:
    """What nbgrader's validator found in one notebook.

    ``passed``, ``recorded`` and ``failed`` name test cells by grade_id, in notebook order: ``recorded``
    the multiple-choice questions whose answer is one of the choices (right or wrong is graded after
    submission); ``failed`` maps each to why it failed. ``changed`` lists the test cells whose source the
    student edited (nbgrader then judges nothing else: grading restores them) and ``retyped`` the cells
    whose type changed.
    """

    notebook: Path
    passed: list[str] = field(default_factory=list)
    recorded: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    changed: list[str] = field(default_factory=list)
    retyped: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every test cell passed and no test cell was edited or retyped."""
        return not (self.failed or self.changed or self.retyped)

    def report(self) -> str:
        """The lines a student reads: one per test cell, then the verdict."""
        lines = []
        for name in self.retyped:
            lines.append(f"CHANGED TYPE  {name}: the cell's type was changed; change it back (Edit > Undo)")
        for name in self.changed:
            lines.append(f"EDITED  {name}: this test cell was edited; grading runs the original tests")
        for name in self.passed:
            lines.append(f"pass  {name}")
        for name in self.recorded:
            lines.append(f"recorded  {name}: {RECORDED}")
        for name, reason in self.failed.items():
            lines.append(f"FAIL  {name}: " + reason.replace("\n", "\n        "))
        total = len(self.passed) + len(self.recorded) + len(self.failed)
        passing = len(self.passed) + len(self.recorded)
        answers = f" ({len(self.recorded)} of them record a multiple-choice answer, graded after you submit)"
        counted = f"{passing} of {total}" if not self.ok else f"all {total}"
        ending = "" if self.ok else "; fix the rest before you submit"
        lines.append(f"{self.notebook.name}: {counted} test cells pass{answers if self.recorded else ''}{ending}")
        return "\n".join(lines)


class _Validator(Validator):
    """nbgrader's validator, keeping the notebook it executed (to say why each cell failed)."""

    executed: nbformat.NotebookNode | None = None

    def _preprocess(self, nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
        self.executed = super()._preprocess(nb)
        return self.executed


def validate(path: Path) -> Validation:
    """Execute the notebook at ``path`` with nbgrader's validator (in its own folder, beside ``checks.py``).

    The file is not changed.

    Raises:
        CourseError: ``path`` is not a readable ``.ipynb`` file, or no ``checks.py`` is beside it (every
            test cell imports it: without it each would fail with a ``NameError`` that says nothing).
    """
    if path.suffix != ".ipynb":
        raise CourseError(f"{path} is not a notebook file (.ipynb)")
    path = path.resolve()
    if not (path.parent / "checks.py").is_file():
        raise CourseError(
            f"no checks.py beside {path}: the test cells import it; copy the one of the assignment's "
            "release folder next to the notebook (e.g. release/01_tensors/checks.py)"
        )
    original = read_notebook(path)
    # The kernel's "running over TCP without encryption" warning would alarm a student for nothing.
    validator = _Validator(config=Config({"Execute": {"extra_arguments": ["--IPKernelApp.log_level=ERROR"]}}))
    results = validator.validate(str(path))
    validation = Validation(notebook=path)
    by_source = {cell.source.strip(): cell for cell in original.cells}
    validation.retyped = [_name(by_source.get(r["source"])) for r in results.get("type_changed", [])]
    validation.changed = [_name(by_source.get(r["source"])) for r in results.get("changed", [])]
    if validator.executed is None or validation.changed:
        return validation
    failed = {r["source"]: r["raw_error"] for r in results.get("failed", [])}
    for cell in validator.executed.cells:
        if not is_autograder_tests(cell):
            continue
        if cell.source.strip() in failed:
            validation.failed[grade_id(cell)] = _reason(cell, failed[cell.source.strip()])
        else:
            (validation.recorded if is_multiple_choice(cell) else validation.passed).append(grade_id(cell))
    return validation


def _name(cell: nbformat.NotebookNode | None) -> str:
    if cell is None:
        return "a cell"
    return grade_id(cell) or f"cell {cell.get('id', '?')}"


def _reason(cell: nbformat.NotebookNode, nbgrader_error: str) -> str:
    """Why nbgrader failed ``cell``: the error's type and message, or the stderr text when there was no error."""
    errors = [o for o in cell.outputs if o.output_type == "error"]
    if errors and errors[0].ename == "NotImplementedError":
        return "not answered yet (NotImplementedError): replace `raise NotImplementedError()` with your code"
    if errors:
        return f"{errors[0].ename}: {errors[0].evalue}"
    stderr = "".join(o.text for o in cell.outputs if o.output_type == "stream" and o.name == "stderr").strip()
    if stderr:
        return (
            "every check passed, but the cell wrote to the error stream, and nbgrader fails any test cell "
            "that does (make your code run without warnings):\n" + stderr
        )
    return nbgrader_error

