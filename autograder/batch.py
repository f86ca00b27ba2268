"""Stage ``batch``: every submitted notebook executed concurrently, ahead of ``nbgrader autograde``.

Stock ``nbgrader autograde`` executes one notebook at a time, and a torch
notebook spends most of its time in its kernel. This stage prepares each
submitted notebook as autograde will hand it to ``Execute`` (nbgrader's own
sanitising preprocessors, and the folder autograde builds: the assignment's
files from source/ over the submission's), and executes those notebooks
``workers`` at a time in local worker processes, or on a Dask cluster
(``scheduler``), each kernel in its sandbox as usual.

Each executed notebook is stored in the course's ``executed/`` folder under
its key (:func:`autograder.execute.execution_key`: the cells, the kernel,
the folder's other files and the execution settings). nbgrader then runs as
before and stays the only writer of the gradebook: the course's ``Execute``
takes the stored outputs of a notebook whose key it finds, and executes
any other itself. A stored result is therefore used only for exactly the
code, files and settings it was produced with, and a run that stops half way
(Ctrl-C, a crash) keeps what it finished: the next run executes only the rest.

The reference solution's check records (:mod:`autograder.verdict`) are
computed in the same batch, in a local process, and stored the same way;
the reference's kernel runs in the same sandbox as the students' (forked
from the preloaded server, so it starts as fast), unless the batch runs
without isolation.

A job that fails (its kernel cannot start, a worker is lost) is reported
and left to nbgrader, which executes that notebook itself. So is a job whose
kernel breached its isolation (a process of it outlived it:
:attr:`autograder.execute.Execute.breach`): its execution is not stored, so
no later run reuses what such a kernel may have tampered with. With
``no_cache`` (``grade --no-cache``) the stored executions of the
submissions and the references are discarded first: everything executes
again.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
from nbgrader.preprocessors import CheckCellMetadata, ClearOutput, DeduplicateIds, OverwriteCells, OverwriteKernelspec
from tqdm import tqdm
from traitlets.config import Config, PyFileConfigLoader

from . import verdict
from .course import Course, die_with_parent
from .execute import STORE, Execute, execution_key, folder_files, stored_path
from .intake import Submission

SANITIZE = (ClearOutput, DeduplicateIds, OverwriteKernelspec, OverwriteCells, CheckCellMetadata)
"""nbgrader autograde's default ``sanitize_preprocessors``, in its order (the course does not change them)."""


@dataclass(frozen=True)
class Job:
    """One notebook to execute: everything a worker needs, so that it needs no shared file system."""

    key: str
    """:func:`autograder.execute.execution_key` of the notebook, its folder's files and the settings."""
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
    """Execute the notebooks of ``submissions`` (placed in submitted/) and store them for nbgrader autograde.

    ``ready`` is called (in this thread) with each submission as soon as its notebooks and its assignment's
    reference run are stored or have failed here, so that nbgrader can take it while others still execute.

    ``workers``: local worker processes (default :func:`default_workers`);
    ``scheduler``: the address of a Dask distributed scheduler
    (``tcp://host:port``), whose workers then execute the students'
    notebooks (they need this repository and its environment); ``no_cache``: discard the stored
    executions of these submissions and their references first; ``progress`` gets a line for notebooks
    found already executed and for each job that fails or breaches its isolation. A progress bar
    (counts, time left) is shown on stderr while the notebooks execute, when stderr is a terminal.

    Raises:
        OSError: ``executed/`` cannot be written.
        ValueError, OSError: no Dask scheduler at ``scheduler`` (from ``distributed``).
    """
    config = job_config(course, isolated=isolated)
    settings = Execute(config=Config(config)).settings()
    store = course.root / STORE
    store.mkdir(exist_ok=True)
    jobs_by_submission = [jobs_of(course, submission, config, settings) for submission in submissions]
    jobs = [job for found in jobs_by_submission for job in found]
    if no_cache:
        assignment_ids = {submission.assignment_id for submission in submissions}
        for path in [stored_path(course.root, job.key) for job in jobs]:
            path.unlink(missing_ok=True)
        for assignment_id in assignment_ids:
            verdict.stored_reference(course, assignment_id).unlink(missing_ok=True)
    done_before = {job.key for job in jobs if stored_path(course.root, job.key).exists()}
    # Identical notebooks (same cells, files, settings: two students handing in the release) run once.
    todo = list({job.key: job for job in jobs if job.key not in done_before}.values())
    references = sorted({s.assignment_id for s in submissions})
    references = [a for a in references if not verdict.stored_reference(course, a).exists()]
    stored = sum(job.key in done_before for job in jobs)
    if stored:
        progress(f"{stored} notebook(s) already executed by an earlier run: kept")
    waiting = []  # (submission, what it waits for: its notebooks' keys and its reference, not yet stored)
    for submission, found in zip(submissions, jobs_by_submission):
        keys = {job.key for job in found if job.key not in done_before}
        waiting.append((submission, keys | ({submission.assignment_id} & set(references))))
    failed: list[str] = []
    breached: list[str] = []
    executed = 0

    def finished(name: str) -> None:
        for submission, pending in waiting:
            if name in pending:
                pending.discard(name)
                if not pending:
                    ready(submission)

    for submission, pending in waiting:
        if not pending:
            ready(submission)
    with _executors(workers, scheduler) as (local, remote):
        futures: dict[concurrent.futures.Future, tuple[str, Path, str]] = {
            local.submit(_reference_json, str(course.root), assignment_id, isolated): (
                f"reference of {assignment_id}",
                verdict.stored_reference(course, assignment_id),
                assignment_id,
            )
            for assignment_id in references
        }
        for job in todo:
            futures[remote.submit(run, job)] = (job.label, stored_path(course.root, job.key), job.key)
        with tqdm(total=len(futures), desc="executing", unit="notebook", file=sys.stderr, disable=None) as bar:
            for future in concurrent.futures.as_completed(futures):
                label, target, name = futures[future]
                bar.update()
                try:
                    text, breach = future.result()
                except Exception as error:  # a worker lost, a kernel that cannot start: nbgrader executes it
                    failed.append(f"{label}: {type(error).__name__}: {error}")
                    progress(f"not executed ahead (nbgrader will): {failed[-1]}")
                else:
                    executed += target.suffix == ".ipynb"
                    if breach:
                        breached.append(f"{label}: {breach}")
                        why = "not stored, its kernel breached its isolation (nbgrader runs it again)"
                        progress(f"{why}: {breached[-1]}")
                    else:
                        _write_atomically(target, text)
                finished(name)
    return BatchRun(executed=executed, stored=stored, failed=failed, breached=breached)


def default_workers() -> int:
    """Worker processes for this machine: one per CPU (measured on 2 cores with forked kernels: 2 workers
    executed a batch of 21 notebooks in 42.5 s and 45.0 s, 3 workers in 45.9 s and 49.8 s), at most one per
    1.5 GiB of memory (a kernel with torch imported takes up to about 1 GiB)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return max(1, min(cpus, int(memory / (1.5 * 2**30))))


def job_config(course: Course, *, isolated: bool) -> dict[str, Any]:
    """The ``Execute`` and sandbox sections of the course's nbgrader_config.py; the sandbox on or off."""
    loaded = PyFileConfigLoader("nbgrader_config.py", path=str(course.root)).load_config()
    sandbox = {**loaded.get("SandboxedKernelManager", {}), "enabled": isolated}
    return {"Execute": dict(loaded.get("Execute", {})), "SandboxedKernelManager": sandbox}


def jobs_of(course: Course, submission: Submission, config: dict[str, Any], settings: dict[str, Any]) -> list[Job]:
    """A job for each notebook of a placed submission, sanitised as nbgrader autograde does.

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
            for preprocessor in SANITIZE:
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


def run(job: Job) -> tuple[str, str | None]:
    """Execute a job's notebook with the course's ``Execute`` in a scratch folder (runs in a worker).

    Returns:
        The executed notebook (nbformat JSON), and how its kernel breached its isolation (None: it did not;
        :attr:`autograder.execute.Execute.breach`).
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


def _reference_json(root: str, assignment_id: str, sandboxed: bool) -> tuple[str, None]:
    """The reference's check records (JSON); the instructor's own code is trusted: never a breach."""
    return json.dumps(verdict.reference_records(Course(Path(root)), assignment_id, sandboxed=sandboxed)), None


def _write_atomically(target: Path, text: str) -> None:
    """Write ``text`` to ``target`` through a temporary file, so an interrupted run never leaves half a file."""
    partial = target.with_name(f".{target.name}.partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(target)


@contextmanager
def _executors(
    workers: int | None, scheduler: str | None
) -> Iterator[tuple[concurrent.futures.Executor, concurrent.futures.Executor]]:
    """(local, students'): a local process pool, and the Dask cluster's executor or that same pool."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")  # a fresh interpreter: no event loop or threads inherited
    pool = concurrent.futures.ProcessPoolExecutor(
        workers or default_workers(), mp_context=context, initializer=die_with_parent, initargs=(os.getpid(),)
    )
    with pool as local:
        if scheduler is None:
            yield local, local
            return
        from distributed import Client

        with Client(scheduler, timeout="30s") as client:
            yield local, client.get_executor()
