"""The nbval plugin of the test command (``tests/nbval_policy.py``), run by pytest on a notebook of its own."""

import os
import subprocess
import sys

import nbformat

from autograder.course import ROOT
from autograder.pipeline.reference import REPRODUCIBLE_CPU_ENV

SHOW_ENV = f"import os\nprint([os.environ.get(key) for key in {sorted(REPRODUCIBLE_CPU_ENV)!r}])"
"""A cell that prints the kernel's values of :data:`REPRODUCIBLE_CPU_ENV`, in its keys' order."""


def test_nbvals_kernels_compute_as_the_reference_kernels_did(tmp_path):
    """A notebook whose stored output is the kernel's :data:`REPRODUCIBLE_CPU_ENV` passes under nbval with the
    plugin, from a pytest whose own environment has none of it."""
    expected = [REPRODUCIBLE_CPU_ENV[key] for key in sorted(REPRODUCIBLE_CPU_ENV)]
    output = nbformat.v4.new_output("stream", text=f"{expected}\n")
    cell = nbformat.v4.new_code_cell(SHOW_ENV, execution_count=1, outputs=[output])
    nbformat.write(nbformat.v4.new_notebook(cells=[cell]), tmp_path / "environment.ipynb")
    env = {key: value for key, value in os.environ.items() if key not in REPRODUCIBLE_CPU_ENV}
    env["PYTHONPATH"] = f"{ROOT / 'tests'}{os.pathsep}{ROOT}"
    command = [sys.executable, "-m", "pytest", "-p", "nbval_policy", "--nbval", "--nbval-current-env", "-p",
               "no:cacheprovider", "-q", "environment.ipynb"]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
