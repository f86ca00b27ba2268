"""Every sample submission graded through the real pipeline once, by ``demo --all`` (conftest's
``every_sample_graded``, one run for the session: none is graded twice; tests/run_tests.sh runs this file first,
on one pytest-xdist worker): each gets its expected grade, in grades.csv, task_results.csv and a feedback page.

The hostile samples of 01_tensors, read back from its gradebook as ``report`` reads them: self-scorers earn exactly
what the verdict gives, malformed files are each one student's invalid notebook, leaks of the hidden tests reach no
feedback page, students' markup reaches it only as text, output floods keep within the output limits and the
grader's processes within the memory bound docs/security.md states, and an execution whose kernel breached its
isolation is not stored for reuse. The malformed files, which are no samples, are graded in a batch of their own
beside the reference.

The stored executions (``executed/``, the kernel's outputs before the verdict) show that each trick works
on stock nbgrader: scored by ``determine_grade`` as they came from the kernel, they earn points they must not.
"""

import csv
import functools
import html
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbgrader.utils import determine_grade

from autograder.pipeline import batch
from autograder.course import (
    HIDDEN_TEST_MARKERS,
    ROOT,
    Course,
    copy_course,
    grade_id,
    is_autograder_tests,
    is_solution,
    read_notebook,
)
from autograder.harness.demo import mismatches_of
from autograder.kernel.sandbox import KERNEL_UIDS
from autograder.pipeline.execute import STORE, Execute
from autograder.results.feedback import REDACTED
from autograder.grading.grade import grade
from autograder.pipeline.intake.submissions import Submission
from autograder.results.report import gradebook_results
from autograder.authoring.samples import samples, write_download
from hostile.malformed_notebooks import MALFORMED

ASSIGNMENT = "01_tensors"
ALL = samples(Course(ROOT), ASSIGNMENT)
REFERENCE = next(s for s in ALL if s.student_id == "reference")
SCORED = [s for s in ALL if s.student_id.startswith("scored_")]
LEAKS = [s for s in ALL if s.student_id.startswith("leaks_")]
INJECTORS = [s for s in ALL if s.student_id.startswith("html_")]
FLOODS = [s for s in ALL if s.student_id.startswith("floods_")]
ATTACKERS = [s for s in ALL if s.student_id.startswith("cross_")]
"""Graded first (student ids sort first), before every other sample of the run."""
FILES = ["json_nested_200000_deep", "attachment_of_the_wrong_type", "binary_png_bytes"]
"""Malformed files graded here (every one of MALFORMED is checked in test_structure)."""


@pytest.fixture(scope="module")
def every_result(every_sample_graded):
    """What the demo graded, every assignment: :func:`autograder.results.report.gradebook_results` of its course."""
    return gradebook_results(every_sample_graded.graded)


@pytest.fixture(scope="module")
def graded(every_sample_graded, every_result):
    """The demo's scratch course, and the results of every sample it graded by student id (01_tensors only)."""
    return every_sample_graded.graded, {r.student_id: r for r in every_result if r.assignment_id == ASSIGNMENT}


@pytest.fixture(scope="module")
def malformed_graded(every_sample_graded, tmp_path_factory):
    """The results by student id of a batch of the reference and the malformed FILES, graded in a course whose
    executed/ holds the demo's executions and reference records (hard links: the batch only ever replaces a
    stored file, never rewrites it), so that nothing executes again."""
    scratch = tmp_path_factory.mktemp("malformed")
    course = copy_course(Course(ROOT), scratch / "course")
    (course.root / STORE).mkdir()
    for path in (every_sample_graded.graded.root / STORE).iterdir():
        if path.is_file():
            os.link(path, course.root / STORE / path.name)
    download = write_download([REFERENCE], scratch / "download")
    release = nbformat.read(ROOT / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    for name in FILES:
        path = download / f"malformed_{name}" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
        path.parent.mkdir(parents=True)
        path.write_bytes(MALFORMED[name](release))
    grading = grade(course, download)
    assert grading.batch.executed == 0
    return {result.student_id: result for result in grading.results}


def test_every_sample_submission_gets_its_expected_grade(every_sample_graded):
    process, course = every_sample_graded.process, every_sample_graded.course
    assert process.returncode == 0, process.stdout + process.stderr
    assert "MISMATCH" not in process.stdout and "all sample submissions got their expected grades" in process.stdout
    expected = {(s.student_id, s.assignment_id) for a in course.assignment_ids() for s in samples(course, a)}
    table = process.stdout.split("\n\n")[0].splitlines()
    graded = {tuple(line.split()[:2]) for line in table[2:]}
    assert graded == expected
    where = re.search(r"graded in a scratch course: grades (\S+), per task (\S+), feedback (\S+)/", process.stdout)
    grades_csv, task_results_csv, feedback = map(Path, where.groups())
    assert grades_csv.parent == task_results_csv.parent == feedback.parent == every_sample_graded.graded.root
    with grades_csv.open() as handle:  # nbgrader's export: every student of the gradebook x every assignment
        assert {row["student_id"] for row in csv.DictReader(handle)} == {student for student, _ in expected}
    with task_results_csv.open() as handle:
        assert {(row["student_id"], row["assignment"]) for row in csv.DictReader(handle)} == expected
    assert {(page.parts[-3], page.parts[-2]) for page in feedback.glob("*/*/*.html")} == expected
    wrong = [s for s in expected if s[0].startswith("wrong_")]
    assert len(wrong) >= 4 * len(course.assignment_ids())


def test_a_task_that_earned_some_of_its_points_is_partial_one_that_earned_none_failed(graded):
    _, results = graded
    tasks = [t for sample in ALL if sample.student_id.startswith("wrong_") for t in results[sample.student_id].tasks]
    partial = {(t.grade_id, t.status) for t in tasks if t.autograded and 0 < t.score < t.max_score}
    failed = {(t.grade_id, t.status) for t in tasks if t.autograded and t.score == 0}
    assert ("task_2_2_zero_negatives", "partial") in partial and {status for _, status in partial} == {"partial"}
    assert ("task_2_2_zero_negatives", "failed") in failed and {status for _, status in failed} == {"failed"}


def test_there_are_self_scorers():
    assert len(SCORED) >= 4


@pytest.mark.parametrize("sample", SCORED, ids=[s.student_id for s in SCORED])
def test_a_self_scorer_earns_exactly_what_the_verdict_gives(graded, sample):
    _, results = graded
    assert mismatches_of(results[sample.student_id], sample) == []


@pytest.mark.parametrize("sample", SCORED, ids=[s.student_id for s in SCORED])
def test_the_trick_earns_points_from_stock_nbgrader(graded, sample):
    course, _ = graded
    unearned = {
        grade_id(cell): determine_grade(cell)[0]
        for cell in stored_execution(course, sample).cells
        if is_autograder_tests(cell) and determine_grade(cell)[0] > sample.expected[grade_id(cell)]
    }
    assert unearned != {}


def test_there_are_leaks():
    assert len(LEAKS) >= 5


@pytest.mark.parametrize("sample", LEAKS, ids=[s.student_id for s in LEAKS])
def test_a_leak_of_the_hidden_tests_reaches_no_feedback_page(graded, sample):
    course, results = graded
    assert mismatches_of(results[sample.student_id], sample) == []
    leaked = [cell for cell in stored_execution(course, sample).cells if "LEAKED" in str(cell.get("outputs"))]
    assert leaked, "the kernel's outputs show no leak"
    page = page_text(course, sample.student_id)
    assert "LEAKED" not in page and REDACTED in page
    assert [line for line in HIDDEN_LINES if line in page] == []


def test_cross_student_attackers_graded_first_harm_nobody_after_them(every_sample_graded, every_result, graded):
    _, results = graded
    assert ATTACKERS and min(r.student_id for r in every_result) == ATTACKERS[0].student_id  # the batch's first
    assert "MISMATCH" not in every_sample_graded.process.stdout  # nor any sample of the other assignments
    wrong = [line for sample in ALL for line in mismatches_of(results[sample.student_id], sample)]
    assert wrong == []


@pytest.mark.parametrize("sample", FLOODS, ids=[s.student_id for s in FLOODS])
def test_an_output_flood_loses_its_cells_and_stays_within_the_output_limits(graded, sample):
    course, results = graded
    assert mismatches_of(results[sample.student_id], sample) == []
    stored = course.root / "autograded" / sample.student_id / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    page = course.root / "feedback" / sample.student_id / ASSIGNMENT / f"{ASSIGNMENT}.html"
    cells = autograded_cell_count()
    limit = Execute.max_notebook_output_bytes.default_value + cells * Execute.max_output_bytes.default_value
    sizes = {"autograded": stored.stat().st_size, "feedback": page.stat().st_size}
    assert max(sizes.values()) < limit + REFERENCE_NOTEBOOK_BYTES, sizes


def test_the_graders_own_memory_stays_under_its_bound_whatever_the_kernels_send(every_sample_graded):
    """docs/security.md, "Limits that bind": each process of the grader stays under GRADER_MEMORY_BOUND; measured
    (VmHWM of every grading process, polled) over the whole run, output floods included."""
    assert FLOODS
    command, peak = every_sample_graded.memory.largest
    print(f"largest peak of a grading process: {peak / 2**20:.0f} MiB ({command})")
    assert 0 < peak < GRADER_MEMORY_BOUND, f"{peak / 2**20:.0f} MiB: {command}"


GRADER_MEMORY_BOUND = 1 * 2**30
"""The bound docs/security.md states for each grading process."""
REFERENCE_NOTEBOOK_BYTES = 2 * 2**20
"""Room for what a notebook holds besides its outputs (cells, metadata) and feedback's page around them."""


def autograded_cell_count():
    """How many autograded test cells the release has (each has its own output limit)."""
    release = read_notebook(ROOT / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
    return sum(is_autograder_tests(cell) for cell in release.cells)


def test_a_kernel_that_breached_its_isolation_leaves_no_stored_execution(graded):
    """The attackers' kernels left processes that the clean-up killed: what they executed is not kept for reuse
    (the batch says so, nbgrader executed them again); honest executions are kept."""
    course, _ = graded
    assert [s.student_id for s in ATTACKERS if stored_executions(course, s)] == []
    assert len(stored_executions(course, REFERENCE)) == 1


def test_an_honest_feedback_page_loses_no_output_and_the_reference_full_marks(graded):
    course, results = graded
    assert mismatches_of(results["reference"], REFERENCE) == []
    assert REDACTED not in page_text(course, "reference")


INJECTED = re.compile(r"<script[^>]*>[^<]*html_injected|<img[^>]*onerror|href=\"?javascript:", re.IGNORECASE)
"""The injectors' payloads as live markup (a script, an event handler, a javascript: link)."""


@pytest.mark.parametrize("sample", INJECTORS, ids=[s.student_id for s in INJECTORS])
def test_a_students_markup_reaches_the_feedback_page_only_as_text(graded, sample):
    course, results = graded
    assert mismatches_of(results[sample.student_id], sample) == []
    raw = (course.root / "feedback" / sample.student_id / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
    assert INJECTED.findall(raw) == []
    assert "html_injected" in page_text(course, sample.student_id)


def page_text(course, student_id):
    """A student's feedback page as text (tags dropped, entities decoded)."""
    path = course.root / "feedback" / student_id / ASSIGNMENT / f"{ASSIGNMENT}.html"
    return html.unescape(re.sub(r"<[^>]*>", "", path.read_text()))


def hidden_test_lines() -> list[str]:
    """The hidden tests' lines of 10 characters or more that the release does not show anyway."""
    release_notebook = read_notebook(ROOT / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
    release = "\n".join(cell.source for cell in release_notebook.cells)
    lines = []
    for cell in read_notebook(ROOT / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").cells:
        inside = False
        for line in cell.source.splitlines():
            inside = (inside or line.strip() == HIDDEN_TEST_MARKERS[0]) and line.strip() != HIDDEN_TEST_MARKERS[1]
            if inside and len(line.strip()) >= 10 and line.strip() not in release:
                lines.append(line.strip())
    return lines


HIDDEN_LINES = hidden_test_lines()


def stored_execution(course, sample):
    """The notebook the batch executed for ``sample`` (the kernel's outputs, before the verdict)."""
    executed = stored_executions(course, sample)
    assert len(executed) == 1
    return nbformat.read(executed[0], as_version=4)


def stored_executions(course, sample):
    """The paths of the notebooks stored in ``executed/`` with the answers of ``sample``."""
    return executed_by_answers(course.root).get(solutions(sample.notebook), [])


@functools.cache
def executed_by_answers(root: Path) -> dict[tuple[str, ...], list[Path]]:
    """The notebooks stored in ``root/executed/`` by their solution cells' sources (read once: hundreds of them)."""
    found: dict[tuple[str, ...], list[Path]] = {}
    for path in sorted((root / STORE).glob("*.ipynb")):
        found.setdefault(solutions(nbformat.read(path, as_version=4)), []).append(path)
    return found


@pytest.mark.parametrize("name", FILES)
def test_a_malformed_file_is_one_invalid_notebook_and_the_batch_is_graded(malformed_graded, name):
    result = malformed_graded[f"malformed_{name}"]
    assert result.status == "invalid notebook" and result.score == 0 and result.tasks
    assert len(malformed_graded) == 1 + len(FILES)
    assert mismatches_of(malformed_graded["reference"], REFERENCE) == []


def solutions(notebook) -> tuple[str, ...]:
    return tuple(cell.source for cell in notebook.cells if is_solution(cell))


def test_a_run_interrupted_then_terminated_leaves_no_process_behind(tmp_path):
    """SIGINT, then SIGTERM 3 s later (as a CI runner or a test harness does), while kernels run: no worker,
    nbgrader, fork server or kernel of the run is left."""
    course = copy_course(Course(ROOT), tmp_path / "course")
    chosen = [REFERENCE, *SCORED[:2]]
    download = write_download(chosen, tmp_path / "download")
    command = [sys.executable, "-m", "autograder", "--course", str(course.root), "grade", str(download)]
    run = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while not any(uid in KERNEL_UIDS for uid in descendants(run.pid).values()):
            assert run.poll() is None and time.monotonic() < deadline, "no kernel started"
            time.sleep(0.2)
        started = descendants(run.pid)
        run.send_signal(signal.SIGINT)
        time.sleep(3)
        run.send_signal(signal.SIGTERM)
        run.wait(timeout=30)
    finally:
        run.kill()
    deadline = time.monotonic() + 15
    while (left := [pid for pid in started if alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == [], f"{len(left)} of the run's {len(started)} processes were left"


def descendants(root: int) -> dict[int, int]:
    """``{pid: real uid}`` of every live process below ``root``, from /proc."""
    parents, uids = {}, {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = dict(line.split(":", 1) for line in (entry / "status").read_text().splitlines() if ":" in line)
            except OSError:
                continue
            parents[int(entry.name)] = int(fields["PPid"])
            uids[int(entry.name)] = int(fields["Uid"].split()[0])
    found, frontier = {}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in found:
                found[pid] = uids[pid]
                frontier.append(pid)
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` is a process that is not a zombie (an orphan whose new parent has not reaped it yet)."""
    try:
        state = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("State"))
    except (OSError, StopIteration):
        return False
    return "Z" not in state.split(":", 1)[1].split()[0]


def test_no_cache_executes_an_honest_notebook_again(graded, tmp_path):
    """The reference's execution, stored by the demo's run (copied into a course of this test's own, with its
    submission, its assignment's reference records and the gradebook), executed again by the batch with ``no_cache`` (what
    ``grade --no-cache`` asks): it runs again, its reference records too, and is stored afresh."""
    demo_course, _ = graded
    [stored_reference] = stored_executions(demo_course, REFERENCE)
    course = copy_course(Course(ROOT), tmp_path / "course")
    (course.root / STORE).mkdir()
    for path in [stored_reference, *(demo_course.root / STORE).glob(f"reference-{ASSIGNMENT}-*.json")]:
        shutil.copy(path, course.root / STORE)
    submitted = Path("submitted") / "reference" / ASSIGNMENT
    shutil.copytree(demo_course.root / submitted, course.root / submitted)
    shutil.copy(demo_course.root / "gradebook.db", course.root)  # nbgrader's sanitising reads the assignment there
    stored = {path: path.stat().st_mtime_ns for path in (course.root / STORE).iterdir()}
    fresh = batch.execute(
        course,
        [Submission("reference", ASSIGNMENT, course.root / submitted / f"{ASSIGNMENT}.ipynb", "reference")],
        isolated=True,
        workers=1,
        no_cache=True,
    )
    assert (fresh.executed, fresh.stored, fresh.breached) == (1, 0, [])
    rewritten = [path for path, mtime in stored.items() if path.exists() and path.stat().st_mtime_ns != mtime]
    assert sorted(path.suffix for path in rewritten) == [".ipynb", ".json"]
    assert [path.name for path in (course.root / STORE).glob("*.ipynb")] == [stored_reference.name]
