import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from autograder.course import ROOT, Course
from grader_memory import PeakMemory


SHARED_RUN = "every_sample_graded"
"""The fixture of the one ``demo --all`` run of a test session (the longest part of it)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the tests that read :func:`every_sample_graded` first (tests/run_tests.sh runs files in parallel,
    pytest-xdist's ``--dist loadfile --no-loadscope-reorder``, each file on one worker in this order), so that
    the longest job starts at once, beside the rest.

    Raises:
        pytest.UsageError: they are in more than one file (each file's worker would run the demo again).
    """
    readers = {item.path for item in items if SHARED_RUN in getattr(item, "fixturenames", ())}
    if len(readers) > 1:
        raise pytest.UsageError(f"the tests that use {SHARED_RUN} must be in one file, not {sorted(map(str, readers))}")
    items.sort(key=lambda item: item.path not in readers)


@pytest.fixture
def course_copy(tmp_path) -> Course:
    """A scratch copy of the course directory (config, source/, release/, notebooks/; links followed)."""
    return copied_course(tmp_path / "course")


def copied_course(root: Path) -> Course:
    """A copy of the course directory made at ``root`` (config, source/, release/, notebooks/; links followed)."""
    root.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", root)
    for folder in ("source", "release", "notebooks"):
        shutil.copytree(
            ROOT / folder, root / folder, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__")
        )
    return Course(root)


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m autograder ARGS`` as a user runs it, from the repository root (``env`` replaces the environment)."""
    command = [sys.executable, "-m", "autograder", *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env)


@pytest.fixture
def cli():
    return run_cli


def repo_path(*parts: str) -> Path:
    return ROOT.joinpath(*parts)


@dataclass(frozen=True)
class EverySampleGraded:
    """``python -m autograder demo --all`` run once: what it printed and the scratch course it graded in."""

    course: Course
    """The course directory it was asked to grade (a scratch copy of this one)."""
    process: subprocess.CompletedProcess[str]
    graded: Course
    """The demo's own scratch course (its gradebook, submitted/, executed/, autograded/, feedback/, CSVs)."""
    memory: PeakMemory
    """The peak memory of every process of the run (the command, its workers, nbgrader's processes)."""


@pytest.fixture(scope="session")
def every_sample_graded(tmp_path_factory) -> Iterator[EverySampleGraded]:
    """Every sample submission of every assignment graded through the real pipeline (nbgrader, sandbox) by
    ``demo --all`` as a user runs it, once for the whole test session: the tests that only read what it graded
    (tests/test_samples_graded.py: expected grades, the hostile samples of 01_tensors) share it, so no sample
    is executed and graded twice. The demo keeps its scratch course (in this fixture's folder: TMPDIR)."""
    folder = tmp_path_factory.mktemp("demo-all")
    course = copied_course(folder / "course")
    with PeakMemory(interval=0.5) as memory:  # 8 ms of CPU a poll here; the grader's processes live for the run
        process = run_cli("--course", str(course.root), "demo", "--all", env={**os.environ, "TMPDIR": str(folder)})
    where = re.search(r"graded in a scratch course: grades (\S+),", process.stdout)
    assert where, process.stdout + process.stderr
    graded = Course(Path(where.group(1)).parent)
    yield EverySampleGraded(course, process, graded, memory)
    shutil.rmtree(folder)  # hundreds of graded notebooks and feedback pages
