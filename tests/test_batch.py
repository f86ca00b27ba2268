"""The batch: notebooks executed ahead (local workers or a real Dask cluster), taken by nbgrader, resumable."""

import json
import os
import subprocess
import sys
import time
from dataclasses import replace

import nbformat
import pytest
from distributed import Client

from autograder.benchmark import scores
from autograder.course import ROOT, copy_course, grade_id, is_autograder_tests
from autograder.execute import STORE
from autograder.grade import grade
from autograder.samples import samples, write_download


@pytest.fixture
def download(course_copy, tmp_path):
    """Three students of the first assignment: the reference, a wrong answer, the unchanged release."""
    assignment_id = course_copy.assignment_ids()[0]
    found = {s.student_id: s for s in samples(course_copy, assignment_id)}
    wrong = next(s for name, s in found.items() if name.startswith("wrong_"))
    chosen = [found["reference"], wrong, found["unchanged_release"]]
    renamed = [replace(sample, student_id=f"s{number}") for number, sample in enumerate(chosen)]
    return write_download(renamed, tmp_path / "download")


def test_nbgrader_takes_the_batchs_outputs_and_a_rerun_executes_only_what_is_missing(course_copy, download):
    grading = grade(course_copy, download, workers=2)
    assert (grading.batch.executed, grading.batch.stored, grading.batch.failed) == (3, 0, [])
    stored = sorted((course_copy.root / STORE).glob("*.ipynb"))
    assert len(stored) == 3 and len(list((course_copy.root / STORE).glob("reference-*.json"))) == 1
    first = scores(course_copy)

    # nbgrader used the stored notebooks: a stored test cell's outputs, replaced, decide that cell's score.
    reference_run = next(p for p in stored if not _failed_tests(nbformat.read(p, as_version=4)))
    forged = nbformat.read(reference_run, as_version=4)
    test_cell = next(c for c in forged.cells if is_autograder_tests(c))
    test_cell.outputs = [nbformat.v4.new_output("error", ename="Forged", evalue="", traceback=[])]
    nbformat.write(forged, reference_run)
    other = sorted(p for p in stored if p != reference_run)[0]
    other.unlink()  # as if the run had stopped before this one finished

    again = grade(course_copy, download, workers=2)
    assert (again.batch.executed, again.batch.stored) == (1, 2)
    changed = {key: score for key, score in scores(course_copy).items() if score != first[key]}
    assert list(changed) == [("s0", course_copy.assignment_ids()[0], grade_id(test_cell))]  # s0: the reference


def test_a_dask_cluster_grades_as_local_workers_do(course_copy, download, tmp_path):
    local = grade(course_copy, download, workers=2)
    on_cluster = copy_course(course_copy, tmp_path / "cluster-course")
    scheduler_file = tmp_path / "scheduler.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_scheduler", "--scheduler-file", str(scheduler_file)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    ]
    try:
        deadline = time.monotonic() + 60
        while not scheduler_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        worker = [sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file", str(scheduler_file)]
        processes.append(
            subprocess.Popen(
                [*worker, "--nworkers", "2", "--nthreads", "1", "--no-dashboard"],
                env=env,
                cwd=tmp_path,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        address = json.loads(scheduler_file.read_text())["address"]
        with Client(address, timeout="60s") as client:
            client.wait_for_workers(2, timeout=120)
        remote = grade(on_cluster, download, scheduler=address)
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=60)
    assert (remote.batch.executed, remote.batch.failed) == (3, [])
    assert scores(on_cluster) == scores(course_copy)
    assert [(r.student_id, r.status) for r in remote.results] == [(r.student_id, r.status) for r in local.results]


def _failed_tests(notebook) -> list[str]:
    """grade_ids of the test cells with an error output."""
    return [
        grade_id(cell)
        for cell in notebook.cells
        if is_autograder_tests(cell) and any(o.get("output_type") == "error" for o in cell.get("outputs", []))
    ]
