"""The course on a real multi-user JupyterHub (``python -m autograder hub``): real Unix accounts logging in through
PAM, each user's server started as that user behind configurable-http-proxy, nbgrader's exchange between them.

One hub is started (``hub start --demo``) for the module; the tests then run in file order: logins, limits, what a
student cannot read, the whole loop from release to feedback in Chromium (formgrader for the instructor and the
grader, JupyterLab's Assignments panel for the students), and last ``hub stop`` leaving no process behind. Needs
root (the hub runs as root); the module removes the demo accounts, the course directory and the exchange's course
folder before and after it.
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
from datetime import datetime, timedelta, timezone
from pathlib import Path

import nbformat
import pytest
import requests
from playwright.sync_api import expect

from autograder.authoring.samples import samples, write_download
from autograder.course import ROOT, Course, copy_course
from autograder.deploy import hub
from test_browser import SCREENSHOTS, VIEWPORT, chromium

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the hub runs as root (PAM, users' servers as each user)")

PORT = 8000
BASE = f"http://127.0.0.1:{PORT}"
ASSIGNMENT = "01_tensors"
WRONG = "one_hot_int64"
"""student2's one wrong task (a wrong answer of tests/submissions/01_tensors.toml); student1 hands in the reference."""
INBOUND = hub.EXCHANGE_ROOT / hub.COURSE_ID / "inbound"
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


def _as_user(command: list[str], user: str) -> tuple[list[str], dict[str, str]]:
    """``command`` run as ``user`` (``runuser``) and its environment: the hub's for that user's role."""
    roles = {"instructor": hub.DEMO_ACCOUNTS["instructors"], "grader": hub.DEMO_ACCOUNTS["graders"]}
    role = next((role for role, users in roles.items() if user in users), "student")
    env = {
        "HOME": pwd.getpwnam(user).pw_dir,
        "USER": user,
        "PATH": f"{Path(sys.executable).parent}:/usr/sbin:/usr/bin:/sbin:/bin",
        "JUPYTER_CONFIG_PATH": str(hub.STATE / "jupyter" / role),
        "PYTHONHASHSEED": "0",
        "PYTHONPATH": str(ROOT),
        "COURSE_DEVICE": "cpu",
    }
    return ["runuser", "-u", user, "--", *command], env


def _run(command: list[str], *, user: str | None = None, cwd: Path | None = None, timeout: float = 600) -> str:
    env = dict(os.environ)
    if user is not None:
        command, env = _as_user(command, user)
        cwd = cwd or Path(pwd.getpwnam(user).pw_dir)
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


class BrowserUser:
    """One user in headless Chromium, in a browser context of their own (their own cookies): the hub's login page,
    then JupyterLab's nbgrader Assignments panel, or formgrader."""

    def __init__(self, browser, name: str):
        self.name = name
        self.page = browser.new_context(viewport=VIEWPORT).new_page()

    def log_in(self) -> None:
        """Fill in and send the hub's login form; wait for JupyterLab in the user's own server."""
        self.page.goto(f"{BASE}/hub/login")
        self.page.get_by_label("Username:").fill(self.name)
        self.page.get_by_label("Password:").fill(hub.demo_password(self.name))
        self.page.get_by_role("button", name="Sign in").click()
        self.page.wait_for_url(f"**/user/{self.name}/lab**", timeout=180_000)
        self.page.wait_for_selector(".lm-MenuBar-item:has-text('Nbgrader')", timeout=120_000)

    def open_assignments(self) -> None:
        """Open the Assignments panel (menu Nbgrader, Assignment List) and wait until its lists are loaded."""
        self.page.click(".lm-MenuBar-item:has-text('Nbgrader')")
        self.page.click(".lm-Menu-itemLabel:text-is('Assignment List')")
        self.page.wait_for_selector("#released_assignments_list_loading", state="hidden", timeout=60_000)

    def row(self, listing: str):
        """The row of ASSIGNMENT in the panel's list ``listing`` (released, fetched, submitted)."""
        return self.page.locator(f"#{listing}_assignments_list > .list_item", has_text=ASSIGNMENT)

    def press(self, listing: str, button: str, then: str) -> None:
        """Press ``button`` in ASSIGNMENT's row of ``listing``; wait until a row shows in list ``then``."""
        self.row(listing).get_by_role("button", name=button, exact=True).first.click()
        self.row(then).first.wait_for(timeout=120_000)

    def submit(self) -> None:
        """Press Submit beside the fetched ASSIGNMENT; wait until the panel lists one submission more."""
        submissions = self.row("submitted").locator(".nested_list_item")
        before = submissions.count()
        self.row("fetched").get_by_role("button", name="Submit", exact=True).click()
        expect(submissions).to_have_count(before + 1, timeout=120_000)

    def save(self, notebook: nbformat.NotebookNode) -> None:
        """Save ``notebook`` over the fetched one, through the server's contents API with the browser's login."""
        xsrf = self.page.evaluate("document.cookie.match(/(?:^|; )_xsrf=([^;]*)/)[1]")  # the server's: longest path
        path = f"{BASE}/user/{self.name}/api/contents/{ASSIGNMENT}/{ASSIGNMENT}.ipynb"
        content = {"type": "notebook", "content": notebook}
        saved = self.page.request.put(path, data=content, headers={"X-XSRFToken": xsrf})
        assert saved.status == 200, saved.text()

    def validate(self) -> str:
        """Press Validate beside the fetched notebook in the panel; return the dialog's text."""
        self.row("fetched").locator("a.assignment-notebooks-link").click()
        self.row("fetched").get_by_role("button", name="Validate", exact=True).click()
        dialog = self.page.locator(".jp-Dialog")
        dialog.wait_for(timeout=180_000)
        text = dialog.inner_text()
        dialog.get_by_role("button").last.click()
        return text

    def fetch_feedback(self) -> None:
        """Refresh the panel, press Fetch Feedback beside the submitted ASSIGNMENT, wait for its "(view feedback)";
        screenshot in SCREENSHOTS."""
        self.page.click("#refresh_assignments_list")
        self.press("submitted", "Fetch Feedback", then="submitted")
        self.row("submitted").get_by_text("(view feedback)").first.wait_for(timeout=60_000)
        self.page.screenshot(path=str(SCREENSHOTS / f"hub-{self.name}-feedback.png"))

    def open_formgrader(self, page: str = "") -> str:
        """Open formgrader's ``page`` (the course's hub service) as a page of its own, through the hub's OAuth for the
        service; returns formgrader's address."""
        formgrader = f"{BASE}/services/{hub.COURSE_ID}/formgrader"
        self.page.goto(f"{formgrader}/{page}")
        self.page.wait_for_url(f"{formgrader}/{page}**", timeout=120_000)
        return formgrader


class ManageAssignments:
    """formgrader's Manage Assignments page, open in an instructor's :class:`BrowserUser`: ASSIGNMENT's row and the
    buttons in it."""

    def __init__(self, user: BrowserUser):
        self.page = user.page
        self.formgrader = user.open_formgrader("manage_assignments")
        self.row = self.page.locator("#main-table tr", has=self.page.locator("td.name", has_text=ASSIGNMENT))
        self.row.locator("td.status").get_by_text("draft").wait_for(timeout=60_000)

    def release(self) -> None:
        """Press the row's release button (nbgrader's POST .../api/assignment/<id>/release); wait for the dialog
        that says it succeeded, close it, and for the row's status "released"."""
        self.row.locator("td.release a").click()
        dialog = self.page.locator("#success-modal, #error-modal")
        dialog.wait_for(timeout=120_000)
        assert f"Successfully released '{ASSIGNMENT}'." in dialog.inner_text(), dialog.inner_text()
        dialog.get_by_role("button", name="OK").click()
        self.row.locator("td.status").get_by_text("released").wait_for(timeout=60_000)

    def set_due_date(self, due: datetime) -> None:
        """In the row's Edit dialog, type ``due`` (UTC, whole seconds) as the due date with the offset +0000 and
        Save (nbgrader's PUT .../api/assignment/<id>); wait until the dialog closes; screenshot in SCREENSHOTS."""
        self.row.locator("td.edit a").click()
        dialog = self.page.locator("#edit-assignment-modal")
        # the field keeps a local date and time in its shortest form: no ":00" for whole minutes
        dialog.locator("input.modal-duedate").fill(due.strftime("%Y-%m-%dT%H:%M:%S").removesuffix(":00"))
        dialog.locator("input.modal-timezone").fill("+0000")
        dialog.get_by_role("button", name="Save").click()
        dialog.wait_for(state="hidden", timeout=60_000)
        self.page.screenshot(path=str(SCREENSHOTS / "hub-instructor1-manage-assignments.png"))

    def assignment(self) -> dict:
        """ASSIGNMENT as formgrader's API gives it (with the instructor's login)."""
        return self.page.request.get(f"{self.formgrader}/api/assignment/{ASSIGNMENT}").json()


def _modes(folder: Path) -> dict[str, int]:
    return {entry.name: entry.lstat().st_mode for entry in folder.iterdir()}


@pytest.fixture(scope="module")
def demo_hub():
    """The demo hub with its gradebook on PostgreSQL; yields the modes of the repository's entries before it
    started."""
    _clean()
    before = _modes(ROOT)
    _cli("hub", "start", "--demo", "--postgres", "--port", str(PORT))
    yield before
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


@pytest.fixture(scope="module")
def hub_chromium(demo_hub):
    """:func:`test_browser.chromium` for the hub's users: each :class:`BrowserUser` opens a context of its own."""
    with chromium() as browser:
        yield browser


def test_release_fetch_submit_collect_grade_feedback(hub_chromium):
    """The loop through nbgrader's exchange, each step as its user in Chromium, each in a browser context of their
    own, through the hub's login page: instructor1 releases in formgrader's Manage Assignments page and later sets
    the due date in its Edit dialog; student1 and student2 fetch, validate and submit in JupyterLab's Assignments
    panel, student2 twice (the second after the due date); student3 never submits. Each student's score is the
    same as grading the same notebooks outside the hub, and each fetches only their own feedback page."""
    instructor = BrowserUser(hub_chromium, "instructor1")
    instructor.log_in()
    manage = ManageAssignments(instructor)
    manage.release()
    assert (hub.EXCHANGE_ROOT / hub.COURSE_ID / "outbound" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").is_file()
    answers = _answers()
    students = {name: BrowserUser(hub_chromium, name) for name in answers}
    for name, student in students.items():
        student.log_in()
        student.open_assignments()
        student.press("released", "Fetch", then="fetched")
    students["student2"].submit()  # the release as fetched, then the worked notebook: collect takes the latest
    for name, student in students.items():
        student.save(answers[name].notebook)
        validated = student.validate()
        if name == "student1":
            assert "Success! Your notebook passes all the tests." in validated
        else:
            assert "The following cell failed:" in validated and "Success!" not in validated, validated
    students["student1"].submit()
    # student1's and student2's first submission are in time, student2's second late
    due = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=1)
    manage.set_due_date(due)
    assert manage.assignment()["duedate"] == due.replace(tzinfo=None).isoformat()
    time.sleep(max(0.0, (due - datetime.now(timezone.utc)).total_seconds()) + 0.1)
    students["student2"].submit()
    assert len(list(INBOUND.glob(f"student2+{ASSIGNMENT}+*"))) == 2
    course = ("--course", str(hub.COURSE_ROOT))
    _cli(*course, "hub", "collect", ASSIGNMENT, user="instructor1")
    collected = hub.COURSE_ROOT / hub.COLLECTED
    assert sorted(path.parent.parent.name for path in collected.glob(f"*/{ASSIGNMENT}/*.ipynb")) == list(answers)
    _cli(*course, "grade", str(collected), user="instructor1")
    in_hub = _grades(hub.COURSE_ROOT / "grades.csv")
    assert sorted(in_hub) == ["student1", "student2"]  # student3 never submitted: no grade
    with tempfile.TemporaryDirectory(prefix="hub-outside-") as scratch:
        outside = copy_course(Course(ROOT), Path(scratch) / "course")
        download = write_download([sample for sample in answers.values()], Path(scratch) / "download")
        for name, sample in answers.items():
            (download / sample.student_id).rename(download / name)
        _cli("--course", str(outside.root), "grade", str(download))
        assert in_hub == _grades(outside.root / "grades.csv")
    assert in_hub["student1"] > in_hub["student2"] > 0
    late = {row["student_id"]: row["late"] for row in _rows(hub.COURSE_ROOT / "task_results.csv")}
    assert late["student2"] and not late["student1"], late  # the latest submission, after the due date
    hand_graded = _hand_grade(hub_chromium, "grader1", "student1")
    assert hand_graded > 0
    _cli(*course, "report", user="instructor1")
    assert _grades(hub.COURSE_ROOT / "grades.csv") == in_hub | {"student1": in_hub["student1"] + hand_graded}
    _two_graders_at_once()
    _cli(*course, "report", user="instructor1")
    both = {"student1": in_hub["student1"] + hand_graded, "student2": in_hub["student2"] + hand_graded}
    assert _grades(hub.COURSE_ROOT / "grades.csv") == both
    released = _cli(*course, "hub", "feedback", ASSIGNMENT, user="instructor1")
    assert "feedback released to: student1, student2" in released
    for student in students.values():
        student.fetch_feedback()
    graded = {name: hub.COURSE_ROOT / "feedback" / name / ASSIGNMENT / f"{ASSIGNMENT}.html" for name in answers}
    assert graded["student1"].read_bytes() != graded["student2"].read_bytes()
    for name in answers:
        pages = list(Path(pwd.getpwnam(name).pw_dir, ASSIGNMENT, "feedback").glob(f"*/{ASSIGNMENT}.html"))
        assert len(pages) == 1, pages
        assert pages[0].read_bytes() == graded[name].read_bytes()


def _hand_grade(browser, grader: str, student: str) -> float:
    """As ``grader``, in Chromium (a context of ``browser`` of their own): log in, open formgrader (the course's hub
    service) as a page of its own, and type full marks into every answer of ``student`` graded by hand. Returns the
    points given, once formgrader's API shows them saved."""
    user = BrowserUser(browser, grader)
    user.log_in()
    formgrader = user.open_formgrader()
    api = user.page.request
    notebooks = api.get(f"{formgrader}/api/submitted_notebooks/{ASSIGNMENT}/{ASSIGNMENT}").json()
    submission = next(notebook for notebook in notebooks if notebook["student"] == student)
    grades = f"{formgrader}/api/grades?submission_id={submission['id']}"
    by_hand = {grade["name"]: grade["max_score"] for grade in api.get(grades).json() if grade["auto_score"] is None}
    assert by_hand
    user.page.goto(f"{formgrader}/submissions/{submission['id']}/")
    # formgrader binds its score boxes once it has loaded the grades (and would reset what was typed before)
    user.page.wait_for_function("() => formgrader.grades?.loaded && formgrader.comments?.loaded", timeout=60_000)
    for name, points in by_hand.items():
        box = user.page.locator(f"input.score#{name}")
        box.fill(f"{points:g}")
        box.press("Tab")  # formgrader saves a score when it changes
    deadline = time.monotonic() + 60
    while {g["name"]: g["manual_score"] for g in api.get(grades).json() if g["name"] in by_hand} != by_hand:
        assert time.monotonic() < deadline, api.get(grades).json()
        time.sleep(0.5)
    user.page.screenshot(path=str(SCREENSHOTS / "hub-grader1-formgrader.png"))
    user.page.close()
    return sum(by_hand.values())


BY_HAND = """
import sys
from pathlib import Path
from nbgrader.api import Gradebook
from autograder.course import Course
student, comment = sys.argv[1:]
url = Course(Path.cwd()).db_url
with Gradebook(url) as gradebook:
    for _ in range(20):
        for notebook in gradebook.find_submission("%s", student).notebooks:
            for grade in notebook.grades:
                if grade.auto_score is None:
                    grade.manual_score = grade.max_score
            for remark in notebook.comments:
                remark.manual_comment = comment
        gradebook.db.commit()
print(url)
""" % ASSIGNMENT
"""As the user it runs as, in the course directory, through nbgrader's gradebook API: give full marks to every
answer of the student graded by hand and write a comment on every cell, twenty times over, one commit each."""


def _two_graders_at_once() -> None:
    """instructor1 (student2's answers) and grader1 (student1's, which grader1 already graded in formgrader) grade
    by hand at the same time, each in their own process; both land."""
    comments = {"instructor1": ("student2", "Say what the view shares."), "grader1": ("student1", "Well argued.")}
    graders = {}
    for user, (student, comment) in comments.items():
        command, env = _as_user([sys.executable, "-c", BY_HAND, student, comment], user)
        pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
        graders[user] = subprocess.Popen(command, cwd=hub.COURSE_ROOT, env=env, text=True, **pipes)
    for user, process in graders.items():
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, (user, err)
        assert out.startswith("postgresql+psycopg2://"), out
    assert not (hub.COURSE_ROOT / "gradebook.db").exists()
    read = "; ".join([
        "from pathlib import Path", "from nbgrader.api import Gradebook", "from autograder.course import Course",
        "gradebook = Gradebook(Course(Path.cwd()).db_url)",
        f"print(sorted({{(s.student.id, c.manual_comment) for s in gradebook.assignment_submissions('{ASSIGNMENT}')"
        " for n in s.notebooks for c in n.comments}))",
    ])
    written = _run([sys.executable, "-c", read], user="instructor1", cwd=hub.COURSE_ROOT)
    assert str(sorted(comments.values())) in written.splitlines(), written


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as file:
        return list(csv.DictReader(file))


def _grades(path: Path) -> dict[str, float]:
    """``{student: score}`` of ASSIGNMENT in a grades.csv."""
    return {row["student_id"]: float(row["score"]) for row in _rows(path) if row["assignment"] == ASSIGNMENT}


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
    str(INBOUND),
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
    submissions = list(INBOUND.glob(f"student2+{ASSIGNMENT}+*"))
    assert submissions
    for submission in submissions:
        for command in (["cat", str(submission / f"{ASSIGNMENT}.ipynb")], ["rm", "-rf", str(submission)]):
            done = subprocess.run(["runuser", "-u", "student1", "--", *command], capture_output=True, text=True)
            assert done.returncode != 0 and "Permission denied" in done.stderr, (command, done.stderr)
        assert (submission / f"{ASSIGNMENT}.ipynb").exists()


def test_a_student_cannot_open_the_gradebook_database(logged_in):
    server = hub.gradebook_server()
    login = {"dbname": server.database, "user": server.database, "host": str(server.socket)}
    connect = f"import psycopg2; psycopg2.connect(**{login!r})"
    command = ["runuser", "-u", "student1", "--", sys.executable, "-c", connect]
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode != 0 and "Permission denied" in done.stderr, done.stderr


def test_a_student_cannot_open_formgrader(logged_in):
    student = logged_in["student1"]
    page = student.http.get(f"{BASE}/services/{hub.COURSE_ID}/formgrader/", timeout=60)
    assert page.status_code == 403, (page.status_code, page.url)
    assert student.server("GET", "formgrader").status_code == 404  # not in their own server either
    assert student.server("GET", "assignments", params={"course_id": hub.COURSE_ID}).status_code == 200


def test_collect_takes_the_time_from_the_exchange_not_from_the_student(demo_hub):
    """student3 submits from a terminal, then rewrites their submission's timestamp.txt to an early time: the
    collected time is when the exchange's files last changed."""
    start = datetime.now(timezone.utc)
    _run(["nbgrader", "fetch_assignment", ASSIGNMENT], user="student3")
    _run(["nbgrader", "submit", ASSIGNMENT], user="student3")
    (submission,) = INBOUND.glob(f"student3+{ASSIGNMENT}+*")
    forged = "2020-01-01 00:00:00.000000 UTC"
    _run(["sh", "-c", f"echo '{forged}' > '{submission}/timestamp.txt'"], user="student3")
    _cli("--course", str(hub.COURSE_ROOT), "hub", "collect", ASSIGNMENT, user="instructor1")
    collected = (hub.COURSE_ROOT / hub.COLLECTED / "student3" / ASSIGNMENT / "timestamp.txt").read_text().strip()
    assert start <= datetime.strptime(collected, "%Y-%m-%d %H:%M:%S.%f UTC").replace(tzinfo=timezone.utc)
    assert (submission / "timestamp.txt").read_text().strip() == forged


def test_stop_leaves_no_process(demo_hub):
    before = [process.pid for process in hub.hub_processes()]
    assert before
    _cli("hub", "stop")
    assert hub.hub_processes() == []
    assert "hub not running" in _cli("hub", "status")
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{BASE}/hub/api/", timeout=5)
    assert not (hub.STATE / "opened.json").exists()
    assert not hub.gradebook_server().running
    after = _modes(ROOT)  # the repository's entries as they were before the hub started (others may come meanwhile)
    assert {name: after[name] for name in demo_hub if name in after} == {
        name: mode for name, mode in demo_hub.items() if name in after
    }
