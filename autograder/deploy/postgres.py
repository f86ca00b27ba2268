"""A PostgreSQL server for the course's gradebook, where several instructors and graders write at once
(``hub start --postgres``; docs/hub.md).

The server is Debian's ``postgresql`` package's, run with a data folder of its own (not the system's cluster): it
listens on a Unix socket only, in a folder that only the course's staff may pass; each staff account logs in by
its Unix name (``peer``) as the one database role that owns the gradebook's database. nbgrader reaches it through
the SQLAlchemy URL :attr:`Server.url` (``CourseDirectory.db_url``) with psycopg2.
"""

from __future__ import annotations

import getpass
import os
import pwd
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from ..course import CourseError

BINARIES = Path("/usr/lib/postgresql")
"""Where Debian's ``postgresql-<version>`` packages keep ``initdb``, ``pg_ctl`` and ``postgres`` (``<version>/bin``)."""
INSTALL = "apt-get install postgresql"
EXIT_WAIT_S = 10
"""How long :func:`stop` waits for the server's processes to exit once ``pg_ctl`` has returned."""


@dataclass(frozen=True)
class Server:
    """One PostgreSQL server and the gradebook's database in it."""

    data: Path
    """The server's data folder (made by ``initdb``; its log is ``server.log`` in it)."""
    socket: Path
    """The folder of its Unix socket."""
    database: str = "pytorch_tensors"
    """The gradebook's database, and the role that owns it."""

    @property
    def url(self) -> str:
        """The gradebook's SQLAlchemy URL (psycopg2, the Unix socket, the owning role)."""
        return f"postgresql+psycopg2://{self.database}@/{self.database}?host={self.socket}"

    @property
    def running(self) -> bool:
        """Whether the server answers (``pg_ctl status``)."""
        if not (self.data / "postmaster.pid").exists():
            return False
        return _as_owner([str(binaries() / "pg_ctl"), "status", "-D", str(self.data)], check=False).returncode == 0


def binaries() -> Path:
    """The ``bin`` folder of the newest PostgreSQL under :data:`BINARIES`.

    Raises:
        CourseError: PostgreSQL is not installed (the message says how to install it).
    """
    found = sorted(BINARIES.glob("*/bin/pg_ctl"), key=lambda path: int(path.parent.parent.name))
    if not found:
        raise CourseError(f"no PostgreSQL server under {BINARIES}: as root, {INSTALL}")
    return found[-1].parent


def owner() -> str:
    """The Unix account the server runs as: Debian's ``postgres`` when run as root (the server refuses root), else
    the calling user."""
    return "postgres" if os.geteuid() == 0 else getpass.getuser()


def start(
    server: Server, staff: list[str], *, staff_group: int | None = None, env: dict[str, str] | None = None
) -> str:
    """Start ``server`` (creating its data folder, role and database the first time) and return its URL; a server
    already running is left as it is but for who may log in, which is written again from ``staff`` (Unix accounts
    allowed to log in as the database's role) and read at the next start.

    The socket folder belongs to :func:`owner` and to ``staff_group`` (a gid; mode ``0710``: the group may only pass
    through), or is closed to all others (``0700``) without it. ``env``: the server's environment (the hub marks
    its processes there).

    Raises:
        CourseError: PostgreSQL is not installed, or ``initdb``, ``pg_ctl`` or ``psql`` failed (their output
            quoted; the server's own log is ``server.log`` in the data folder).
    """
    bin = binaries()
    account = pwd.getpwnam(owner())
    fresh = not (server.data / "PG_VERSION").exists()
    socket_group, socket_mode = (account.pw_gid, 0o700) if staff_group is None else (staff_group, 0o710)
    for folder, group, mode in ((server.data, account.pw_gid, 0o700), (server.socket, socket_group, socket_mode)):
        folder.mkdir(parents=True, exist_ok=True)
        os.chown(folder, account.pw_uid, group)
        folder.chmod(mode)
    if fresh:
        _as_owner([str(bin / "initdb"), "-D", str(server.data), "-U", account.pw_name, "-E", "UTF8", "--no-locale"])
        settings = f"listen_addresses = ''\nunix_socket_directories = '{server.socket}'\n"
        _append(server.data / "postgresql.conf", settings, account)
    hba = f"local all {account.pw_name} peer\nlocal {server.database} {server.database} peer map=staff\n"
    ident = "".join(f"staff {user} {server.database}\n" for user in staff)
    for name, text in (("pg_hba.conf", hba), ("pg_ident.conf", ident)):
        (server.data / name).write_text(text, encoding="utf-8")
        os.chown(server.data / name, account.pw_uid, account.pw_gid)
    if not server.running:
        log = str(server.data / "server.log")
        _as_owner([str(bin / "pg_ctl"), "start", "-D", str(server.data), "-l", log, "-w", "-t", "60"], env=env)
    if fresh:
        psql = [str(bin / "psql"), "-h", str(server.socket), "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-c"]
        _as_owner([*psql, f"CREATE ROLE {server.database} LOGIN"])
        _as_owner([*psql, f"CREATE DATABASE {server.database} OWNER {server.database}"])
    return server.url


def stop(server: Server) -> bool:
    """Stop ``server`` (``pg_ctl stop -m fast``: open sessions are ended, the data is kept) and wait until its
    processes have exited. Returns whether it was running.

    ``pg_ctl stop -w`` returns once the server has removed ``postmaster.pid``, which it does on its way out, before
    the process exits; so the server's processes, found before the stop, are waited for here (at most
    :data:`EXIT_WAIT_S` seconds; an exited process that nobody has reaped yet counts as exited).

    Raises:
        CourseError: ``pg_ctl`` failed (its output quoted), or a process of the server still runs after
            :data:`EXIT_WAIT_S` seconds.
    """
    if not server.running:
        return False
    processes = _processes(server)
    _as_owner([str(binaries() / "pg_ctl"), "stop", "-D", str(server.data), "-m", "fast", "-w", "-t", "60"])
    deadline = time.monotonic() + EXIT_WAIT_S
    while running := [process for process in processes if _runs(process)]:
        if time.monotonic() > deadline:
            raise CourseError(f"PostgreSQL stopped but its processes {[p.pid for p in running]} still run")
        time.sleep(0.01)
    return True


def _processes(server: Server) -> list[psutil.Process]:
    """The server's main process (its pid is the first line of ``postmaster.pid``) and all of its children; none
    when it has just exited."""
    try:
        main = psutil.Process(int((server.data / "postmaster.pid").read_text(encoding="utf-8").split()[0]))
        return [main, *main.children(recursive=True)]
    except (FileNotFoundError, psutil.NoSuchProcess):
        return []


def _runs(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _append(path: Path, text: str, account: pwd.struct_passwd) -> None:
    with open(path, "a", encoding="utf-8") as file:
        file.write(text)
    os.chown(path, account.pw_uid, account.pw_gid)


def _as_owner(command: list[str], *, check: bool = True, env: dict[str, str] | None = None):
    """Run ``command`` as :func:`owner` (through ``runuser`` as root) in ``/``; raise CourseError with its output
    when it fails and ``check``."""
    if os.geteuid() == 0:
        command = ["runuser", "-u", owner(), "--", *command]
    done = subprocess.run(command, cwd="/", env=env, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise CourseError(f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return done
