"""Kernels forked from a preloaded process, inside the sandbox: the fork server and the kernel command.

Starting a kernel costs a new Python, ipykernel, and the imports of torch,
numpy and matplotlib (2 to 3 CPU seconds), every notebook again. A fork
server pays that once: it runs in a bubblewrap sandbox like a kernel's
(:mod:`autograder.kernel.sandbox`, as root with only CAP_SETUID/SETGID/SYS_ADMIN/NET_ADMIN), imports
:data:`PRELOAD`, and then forks one kernel at a time on request. Each
kernel, before it runs anything:

- starts a new session, in network, mount and IPC namespaces of its own with a
  fresh tmpfs on /tmp (its HOME; :func:`_own_namespaces`), System V IPC bounded in that namespace
  (:func:`_bound_ipc`), its working
  folder a tmpfs bounded in bytes and in files that the server mounted for
  the notebook (:func:`_work_folder`), a /dev/shm of its own (:func:`_own_shm`),
  moves into its folder and takes the environment it was sent;
- sets its resource limits (``setrlimit``: CPU, data segment, processes,
  file size, open files, core), empties its capability bounding set, then drops to its own unprivileged user
  (``setresgid``/``setresuid``; the capabilities go with root) and empties its inheritable set;
- can no longer create a user namespace or join a namespace (:func:`_refuse_user_namespaces`: a seccomp filter),
  so it can never again gain a capability to mount anything;
- reseeds ``random``, NumPy's and torch's generators (a fork copies them);
- runs ``ipykernel``'s ``IPKernelApp`` with the arguments jupyter_client
  gave.

While a kernel runs, the server watches the memory its processes hold
(:func:`memory_of`, every :data:`MEMORY_INTERVAL` seconds: what ``RLIMIT_DATA``
misses, shared memory and memory files, counted too, and what the System V objects of its IPC namespace hold,
read through the ``/proc/sysvipc`` files the kernel opened there and sent back) and kills them all past
the request's ``memory`` bytes. After a kernel ends, the server kills every
process left of its user (found
by any live thread) and empties its own /tmp before it serves the next request.
It then appends a line to the kernel's clean-up report (:func:`report_path`,
in the socket's folder): how many processes of the kernel had outlived it.
A kernel that left one has breached its isolation: its execution is not
stored for reuse (:attr:`autograder.kernel.sandbox.SandboxedKernelManager.breach`).

Before forking, the server also does the work every kernel's first tracebacks would repeat
(:func:`_warm_tracebacks`). It imports but runs no torch operation and starts no thread:
forking after torch has run a parallel operation hangs the child (GNU
OpenMP), and CUDA must never be initialised before a fork. matplotlib is
imported with the inline backend named in ``MPLBACKEND`` (as ipykernel
sets it), but ``matplotlib_inline`` itself is not preloaded: its import
hooks into an IPython shell, which only exists in the kernel.

This file runs as a script, with nothing but the standard library and the
preloaded modules, in four roles:

- ``forkserver.py serve SOCKET``: the server, inside the sandbox;
- ``forkserver.py kernel SOCKET REQUEST``: the kernel command jupyter_client
  starts (outside). It sends REQUEST (JSON: ``argv``, ``cwd``, ``env``,
  ``uid``, ``limits``, ``memory``, ``work``: ``size`` and ``files`` of the
  working folder, ``fresh`` for a notebook's first kernel; ``shm``: ``size`` and ``files`` of its /dev/shm;
  ``ipc``: the System V limits of its IPC namespace, :func:`_bound_ipc`)
  and then lives exactly as long as the kernel, exiting
  with its exit code; when it is killed, the server kills the kernel. So
  jupyter_client manages it like any kernel process;
- ``forkserver.py work REQUEST COMMAND...``: for a kernel in a sandbox of its own, run first inside that sandbox
  (as root there; without root, in a user and mount namespace it makes, where it has the capabilities to mount):
  mounts the kernel's working folder as the server mounts a forked kernel's (:func:`_work_folder`; REQUEST:
  ``folder``, ``source``, ``uid``, ``size``, ``files``) and its /dev/shm as a forked kernel mounts its own
  (:func:`_own_shm`; REQUEST's ``shm``), refuses user namespaces to itself and all it starts
  (:func:`_refuse_user_namespaces`) and execs COMMAND, which drops every capability (``setpriv``) before the
  kernel starts;
- ``forkserver.py ipc PID LIMITS FD`` (:func:`ipc`): run by the grader outside, it joins the IPC namespace of the
  sandbox process PID, bounds its System V objects (LIMITS, JSON as :func:`_bound_ipc` takes them; root only,
  ``{}`` leaves them), and sends open ``/proc/sysvipc`` files of that namespace back over the Unix socket FD,
  for the grader's memory watch (:func:`ipc_bytes`).

The socket lies in a folder only root may enter: a kernel cannot ask for
kernels.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import importlib
import json
import os
import shutil
import signal
import socket
import struct
import sys
import time

PRELOAD = (
    "numpy",
    "torch",
    "torch._dynamo",
    "torch.testing",
    "torch.utils.benchmark",
    "torch._decomp.decompositions_for_jvp",
    "matplotlib",
    "matplotlib.figure",
    "matplotlib.font_manager",
    "matplotlib.pyplot",
    "ipykernel.zmqshell",
    "ipykernel.debugger",
    "stack_data",
    "IPython.core.debugger",
    "IPython",
    "ipykernel.ipkernel",
    "ipykernel.kernelapp",
    "statistics",
)
"""Modules the server imports before forking: those the course's notebooks import, directly or through torch
(``torch._dynamo`` comes with the first optimizer step, ``torch._decomp.decompositions_for_jvp`` with the first
``torch.func.jvp``) or ipykernel (its debugger; ``stack_data`` formats the
first traceback), found by listing a kernel's ``sys.modules`` after each notebook. ``matplotlib.pyplot`` only
loads its backend at the first figure, in the kernel (checked: the same figures as unforked kernels)."""

TRACEBACK_SOURCES = (
    "torch/_tensor.py",
    "torch/autograd/__init__.py",
    "torch/autograd/graph.py",
    "torch/cuda/__init__.py",
)
"""torch's files (relative to its package folder) that the course's tracebacks pass through: ``backward``,
``autograd.grad``, a CUDA call on a machine without one. Found by listing the files named in the error outputs of
a benchmark batch (28 notebooks, 114 error outputs)."""

INLINE_BACKEND = "module://matplotlib_inline.backend_inline"

LIMITS = {
    "cpu": "RLIMIT_CPU",
    "data": "RLIMIT_DATA",
    "nproc": "RLIMIT_NPROC",
    "fsize": "RLIMIT_FSIZE",
    "nofile": "RLIMIT_NOFILE",
    "core": "RLIMIT_CORE",
    "msgqueue": "RLIMIT_MSGQUEUE",
}
"""Request ``limits`` keys (``prlimit``'s option names, which the plain sandbox passes) -> ``resource`` names."""


def serve(path: str) -> None:
    """Preload, listen on ``path`` and serve kernels one at a time, forever."""
    os.environ.setdefault("MPLBACKEND", INLINE_BACKEND)
    kept = set(os.listdir("/tmp"))  # the folders bwrap made for what it bound under /tmp (Python, say)
    for name in PRELOAD:
        importlib.import_module(name)
    _warm_tracebacks()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(4)
    _empty_tmp(kept)  # what the imports wrote (matplotlib's font list) stays in memory only, as for every kernel
    print("ready", flush=True)
    while True:
        connection, _ = server.accept()
        with connection:
            try:
                _serve_one(server, connection, kept, os.path.dirname(path))
            except Exception as error:  # a kernel command that went away early, say: serve the next one
                print(f"request failed: {type(error).__name__}: {error}", file=sys.stderr, flush=True)


def _warm_tracebacks() -> None:
    """Do once, before any fork, what IPython's first tracebacks in every kernel would do again: build pygments'
    Python lexer (its rules are compiled once per process), map every loaded module to its file
    (``inspect.getmodule``, which walks all of ``sys.modules`` for a frame of a cell: no module holds that file)
    and parse the :data:`TRACEBACK_SOURCES` (``stack_data`` keeps each file's syntax tree). Pure Python over
    source files: no torch operation runs, no thread starts. Measured in IPython shells forked after PRELOAD, running
    seven of the course's error cells: 0.27 s of CPU without this, 0.18 s with it."""
    import stack_data
    from IPython.core.ultratb import VerboseTB

    try:
        exec(compile("def cell():\n    raise ValueError\ncell()", "<warm-up>", "exec"), {})
    except ValueError:
        VerboseTB(theme_name="linux").structured_traceback(*sys.exc_info())
    torch_folder = os.path.dirname(sys.modules["torch"].__file__ or "")
    for name in TRACEBACK_SOURCES:
        stack_data.Source.for_filename(os.path.join(torch_folder, name))


def report_path(folder: str, uid: int) -> str:
    """The clean-up report of the kernels of user ``uid``, in the server's socket ``folder``: one JSON line per
    kernel served, ``{"survivors": N}`` (processes of the kernel found alive after it ended, and killed)."""
    return os.path.join(folder, f"clean-up-{uid}.jsonl")


def _serve_one(server: socket.socket, connection: socket.socket, kept: set[str], folder: str) -> None:
    """Fork the kernel ``connection`` asks for, watch it, clean up after it, and report the clean-up in
    ``folder`` (:func:`report_path`)."""
    request = json.loads(connection.makefile("r").readline())
    work = request["work"]
    if work["fresh"]:
        _work_folder(request["cwd"], request["uid"], work["size"], work["files"])
    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        server.close()
        ours.close()
        _kernel(connection, request, theirs)
    theirs.close()
    files: list[int] = []
    try:
        with ours:
            ours.settimeout(IPC_SECONDS)
            files = socket.recv_fds(ours, 16, len(IPC_FILES))[1]
        if len(files) != len(IPC_FILES):
            raise OSError("the kernel did not send its /proc/sysvipc files (it failed to start)")
        code = _watch(connection, pid, request["uid"], request["memory"], files)
    except BaseException:
        os.kill(pid, signal.SIGKILL)  # it may not have become its user yet, which the clean-up looks for
        os.waitpid(pid, 0)
        raise
    finally:
        for fd in files:
            os.close(fd)  # the kernel's IPC namespace, and all it holds, ends with its last process
        survivors = _clean_up(request["uid"], kept)
        with open(report_path(folder, request["uid"]), "a") as report:
            report.write(json.dumps({"survivors": survivors}) + "\n")
    try:
        connection.sendall(json.dumps({"exit": code}).encode() + b"\n")
    except OSError:
        pass  # the kernel command was killed: nobody waits for the code


MEMORY_INTERVAL = 0.1
"""Seconds between two readings of a kernel's memory (:func:`memory_of`)."""

IPC_SECONDS = 30
"""How long the server waits for a forked kernel's ``/proc/sysvipc`` files (:func:`ipc_files`)."""


def _watch(connection: socket.socket, pid: int, uid: int, memory: int, files: list[int]) -> int:
    """Wait for the kernel ``pid`` to end (SIGKILL it when ``connection`` closes); its exit code. Every
    :data:`MEMORY_INTERVAL` seconds, when the processes of ``uid`` and the System V objects listed by ``files``
    (the kernel's :func:`ipc_files`) hold more than ``memory`` bytes (:func:`memory_of`), SIGKILL them all: the
    kernel dies as if out of memory."""
    connection.settimeout(0.05)
    measured = time.monotonic()
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() - measured > MEMORY_INTERVAL:
            measured = time.monotonic()
            used = memory_of(uid, files)
            if used > memory:
                print(f"kernel of {uid} killed: {used} bytes of memory, over {memory}", file=sys.stderr, flush=True)
                for process in _processes_of(uid):
                    _kill(process)
        try:
            closed = connection.recv(1) == b""
        except TimeoutError:
            closed = False
        except OSError:
            closed = True
        if closed:
            os.kill(pid, signal.SIGKILL)


def _clean_up(uid: int, kept: set[str]) -> int:
    """Kill every process of ``uid`` left behind and empty /tmp but for ``kept``; how many processes were left (0:
    none outlived the kernel). Its IPC objects (System V, POSIX message queues) end with its IPC namespace."""
    survivors: set[int] = set()
    for _ in range(1000):
        left = _processes_of(uid)
        if not left:
            break
        survivors.update(left)
        for pid in left:
            _kill(pid)
        time.sleep(0.005)
    _empty_tmp(kept)
    return len(survivors)


def memory_of(uid: int, files: list[int]) -> int:
    """Bytes of memory the processes of ``uid`` hold (:func:`memory_of_processes`), and the System V objects listed
    by ``files`` (:func:`ipc_bytes`)."""
    return memory_of_processes(_processes_of(uid)) + ipc_bytes(files)


IPC_FILES = ("shm", "msg", "sem")
"""The ``/proc/sysvipc`` files of an IPC namespace, in the order :func:`ipc_files` opens them."""

IPC_OBJECT_BYTES = 2048
"""What one System V object costs the kernel before its contents (measured on Linux 6.18: an empty queue 264 bytes
of slab, a one-semaphore set 518, an unwritten segment 1,176 with its file): an overcount."""

MESSAGE_HEADER_BYTES, SEMAPHORE_BYTES = 48, 64
"""The kernel's ``struct msg_msg`` before each message's text, and its ``struct sem`` (cache-line aligned), x86-64
and aarch64 (``ipc/msg.c``, ``ipc/sem.c``)."""


def ipc_files() -> list[int]:
    """Open ``/proc/sysvipc/shm``, ``msg`` and ``sem`` (:data:`IPC_FILES`): each lists the IPC namespace of the
    process that opened it, for as long as it is open (and keeps that namespace)."""
    return [os.open(f"/proc/sysvipc/{name}", os.O_RDONLY) for name in IPC_FILES]


def ipc_bytes(files: list[int]) -> int:
    """Bytes of memory the System V objects listed by ``files`` (:func:`ipc_files`, read again from their start)
    hold: each object :data:`IPC_OBJECT_BYTES`; a shared memory segment its resident bytes (attached or not); a
    message queue twice its queued text and a :data:`MESSAGE_HEADER_BYTES` header per message (``kmalloc``
    rounds each allocation up, at most to twice: so 16,384 empty messages count as 1.5 MiB); a semaphore set twice
    :data:`SEMAPHORE_BYTES` per semaphore. None of these is counted by ``RLIMIT_DATA`` or by any process's pages."""
    counted = {
        "shm": lambda o: int(o["rss"]),
        "msg": lambda o: 2 * (int(o["cbytes"]) + MESSAGE_HEADER_BYTES * int(o["qnum"])),
        "sem": lambda o: 2 * SEMAPHORE_BYTES * int(o["nsems"]),
    }
    total = 0
    for name, fd in zip(IPC_FILES, files, strict=True):
        os.lseek(fd, 0, os.SEEK_SET)
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        header, *lines = b"".join(chunks).decode().splitlines()
        for line in lines:
            total += IPC_OBJECT_BYTES + counted[name](dict(zip(header.split(), line.split())))
    return total


def memory_of_processes(pids: list[int]) -> int:
    """Bytes of memory the processes ``pids`` hold, from /proc: their proportional share of private and shared
    resident pages (``Pss_Anon``, ``Pss_Shmem`` of ``smaps_rollup``: shared anonymous ``mmap`` included, which
    ``RLIMIT_DATA`` does not count; pages a fork shares with its parent counted once), the memory files
    (``memfd_create``) they hold open, and what the /dev/shm they see holds (each kernel's own tmpfs,
    :func:`_own_shm`; its files, open or not). A page both mapped and in a memory file or /dev/shm counts twice
    (an overcount, never an undercount)."""
    total, memory_files, shm = 0, {}, {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as rollup:
                fields = dict(line.split(":", 1) for line in rollup if ":" in line)
            total += 1024 * sum(int(fields.get(name, "0 kB").split()[0]) for name in ("Pss_Anon", "Pss_Shmem"))
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("/memfd:"):
                    found = os.stat(f"/proc/{pid}/fd/{fd}")
                    memory_files[(found.st_dev, found.st_ino)] = found.st_blocks * 512
            device, used = os.stat(f"/proc/{pid}/root/dev/shm").st_dev, os.statvfs(f"/proc/{pid}/root/dev/shm")
            shm[device] = (used.f_blocks - used.f_bfree) * used.f_frsize
        except (OSError, ValueError):
            continue  # gone meanwhile
    return total + sum(memory_files.values()) + sum(shm.values())


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _processes_of(uid: int) -> list[int]:
    """Processes whose real user id is ``uid`` with a thread that is not a zombie, from /proc.

    A process whose main thread ended (``SYS_exit``, not ``exit_group``) while its other threads run shows
    ``State: Z`` in ``/proc/PID/status``, yet is alive: each thread's state is read from ``/proc/PID/task``.
    """
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status") as status:
                fields = dict(line.split(":", 1) for line in status if ":" in line)
            if int(fields["Uid"].split()[0]) == uid and any(
                not _state(f"/proc/{entry.name}/task/{task}").startswith("Z")
                for task in os.listdir(f"/proc/{entry.name}/task")
            ):
                found.append(int(entry.name))
        except OSError:
            continue  # gone meanwhile
    return found


def _state(folder: str) -> str:
    """The ``State`` field of ``folder/status`` (a process's or a thread's): ``R``, ``S``, ``Z`` ..."""
    with open(f"{folder}/status") as status:
        return next(line.split(":", 1)[1].strip() for line in status if line.startswith("State:"))


def _empty_tmp(kept: set[str]) -> None:
    """Remove everything in /tmp but the entries named in ``kept`` (root's folders, holding bound folders)."""
    for entry in os.scandir("/tmp"):
        if entry.name in kept:
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            try:
                os.unlink(entry.path)
            except OSError:
                pass


TMP_BYTES = 256 * 2**20
"""Size of each forked kernel's own /tmp (memory-backed), as a kernel in a sandbox of its own has."""

CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWUSER, CLONE_NEWIPC = 0x00020000, 0x40000000, 0x10000000, 0x08000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 0x1, 0x2, 0x4, 0x8, 0x20
MS_BIND, MS_REC, MS_PRIVATE = 0x1000, 0x4000, 0x40000
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1


def _remount(path: str, read_only: bool) -> None:
    """Remount the mount at ``path`` read-only or read-write, keeping its ``nosuid``, ``nodev`` and ``noexec``.

    Raises:
        OSError: the remount is refused.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    flags = ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC))
    kept = sum(flag for bit, flag in flags if os.statvfs(path).f_flag & bit) | (MS_RDONLY if read_only else 0)
    if libc.mount(None, path.encode(), None, MS_REMOUNT | MS_BIND | kept, None) != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"remount {path} {'read-only' if read_only else 'read-write'}: {os.strerror(number)}")


SEMOPM = 500
"""Operations per ``semop`` call (``kernel.sem``'s third field): the kernel's default, kept."""


def _bound_ipc(limits: dict[str, int]) -> None:
    """As root, bound the System V objects of this process's IPC namespace (its ``/proc/sys/kernel`` settings,
    which are the namespace's own): shared memory to ``limits["memory"]`` bytes in all (``shmall``, and
    ``shmmax`` for one segment); ``limits["queues"]`` message queues (``msgmni``) of ``limits["queue_bytes"]``
    bytes and as many messages each (``msgmnb``, taken by a queue when it is made; raising it needs
    ``CAP_SYS_RESOURCE``); ``limits["semaphore_sets"]`` semaphore sets (``semmni``) of ``limits["semaphores"]``
    semaphores in all (``semmns``, and ``semmsl`` per set). Past them, ``shmget``, ``msgget`` and ``semget`` fail
    (``ENOSPC``, ``EINVAL``) and a full queue refuses messages (``EAGAIN``, or ``msgsnd`` waits), before any memory
    is used. ``limits`` empty: nothing is written (without root, the namespace's settings are the machine root's).
    Where ``/proc/sys`` is a read-only mount (bwrap's, in a forked kernel's own mount namespace) it is made
    writable for the writes only.

    Raises:
        OSError: a setting cannot be written.
    """
    if not limits:
        return
    settings = {
        "shmmax": limits["memory"],
        "shmall": limits["memory"] // os.sysconf("SC_PAGE_SIZE"),
        "msgmni": limits["queues"],
        "msgmnb": limits["queue_bytes"],
        "sem": f"{limits['semaphores']} {limits['semaphores']} {SEMOPM} {limits['semaphore_sets']}",
    }
    read_only = bool(os.statvfs("/proc/sys").f_flag & os.ST_RDONLY)
    if read_only:
        _remount("/proc/sys", read_only=False)
    try:
        for name, value in settings.items():
            with open(f"/proc/sys/kernel/{name}", "w") as setting:
                setting.write(str(value))
    finally:
        if read_only:
            _remount("/proc/sys", read_only=True)


def _own_namespaces() -> None:
    """In the forked child, still root: network, mount and IPC namespaces of its own, with a fresh tmpfs
    on /tmp (its HOME) holding only the folders bwrap bound there for the server (Python, the runtime folder).

    So nothing of one kernel (a file, a start-up hook in HOME, a listening socket, an abstract Unix socket, a
    System V object, a POSIX message queue) can reach another kernel, running or later, even if a process of it
    outlived the clean-up; its IPC objects end with the namespace (with its last process, once the server closes
    the namespace's ``/proc/sysvipc`` files).

    Raises:
        OSError: the kernel gives no namespace or mount (the kernel then does not start).
    """
    libc = ctypes.CDLL(None, use_errno=True)

    def check(result: int, what: str) -> None:
        if result != 0:
            number = ctypes.get_errno()
            raise OSError(number, f"{what}: {os.strerror(number)}")

    check(libc.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC), "unshare")
    check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "make mounts private")
    bound = {name: os.open(f"/tmp/{name}", os.O_PATH) for name in os.listdir("/tmp")}
    options = f"size={TMP_BYTES},mode=1777".encode()
    check(libc.mount(b"tmpfs", b"/tmp", b"tmpfs", MS_NOSUID | MS_NODEV, options), "mount /tmp")
    for name, descriptor in bound.items():
        os.mkdir(f"/tmp/{name}", 0o755)
        source = f"/proc/self/fd/{descriptor}".encode()
        check(libc.mount(source, f"/tmp/{name}".encode(), None, MS_BIND | MS_REC, None), f"bind /tmp/{name}")
        os.close(descriptor)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as control:  # loopback up, as bwrap's --unshare-net has it
        request = struct.pack("16sH14s", b"lo", 0, b"")
        flags = struct.unpack("16sH", fcntl.ioctl(control, SIOCGIFFLAGS, request)[:18])[1]
        fcntl.ioctl(control, SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", flags | IFF_UP, b""))


_work_folders: list[str] = []
"""The working folders the server has mounted (the latest notebook's; :func:`_work_folder`)."""

MNT_DETACH = 0x2
PR_CAPBSET_DROP, CAPABILITY_VERSION_3 = 24, 0x20080522

GRADER_FILES = ("checks.py",)
"""Files of the working folder that are the grader's (the check helpers the test cells import): bound read-only,
so no kernel can write, replace or remove them, and a restarted kernel replaying the cells imports the grader's
copy, not one a student's code left there."""


def _mount_tmpfs(path: str, uid: int, size: int, files: int) -> None:
    """Mount a tmpfs of ``size`` bytes and ``files`` inodes on ``path`` (no set-user-id, no devices; mode 0700),
    the user ``uid``'s.

    Raises:
        OSError: the mount fails.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    options = f"size={size},nr_inodes={files},mode=0700,uid={uid},gid={uid}".encode()
    if libc.mount(b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options) != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"mount a tmpfs on {path}: {os.strerror(number)}")


def _own_shm(uid: int, shm: dict[str, int]) -> None:
    """Mount a tmpfs of its own on /dev/shm, ``shm["size"]`` bytes and ``shm["files"]`` inodes, the kernel user
    ``uid``'s: POSIX semaphores and shared memory (``multiprocessing``'s locks, a ``DataLoader``'s workers) work, a
    flood fails with ``ENOSPC``, its pages count as the kernel's memory (:func:`memory_of_processes`), and it lives
    in the kernel's mount namespace only: it ends with the kernel, and no other kernel sees it. Done in the forked
    child (after :func:`_own_namespaces`) and in ``forkserver.py work``, before the seccomp filter.

    Raises:
        OSError: the mount fails.
    """
    _mount_tmpfs("/dev/shm", uid, shm["size"], shm["files"])


def _work_folder(folder: str, uid: int, size: int, files: int, source: str | None = None) -> None:
    """In the server, for a notebook's first kernel: detach the working folders mounted for earlier notebooks, then
    mount a tmpfs of ``size`` bytes and ``files`` inodes over ``folder``, holding a copy of what the grader put
    there (or, for a kernel in a sandbox of its own, what is in ``source``; the user ``uid``'s). Each kernel's mount
    namespace starts as a copy of the server's, so the kernels of one notebook (a restart) share that tmpfs and
    what they wrote there; the next notebook gets a fresh one.

    So what a kernel writes in its folder is bounded in bytes and in files (a tmpfs's inode count cannot be set
    through bwrap), and the :data:`GRADER_FILES` in it are bound read-only.

    Raises:
        OSError: a mount fails, or the folder's files do not fit.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    while _work_folders:
        libc.umount2(_work_folders.pop().encode(), MNT_DETACH)
    original = os.open(source or folder, os.O_PATH | os.O_DIRECTORY)
    try:
        _mount_tmpfs(folder, uid, size, files)
        _work_folders.append(folder)
        shutil.copytree(f"/proc/self/fd/{original}", folder, symlinks=True, dirs_exist_ok=True)
    finally:
        os.close(original)
    for parent, folders, names in os.walk(folder):
        for name in [*folders, *names]:
            os.lchown(os.path.join(parent, name), uid, uid)
    for name in GRADER_FILES:
        path = os.path.join(folder, name).encode()
        if os.path.isfile(path) and not os.path.islink(path):
            for flags in (MS_BIND, MS_BIND | MS_REMOUNT | MS_RDONLY):
                if libc.mount(path, path, None, flags, None) != 0:
                    number = ctypes.get_errno()
                    raise OSError(number, f"bind {name} read-only: {os.strerror(number)}")


def _empty_bounding_set() -> None:
    """Drop every capability from this process's bounding set (needs CAP_SETPCAP): no program it runs can gain one.

    Raises:
        OSError: one could not be dropped.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    with open("/proc/sys/kernel/cap_last_cap") as last:
        for capability in range(int(last.read()) + 1):
            if libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), f"drop capability {capability} from the bounding set")


SYSCALLS = {
    "x86_64": {"arch": 0xC000003E, "clone": 56, "unshare": 272, "setns": 308, "seccomp": 317, "clone3": 435},
    "aarch64": {"arch": 0xC00000B7, "clone": 220, "unshare": 97, "setns": 268, "seccomp": 277, "clone3": 435},
}
"""Per machine (``os.uname().machine``): its ``AUDIT_ARCH_*`` and the numbers of the system calls that
:func:`_refuse_user_namespaces` filters (``asm/unistd.h``; a call of the x86-64 kernel's x32 ABI, numbered from
:data:`X32_SYSCALL_BIT`, kills the process)."""

X32_SYSCALL_BIT = 0x40000000
PR_SET_NO_NEW_PRIVS, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC = 38, 1, 1
SECCOMP_RET_KILL_PROCESS, SECCOMP_RET_ERRNO, SECCOMP_RET_ALLOW = 0x80000000, 0x00050000, 0x7FFF0000
BPF_LD_W_ABS, BPF_JEQ, BPF_JGE, BPF_JSET, BPF_RET = 0x20, 0x15, 0x35, 0x45, 0x06


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _refuse_user_namespaces() -> None:
    """From now on this process and all it starts (``no_new_privs``; a seccomp filter, kept through fork and exec,
    on all its threads) can neither create a user namespace nor join a namespace: ``unshare`` and ``clone`` with
    ``CLONE_NEWUSER`` fail with ``EPERM``, ``setns`` always does, ``clone3`` (whose flags a filter cannot read)
    fails with ``ENOSYS``, so glibc's ``pthread_create``, ``posix_spawn`` and ``fork`` use ``clone``; a system
    call of another ABI (32-bit, x32) kills the process. Without a user namespace of its own, a kernel has no
    capability to mount anything (a tmpfs outside its working folder's bounds, say).

    Raises:
        OSError: this machine's system call numbers are not known (:data:`SYSCALLS`: nothing is guessed), or the
            filter is refused.
    """
    machine = os.uname().machine
    if machine not in SYSCALLS:
        raise OSError(f"no seccomp filter for {machine}: its system call numbers are not known")
    numbers = SYSCALLS[machine]
    labels: dict[str, int] = {}
    program: list[tuple] = []

    def at(label: str) -> None:
        labels[label] = len(program)

    program += [(BPF_LD_W_ABS, 4), (BPF_JEQ, numbers["arch"], "number", "kill")]  # seccomp_data.arch
    at("number")
    program += [(BPF_LD_W_ABS, 0), (BPF_JGE, X32_SYSCALL_BIT, "kill", "next")]  # seccomp_data.nr
    for name, target in (("clone3", "enosys"), ("setns", "eperm"), ("unshare", "flags"), ("clone", "flags")):
        program.append((BPF_JEQ, numbers[name], target, "next"))
    program.append((BPF_RET, SECCOMP_RET_ALLOW))
    at("flags")  # the low half of the first argument (little-endian), the flags of both calls
    program += [(BPF_LD_W_ABS, 16), (BPF_JSET, CLONE_NEWUSER, "eperm", "allow")]
    refusals = (("eperm", SECCOMP_RET_ERRNO | errno.EPERM), ("enosys", SECCOMP_RET_ERRNO | errno.ENOSYS))
    for label, action in (("allow", SECCOMP_RET_ALLOW), *refusals, ("kill", SECCOMP_RET_KILL_PROCESS)):
        at(label)
        program.append((BPF_RET, action))
    code = b""
    for index, (operation, value, *jumps) in enumerate(program):
        offsets = [0 if jump == "next" else labels[jump] - index - 1 for jump in jumps] or [0, 0]
        code += struct.pack("=HBBI", operation, *offsets, value)
    buffer = ctypes.create_string_buffer(code, len(code))
    fprog = _SockFprog(len(program), ctypes.cast(buffer, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or libc.syscall(
        numbers["seccomp"], SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, ctypes.byref(fprog)
    ):
        number = ctypes.get_errno()
        raise OSError(number, f"install the seccomp filter: {os.strerror(number)}")


def _kernel(connection: socket.socket, request: dict, channel: socket.socket) -> None:
    """In the forked child: become the kernel the request describes, after sending the server its IPC namespace's
    :func:`ipc_files` over ``channel``. Never returns."""
    try:
        import random
        import resource

        import numpy
        import torch

        os.setsid()
        _own_namespaces()
        _bound_ipc(request["ipc"])
        files = ipc_files()
        socket.send_fds(channel, [b"ipc"], files)
        for fd in files:
            os.close(fd)
        channel.close()
        _own_shm(request["uid"], request["shm"])
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        connection.close()
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        for name, value in request["limits"].items():
            resource.setrlimit(getattr(resource, LIMITS[name]), (value, value))
        uid = request["uid"]
        libc = ctypes.CDLL(None, use_errno=True)
        _empty_bounding_set()
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        header, nothing = struct.pack("Ii", CAPABILITY_VERSION_3, 0), bytes(24)  # and the inheritable set emptied
        if libc.capset(header, nothing) != 0:
            raise OSError(ctypes.get_errno(), "capset")
        _refuse_user_namespaces()
        seed = int.from_bytes(os.urandom(8), "little")
        random.seed(seed)
        numpy.random.seed(seed % 2**32)
        torch.manual_seed(seed)
        sys.path.insert(0, os.getcwd())  # as ``python -m ipykernel_launcher`` has it
        sys.argv = ["ipykernel_launcher", *request["argv"]]
        from ipykernel.kernelapp import IPKernelApp

        IPKernelApp.launch_instance(argv=request["argv"], kernel_class=_kernel_class())
    except SystemExit as exit:
        os._exit(exit.code if isinstance(exit.code, int) else int(exit.code is not None))
    except BaseException:
        os._exit(1)
    os._exit(0)


def _kernel_class() -> type:
    """ipykernel's ``IPythonKernel`` with a shell that formats each error's traceback once.

    IPython 9 keeps, for its ``%notebook`` export, each failed cell's traceback in its history manager
    (``history_manager.exceptions``), and formats it there a second time after the cell showed it
    (``InteractiveShell._format_exception_for_storage``: ``stack_data`` and pygments again, the larger part of a
    traceback's cost). This shell keeps the traceback it has just shown instead, the same lines. Every output is
    unchanged; the course's notebooks have many cells that raise on purpose.
    """
    from ipykernel.ipkernel import IPythonKernel
    from ipykernel.zmqshell import ZMQInteractiveShell
    from traitlets import Type

    class Shell(ZMQInteractiveShell):
        shown: tuple[BaseException, list[str]] | None = None
        """The exception whose traceback was shown last, and its lines, until they are stored."""

        def _showtraceback(self, etype, evalue, stb):
            self.shown = (evalue, stb)
            super()._showtraceback(etype, evalue, stb)

        def _format_exception_for_storage(self, exception, filename=None, running_compiled_code=False):
            shown, self.shown = self.shown, None
            if shown is not None and shown[0] is exception:
                return {"ename": type(exception).__name__, "evalue": str(exception), "traceback": shown[1]}
            return super()._format_exception_for_storage(exception, filename, running_compiled_code)

    class Kernel(IPythonKernel):
        shell_class = Type(Shell)

    return Kernel


def kernel(path: str, request: str) -> int:
    """The kernel command: ask the server at ``path`` for the kernel ``request`` describes; its exit code."""
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(path)
    connection.sendall(request.encode() + b"\n")
    line = connection.makefile("r").readline()
    return json.loads(line)["exit"] if line else 1


def work(request: str, command: list[str]) -> None:
    """Mount the working folder ``request`` describes (JSON: ``folder``, ``source``, ``uid``, ``size``, ``files``;
    :func:`_work_folder`) and the kernel's /dev/shm (``shm``: :func:`_own_shm`), move into the folder, refuse user
    namespaces (:func:`_refuse_user_namespaces`), then exec ``command``. Never returns. Not root (a sandbox in a
    user namespace, whose mounts belong to bwrap's), it first makes a user namespace of its own, mapping only its
    user, and a mount namespace in it, where it makes ``/`` and ``/dev`` (tmpfs that are the user's, there)
    read-only.

    Raises:
        OSError: the mount or the copy fails, the seccomp filter is refused, or ``command`` cannot be run.
    """
    folder = json.loads(request)
    if os.getuid() != 0:  # a sandbox without root: mount in a user and mount namespace of its own
        uid, gid = os.getuid(), os.getgid()
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
            number = ctypes.get_errno()
            raise OSError(number, f"unshare: {os.strerror(number)}")
        for name, text in (("uid_map", f"{uid} {uid} 1"), ("setgroups", "deny"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as setting:
                setting.write(text)
        # bwrap's root and /dev (with /dev/shm) are tmpfs of the default size, the kernel user's there: read-only.
        for path in ("/", "/dev"):
            _remount(path, read_only=True)
    _work_folder(folder["folder"], folder["uid"], folder["size"], folder["files"], source=folder["source"])
    _own_shm(folder["uid"], folder["shm"])
    os.chdir(folder["folder"])
    _empty_bounding_set()  # setpriv (util-linux 2.38) leaves it full in a user namespace
    _refuse_user_namespaces()
    os.execvp(command[0], command)


NS_GET_USERNS = 0xB701


def ipc(pid: int, limits: dict[str, int], fd: int) -> None:
    """Join the IPC namespace of process ``pid`` (and first the user namespace that owns it, where that is not
    this process's: a sandbox started without root), bound its System V objects (:func:`_bound_ipc`: ``limits``;
    empty, they are left as they are: only root may write them, for a namespace owned by the machine's user
    namespace), and send its open :func:`ipc_files` over the Unix socket ``fd`` (:func:`ipc_bytes` reads them).

    Raises:
        OSError: a namespace cannot be joined (the process is gone, say) or a limit cannot be written.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    namespace = os.open(f"/proc/{pid}/ns/ipc", os.O_RDONLY)
    owner = fcntl.ioctl(namespace, NS_GET_USERNS)  # the user namespace it belongs to (not always pid's own)
    for kind, descriptor, flag in (("user", owner, CLONE_NEWUSER), ("ipc", namespace, CLONE_NEWIPC)):
        if os.fstat(descriptor).st_ino != os.stat(f"/proc/self/ns/{kind}").st_ino and libc.setns(descriptor, flag):
            number = ctypes.get_errno()
            raise OSError(number, f"join the {kind} namespace of {pid}'s IPC namespace: {os.strerror(number)}")
        os.close(descriptor)
    _bound_ipc(limits)
    with socket.socket(fileno=fd) as channel:
        socket.send_fds(channel, [b"ipc"], ipc_files())


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2])
    elif sys.argv[1] == "work":
        work(sys.argv[2], sys.argv[3:])
    elif sys.argv[1] == "ipc":
        ipc(int(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4]))
    else:
        sys.exit(kernel(sys.argv[2], sys.argv[3]))
