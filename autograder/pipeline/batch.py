"""Stage ``batch``: every submitted notebook executed concurrently, ahead of ``nbgrader autograde``.

Stock ``nbgrader autograde`` executes one notebook at a time, and a torch
notebook spends most of its time in its kernel. This stage prepares each
submitted notebook as autograde will hand it to ``Execute`` (nbgrader's own
sanitising preprocessors, and the folder autograde builds: the assignment's
files from source/ over the submission's), and executes those notebooks
``workers`` at a time in local worker processes, or on a Dask cluster
(``scheduler``), each kernel in its sandbox as usual.

Each executed notebook is stored in the course's ``executed/`` folder under
its key (:func:`autograder.pipeline.execute.execution_key`: the cells, the kernel,
the folder's other files and the execution settings). nbgrader then runs as
before and stays the only writer of the gradebook: the course's ``Execute``
takes the stored outputs of a notebook whose key it finds, and executes
any other itself. A stored result is therefore used only for exactly the
code, files and settings it was produced with, and a run that stops half way
(Ctrl-C, a crash) keeps what it finished: the next run executes only the rest.

The reference solution's check records (:mod:`autograder.pipeline.verdict`) are
computed in the same batch, in a local process, and stored the same way;
the reference's kernel runs in the same sandbox as the students' (forked
from the preloaded server, so it starts as fast), unless the batch runs
without isolation. A :class:`Batch` starts an assignment's reference run as
soon as it is asked for (``grade`` asks while it reads the download), so the
reference runs overlap the intake, up to one per worker; the others run among
the submissions' notebooks, each just ahead of its own assignment's: a
submission's execution does not need its reference, only nbgrader's verdict
does, so nbgrader starts on the first assignment while later references run.

The workers run one kernel each, one per CPU, each kernel on one thread
(:data:`KERNEL_THREADS`); while the running kernels leave CPUs idle (one
sleeps through its timeout), a second pool runs one job more at a time
(:class:`Occupancy`).

A job that fails (its kernel cannot start, a worker is lost) is reported
and left to nbgrader, which executes that notebook itself. So is a job whose
kernel breached its isolation (a process of it outlived it:
:attr:`autograder.pipeline.execute.Execute.breach`): its execution is not stored, so
no later run reuses what such a kernel may have tampered with. With
``no_cache`` (``grade --no-cache``) the stored executions of the
submissions and the references are discarded first: everything executes
again.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import multiprocessing
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import nbformat
import psutil
from nbconvert.preprocessors import Preprocessor
from nbgrader.converters import Autograde
from tqdm import tqdm
from traitlets.config import Config, PyFileConfigLoader
from traitlets.utils.importstring import import_item

from . import verdict
from ..course import Course, die_with_parent, write_atomically
from .execute import STORE, Execute, execution_key, folder_files, stored_path
from .intake.submissions import Submission


@dataclass(frozen=True)
class Job:
    """One notebook to execute: everything a worker needs, so that it needs no shared file system."""

    key: str
    """:func:`autograder.pipeline.execute.execution_key` of the notebook, its folder's files and the settings."""
    label: str
    """``student/assignment/notebook``, for progress lines."""
    folder: str
    """Name of the folder the kernel runs in (the assignment id, as under autograded/)."""
    notebook: str
    """The sanitised notebook, nbformat JSON."""
    files: dict[str, bytes]
    """The folder's other files (relative path -> contents)."""
    config: dict[str, Any]
    """Configuration of ``Execute`` and the sandbox (sections of nbgrader_config.py)."""


@dataclass
class BatchRun:
    """What :func:`execute` did."""

    executed: int
    """Executions in this run (notebooks identical in cells, files and settings share one)."""
    stored: int
    """Notebooks found already executed by an earlier run."""
    failed: list[str]
    """``label: reason`` of jobs that failed here (nbgrader executes those itself)."""
    breached: list[str]
    """``label: how`` of executions not stored because their kernel breached its isolation (nbgrader executes
    those again itself)."""


class Batch:
    """The batch's local worker processes for one grading run (a context manager; leaving it ends them).

    :meth:`reference` starts an assignment's reference run as soon as the run knows the assignment (while the
    download is still read and placed); :meth:`execute` executes the placed submissions. ``workers`` worker
    processes run jobs at once (default :func:`default_workers`, one per CPU); without an explicit ``workers``,
    one more at a time (up to :func:`most_workers`) while the machine's CPUs stay idle beside them
    (:class:`Occupancy`: kernels sleeping through a timeout, waiting, stopped). ``isolated``, ``no_cache``: see
    :func:`execute`.
    """

    def __init__(self, course: Course, *, isolated: bool, workers: int | None = None, no_cache: bool = False) -> None:
        self.course, self.isolated, self.no_cache = course, isolated, no_cache
        self.workers = workers or default_workers()
        self.most = self.workers if workers else max(self.workers, most_workers())
        # Asked for: its run (None: stored when asked, queued, or already handed to :meth:`execute`).
        self._references: dict[str, concurrent.futures.Future | None] = {}
        self._queued: list[str] = []  # asked for while one reference per worker ran: :meth:`execute` runs them
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> Batch:
        context = multiprocessing.get_context("spawn")  # a fresh interpreter: no event loop or threads inherited
        options = {"mp_context": context, "initializer": start_worker, "initargs": (os.getpid(),)}
        # The first pool runs ``workers`` jobs; the second, started only when CPUs stay idle, the jobs beside them.
        self._pools = [concurrent.futures.ProcessPoolExecutor(self.workers, **options)]
        if self.most > self.workers:
            self._pools.append(concurrent.futures.ProcessPoolExecutor(self.most - self.workers, **options))
        for pool in self._pools:
            self._stack.enter_context(pool)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if error is not None:
            for pool in self._pools:
                pool.shutdown(wait=False, cancel_futures=True)
        self._stack.__exit__(kind, error, traceback)

    def reference(self, assignment_id: str) -> None:
        """Start executing the assignment's reference solution for its check records
        (:mod:`autograder.pipeline.verdict`) unless they are stored (with ``no_cache`` they are discarded first) or it
        has started; while ``workers`` reference runs are unfinished, queue it for :meth:`execute` instead, which
        runs it just ahead of its assignment's submissions. Returns at once."""
        if assignment_id in self._references:
            return
        stored = verdict.stored_reference(self.course, assignment_id)
        if self.no_cache:
            stored.unlink(missing_ok=True)
        started = None
        running = sum(future is not None and not future.done() for future in self._references.values())
        if not stored.exists() and running < self.workers:
            call, arguments, _ = _reference_call(self.course, assignment_id, self.isolated)
            started = self._pools[0].submit(call, *arguments)
        elif not stored.exists():
            self._queued.append(assignment_id)
        self._references[assignment_id] = started

    def execute(
        self,
        submissions: list[Submission],
        *,
        scheduler: str | None = None,
        progress: Callable[[str], None] = lambda line: None,
        ready: Callable[[Submission], None] = lambda submission: None,
    ) -> BatchRun:
        """Execute the notebooks of ``submissions`` (placed in submitted/) and store them for nbgrader autograde.

        ``ready`` is called (in this thread) with each submission as soon as its notebooks and its assignment's
        reference run are stored or have failed here, so that nbgrader can take it while others still execute.

        ``scheduler``: the address of a Dask distributed scheduler (``tcp://host:port``), whose workers then
        execute the students' notebooks (they need this repository and its environment); ``progress`` gets a
        line for notebooks found already executed and for each job that fails or breaches its isolation. A
        progress bar (counts, time left) is shown on stderr while the notebooks execute, when stderr is a
        terminal.

        Raises:
            OSError: ``executed/`` cannot be written.
            ValueError, OSError: no Dask scheduler at ``scheduler`` (from ``distributed``).
        """
        course = self.course
        config = job_config(course, isolated=self.isolated)
        settings = Execute(config=Config(config)).settings()
        sanitize = sanitize_preprocessors(course)
        store = course.root / STORE
        store.mkdir(exist_ok=True)
        jobs_by_submission = [jobs_of(course, submission, config, settings, sanitize) for submission in submissions]
        jobs = [job for found in jobs_by_submission for job in found]
        if self.no_cache:
            for path in [stored_path(course.root, job.key) for job in jobs]:
                path.unlink(missing_ok=True)
        for assignment_id in sorted({submission.assignment_id for submission in submissions}):
            self.reference(assignment_id)
        done_before = {job.key for job in jobs if stored_path(course.root, job.key).exists()}
        # Identical notebooks (same cells, files, settings: two students handing in the release) run once.
        todo = list({job.key: job for job in jobs if job.key not in done_before}.values())
        # The references started and not yet collected (by an earlier call) run beside the students' notebooks.
        references = {a: future for a, future in self._references.items() if future is not None}
        self._references.update(dict.fromkeys(references))
        queued, self._queued = self._queued, []
        stored = sum(job.key in done_before for job in jobs)
        if stored:
            progress(f"{stored} notebook(s) already executed by an earlier run: kept")
        waiting = []  # (submission, what it waits for: its notebooks' keys and its reference, not yet stored)
        for submission, found in zip(submissions, jobs_by_submission):
            keys = {job.key for job in found if job.key not in done_before}
            waiting.append((submission, keys | ({submission.assignment_id} & {*references, *queued})))
        run = BatchRun(executed=0, stored=stored, failed=[], breached=[])

        def finished(name: str) -> None:
            for submission, pending in waiting:
                if name in pending:
                    pending.discard(name)
                    if not pending:
                        ready(submission)

        for submission, pending in waiting:
            if not pending:
                ready(submission)
        futures: dict[concurrent.futures.Future, tuple[str, Path, str]] = {
            future: (f"reference of {a}", verdict.stored_reference(course, a), a) for a, future in references.items()
        }
        with contextlib.ExitStack() as stack:
            if scheduler is not None:  # the cluster schedules the students' notebooks itself
                from distributed import Client

                remote = stack.enter_context(Client(scheduler, timeout="30s")).get_executor()
                for job in todo:
                    futures[remote.submit(run_job, job)] = (job.label, stored_path(course.root, job.key), job.key)
                todo = []
            queue = _in_order(course, queued, todo, isolated=self.isolated)
            total = len(futures) + len(queue)
            bar = stack.enter_context(
                tqdm(total=total, desc="executing", unit="notebook", file=sys.stderr, disable=None)
            )
            self._dispatch(queue, futures, lambda future, what: self._collect(future, what, run, progress, finished, bar))
        return run

    def _dispatch(
        self,
        queue: list[Call],
        futures: dict[concurrent.futures.Future, tuple[str, Path, str]],
        collect: Callable[[concurrent.futures.Future, tuple[str, Path, str]], None],
    ) -> None:
        """Run the ``queue``'s calls in the local pools, in order, as many at once as each pool is allowed (the first
        ``workers`` with the references still running; the second the extra jobs :class:`Occupancy` allows), and
        ``collect`` each of them and of the ``futures`` already running as it finishes."""
        occupancy = Occupancy()
        running: list[list[concurrent.futures.Future]] = [list(futures), []]
        allowed = [self.workers, 0]
        queue = list(queue)
        while futures or queue:
            for share, pool in enumerate(self._pools):
                running[share] = [future for future in running[share] if not future.done()]
                while queue and len(running[share]) < allowed[share]:
                    call, arguments, what = queue.pop(0)
                    future = pool.submit(call, *arguments)
                    futures[future] = what
                    running[share].append(future)
            done, _ = concurrent.futures.wait(futures, timeout=Occupancy.INTERVAL, return_when="FIRST_COMPLETED")
            for future in done:
                collect(future, futures.pop(future))
            busy = all(sum(not future.done() for future in r) >= a for r, a in zip(running, allowed))
            if len(self._pools) > 1 and queue and busy:
                allowed[1] = occupancy.extra(allowed[1], self.most - self.workers)

    def _collect(
        self,
        future: concurrent.futures.Future,
        what: tuple[str, Path, str],
        run: BatchRun,
        progress: Callable[[str], None],
        finished: Callable[[str], None],
        bar: tqdm,
    ) -> None:
        label, target, name = what
        bar.update()
        try:
            text, breach = future.result()
        except Exception as error:  # a worker lost, a kernel that cannot start: nbgrader executes it
            run.failed.append(f"{label}: {type(error).__name__}: {error}")
            progress(f"not executed ahead (nbgrader will): {run.failed[-1]}")
        else:
            run.executed += target.suffix == ".ipynb"
            if breach:
                run.breached.append(f"{label}: {breach}")
                why = "not stored, its kernel breached its isolation (nbgrader runs it again)"
                progress(f"{why}: {run.breached[-1]}")
            else:
                write_atomically(target, text)
        finished(name)


class Occupancy:
    """How busy the machine's CPUs are (psutil's system-wide CPU times, every :attr:`INTERVAL` seconds), for the
    batch to run one job more beside the running ones while they leave CPUs idle (a kernel sleeping through its
    timeout, waiting, stopped). An extra job stays allowed: a kernel runs one thread (:data:`KERNEL_THREADS`), so
    one process more than CPUs costs the others little."""

    INTERVAL = 1.0
    """Seconds between two looks."""
    LOOKS = 3
    """Looks in a row with CPUs idle, every allowed job running and more waiting, before one more is allowed."""
    IDLE_CPUS = 0.5
    """CPUs idle (of all of them together) that count as room for one more job."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        psutil.cpu_percent(percpu=True)  # the first look's reference
        self._clock, self._looked, self._idle_looks = clock, clock(), 0

    def extra(self, current: int, most: int) -> int:
        """The extra jobs to allow from now on; the batch asks while every allowed job runs and more wait. A look
        is taken when :attr:`INTERVAL` has passed since the last one (else ``current`` is kept): one more than
        ``current`` (at most ``most``) after :attr:`LOOKS` looks in a row with :attr:`IDLE_CPUS` idle."""
        if self._clock() - self._looked < self.INTERVAL:
            return current
        self._looked = self._clock()
        idle = sum(100 - percent for percent in psutil.cpu_percent(percpu=True)) / 100
        self._idle_looks = self._idle_looks + 1 if idle >= self.IDLE_CPUS else 0
        if self._idle_looks >= self.LOOKS and current < most:
            self._idle_looks = 0
            return current + 1
        return current


def execute(
    course: Course,
    submissions: list[Submission],
    *,
    isolated: bool,
    workers: int | None = None,
    scheduler: str | None = None,
    no_cache: bool = False,
    progress: Callable[[str], None] = lambda line: None,
    ready: Callable[[Submission], None] = lambda submission: None,
) -> BatchRun:
    """Execute the notebooks of ``submissions`` (placed in submitted/) and store them for nbgrader autograde, in
    a :class:`Batch` of its own (see :meth:`Batch.execute`).

    ``workers``: local worker processes (see :class:`Batch`); ``no_cache``: discard the stored executions of
    these submissions and their references first; ``scheduler``, ``progress``, ``ready``: see
    :meth:`Batch.execute`.

    Raises:
        OSError: ``executed/`` cannot be written.
        ValueError, OSError: no Dask scheduler at ``scheduler`` (from ``distributed``).
    """
    with Batch(course, isolated=isolated, workers=workers, no_cache=no_cache) as local:
        return local.execute(submissions, scheduler=scheduler, progress=progress, ready=ready)


KERNEL_THREADS = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
"""Threads of each kernel the batch starts, where the environment does not set them: the batch runs a kernel per
CPU, so threads of one kernel would only wait for each other's CPU (GNU OpenMP spins while it waits). Measured on
2 cores, the default demo of 04, 05 and 06: 61.4 and 65.0 s with OpenMP's default (2 threads), 56.1 and 54.1 s with
one. The reference runs get the same, so students' and reference records come from the same arithmetic."""


def start_worker(parent: int) -> None:
    """Initialise a worker process of the batch: it ends with the process ``parent``
    (:func:`autograder.course.die_with_parent`) and its kernels run :data:`KERNEL_THREADS`."""
    die_with_parent(parent)
    for name, value in KERNEL_THREADS.items():
        os.environ.setdefault(name, value)


def most_workers() -> int:
    """The most worker processes the batch runs at once while CPUs stay idle (:class:`Occupancy`): two per CPU,
    at most one per 1.5 GiB of memory (:func:`default_workers`)."""
    return max(1, min(2 * _cpus(), _memory_allows()))


def default_workers() -> int:
    """Worker processes for this machine: one per CPU (measured on 2 cores with forked kernels: 2 workers
    executed a batch of 21 notebooks in 42.5 s and 45.0 s, 3 workers in 45.9 s and 49.8 s), at most one per
    1.5 GiB of memory (a kernel with torch imported takes up to about 1 GiB)."""
    return max(1, min(_cpus(), _memory_allows()))


def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _memory_allows() -> int:
    """Worker processes the machine's memory allows: one per 1.5 GiB."""
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1.5 * 2**30))


def job_config(course: Course, *, isolated: bool) -> dict[str, Any]:
    """The ``Execute`` and sandbox sections of the course's nbgrader_config.py; the sandbox on or off."""
    loaded = PyFileConfigLoader("nbgrader_config.py", path=str(course.root)).load_config()
    sandbox = {**loaded.get("SandboxedKernelManager", {}), "enabled": isolated}
    return {"Execute": dict(loaded.get("Execute", {})), "SandboxedKernelManager": sandbox}


def sanitize_preprocessors(course: Course) -> list[type[Preprocessor]]:
    """nbgrader autograde's ``sanitize_preprocessors`` (the classes, in order) as the course's nbgrader_config.py
    sets them, nbgrader's default if it does not."""
    loaded = PyFileConfigLoader("nbgrader_config.py", path=str(course.root)).load_config()
    names = loaded.get("Autograde", {}).get("sanitize_preprocessors")
    if names is None:
        return list(Autograde.class_traits()["sanitize_preprocessors"].default())
    return [import_item(name) if isinstance(name, str) else name for name in names]


def jobs_of(
    course: Course,
    submission: Submission,
    config: dict[str, Any],
    settings: dict[str, Any],
    sanitize: list[type[Preprocessor]],
) -> list[Job]:
    """A job for each notebook of a placed submission, sanitised as nbgrader autograde does (``sanitize``:
    :func:`sanitize_preprocessors`).

    A notebook nbgrader's sanitising rejects gets no job: nbgrader reports it.
    """
    submitted = course.root / "submitted" / submission.student_id / submission.assignment_id
    files = folder_files(submitted)
    files.update(folder_files(course.source / submission.assignment_id))  # autograde copies these over
    jobs = []
    for path in sorted(submitted.glob("*.ipynb")):
        resources = {
            "nbgrader": {
                "student": submission.student_id,
                "assignment": submission.assignment_id,
                "notebook": path.stem,
                "db_url": course.db_url,
            }
        }
        try:
            notebook = nbformat.read(path, as_version=4)
            for preprocessor in sanitize:
                notebook, resources = preprocessor().preprocess(notebook, resources)
        except Exception:  # nbgrader reports the same problem when it autogrades this notebook
            continue
        jobs.append(
            Job(
                key=execution_key(notebook, files, settings),
                label=f"{submission.student_id}/{submission.assignment_id}/{path.stem}",
                folder=submission.assignment_id,
                notebook=nbformat.writes(notebook),
                files=files,
                config=config,
            )
        )
    return jobs


def run_job(job: Job) -> tuple[str, str | None]:
    """Execute a job's notebook with the course's ``Execute`` in a scratch folder (runs in a worker).

    Returns:
        The executed notebook (nbformat JSON), and how its kernel breached its isolation (None: it did not;
        :attr:`autograder.pipeline.execute.Execute.breach`).
    """
    os.environ["NBGRADER_EXECUTION"] = "autograde"  # as nbgrader autograde sets it for its kernels
    with tempfile.TemporaryDirectory(prefix="batch-") as scratch:
        folder = Path(scratch) / job.folder
        for relative, content in job.files.items():
            (folder / relative).parent.mkdir(parents=True, exist_ok=True)
            (folder / relative).write_bytes(content)
        notebook = nbformat.reads(job.notebook, as_version=4)
        executor = Execute(config=Config(job.config))
        notebook, _ = executor.preprocess(notebook, {"metadata": {"path": str(folder)}})
    return nbformat.writes(notebook), executor.breach


Call = tuple[Callable[..., tuple[str, str | None]], tuple[Any, ...], tuple[str, Path, str]]
"""A call for a worker: the function, its arguments, and what it makes (its label, where its result is stored, the
name a submission waiting for it knows it by: a job's key or a reference's assignment id)."""


def _in_order(course: Course, references: list[str], jobs: list[Job], *, isolated: bool) -> list[Call]:
    """The calls that run the assignments' ``references`` and the ``jobs``, grouped by assignment (first the
    references of assignments without jobs, whose submissions wait for nothing else, then the assignments in the order
    the jobs name them), each reference just ahead of its assignment's jobs."""
    folders = [job.folder for job in jobs]
    order = list(dict.fromkeys([*(a for a in references if a not in folders), *folders]))
    calls: list[Call] = []
    for assignment_id in order:
        if assignment_id in references:
            calls.append(_reference_call(course, assignment_id, isolated))
        calls += [
            (run_job, (job,), (job.label, stored_path(course.root, job.key), job.key))
            for job in jobs
            if job.folder == assignment_id
        ]
    return calls


def _reference_call(course: Course, assignment_id: str, isolated: bool) -> Call:
    """The call that runs an assignment's reference for its check records (:func:`_reference_json`)."""
    what = (f"reference of {assignment_id}", verdict.stored_reference(course, assignment_id), assignment_id)
    return _reference_json, (str(course.root), assignment_id, isolated), what


def _reference_json(root: str, assignment_id: str, sandboxed: bool) -> tuple[str, None]:
    """The reference's check records (JSON); the instructor's own code is trusted: never a breach."""
    return json.dumps(verdict.reference_records(Course(Path(root)), assignment_id, sandboxed=sandboxed)), None

