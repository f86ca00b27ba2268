"""The peak memory of the grader's own processes while a block runs, read from /proc (Linux)."""

import os
import threading
from pathlib import Path


class PeakMemory:
    """Polls, every ``interval`` seconds while the ``with`` block runs, the peak resident memory (``VmHWM``) of
    each process below this one in its PID namespace: the grader's workers and nbgrader's passes, not the
    kernels (they run in PID namespaces of their own, below bwrap). ``peaks``: pid -> (command, bytes)."""

    def __init__(self, interval: float = 0.1) -> None:
        self.interval = interval
        self.peaks: dict[int, tuple[str, int]] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> "PeakMemory":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    @property
    def largest(self) -> tuple[str, int]:
        """(command, bytes) of the process with the highest peak; ("", 0) when none was seen."""
        return max(self.peaks.values(), key=lambda peak: peak[1], default=("", 0))

    def _poll(self) -> None:
        while not self._done.wait(self.interval):
            for pid, fields in _below(os.getpid()).items():
                nested = len(fields.get("NSpid", "").split()) > 1
                if not nested and "VmHWM" in fields:
                    kib = int(fields["VmHWM"].split()[0])
                    command = _command(pid)
                    self.peaks[pid] = (command, max(kib * 1024, self.peaks.get(pid, ("", 0))[1]))


def _below(root: int) -> dict[int, dict[str, str]]:
    """``{pid: /proc/pid/status fields}`` of every process below ``root``."""
    status = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                lines = (entry / "status").read_text().splitlines()
            except OSError:
                continue
            status[int(entry.name)] = dict(line.split(":\t", 1) for line in lines if ":\t" in line)
    children: dict[int, list[int]] = {}
    for pid, fields in status.items():
        children.setdefault(int(fields.get("PPid", "0")), []).append(pid)
    found, frontier = {}, [root]
    while frontier:
        for child in children.get(frontier.pop(), []):
            found[child] = status[child]
            frontier.append(child)
    return found


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200]
    except OSError:
        return "?"
