"""The batch: notebooks executed ahead (local workers or a real Dask cluster), taken by nbgrader, resumable."""

import concurrent.futures
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import nbformat
import pytest
from distributed import Client

from autograder.pipeline import batch, verdict
from autograder.pipeline.intake import submissions as intake
from autograder.pipeline.releases import update_gradebook
from autograder.harness.benchmark import benchmark, scores
from autograder.course import ROOT, Course, copy_course, grade_id, is_autograder_tests
from autograder.pipeline.execute import STORE
from autograder.grading.grade import grade
from autograder.kernel.sandbox import BWRAP_ENV
from autograder.authoring.samples import samples, write_download


def download_samples(course):
    """Three students of the first assignment: s0 the reference, s1 a wrong answer, s2 the unchanged release."""
    found = {s.student_id: s for s in samples(course, course.assignment_ids()[0])}
    wrong = next(s for name, s in found.items() if name.startswith("wrong_"))
    chosen = [found["reference"], wrong, found["unchanged_release"]]
    return [replace(sample, student_id=f"s{number}") for number, sample in enumerate(chosen)]


@pytest.fixture(scope="module")
def download(tmp_path_factory):
    return write_download(download_samples(Course(ROOT)), tmp_path_factory.mktemp("download"))


@pytest.fixture(scope="module")
def graded_locally(tmp_path_factory, download):
    """The download graded once by two local workers, in a course of its own (read only: copy it to change it)."""
    course = copy_course(Course(ROOT), tmp_path_factory.mktemp("graded") / "course")
    return course, grade(course, download, workers=2)


def test_nbgrader_takes_the_batchs_outputs_and_a_rerun_executes_only_what_is_missing(
    graded_locally, download, tmp_path
):
    graded, grading = graded_locally
    assert (grading.batch.executed, grading.batch.stored, grading.batch.failed) == (3, 0, [])
    course = Course(Path(shutil.copytree(graded.root, tmp_path / "course", symlinks=True)))
    stored = sorted((course.root / STORE).glob("*.ipynb"))
    assert len(stored) == 3 and len(list((course.root / STORE).glob("reference-*.json"))) == 1
    first = scores(course)

    # nbgrader used the stored notebooks: a stored test cell's outputs, replaced, decide that cell's score.
    reference_run = next(p for p in stored if not _failed_tests(nbformat.read(p, as_version=4)))
    forged = nbformat.read(reference_run, as_version=4)
    test_cell = next(c for c in forged.cells if is_autograder_tests(c))
    test_cell.outputs = [nbformat.v4.new_output("error", ename="Forged", evalue="", traceback=[])]
    nbformat.write(forged, reference_run)
    other = sorted(p for p in stored if p != reference_run)[0]
    other.unlink()  # as if the run had stopped before this one finished

    again = grade(course, download, workers=2)
    assert (again.batch.executed, again.batch.stored) == (1, 2)
    changed = {key: score for key, score in scores(course).items() if score != first[key]}
    assert list(changed) == [("s0", course.assignment_ids()[0], grade_id(test_cell))]  # s0: the reference


def test_each_submission_is_ready_for_nbgrader_as_soon_as_its_notebooks_are_stored(graded_locally, tmp_path):
    """A rerun with one notebook to execute again: the two others are handed on before it runs, it after."""
    graded, grading = graded_locally
    course = Course(Path(shutil.copytree(graded.root, tmp_path / "course", symlinks=True)))
    sorted((course.root / STORE).glob("*.ipynb"))[0].unlink()
    stored_when_ready = {}

    def ready(submission):
        stored_when_ready[submission.student_id] = len(list((course.root / STORE).glob("*.ipynb")))

    run = batch.execute(course, grading.intake.submissions, isolated=True, workers=1, ready=ready)
    assert (run.executed, run.stored) == (1, 2)
    assert sorted(stored_when_ready.values()) == [2, 2, 3] and len(stored_when_ready) == 3


def test_a_dask_cluster_grades_as_local_workers_do(graded_locally, download, tmp_path):
    graded, local = graded_locally
    on_cluster = copy_course(graded, tmp_path / "cluster-course")
    with dask_cluster(tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}) as address:
        remote = grade(on_cluster, download, scheduler=address)
    assert (remote.batch.executed, remote.batch.failed) == (3, [])
    assert scores(on_cluster) == scores(graded)
    assert [(r.student_id, r.status) for r in remote.results] == [(r.student_id, r.status) for r in local.results]


def test_notebooks_a_worker_cannot_execute_are_executed_by_nbgrader(course_copy, download, tmp_path):
    """Workers without bubblewrap (told to use the system's, none on their PATH): every job fails with the reason,
    and the grades still hold."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": str(Path(sys.executable).parent), BWRAP_ENV: "bwrap"}
    with dask_cluster(tmp_path, env=env) as address:
        remote = grade(course_copy, download, scheduler=address)
    assert remote.batch.executed == 0 and len(remote.batch.failed) == 3
    assert all(f"{BWRAP_ENV}=bwrap names no executable bwrap" in line for line in remote.batch.failed)
    expected = {s.student_id: s.expected for s in download_samples(course_copy)}
    assert {r.student_id: {t.grade_id: t.score for t in r.tasks} for r in remote.results} == expected


@contextmanager
def dask_cluster(folder: Path, *, env: dict[str, str]) -> Iterator[str]:
    """A real Dask cluster on this machine: a scheduler process and a worker process with two worker processes
    (one thread each), started with ``env``; yields the scheduler's address."""
    scheduler_file = folder / "scheduler.json"
    quiet = {"env": env, "cwd": folder, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    scheduler = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
    processes = [
        subprocess.Popen(
            [*scheduler, "--scheduler-file", str(scheduler_file), "--port", "0", "--no-dashboard"], **quiet
        )
    ]
    try:
        address = _scheduler_address(scheduler_file, timeout=60)
        worker = [sys.executable, "-m", "distributed.cli.dask_worker", address]
        processes.append(subprocess.Popen([*worker, "--nworkers", "2", "--nthreads", "1", "--no-dashboard"], **quiet))
        with Client(address, timeout="60s") as client:
            client.wait_for_workers(2, timeout=120)
        yield address
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=60)


def _scheduler_address(scheduler_file: Path, *, timeout: float) -> str:
    """The address the scheduler writes to its file once it listens (waits for the whole file)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return json.loads(scheduler_file.read_text())["address"]
        except (OSError, ValueError, KeyError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _failed_tests(notebook) -> list[str]:
    """grade_ids of the test cells with an error output."""
    return [
        grade_id(cell)
        for cell in notebook.cells
        if is_autograder_tests(cell) and any(o.get("output_type") == "error" for o in cell.get("outputs", []))
    ]


def test_the_benchmark_grades_like_stock_nbgrader(course_copy):
    """Two generated students (the reference, a wrong answer) on 03, whose notebook sizes its work by
    NBGRADER_EXECUTION: stock, our ``grade`` and its first run score alike (the comparison that found the batch's
    reference run missing NBGRADER_EXECUTION) and every side wrote each submission's feedback page; times are
    printed, not judged. ``benchmark`` itself grades every assignment."""
    result = benchmark(course_copy, students=2, assignment_ids=["03_devices"], workers=2)
    assert (result.notebooks, result.references) == (2, 1)
    assert result.differences == []
    assert "grades identical, every feedback page there: yes" in result.report()


def test_a_reference_asked_for_before_the_batch_executes_runs_then_and_is_stored(course_copy):
    """What grade does while it reads the download: each assignment's reference run starts as soon as the assignment
    is known, and the batch stores its records with its other results."""
    stored = verdict.stored_reference(course_copy, "03_devices")
    with batch.Batch(course_copy, isolated=True, workers=1) as local:
        local.reference("03_devices")
        assert not stored.exists()
        run = local.execute([])
    assert stored.exists() and json.loads(stored.read_text())
    assert (run.executed, run.failed, run.breached) == (0, [], [])


def test_references_beyond_one_per_worker_run_among_the_submissions_each_ahead_of_its_assignment(course_copy, tmp_path):
    """One worker, the references of three assignments asked for as grade asks (the first starts, the others wait),
    then one reference submission of each executed: the first assignment's submission is ready for nbgrader before
    the third assignment's reference has run, and every reference is stored in the end."""
    first, second, third = course_copy.assignment_ids()[:3]
    chosen = [next(s for s in samples(course_copy, a) if s.student_id == "reference") for a in (first, second, third)]
    download = write_download(chosen, tmp_path / "download")
    releases = {a: update_gradebook(course_copy, a) for a in (first, second, third)}
    with intake.opened(download, course=course_copy, release=releases.__getitem__) as found:
        for submission in found.submissions:
            intake.place(course_copy, submission, release=releases[submission.assignment_id])
    submissions = sorted(found.submissions, key=lambda s: [first, second, third].index(s.assignment_id))
    stored = {a: verdict.stored_reference(course_copy, a) for a in (first, second, third)}
    references_stored_when_ready = {}

    def ready(submission):
        references_stored_when_ready[submission.assignment_id] = [a for a, path in stored.items() if path.exists()]

    with batch.Batch(course_copy, isolated=True, workers=1) as local:
        for assignment_id in (first, second, third):
            local.reference(assignment_id)
        run = local.execute(submissions, ready=ready)
    assert (run.executed, run.failed, run.breached) == (3, [], [])
    assert references_stored_when_ready == {first: [first], second: [first, second], third: [first, second, third]}


def test_one_job_more_is_allowed_after_three_looks_with_half_a_cpu_idle_up_to_the_most(monkeypatch):
    """psutil's per-CPU busy percentages, as :class:`autograder.pipeline.batch.Occupancy` looks at them once a second;
    asked again sooner (a job just finished), it keeps the number and takes no look."""
    looks = iter([[0, 0], *[[100, 20]] * 3, [100, 60], [100, 100], *[[60, 60]] * 3, *[[0, 0]] * 5])
    monkeypatch.setattr(batch.psutil, "cpu_percent", lambda percpu: next(looks))
    now = [0.0]
    occupancy, extra = batch.Occupancy(clock=lambda: now[0]), 0
    allowed = []
    for _ in range(13):
        now[0] += 0.4
        assert occupancy.extra(extra, 2) == extra  # too soon: no look
        now[0] += 0.6
        extra = occupancy.extra(extra, 2)
        allowed.append(extra)
    assert allowed == [0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2]
    assert next(looks, None) is None  # one look a second, 13 of them


def test_the_batchs_workers_run_kernels_on_one_thread_unless_the_environment_says_otherwise(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("MKL_NUM_THREADS", "3")
    context = multiprocessing.get_context("spawn")
    options = {"mp_context": context, "initializer": batch.start_worker, "initargs": (os.getpid(),)}
    with concurrent.futures.ProcessPoolExecutor(1, **options) as pool:
        assert [pool.submit(os.getenv, name).result() for name in batch.KERNEL_THREADS] == ["1", "3"]
