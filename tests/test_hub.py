"""The course on a real multi-user JupyterHub (``python -m autograder hub``): real Unix accounts logging in through
PAM, each user's server started as that user behind configurable-http-proxy, nbgrader's exchange between them.

One hub is started (``hub start --demo``) for the module; the tests then run in file order: logins, limits, what a
student cannot read, the whole loop from release to feedback through nbgrader's own REST handlers in each user's
server, and last ``hub stop`` leaving no process behind. Needs root (the hub runs as root); the module removes the
demo accounts, the course directory and the exchange's course folder before and after it.
"""

from __future__ import annotations

import csv
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest
import requests

from autograder.authoring.samples import samples, write_download
from autograder.course import ROOT, Course, copy_course
from autograder.deploy import hub

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the hub runs as root (PAM, users' servers as each user)")

PORT = 8000
BASE = f"http://127.0.0.1:{PORT}"
ASSIGNMENT = "01_tensors"
WRONG = "one_hot_int64"
"""student2's one wrong task (a wrong answer of tests/submissions/01_tensors.toml); student1 hands in the reference."""
ACCOUNTS = [user for users in hub.DEMO_ACCOUNTS.values() for user in users]


def _clean() -> None:
    """No demo account, course directory, exchange course folder or hub state left from an earlier run."""
    hub.stop()
    for user in ACCOUNTS:
        if subprocess.run(["id", user], capture_output=True).returncode == 0:
            subprocess.run(["userdel", "--remove", user], capture_output=True)
    for group in (hub.GRADERS_GROUP, hub.USERS_GROUP):
        subprocess.run(["groupdel", group], capture_output=True)
    for folder in (hub.COURSE_ROOT, hub.EXCHANGE_ROOT / hub.COURSE_ID, hub.STATE):
        shutil.rmtree(folder, ignore_errors=True)


def _cli(*args: str, user: str | None = None, cwd: Path | None = None, timeout: float = 600) -> str:
    """Run ``python -m autograder ARGS`` (as ``user``, in the hub's environment for that user), return its output.
    Raises ``CalledProcessError`` with the output in the message on a non-zero exit."""
    command = [sys.executable, "-m", "autograder", *args]
    return _run(command, user=user, cwd=cwd or ROOT, timeout=timeout)


def _run(command: list[str], *, user: str | None = None, cwd: Path | None = None, timeout: float = 600) -> str:
    env = dict(os.environ)
    if user is not None:
        home = pwd.getpwnam(user).pw_dir
        role = "instructor" if user in hub.DEMO_ACCOUNTS["instructors"] else "student"
        env = {
            "HOME": home,
            "USER": user,
            "PATH": f"{Path(sys.executable).parent}:/usr/sbin:/usr/bin:/sbin:/bin",
            "JUPYTER_CONFIG_PATH": str(hub.STATE / "jupyter" / role),
            "PYTHONHASHSEED": "0",
            "PYTHONPATH": str(ROOT),
            "COURSE_DEVICE": "cpu",
        }
        command = ["runuser", "-u", user, "--", *command]
        cwd = cwd or Path(home)
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode:
        raise AssertionError(f"{command} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done.stdout + done.stderr


class HubUser:
    """One user in a browser-less client: logs in on the hub's login page, then talks to their own server."""

    def __init__(self, name: str, password: str | None = None):
        self.name = name
        self.http = requests.Session()
        self.password = password or hub.demo_password(name)

    def log_in(self) -> requests.Response:
        """Post the login form (with its XSRF field) and follow the redirects (to the spawn page)."""
        page = self.http.get(f"{BASE}/hub/login", timeout=30)
        xsrf = re.search(r'name="_xsrf" value="([^"]+)"', page.text).group(1)
        form = {"username": self.name, "password": self.password, "_xsrf": xsrf}
        return self.http.post(f"{BASE}/hub/login?next=", data=form, timeout=120)

    def open_lab(self) -> requests.Response:
        """Open JupyterLab in the user's own server, once it has started (OAuth with the server on the way)."""
        deadline = time.monotonic() + 120
        while True:
            page = self.http.get(f"{BASE}/user/{self.name}/lab", timeout=60)
            if page.status_code == 200 and page.url.endswith(f"/user/{self.name}/lab") or time.monotonic() > deadline:
                return page
            time.sleep(1)

    def server(self, method: str, path: str, **kwargs) -> requests.Response:
        """A request to the user's own server, with its XSRF token."""
        xsrf = self.http.cookies.get("_xsrf", path=f"/user/{self.name}/")
        url = f"{BASE}/user/{self.name}/{path}"
        return self.http.request(method, url, headers={"X-XSRFToken": xsrf}, timeout=300, **kwargs)

    def assignments(self, action: str) -> list[dict]:
        """nbgrader's Assignments panel's request ``action`` (fetch, submit, fetch_feedback) for ASSIGNMENT."""
        which = {"course_id": hub.COURSE_ID, "assignment_id": ASSIGNMENT}
        answer = self.server("POST", f"assignments/{action}", data=which)
        body = answer.json()
        assert answer.status_code == 200 and body["success"], body
        return body["value"]


@pytest.fixture(scope="module")
def demo_hub():
    _clean()
    started = _cli("hub", "start", "--demo", "--port", str(PORT))
    yield started
    _cli("hub", "stop")
    _clean()


@pytest.fixture(scope="module")
def logged_in(demo_hub):
    users = {name: HubUser(name) for name in ("instructor1", "student1", "student2")}
    for user in users.values():
        user.log_in()
        assert user.open_lab().status_code == 200
    return users


def test_status_shows_hub_and_proxy(demo_hub):
    status = _cli("hub", "status")
    assert f"hub at {BASE} (answers)" in status
    assert "jupyterhub" in status and "configurable-http-proxy" in status
    assert _cli("hub", "start", "--demo", "--port", str(PORT)).splitlines()[0] == status.splitlines()[0]


def test_wrong_password_is_refused(demo_hub):
    page = HubUser("student1", password="wrong").log_in()
    assert page.url.endswith("/hub/login?next=") and "Invalid username or password" in page.text


def test_each_server_runs_as_its_user_under_the_limits(logged_in):
    servers = {
        process.username(): process
        for process in hub.hub_processes()
        if "jupyterhub.singleuser" in " ".join(process.cmdline())
    }
    assert set(servers) >= {"instructor1", "student1", "student2"}
    limits = Path(f"/proc/{servers['student1'].pid}/limits").read_text()
    assert re.search(rf"Max address space\s+{hub.MEMORY_LIMIT}\s+{hub.MEMORY_LIMIT}", limits), limits
    assert re.search(rf"Max processes\s+{hub.PROCESS_LIMIT}\s+{hub.PROCESS_LIMIT}", limits), limits
    kernel = logged_in["student1"].server("POST", "api/kernels", json={"name": "python3"}).json()
    probe = "import resource; print(resource.getrlimit(resource.RLIMIT_AS)); bytearray(3 * 1024**3)"
    done = subprocess.run(
        ["runuser", "-u", "student1", "--", "prlimit", f"--as={hub.MEMORY_LIMIT}", "--", sys.executable, "-c", probe],
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0 and "MemoryError" in done.stderr, done.stderr
    logged_in["student1"].server("DELETE", f"api/kernels/{kernel['id']}")


def _answers() -> dict[str, nbformat.NotebookNode]:
    found = {sample.student_id: sample for sample in samples(Course(ROOT), ASSIGNMENT)}
    wrong = next(sample for name, sample in found.items() if name.endswith(WRONG))
    return {"student1": found["reference"], "student2": wrong}


def test_release_fetch_submit_collect_grade_feedback(logged_in):
    """The loop through nbgrader's exchange, each step as its user, and the same scores as grading the same
    notebooks outside the hub."""
    _run(["nbgrader", "release_assignment", ASSIGNMENT], user="instructor1", cwd=hub.COURSE_ROOT)
    answers = _answers()
    for name, sample in answers.items():
        student = logged_in[name]
        fetched = student.assignments("fetch")
        assert [item["status"] for item in fetched if item["assignment_id"] == ASSIGNMENT] == ["fetched"]
        notebook = f"{ASSIGNMENT}/{ASSIGNMENT}.ipynb"
        saved = student.server("PUT", f"api/contents/{notebook}", json={"type": "notebook", "content": sample.notebook})
        assert saved.status_code == 200, saved.text
        validated = student.server("POST", "assignments/validate", data={"path": notebook}).json()
        assert validated["success"], validated
        submitted = student.assignments("submit")
        assert any(item["status"] == "submitted" for item in submitted)
    course = ("--course", str(hub.COURSE_ROOT))
    _cli(*course, "hub", "collect", ASSIGNMENT, user="instructor1")
    collected = hub.COURSE_ROOT / hub.COLLECTED
    assert sorted(path.parent.parent.name for path in collected.glob(f"*/{ASSIGNMENT}/*.ipynb")) == list(answers)
    _cli(*course, "grade", str(collected), user="instructor1")
    in_hub = _grades(hub.COURSE_ROOT / "grades.csv")
    with tempfile.TemporaryDirectory(prefix="hub-outside-") as scratch:
        outside = copy_course(Course(ROOT), Path(scratch) / "course")
        download = write_download([sample for sample in answers.values()], Path(scratch) / "download")
        for name, sample in answers.items():
            (download / sample.student_id).rename(download / name)
        _cli("--course", str(outside.root), "grade", str(download))
        assert in_hub == _grades(outside.root / "grades.csv")
    assert in_hub["student1"] > in_hub["student2"] > 0
    released = _cli(*course, "hub", "feedback", ASSIGNMENT, user="instructor1")
    assert "feedback released to: student1, student2" in released
    for name in answers:
        logged_in[name].assignments("fetch_feedback")
        pages = list(Path(pwd.getpwnam(name).pw_dir, ASSIGNMENT, "feedback").glob(f"*/{ASSIGNMENT}.html"))
        assert len(pages) == 1, pages
        graded = {
            student: hub.COURSE_ROOT / "feedback" / student / ASSIGNMENT / f"{ASSIGNMENT}.html" for student in answers
        }
        assert graded["student1"].read_bytes() != graded["student2"].read_bytes()
        assert pages[0].read_bytes() == graded[name].read_bytes()


def _grades(path: Path) -> dict[str, float]:
    """``{student: score}`` of ASSIGNMENT in a grades.csv."""
    with open(path, newline="", encoding="utf-8") as file:
        rows = list(csv.DictReader(file))
    return {row["student_id"]: float(row["score"]) for row in rows if row["assignment"] == ASSIGNMENT}


CANNOT_READ = [
    f"{hub.COURSE_ROOT}/source/{ASSIGNMENT}/{ASSIGNMENT}.ipynb",
    f"{hub.COURSE_ROOT}/notebooks/{ASSIGNMENT}.ipynb",
    f"{hub.COURSE_ROOT}/nbgrader_config.py",
    f"{hub.COURSE_ROOT}/gradebook.db",
    "/home/student2/.bashrc",
    f"{hub.STATE}/settings.json",
]
CANNOT_LIST = [
    f"{hub.COURSE_ROOT}",
    "/home/student2",
    f"{hub.EXCHANGE_ROOT}/{hub.COURSE_ID}/inbound",
]


@pytest.mark.parametrize("path", CANNOT_READ)
def test_a_student_cannot_read(logged_in, path):
    done = subprocess.run(["runuser", "-u", "student1", "--", "cat", path], capture_output=True, text=True)
    assert done.returncode != 0 and "Permission denied" in done.stderr, (path, done.stderr)


@pytest.mark.parametrize("path", CANNOT_LIST)
def test_a_student_cannot_list(logged_in, path):
    done = subprocess.run(["runuser", "-u", "student1", "--", "ls", path], capture_output=True, text=True)
    assert done.returncode != 0 and "Permission denied" in done.stderr, (path, done.stderr)


def test_a_student_cannot_read_or_remove_another_submission_even_by_its_name(logged_in):
    inbound = hub.EXCHANGE_ROOT / hub.COURSE_ID / "inbound"
    (submission,) = inbound.glob(f"student2+{ASSIGNMENT}+*")
    for command in (["cat", str(submission / f"{ASSIGNMENT}.ipynb")], ["rm", "-rf", str(submission)]):
        done = subprocess.run(["runuser", "-u", "student1", "--", *command], capture_output=True, text=True)
        assert done.returncode != 0 and "Permission denied" in done.stderr, (command, done.stderr)
    assert (submission / f"{ASSIGNMENT}.ipynb").exists()


def test_stop_leaves_no_process(demo_hub):
    before = [process.pid for process in hub.hub_processes()]
    assert before
    _cli("hub", "stop")
    assert hub.hub_processes() == []
    assert "hub not running" in _cli("hub", "status")
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{BASE}/hub/api/", timeout=5)
    assert not (hub.STATE / "opened.json").exists()
