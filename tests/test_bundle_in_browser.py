"""A student's bundle in JupyterLab, in a real browser: Validate and the terminal check work from the unpacked zip.

The zip ``python -m autograder release`` writes is unpacked far from the repository and, as docs/students.md says,
JupyterLab is started in the unpacked folder, both ways it gives: ``.venv/bin/jupyter lab <id>.ipynb`` and
``.venv/bin/jupyter lab``. ``.venv`` is this environment (the packages of requirements.txt), ``HOME`` a scratch
folder, no ``PYTHONPATH``: nothing of the repository is importable there, and the test checks that it is not. In
each: nbgrader's Validate button, pressed in Debian's Chromium, reports the unchanged notebook as failing; and the
command of the notebook's "Before you submit" cell, run as JupyterLab's terminal runs it (a login shell, in the
folder JupyterLab serves, ``JUPYTER_SERVER_ROOT`` set), exits 0 and prints the failure.
"""

import json
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from autograder.authoring.bundle import release
from autograder.course import ROOT, Course, read_notebook
from test_browser import (
    SCREENSHOTS,
    TOKEN,
    VIEWPORT,
    chromium,
    free_port,
    open_notebook,
    press_validate,
    shut_down_kernels,
    started_lab,
)

ASSIGNMENT = "02_strides"
"""The smallest notebook: Validate runs it whole, twice per way of starting JupyterLab."""

SHELL = "/bin/bash"
CHECK_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def browser():
    """A context of :func:`test_browser.chromium` for the unpacked bundle's JupyterLab."""
    with chromium() as chrome:
        yield chrome.new_context(viewport=VIEWPORT)


def unpacked_bundle(tmp_path: Path, assignment_id: str) -> Path:
    """``<id>.zip`` as ``release`` writes it, unzipped into ``tmp_path``; returns the folder it made."""
    (bundle,) = release(Course(ROOT), assignment_ids=[assignment_id], output=tmp_path / "dist")
    assert bundle.path is not None, bundle.findings
    with zipfile.ZipFile(bundle.path) as archive:
        archive.extractall(tmp_path)
    folder = tmp_path / assignment_id
    assert folder.is_dir() and not (folder / "autograder").exists()
    return folder


def documented_check(folder: Path, assignment_id: str) -> str:
    """The terminal command the bundle's notebook gives in "Before you submit" (the first backquoted
    ``nbgrader validate`` there), checked to be the one of the bundle's README."""
    notebook = read_notebook(folder / f"{assignment_id}.ipynb")
    cell = next(c.source for c in notebook.cells if c.source.startswith("## Before you submit"))
    pattern = r"`([^`\n]*nbgrader validate [^`\n]*)`"
    command = re.findall(pattern, cell)[0]
    assert re.search(rf"^\s*{re.escape(command)}$", (folder / "README.md").read_text(), re.MULTILINE), command
    return command


def in_terminal(command: str, *, root: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``command`` run as JupyterLab's terminal runs it: ``$SHELL -l`` (a login shell: JupyterLab's own output is not
    a terminal), in the server's root folder, with the server's environment and ``JUPYTER_SERVER_ROOT``."""
    env = {**env, "TERM": "xterm", "JUPYTER_SERVER_ROOT": str(root)}
    return subprocess.run(
        [env["SHELL"], "-l", "-c", command], cwd=root, env=env, capture_output=True, text=True, timeout=CHECK_TIMEOUT_S
    )


def server_root(home: Path) -> Path:
    """The folder the (only) running JupyterLab with this ``HOME`` serves, from its runtime file."""
    (info,) = (home / ".local" / "share" / "jupyter" / "runtime").glob("jpserver-*.json")
    return Path(json.loads(info.read_text())["root_dir"])


def processes_in(folder: Path) -> list[str]:
    """Processes whose working directory is ``folder`` or below it (as ``pid command``)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cwd = (proc / "cwd").resolve(strict=True)
            if cwd == folder or folder in cwd.parents:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                found.append(f"{proc.name} {cmdline}")
        except (OSError, ValueError):
            continue
    return found


@pytest.mark.parametrize("opens", ["notebook", "folder"])
def test_validate_and_the_terminal_check_work_in_the_unpacked_bundle(tmp_path, browser, opens):
    folder = unpacked_bundle(tmp_path, ASSIGNMENT)
    (folder / ".venv").symlink_to(sys.prefix, target_is_directory=True)  # the student's environment
    command = documented_check(folder, ASSIGNMENT)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SHELL": SHELL, "LANG": "C.UTF-8", "COURSE_DEVICE": "cpu"}
    port = free_port()
    lab = [".venv/bin/jupyter", "lab", *([f"{ASSIGNMENT}.ipynb"] if opens == "notebook" else [])]
    lab += ["--no-browser", "--ip=127.0.0.1", f"--port={port}", f"--IdentityProvider.token={TOKEN}"]
    lab += ["--LabApp.news_url="]

    with started_lab(lab, cwd=folder, env=env, port=port, token=TOKEN) as base:
        root = server_root(tmp_path)
        assert root == folder
        no_repository = in_terminal(".venv/bin/python -c 'import autograder'", root=root, env=env)
        assert no_repository.returncode != 0 and "No module named 'autograder'" in no_repository.stderr, no_repository

        pages = len(browser.pages)
        try:
            page = open_notebook(browser, base, f"{ASSIGNMENT}.ipynb")
            outcome, text = press_validate(page)
            page.screenshot(path=str(SCREENSHOTS / f"{ASSIGNMENT}-bundle-{opens}.png"))
        finally:
            for opened in browser.pages[pages:]:
                opened.close()
            shut_down_kernels(base)
        assert "validation-failed" in outcome, text
        assert "The following cell failed:" in text and "NotImplementedError" in text, text

        check = in_terminal(command, root=root, env=env)
        printed = check.stdout + check.stderr
        assert check.returncode == 0, printed  # nbgrader validate exits 0 either way: the docs say to read its output
        assert "VALIDATION FAILED ON" in check.stdout and "NotImplementedError" in check.stdout, printed
        assert "The following cell failed:" in check.stdout, printed

    deadline = time.monotonic() + 30
    while (left := processes_in(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert left == [], left
