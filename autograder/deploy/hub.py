"""The course on a multi-user JupyterHub on one Linux machine: ``python -m autograder hub start|stop|status``.

What ``start`` sets up and runs (as root; docs/hub.md):

- JupyterHub (``jupyterhub_config.py`` beside this file) with PAM logins of real Unix accounts, each user's server
  started as that user by ``LocalProcessSpawner`` from this environment, under per-process and per-user limits
  (``prlimit``), behind configurable-http-proxy;
- the course directory (:data:`COURSE_ROOT`): a copy of what the instructor needs (``source/``, ``release/``,
  ``nbgrader_config.py``; the package is imported from this repository), owned by the first instructor and the group
  :data:`GRADERS_GROUP` (instructors and graders), closed to everyone else;
- nbgrader's exchange (:data:`EXCHANGE_ROOT`), and per role a Jupyter configuration folder that points each user's
  nbgrader at it and at the course;
- with ``demo``, the accounts of :data:`DEMO_ACCOUNTS` and their passwords (:func:`demo_password`).
- with ``postgres``, a PostgreSQL server for the gradebook (:func:`gradebook_server`, :mod:`.postgres`).

The hub's state folder (:data:`STATE`) holds the settings, the logs and the pid files; every process the hub starts
carries ``PYTORCH_TENSORS_HUB=<state folder>`` in its environment, by which ``stop`` finds and ends them all.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import psutil

from ..course import Course, CourseError, nbgrader_failure, run_nbgrader
from . import postgres
from .exchange import ACL_XATTR, access_acl

STATE = Path("/var/lib/pytorch-tensors-hub")
"""The hub's state folder: settings.json, JupyterHub's database and cookie secret, logs, pid files."""
COURSE_ROOT = Path("/srv/pytorch-tensors")
"""The course directory the hub's instructors and graders work in."""
EXCHANGE_ROOT = Path("/usr/local/share/nbgrader/exchange")
"""nbgrader's exchange (its default ``Exchange.root``)."""
COURSE_ID = "pytorch-tensors"
GRADERS_GROUP = "pytorch-tensors-graders"
"""The Unix group of the course directory: the instructors and the graders."""
USERS_GROUP = "pytorch-tensors-hub"
"""The Unix group of every user of the hub: it may pass through the folders above the environment's Python."""
DEMO_ACCOUNTS = {
    "instructors": ["instructor1"],
    "graders": ["grader1"],
    "students": ["student1", "student2", "student3"],
}
CONFIG_FILE = Path(__file__).resolve().parent / "jupyterhub_config.py"
COURSE_ITEMS = ("source", "release", "nbgrader_config.py")
"""What the hub's course directory is copied from, out of this repository."""
MEMORY_LIMIT = 2 * 1024**3
"""Bytes of address space each process of a user's server may map (``RLIMIT_AS``): a kernel that imports torch maps
under 1 GiB."""
PROCESS_LIMIT = 256
"""Processes and threads per user (``RLIMIT_NPROC``)."""
PROXY_PACKAGE_DIR = "/usr/share/nodejs"
"""Where Debian's node-configurable-http-proxy keeps its JavaScript modules (``NODE_PATH`` for a Node.js that does not
look there by itself)."""


CLOSED = "closed.json"
"""In the state folder: the modes of the repository's entries before ``start`` closed them, restored by ``stop``."""
COLLECTED = "collected"
"""Where ``hub collect`` puts the exchange's submissions in the course directory, in nbgrader's ``submitted/`` layout
(``grade`` reads them from there and writes its own ``submitted/``)."""


class HubError(CourseError):
    """The hub cannot be started or stopped as asked; the message says why."""


def demo_password(user: str) -> str:
    """The password ``hub start --demo`` gives the demo account ``user`` (docs/hub.md lists them)."""
    return f"{user}-tensors"


@dataclass
class Settings:
    """What the hub runs with, written to ``settings.json`` in the state folder and read by jupyterhub_config.py."""

    instructors: list[str]
    graders: list[str]
    students: list[str]
    ip: str = "127.0.0.1"
    port: int = 8000
    state: str = str(STATE)
    course_root: str = str(COURSE_ROOT)
    exchange: str = str(EXCHANGE_ROOT)
    python: str = sys.executable
    package_root: str = str(Path(__file__).resolve().parents[2])
    """The folder that holds this package (users' servers import :mod:`autograder.deploy.exchange` from it)."""
    proxy: str = field(default_factory=lambda: shutil.which("configurable-http-proxy") or "configurable-http-proxy")
    memory_limit: int = MEMORY_LIMIT
    process_limit: int = PROCESS_LIMIT
    postgres: bool = False
    """Keep the gradebook in a PostgreSQL server of the hub's own (:func:`gradebook_server`), not in SQLite."""

    @property
    def hub_port(self) -> int:
        """The hub's own port (its API, on 127.0.0.1): ``port + 81``."""
        return self.port + 81

    @property
    def proxy_api_port(self) -> int:
        """configurable-http-proxy's API port (on 127.0.0.1): ``port + 1``."""
        return self.port + 1

    @property
    def formgrader_port(self) -> int:
        """The formgrader service's port (on 127.0.0.1): ``port + 2``."""
        return self.port + 2

    @property
    def gradebook_url(self) -> str | None:
        """The gradebook's URL that the staff's nbgrader configuration names (``CourseDirectory.db_url``): the
        hub's PostgreSQL server's with :attr:`postgres`, else none (nbgrader's SQLite file in the course)."""
        return gradebook_server(Path(self.state)).url if self.postgres else None

    @property
    def url(self) -> str:
        """Where users open the hub."""
        return f"http://{self.ip}:{self.port}"

    def write(self, path: Path) -> None:
        """Write the settings (and the derived ports) to ``path`` as JSON."""
        ports = {"hub_port": self.hub_port, "proxy_api_port": self.proxy_api_port}
        data = asdict(self) | ports | {"formgrader_port": self.formgrader_port, "course_id": COURSE_ID}
        path.write_text(json.dumps(data, indent=1), encoding="utf-8")

    @classmethod
    def read(cls, state: Path) -> Settings:
        """The settings a hub was started with, from ``state/settings.json``.

        Raises:
            HubError: there is none (no hub was ever started with this state folder).
        """
        path = state / "settings.json"
        if not path.exists():
            raise HubError(f"no hub was started with {state}")
        data = json.loads(path.read_text(encoding="utf-8"))
        return cls(**{key: value for key, value in data.items() if key in cls.__dataclass_fields__})


def gradebook_server(state: Path = STATE) -> postgres.Server:
    """The PostgreSQL server of the hub started with ``state`` (``hub start --postgres``): its data in
    ``state/postgres``, its socket in ``state/postgres-socket``."""
    return postgres.Server(data=state / "postgres", socket=state / "postgres-socket")


def start(course: Course, settings: Settings, *, demo: bool = False, timeout: float = 120.0) -> str:
    """Start the hub in the background (as root) and return what :func:`status` then says; a hub already running
    from ``settings.state`` is left as it is.

    ``demo``: create the demo accounts first (:data:`DEMO_ACCOUNTS`, :func:`demo_password`); without it every user
    named in ``settings`` must already have a Unix account. The course directory is copied from ``course`` only
    when it does not exist yet (an instructor's work there is never overwritten). With ``settings.postgres`` the
    hub's PostgreSQL server (:func:`gradebook_server`) is started too, the instructors and graders may log in to
    it, and their nbgrader configuration names it as the gradebook.

    Raises:
        HubError: not root, a user without an account, a port taken, a folder above this environment's Python
            closed to others that already has an ACL (:func:`_open_path`), or the hub not answering within
            ``timeout`` seconds (its log's end is in the message).
        CourseError: PostgreSQL asked for and not installed, or it did not start (its output quoted).
    """
    state = Path(settings.state)
    if _hub_pid(state) is not None:
        return status(state)
    if os.geteuid() != 0:
        raise HubError("the hub runs as root (PAM logins, each user's server started as that user)")
    if demo:
        for user in settings.instructors + settings.graders + settings.students:
            _ensure_account(user, demo_password(user))
    _check_accounts(settings)
    _ensure_group(USERS_GROUP, settings.instructors + settings.graders + settings.students)
    for port in (settings.port, settings.proxy_api_port, settings.hub_port, settings.formgrader_port):
        if _port_taken(settings.ip if port == settings.port else "127.0.0.1", port):
            raise HubError(f"port {port} is taken: start the hub on another (--port)")
    _set_up_state(settings)
    _open_path(settings, state)
    _set_up_course(course, settings)
    _close_repository(Path(settings.package_root), state)
    environment = os.environ | {
        "PYTORCH_TENSORS_HUB": str(state),
        "PYTORCH_TENSORS_HUB_SETTINGS": str(state / "settings.json"),
        "PATH": os.pathsep.join([str(Path(settings.python).parent), os.environ.get("PATH", "/usr/bin:/bin")]),
        "NODE_PATH": os.pathsep.join(filter(None, [os.environ.get("NODE_PATH"), PROXY_PACKAGE_DIR])),
    }
    if settings.postgres:
        staff, group = settings.instructors + settings.graders, grp.getgrnam(GRADERS_GROUP).gr_gid
        postgres.start(gradebook_server(state), staff, staff_group=group, env=environment)
    with open(state / "jupyterhub.log", "ab") as log:
        hub = subprocess.Popen(
            [settings.python, "-m", "jupyterhub", "-f", str(CONFIG_FILE)],
            cwd=state,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    (state / "hub.pid").write_text(str(hub.pid), encoding="utf-8")
    deadline = time.monotonic() + timeout
    while not _answers(settings):
        if hub.poll() is not None or time.monotonic() > deadline:
            stop(state)
            tail = (state / "jupyterhub.log").read_text(encoding="utf-8", errors="replace")[-3000:]
            raise HubError(f"JupyterHub did not come up at {settings.url}:\n{tail}")
        time.sleep(0.5)
    return status(state)


def stop(state: Path = STATE, *, timeout: float = 30.0) -> list[int]:
    """Stop the hub started with ``state`` and every process it started (proxy, users' servers, their kernels and
    terminals, services, the PostgreSQL server): SIGTERM to the hub (which stops its servers and proxy), PostgreSQL's
    own fast shutdown, then SIGKILL to whatever still carries the hub's mark after ``timeout`` seconds. The modes and
    ACLs that ``start`` changed on folders outside the hub's own are restored. Returns the process ids that were
    running; nothing running is not an error.

    Raises:
        CourseError: PostgreSQL's ``pg_ctl stop`` failed (its output quoted).
    """
    running = hub_processes(state)
    pid = _hub_pid(state)
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
    postgres.stop(gradebook_server(state))
    deadline = time.monotonic() + timeout
    while hub_processes(state) and time.monotonic() < deadline:
        time.sleep(0.3)
    for process in hub_processes(state):
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(hub_processes(state), timeout=5)
    (state / "hub.pid").unlink(missing_ok=True)
    opened = state / "opened.json"
    if opened.exists():
        for folder, mode in json.loads(opened.read_text(encoding="utf-8")).items():
            os.removexattr(folder, ACL_XATTR)
            os.chmod(folder, mode)
        opened.unlink()
    closed = state / CLOSED
    if closed.exists():
        for entry, mode in json.loads(closed.read_text(encoding="utf-8")).items():
            os.chmod(entry, mode)
        closed.unlink()
    return sorted(process.pid for process in running)


def collect(course: Course, assignment_id: str, exchange: Path = EXCHANGE_ROOT) -> Path:
    """Collect the exchange's submissions of ``assignment_id`` (nbgrader's ``collect``, the latest of each student)
    into ``COLLECTED/<student>/<assignment_id>/`` of the course, for ``python -m autograder grade COLLECTED``; run by
    the instructor who released it. Returns that folder.

    Each collected ``timestamp.txt`` is then rewritten with the time the exchange's filesystem gives the submission
    (:func:`submitted_at`), not the one the student's own process wrote there, which a student can set.

    Raises:
        CourseError: nbgrader's collect failed (its error lines quoted).
        HubError: a collected notebook matches no submission in the exchange.
    """
    _nbgrader(course, "collect", f"--CourseDirectory.submitted_directory={COLLECTED}", assignment_id)
    inbound = exchange / COURSE_ID / "inbound"
    for folder in sorted((course.root / COLLECTED).glob(f"*/{assignment_id}")):
        notebooks = {path.name: path.read_bytes() for path in folder.glob("*.ipynb")}
        same = [
            submission
            for submission in inbound.glob(f"{folder.parent.name}+{assignment_id}+*")
            if all(_read(submission / name) == content for name, content in notebooks.items())
        ]
        if not same:
            raise HubError(f"{folder}: no submission in {inbound} holds these notebooks")
        when = min(submitted_at(submission) for submission in same)
        (folder / "timestamp.txt").write_text(when.strftime("%Y-%m-%d %H:%M:%S.%f %Z"), encoding="utf-8")
    return course.root / COLLECTED


def submitted_at(submission: Path) -> datetime:
    """When a submission in the exchange was last changed, in UTC: the latest status-change time (``st_ctime``, set
    by the kernel, which no user can set back) of its folder and its files."""
    paths = [submission, *(path for path in submission.rglob("*"))]
    return datetime.fromtimestamp(max(path.stat().st_ctime for path in paths), tz=timezone.utc)


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def release_feedback(course: Course, assignment_id: str) -> list[str]:
    """Release each collected student's feedback page of ``assignment_id`` (written by ``grade``) through the
    exchange (nbgrader's ``release_feedback``), where the student's *Fetch Feedback* finds it: the exchange names it
    by the secret of the student's submission, which is copied from ``COLLECTED/`` beside the page first. Run by the
    instructor who released the assignment. Returns the students whose feedback was released.

    Raises:
        HubError: a feedback page of a student whose submission was not collected.
        CourseError: nbgrader's release_feedback failed (its error lines quoted).
    """
    students = []
    for page in sorted(course.root.glob(f"feedback/*/{assignment_id}/{assignment_id}.html")):
        student = page.parent.parent.name
        secret = course.root / COLLECTED / student / assignment_id / "submission_secret.txt"
        if not secret.exists():
            raise HubError(f"{student}'s submission of {assignment_id} was not collected: no {secret}")
        shutil.copy(secret, page.parent / secret.name)
        students.append(student)
    _nbgrader(course, "release_feedback", assignment_id)
    return students


def _nbgrader(course: Course, *args: str) -> None:
    """``nbgrader ARGS`` in the course directory (:func:`autograder.course.run_nbgrader`).

    Raises:
        CourseError: nbgrader failed (its error lines quoted).
    """
    process = run_nbgrader(course, *args)
    if process.returncode != 0:
        raise nbgrader_failure(process, f"nbgrader {args[0]}")


def status(state: Path = STATE) -> str:
    """What runs of the hub started with ``state``: its address and each of its processes (id, user, command), or
    that it is not running."""
    processes = hub_processes(state)
    if _hub_pid(state) is None and not processes:
        return f"hub not running (state folder {state})"
    settings = Settings.read(state)
    health = "answers" if _answers(settings) else "does not answer"
    lines = [f"hub at {settings.url} ({health}), course {settings.course_root}, exchange {settings.exchange}"]
    for process in processes:
        try:
            lines.append(f"  {process.pid:>7} {process.username():<12} {' '.join(process.cmdline())[:100]}")
        except psutil.NoSuchProcess:
            pass
    return "\n".join(lines)


def hub_processes(state: Path = STATE) -> list[psutil.Process]:
    """Every live process that carries the mark of the hub started with ``state`` (``PYTORCH_TENSORS_HUB`` in its
    environment), the hub itself included."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("PYTORCH_TENSORS_HUB") == str(state) and process.status() != "zombie":
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return found


def _hub_pid(state: Path) -> int | None:
    try:
        pid = int((state / "hub.pid").read_text(encoding="utf-8"))
        process = psutil.Process(pid)
        if process.environ().get("PYTORCH_TENSORS_HUB") == str(state) and process.status() != "zombie":
            return pid
    except (FileNotFoundError, ValueError, psutil.NoSuchProcess, psutil.ZombieProcess):
        pass
    return None


def _answers(settings: Settings) -> bool:
    try:
        with urllib.request.urlopen(f"{settings.url}/hub/api/", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _port_taken(ip: str, port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex((ip, port)) == 0


def _open_path(settings: Settings, state: Path) -> None:
    """Every user's server runs this environment's Python (the virtual environment and the interpreter it links
    to): each folder above them that is closed to others gets a POSIX ACL letting :data:`USERS_GROUP` pass through
    (search, not list: ``--x``), which ``stop`` removes again, restoring the mode that ``state/opened.json`` keeps.

    Raises:
        HubError: such a folder already has an ACL (this function does not merge ACLs).
    """
    python = Path(settings.python)
    folders = {folder for path in (python, python.resolve()) for folder in path.parents}
    closed = sorted(str(folder) for folder in folders if not folder.stat().st_mode & stat.S_IXOTH)
    opened = {}
    for folder in closed:
        if ACL_XATTR in os.listxattr(folder):
            raise HubError(f"{folder} is closed to other users and has an ACL: give {USERS_GROUP} search (x) on it")
        mode = stat.S_IMODE(os.stat(folder).st_mode)
        os.setxattr(folder, ACL_XATTR, access_acl(mode, grp.getgrnam(USERS_GROUP).gr_gid, 1))
        opened[folder] = mode
    if opened:
        (state / "opened.json").write_text(json.dumps(opened), encoding="utf-8")


def _ensure_group(name: str, members: list[str]) -> None:
    try:
        grp.getgrnam(name)
    except KeyError:
        subprocess.run(["groupadd", name], check=True)
    for user in members:
        subprocess.run(["usermod", "--append", "--groups", name, user], check=True)


def _ensure_account(user: str, password: str) -> None:
    """A Unix account ``user`` with a private home and ``password`` (created when missing)."""
    try:
        home = Path(pwd.getpwnam(user).pw_dir)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", user], check=True)
        home = Path(pwd.getpwnam(user).pw_dir)
    subprocess.run(["chpasswd"], input=f"{user}:{password}\n", text=True, check=True)
    home.chmod(0o700)


def _check_accounts(settings: Settings) -> None:
    for user in settings.instructors + settings.graders + settings.students:
        try:
            pwd.getpwnam(user)
        except KeyError:
            raise HubError(f"{user} has no Unix account: create it (useradd) or start with --demo") from None
    if not settings.instructors:
        raise HubError("the hub needs at least one instructor")


def _set_up_course(course: Course, settings: Settings) -> None:
    """The graders' group, the course directory (copied once, then owned by the first instructor and the group,
    closed to others) and the exchange (anyone may write, only owners delete: mode 1777)."""
    _ensure_group(GRADERS_GROUP, settings.instructors + settings.graders)
    root = Path(settings.course_root)
    if not root.exists():
        root.mkdir(parents=True)
        for item in COURSE_ITEMS:
            source = course.root / item
            ignore = shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__", "*.pyc")
            if source.is_dir():
                shutil.copytree(source, root / item, ignore=ignore)
            else:
                shutil.copy(source, root / item)
    owner = pwd.getpwnam(settings.instructors[0]).pw_uid
    group = grp.getgrnam(GRADERS_GROUP).gr_gid
    for folder, names, files in os.walk(root):
        for path in [Path(folder), *(Path(folder) / name for name in files)]:
            os.chown(path, owner, group)
            mode = path.stat().st_mode
            path.chmod((mode | stat.S_IRGRP | stat.S_IWGRP | (stat.S_IXGRP if mode & stat.S_IXUSR else 0)) & ~0o007)
        Path(folder).chmod(0o2770)
    exchange = Path(settings.exchange)
    exchange.mkdir(parents=True, exist_ok=True)
    exchange.chmod(0o1777)


def _close_repository(root: Path, state: Path) -> None:
    """The repository the users' servers import this package from must be passable by them, but they must read
    nothing else of it (solutions in source/, notebooks/, tests/; a gradebook): every top-level entry but the
    package and the virtual environment is closed to others (``o-rwx``) while the hub runs. Each entry's mode before
    is kept in ``state/closed.json`` (the first one, when a hub that was not stopped starts again), which ``stop``
    restores."""
    record = state / CLOSED
    before = json.loads(record.read_text(encoding="utf-8")) if record.exists() else {}
    for entry in root.iterdir():
        if entry.name not in ("autograder", ".venv") and not entry.is_symlink():
            mode = stat.S_IMODE(entry.stat().st_mode)
            before.setdefault(str(entry), mode)
            entry.chmod(mode & ~0o007)
    record.write_text(json.dumps(before), encoding="utf-8")
    record.chmod(0o600)


def _set_up_state(settings: Settings) -> None:
    """The state folder (closed to users but for the per-role Jupyter configuration folders) and its settings."""
    state = Path(settings.state)
    state.mkdir(parents=True, exist_ok=True)
    state.chmod(0o711)
    settings.write(state / "settings.json")
    (state / "settings.json").chmod(0o600)
    course = (
        f"c.CourseDirectory.course_id = {COURSE_ID!r}\nc.Exchange.root = {settings.exchange!r}\n"
        'c.ExchangeFactory.submit = "autograder.deploy.exchange.PrivateSubmit"\n'
    )
    staff = f"c.CourseDirectory.root = {settings.course_root!r}\n"
    if settings.gradebook_url:
        staff += f"c.CourseDirectory.db_url = {settings.gradebook_url!r}\n"
    for role, extra in {"student": "", "grader": staff, "instructor": staff}.items():
        folder = state / "jupyter" / role
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "nbgrader_config.py").write_text(f"c = get_config()  # noqa: F821\n{course}{extra}", encoding="utf-8")
    # nbgrader enables all its extensions for the whole environment: students get the Assignments panel and Validate
    # only, not formgrader, the course list or the assignment-creation toolbar.
    student = state / "jupyter" / "student"
    off = {f"nbgrader.server_extensions.{name}": False for name in ("formgrader", "course_list")}
    server = {"ServerApp": {"jpserver_extensions": off}}
    (student / "jupyter_server_config.json").write_text(json.dumps(server), "utf-8")
    (student / "labconfig").mkdir(exist_ok=True)
    plugins = {f"@jupyter/nbgrader:{name}": True for name in ("formgrader", "course-list", "create-assignment")}
    (student / "labconfig" / "page_config.json").write_text(json.dumps({"disabledExtensions": plugins}), "utf-8")
    for path in [state / "jupyter", *(state / "jupyter").rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
