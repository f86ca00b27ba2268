"""Limits of kernels in a sandbox of their own (``SandboxedKernelManager.fork = False`` in the course's config, as
when grading without root): the attacks of ``tests/hostile/own_sandbox/01_tensors.toml`` graded through the real
pipeline in one run (one worker), with an honest student graded after them.

Each attacker's one_hot is right but first floods a limit: the working folder's files and folders (200 here),
System V shared memory that no process maps (1.5 GiB of memory here). Each loses its task, with its status; the
batch goes on; the honest student after them gets exactly the reference's grades; the run leaves no System V
segment of a kernel's user on the machine.
"""

import dataclasses
import shutil
from pathlib import Path

import pytest

from autograder.course import ROOT, Course, copy_course
from autograder.kernel.sandbox import KERNEL_UIDS
from autograder.harness.demo import mismatches_of
from autograder.grading.grade import grade
from autograder.authoring.samples import samples, write_download

ASSIGNMENT = "01_tensors"
FIXTURES = ROOT / "tests" / "hostile" / "own_sandbox" / f"{ASSIGNMENT}.toml"
LIMITS = """
c.SandboxedKernelManager.fork = False
c.SandboxedKernelManager.work_files = 200
c.SandboxedKernelManager.memory_bytes = 3 * 2**29
"""
"""Appended to the course's nbgrader_config.py: kernels in sandboxes of their own, low bounds."""


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The attackers, the honest student graded after them, the results by student id, and the machine's System V
    segments before and after the run."""
    scratch = tmp_path_factory.mktemp("own-sandbox")
    course = copy_course(Course(ROOT), scratch / "course")
    with (course.root / "nbgrader_config.py").open("a") as config:
        config.write(LIMITS)
    shutil.copytree(ROOT / "release" / ASSIGNMENT, course.root / "release" / ASSIGNMENT)  # samples start from it
    (course.root / "tests" / "submissions").mkdir(parents=True)  # the course's own samples (samples_root)
    (course.root / "tests" / "hostile").mkdir()
    shutil.copy(FIXTURES, course.root / "tests" / "hostile" / FIXTURES.name)
    found = samples(course, ASSIGNMENT)
    attackers = [s for s in found if s.student_id.startswith("stops_")]
    reference = next(s for s in found if s.student_id == "reference")
    honest = dataclasses.replace(reference, student_id="valid_graded_after_the_attacks")
    download = write_download([*attackers, honest], scratch / "download")
    before = segments()
    grading = grade(course, download, workers=1)
    return attackers, honest, {result.student_id: result for result in grading.results}, (before, segments())


def segments() -> list[str]:
    """The machine's System V shared memory segments that a kernel's user created (``/proc/sysvipc/shm``, one
    line each); not those of other programs, a PostgreSQL server that another test starts meanwhile, say."""
    lines = Path("/proc/sysvipc/shm").read_text().splitlines()
    creator = lines[0].split().index("cuid")
    return [line for line in lines[1:] if int(line.split()[creator]) in KERNEL_UIDS]


def test_each_attacker_loses_its_task_with_its_status(graded):
    attackers, _, results, _ = graded
    assert len(attackers) >= 2
    assert [line for sample in attackers for line in mismatches_of(results[sample.student_id], sample)] == []


def test_the_honest_student_graded_after_the_attacks_gets_exact_grades(graded):
    attackers, honest, results, _ = graded
    assert sorted(results)[-1] == honest.student_id and len(results) == len(attackers) + 1
    assert mismatches_of(results[honest.student_id], honest) == []


def test_the_run_leaves_no_system_v_segment(graded):
    *_, (before, after) = graded
    assert after == before
