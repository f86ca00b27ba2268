"""Manual grading as docs/instructors.md says: formgrader opens in JupyterLab started as ``.venv/bin/jupyter lab``.

The environment is not activated (its bin/ is not on PATH) and the course has no gradebook yet, so
formgrader's first request makes nbgrader create it, which runs ``alembic`` by name: the course's
nbgrader_config.py puts this environment's bin/ on PATH (before, formgrader's API answered HTTP 500,
``FileNotFoundError: 'alembic'``).
"""

import json
import sys
import urllib.request
from pathlib import Path

from autograder.course import ROOT, Course, copy_course
from test_browser import free_port, started_lab

TOKEN = "course-formgrader-test"


def get(url: str) -> urllib.request.Request:
    """A GET with the token in a header, which redirects keep (a ``?token=`` would be dropped)."""
    return urllib.request.Request(url, headers={"Authorization": f"token {TOKEN}"})


def test_formgrader_opens_in_jupyterlab_started_from_the_environment_without_activating_it(tmp_path):
    course = copy_course(Course(ROOT), tmp_path / "course")
    port = free_port()
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
    # A scratch copy holds config and source/ only: the course's package (which nbgrader_config.py names) is found
    # where `python -m autograder` puts it for such copies, on PYTHONPATH.
    env["PYTHONPATH"] = str(ROOT)
    jupyter = Path(sys.executable).parent / "jupyter"
    command = [str(jupyter), "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}"]
    command.append(f"--IdentityProvider.token={TOKEN}")
    with started_lab(command, cwd=course.root, env=env, port=port, token=TOKEN) as base:
        assert not (course.root / "gradebook.db").exists()
        with urllib.request.urlopen(get(f"{base}/formgrader"), timeout=60) as page:  # redirected
            assert (page.status, page.url) == (200, f"{base}/formgrader/manage_assignments")
        with urllib.request.urlopen(get(f"{base}/formgrader/api/assignments"), timeout=60) as api:
            assert api.status == 200
            assignments = {entry["name"] for entry in json.load(api)}
        assert assignments == set(course.assignment_ids())
        assert (course.root / "gradebook.db").exists()
