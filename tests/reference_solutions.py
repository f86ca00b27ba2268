"""The reference solutions of a source notebook as a module, without a kernel.

``load("07_hvp_challenge")`` executes the notebook's setup cell (grade_id
``setup``: imports, seed, ``DEVICE``) and then every autograded answer cell
(the solution cells, markers stripped) in one fresh module namespace, with the
assignment's own ``checks.py`` importable as ``checks``, and returns that
module: ``load(...).hvp_double_backward`` is the reference function. No other
cell runs (no demonstrations, no tests), so loading is cheap. Set
``COURSE_DEVICE=cpu`` first (``tests/run_tests.sh`` does) so that the setup
cell's device choice does not depend on the machine.
"""

import functools
import importlib.util
import sys
import types

from autograder.course import ROOT, grade_id, is_autograded_answer, read_notebook, strip_markers

SETUP_CELL = "setup"
"""The grade_id of each notebook's locked setup cell."""


@functools.cache
def load(assignment_id: str) -> types.ModuleType:
    """The setup cell and reference solution cells of ``source/<assignment_id>/<assignment_id>.ipynb``, executed.

    Raises:
        CourseError: the notebook is missing or unreadable.
        Exception: whatever a cell raises while it is executed.
    """
    folder = ROOT / "source" / assignment_id
    notebook = read_notebook(folder / f"{assignment_id}.ipynb")
    module = types.ModuleType(f"reference_{assignment_id}")
    module.__file__ = str(folder / f"{assignment_id}.ipynb")
    spec = importlib.util.spec_from_file_location("checks", folder / "checks.py")
    checks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(checks)
    saved = sys.modules.get("checks")
    sys.modules["checks"] = checks  # the setup cell's `from checks import ...` gets this assignment's copy
    try:
        for cell in notebook.cells:
            if grade_id(cell) == SETUP_CELL or is_autograded_answer(cell):
                code = compile(strip_markers(cell.source), f"{assignment_id}:{grade_id(cell)}", "exec")
                exec(code, module.__dict__)
    finally:
        if saved is None:
            sys.modules.pop("checks", None)
        else:
            sys.modules["checks"] = saved
    return module


def records_of_tests(assignment_id: str, tests_grade_id: str, *, solution: str | None = None) -> list[dict]:
    """The check records that the autograder-tests cell ``tests_grade_id`` (visible and hidden tests) makes in a copy
    of :func:`load`'s namespace, after ``solution`` (a solution cell's whole source: a sample answer) if given.

    A failed check stops the cell, as in a kernel: the records made up to it are returned; the grader's verdict
    (``verdict.first_mismatch``) then judges them against the reference's.
    """
    module = load(assignment_id)
    notebook = read_notebook(ROOT / "source" / assignment_id / f"{assignment_id}.ipynb")
    cell = next(cell for cell in notebook.cells if grade_id(cell) == tests_grade_id)
    records = module.check_equal.__globals__["records"]
    namespace, start = dict(module.__dict__), len(records)
    if solution is not None:
        exec(compile(solution, f"{assignment_id}:sample", "exec"), namespace)
    try:
        exec(compile(strip_markers(cell.source), f"{assignment_id}:{tests_grade_id}", "exec"), namespace)
    except AssertionError:
        pass
    made = records[start:]
    del records[start:]
    return made
