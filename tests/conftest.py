import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.course import ROOT, Course


@pytest.fixture
def course_copy(tmp_path) -> Course:
    """A scratch copy of the course directory (config, source/, release/, notebooks/; links followed)."""
    root = tmp_path / "course"
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
