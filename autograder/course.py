"""The course directory: where things live, and what nbgrader metadata says about cells.

Layout (fixed by the design; see README):
``source/<id>/<id>.ipynb`` instructor notebooks, ``release/<id>/`` student
notebooks, ``notebooks/<id>.ipynb`` executed reference notebooks. nbgrader's
own state (``submitted/``, ``autograded/``, ``feedback/``, ``gradebook.db`` unless the
configuration names another gradebook) lives in the course directory too, git-ignored.
"""

from __future__ import annotations

import ast
import ctypes
import functools
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any
from pathlib import Path

import nbformat
from jupyter_core.paths import jupyter_config_path
from traitlets.config import Config
from traitlets.config.loader import JSONFileConfigLoader, PyFileConfigLoader

ROOT = Path(__file__).resolve().parent.parent
"""The repository root, which is also the course directory."""

CHECKS_MODULE = Path(__file__).resolve().parent / "kernel" / "checks.py"
"""The check helpers: one file, copied (as ``checks.py``) beside every notebook."""

SOLUTION_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")
HIDDEN_TEST_MARKERS = ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")
MARKERS = SOLUTION_MARKERS + HIDDEN_TEST_MARKERS
RAISES_TAG = "raises-exception"
"""Cell tag of a cell that raises on purpose: JupyterLab's Run All, nbclient, nbgrader and nbval go on past it."""


NBGRADER_CONFIG_FILES = ("nbgrader_config.py", "nbgrader_config.json")
"""The configuration files nbgrader reads from each of Jupyter's configuration folders."""


class CourseError(RuntimeError):
    """Something the course needs is missing or broken; the message says what."""


@dataclass(frozen=True)
class Course:
    """A course directory (the repository, or a scratch copy of it)."""

    root: Path

    @property
    def source(self) -> Path:
        return self.root / "source"

    @property
    def release(self) -> Path:
        return self.root / "release"

    @property
    def notebooks(self) -> Path:
        return self.root / "notebooks"

    @property
    def db_url(self) -> str:
        """The gradebook's SQLAlchemy URL: ``CourseDirectory.db_url`` where nbgrader's configuration sets it (the
        course's ``nbgrader_config.py`` over those of Jupyter's configuration folders, as nbgrader reads them; e.g.
        a PostgreSQL database), else ``gradebook.db`` (SQLite) in the course directory.

        Raises:
            traitlets.config.ConfigFileNotFound or the file's own exception: a configuration file cannot be run.
        """
        config, search_path = Config(), list(sys.path)
        try:
            for path in reversed([path for path in self.nbgrader_config_files() if path.is_file()]):
                loader = PyFileConfigLoader if path.suffix == ".py" else JSONFileConfigLoader
                config.merge(loader(path.name, str(path.parent)).load_config())
        finally:
            sys.path[:] = search_path  # the course's file puts its folder first, for nbgrader's own processes
        configured = config.CourseDirectory.get("db_url")
        return configured or f"sqlite:///{self.root / 'gradebook.db'}"

    def assignment_ids(self) -> list[str]:
        """Assignment ids, sorted: every ``source/<id>/`` holding ``<id>.ipynb``.

        Raises:
            CourseError: there is no source/ folder or no assignment in it.
        """
        if not self.source.is_dir():
            raise CourseError(f"{self.source} does not exist: is {self.root} a course directory?")
        ids = sorted(p.name for p in self.source.iterdir() if (p / f"{p.name}.ipynb").is_file())
        if not ids:
            raise CourseError(f"no assignment in {self.source} (expected source/<id>/<id>.ipynb)")
        return ids

    def chosen(self, assignment_ids: list[str] | None) -> list[str]:
        """``assignment_ids`` as given, or all of :meth:`assignment_ids` when None or empty.

        Raises:
            CourseError: one of them is not an assignment of the course (the message lists those that are).
        """
        known = self.assignment_ids()
        unknown = [name for name in assignment_ids or [] if name not in known]
        if unknown:
            raise CourseError(f"no assignment {', '.join(unknown)} in {self.source} (there are: {', '.join(known)})")
        return list(assignment_ids or known)

    def nbgrader_config_files(self) -> list[Path]:
        """The configuration files nbgrader reads (present or not): the course's ``nbgrader_config.py`` and
        :data:`NBGRADER_CONFIG_FILES` in each of Jupyter's configuration folders."""
        configs = [Path(folder) / name for folder in jupyter_config_path() for name in NBGRADER_CONFIG_FILES]
        return [self.root / "nbgrader_config.py", *configs]

    def source_notebook(self, assignment_id: str) -> Path:
        return self.source / assignment_id / f"{assignment_id}.ipynb"

    def release_notebook(self, assignment_id: str) -> Path:
        return self.release / assignment_id / f"{assignment_id}.ipynb"

    def reference_notebook(self, assignment_id: str) -> Path:
        return self.notebooks / f"{assignment_id}.ipynb"


def gradebook_file_missing(db_url: str) -> bool:
    """Whether ``db_url`` names an SQLite file that does not exist (nbgrader creates it, running ``alembic``, when
    it opens it)."""
    return db_url.startswith("sqlite:///") and not Path(db_url.removeprefix("sqlite:///")).exists()


def require_gradebook(course: Course) -> None:
    """Check that the course has been graded into its gradebook, as far as can be told without creating it.

    Raises:
        CourseError: the gradebook is an SQLite file that does not exist yet (nothing graded yet).
    """
    if gradebook_file_missing(course.db_url):
        path = Path(course.db_url.removeprefix("sqlite:///"))
        raise CourseError(f"no {path.name} in {path.parent}: nothing graded yet (python -m autograder grade ...)")


def write_atomically(target: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``target`` through a temporary file beside it, so that an interrupted run never
    leaves half a file: ``target`` holds the old text or the new, whole.

    Raises:
        OSError: the folder cannot be written.
    """
    partial = target.with_name(f".{target.name}.partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(target)


def hash_files(digest: Any, paths: Iterable[Path], *, root: Path) -> None:
    """Feed each file of ``paths`` into ``digest`` (a ``hashlib`` object): its name (relative to
    ``root`` where it lies there) and its bytes. Folders, missing files and editors' ``.ipynb_checkpoints`` and
    ``__pycache__`` are left out."""
    for path in paths:
        if path.is_file() and not {".ipynb_checkpoints", "__pycache__"} & set(path.parts):
            name = path.relative_to(root) if path.is_relative_to(root) else path
            digest.update(f"{name}\0".encode() + path.read_bytes() + b"\0")


def copy_course(course: Course, destination: Path) -> Course:
    """A scratch course directory at ``destination``: config and source/ copied, symlinks followed."""
    destination.mkdir(parents=True, exist_ok=True)
    shutil.copy(course.root / "nbgrader_config.py", destination / "nbgrader_config.py")
    shutil.copytree(course.source, destination / "source", ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    return Course(destination)


def die_with_parent(parent: int) -> None:
    """Make this process get SIGKILL when its parent ends (Linux ``PR_SET_PDEATHSIG``; elsewhere nothing), and end
    at once if the parent, process id ``parent``, is already gone.

    For what a grading run starts (nbgrader's commands, the batch's workers): a run that ends in any way (Ctrl-C,
    SIGTERM, its own parent killed) leaves none of them behind, nor, through bwrap's ``--die-with-parent`` and PID
    namespace, the fork servers and kernels they started. The signal follows the death of the parent *thread* that
    started this process: start it from a thread that lives as long as the run (the main thread).
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux
        return
    if os.getppid() != parent:
        os._exit(1)


def nbgrader_environment(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment nbgrader runs in: this process's, with the course's package importable (nbgrader_config.py
    names its preprocessors), hash seed 0, no ``MPLBACKEND``; ``env`` adds to (or overrides) it.

    ``PATH`` is left as it is: nbgrader_config.py, which every nbgrader process loads first (formgrader's too), puts
    the environment's commands on it for ``alembic``."""
    python_path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    environment = {
        **os.environ,
        "PYTHONHASHSEED": "0",
        "PYTHONPATH": python_path,
        **(env or {}),
    }
    environment.pop("MPLBACKEND", None)
    return environment


def run_nbgrader(course: Course, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``nbgrader ARGS`` in the course directory with this interpreter; never raises on failure.

    ``env``: see :func:`nbgrader_environment`. Returns the completed process (stdout and stderr captured as text).
    """
    return subprocess.run(
        [sys.executable, "-m", "nbgrader", *args, f"--CourseDirectory.root={course.root}"],
        cwd=course.root,
        env=nbgrader_environment(env),
        capture_output=True,
        text=True,
        check=False,
        preexec_fn=functools.partial(die_with_parent, os.getpid()),
    )


def generate_assignment(course: Course, assignment_id: str, *, release_dir: Path, db_url: str) -> Path:
    """Run ``nbgrader generate_assignment`` from source/ into ``release_dir/<id>/``, recording it in ``db_url``.

    Returns the assignment folder written.

    Raises:
        CourseError: nbgrader refused (its log is quoted).
    """
    process = run_nbgrader(
        course,
        "generate_assignment",
        assignment_id,
        "--force",
        f"--CourseDirectory.release_directory={release_dir}",
        f"--CourseDirectory.db_url={db_url}",
    )
    if process.returncode != 0:
        raise nbgrader_failure(process, f"nbgrader generate_assignment {assignment_id}")
    return release_dir / assignment_id


def nbgrader_failure(process: subprocess.CompletedProcess[str], what: str) -> CourseError:
    """A CourseError quoting nbgrader's own error lines (:func:`nbgrader_errors`), else the end of its log."""
    log = process.stdout + process.stderr
    quoted = nbgrader_errors(log) or log.strip().splitlines()[-15:]
    return CourseError(f"{what} failed (nbgrader exit {process.returncode}):\n  " + "\n  ".join(quoted))


NBGRADER_BOILERPLATE = ("Please see the", "There was an error processing assignment")
"""Starts of nbgrader's ERROR lines that only point at the error lines before them."""


ERROR_LINE = re.compile(r"\[(?:\w+ \| )?ERROR\] (.*)")
"""A line nbgrader logs at ERROR level: ``[App | ERROR] ...`` from its commands, ``[ERROR] ...`` from its API."""


def nbgrader_errors(log: str) -> list[str]:
    """The causes nbgrader logged at ERROR level (:data:`ERROR_LINE`), in order, each once.

    A logged traceback (``[App | ERROR] Traceback ...`` and its indented
    lines) is quoted by its exception line (``ValidationError: Duplicate grade
    id: ...``); other ERROR lines as they are, except those that only refer to
    the lines before them (:data:`NBGRADER_BOILERPLATE`) or repeat a cause
    already quoted (nbgrader logs a failed validation as a line and as an exception).
    """
    causes: list[str] = []
    lines = log.splitlines()
    for index, line in enumerate(lines):
        if not (error := ERROR_LINE.match(line)):
            continue
        message = error.group(1).strip()
        if message.startswith("Traceback"):
            block = itertools.takewhile(lambda following: not following.startswith("["), lines[index + 1 :])
            message = next((b.strip() for b in reversed(list(block)) if b.strip()), message)
        repeated = any(message.endswith(cause) or cause.endswith(message) for cause in causes)
        if message and not message.startswith(NBGRADER_BOILERPLATE) and not repeated:
            causes.append(message)
    return causes


# --------------------------------------------------------------------------- cells


def nbgrader_meta(cell: nbformat.NotebookNode) -> dict:
    """The cell's ``metadata.nbgrader`` dict (empty when it has none)."""
    return dict(cell.get("metadata", {}).get("nbgrader", {}))


def is_solution(cell: nbformat.NotebookNode) -> bool:
    return bool(nbgrader_meta(cell).get("solution"))


def is_grade(cell: nbformat.NotebookNode) -> bool:
    return bool(nbgrader_meta(cell).get("grade"))


def is_autograder_tests(cell: nbformat.NotebookNode) -> bool:
    """An autograded test cell: a graded code cell that is not a solution."""
    return cell.cell_type == "code" and is_grade(cell) and not is_solution(cell)


def is_multiple_choice(cell: nbformat.NotebookNode) -> bool:
    """An autograder-tests cell of a multiple-choice question (the knowledge check's): its visible tests only
    check that answers are among the choices (``check_equal(answer_q1 in ("a", "b", "c", "d"), True, ...)``);
    which choice is right only its hidden tests know, judged outside the kernel against the reference (the
    release holds no expected value, so a student's run of the visible tests cannot tell)."""
    if not is_autograder_tests(cell):
        return False
    try:
        visible = ast.parse("\n".join(line for region, line in regions(cell.source) if region != "hidden test"))
    except SyntaxError:
        return False
    calls = [node.value for node in visible.body if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)]
    return bool(calls) and len(calls) == len(visible.body) and all(_checks_a_choice(call) for call in calls)


def _checks_a_choice(call: ast.Call) -> bool:
    """Whether a check's first argument is ``<answer> in (<strings>)``."""
    test = call.args[0] if call.args else None
    return (
        isinstance(test, ast.Compare)
        and [type(op) for op in test.ops] == [ast.In]
        and isinstance(test.comparators[0], (ast.Tuple, ast.List, ast.Set))
        and all(isinstance(item, ast.Constant) and isinstance(item.value, str) for item in test.comparators[0].elts)
    )


def is_autograded_answer(cell: nbformat.NotebookNode) -> bool:
    """A code cell the student fills in, graded by the tests after it."""
    return cell.cell_type == "code" and is_solution(cell) and not is_grade(cell)


def raises_on_purpose(cell: nbformat.NotebookNode) -> bool:
    """A code cell tagged :data:`RAISES_TAG` (a demonstration of a real error)."""
    return cell.cell_type == "code" and RAISES_TAG in (cell.get("metadata", {}).get("tags") or [])


def grade_id(cell: nbformat.NotebookNode) -> str | None:
    return nbgrader_meta(cell).get("grade_id")


TASK_HEADING = re.compile(r"^(#{1,6})\s+(Task\s+(\d+(?:\.\d+)*)\s*[-\u2013\u2014:]\s*.+?)\s*$")
"""A task's heading line: ``### Task 2.3 - contiguous strides`` (level, title, number)."""
HEADING = re.compile(r"^(#{1,6})\s")


@dataclass(frozen=True)
class TaskHeading:
    """The visible heading of a task, e.g. ``### Task 2.3 - contiguous strides``."""

    title: str
    """The heading's text: ``Task 2.3 - contiguous strides``."""
    number: str
    """``2.3``."""

    @property
    def grade_id_prefix(self) -> str:
        """What the grade_ids of the task's cells start with: ``task_2_3`` (then ``_<name>``)."""
        return "task_" + self.number.replace(".", "_")


def cell_number(index: int) -> str:
    """How a message names the cell at 0-based ``index`` of a notebook: ``cell N``, counted from 1 at the top, as an
    author counts the cells scrolling down in JupyterLab (nbformat's list of cells counts from 0)."""
    return f"cell {index + 1}"


def task_headings(notebook: nbformat.NotebookNode) -> list[TaskHeading | None]:
    """For each cell of ``notebook``, the task heading it lies under (None outside every task).

    A task runs from its heading to the next heading of the same or a higher
    level (``## 6. Knowledge check`` ends ``### Task 5.1``); headings inside
    fenced code blocks do not count.
    """
    current: tuple[int, TaskHeading] | None = None
    found: list[TaskHeading | None] = []
    for cell in notebook.cells:
        for line in headings(cell):
            level = len(HEADING.match(line).group(1))
            task = TASK_HEADING.match(line)
            if task is not None:
                current = (level, TaskHeading(title=task.group(2), number=task.group(3)))
            elif current is not None and level <= current[0]:
                current = None
        found.append(current[1] if current else None)
    return found


def headings(cell: nbformat.NotebookNode) -> list[str]:
    """The heading lines (``## ...``) of a markdown cell, in order; none in fenced code blocks or other cells."""
    found, fenced = [], False
    for line in cell.source.splitlines() if cell.cell_type == "markdown" else []:
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and HEADING.match(line):
            found.append(line)
    return found


def cell_labels(notebook: nbformat.NotebookNode) -> dict[str, str]:
    """grade_id -> a readable label for each grade cell: its task's heading (``Task 2.3 - contiguous strides``),
    or outside every task the last heading above it and the grade_id (``6. Knowledge check: knowledge_check_q1``)."""
    labels, heading = {}, None
    for cell, task in zip(notebook.cells, task_headings(notebook)):
        heading = next((line.lstrip("#").strip() for line in reversed(headings(cell))), heading)
        name = grade_id(cell)
        if name is not None and is_grade(cell):
            labels[name] = task.title if task else f"{heading}: {name}" if heading else name
    return labels


def regions(source: str) -> Iterator[tuple[str | None, str]]:
    """Yield ``(region, line)`` for each line of ``source`` that is not a marker line.

    ``region`` is ``"solution"`` between the solution markers, ``"hidden test"``
    between the hidden-test markers, and None outside both.
    """
    region = None
    for line in source.splitlines():
        stripped = line.strip()
        if stripped in (SOLUTION_MARKERS[0], HIDDEN_TEST_MARKERS[0]):
            region = "solution" if stripped == SOLUTION_MARKERS[0] else "hidden test"
        elif stripped in (SOLUTION_MARKERS[1], HIDDEN_TEST_MARKERS[1]):
            region = None
        else:
            yield region, line


def strip_markers(source: str) -> str:
    """``source`` without the solution and hidden-test marker lines (their content stays)."""
    return "\n".join(line for _, line in regions(source))


def read_notebook(path: Path) -> nbformat.NotebookNode:
    """Read a notebook as nbformat 4.

    Raises:
        CourseError: the file is missing or is not a valid notebook.
    """
    try:
        return nbformat.read(path, as_version=4)
    except (OSError, ValueError, nbformat.ValidationError) as error:  # NotJSONError is a ValueError
        raise CourseError(f"cannot read notebook {path}: {error}") from error
