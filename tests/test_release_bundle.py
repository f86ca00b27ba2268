"""`python -m autograder release`: the bundles students receive hold only what a student may see, and the check
students are told to run works in an unpacked bundle without this repository."""

import io
import json
import re
import subprocess
import sys
import zipfile

import nbformat
import pytest

from autograder.authoring.bundle import (
    STUDENT_PACKAGES,
    bundle_contents,
    bundle_findings,
    bundle_names,
    read_zip,
    zip_bytes,
)
from autograder.authoring.check import bundle_check
from autograder.authoring.leaks import secret_lines
from autograder.course import ROOT, Course, grade_id, is_solution, read_notebook

COURSE = Course(ROOT)
ASSIGNMENT = "01_tensors"


def secret_line(course, assignment_id, kind):
    """A line of the source notebook's regions of ``kind`` ("solution code", "hidden test code") that is secret."""
    secret = secret_lines(read_notebook(course.source_notebook(assignment_id)))
    return next(line for line, what in secret.items() if what == kind and len(line) > 12)


def with_notebook(contents, assignment_id, change):
    """``contents`` with the bundle's notebook changed by ``change`` (called with the notebook as nbformat)."""
    name = bundle_names(assignment_id)[0]
    notebook = nbformat.reads(contents[name].decode(), as_version=4)
    change(notebook)
    return {**contents, name: nbformat.writes(notebook).encode()}


def first_code_cell(notebook, solution):
    return next(c for c in notebook.cells if c.cell_type == "code" and is_solution(c) == solution)


def test_every_real_bundle_passes_and_release_writes_them(tmp_path, cli):
    for assignment_id in COURSE.assignment_ids():
        contents = bundle_contents(COURSE, assignment_id)
        assert list(contents) == bundle_names(assignment_id)
        assert bundle_findings(COURSE, assignment_id, zip_bytes(contents)) == [], assignment_id
        assert bundle_check(COURSE, assignment_id) == []

    written = cli("release", "--output", str(tmp_path / "dist"), ASSIGNMENT, "02_strides")
    assert written.returncode == 0, written.stdout + written.stderr
    assert sorted(p.name for p in (tmp_path / "dist").iterdir()) == ["01_tensors.zip", "02_strides.zip"]
    with zipfile.ZipFile(tmp_path / "dist" / "01_tensors.zip") as archive:
        assert archive.namelist() == bundle_names(ASSIGNMENT)
        requirements = archive.read(f"{ASSIGNMENT}/requirements.txt").decode()
        readme = archive.read(f"{ASSIGNMENT}/README.md").decode()
    pins = [line for line in requirements.splitlines() if not line.startswith("#")]
    course_pins = set((ROOT / "requirements.txt").read_text().splitlines())
    assert [pin.split("==")[0] for pin in pins] == list(STUDENT_PACKAGES)
    assert set(pins) <= course_pins  # the course's versions, whatever they are
    upload = "upload `01_tensors.ipynb` as it is, under its own name, to the\nassignment on your course's platform"
    assert upload in readme
    # the same release gives the same bytes
    assert zip_bytes(bundle_contents(COURSE, ASSIGNMENT)) == (tmp_path / "dist" / "01_tensors.zip").read_bytes()


def test_release_refuses_a_bundle_whose_notebook_holds_a_solution_line(course_copy, cli, tmp_path):
    solution_line = secret_line(course_copy, ASSIGNMENT, "solution code")
    path = course_copy.release_notebook(ASSIGNMENT)
    planted = json.loads(path.read_text())
    stub = next(
        c for c in planted["cells"] if c["cell_type"] == "code" and c["metadata"].get("nbgrader", {}).get("solution")
    )
    stub["source"] = "".join(stub["source"]).replace("raise NotImplementedError()", solution_line)
    path.write_text(json.dumps(planted, indent=1))

    dist = tmp_path / "dist"
    refused = cli("--course", str(course_copy.root), "release", "--output", str(dist), ASSIGNMENT, "02_strides")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert re.search(
        r"01_tensors/01_tensors.ipynb: cell \d+, under '[^']+', line \d+ holds solution code: "
        + re.escape(repr(solution_line)),
        refused.stdout,
    ), refused.stdout
    assert "refused 01_tensors.zip (not written)" in refused.stdout
    assert sorted(p.name for p in dist.iterdir()) == ["02_strides.zip"]  # the clean one is written, not the other
    assert any("holds solution code" in finding for finding in bundle_check(course_copy, ASSIGNMENT))


def test_a_hidden_test_line_anywhere_in_the_bundle_is_caught():
    hidden_line = secret_line(COURSE, ASSIGNMENT, "hidden test code")
    contents = bundle_contents(COURSE, ASSIGNMENT)

    def plant(notebook):
        cell = next(c for c in notebook.cells if c.cell_type == "code" and "check_" in c.source)
        cell.source += "\n" + hidden_line

    findings = bundle_findings(COURSE, ASSIGNMENT, zip_bytes(with_notebook(contents, ASSIGNMENT, plant)))
    assert len(findings) == 1 and f"holds hidden test code: {hidden_line!r}" in findings[0]

    readme = f"{ASSIGNMENT}/README.md"
    in_readme = {**contents, readme: contents[readme] + f"\n    {hidden_line}\n".encode()}
    line = len(in_readme[readme].decode().splitlines())
    assert bundle_findings(COURSE, ASSIGNMENT, zip_bytes(in_readme)) == [
        f"{readme}, line {line} holds hidden test code: {hidden_line!r}"
    ]


def test_markers_and_written_answers_are_caught():
    source = read_notebook(COURSE.source_notebook(ASSIGNMENT))
    answer = next(c for c in source.cells if c.cell_type == "markdown" and is_solution(c))
    model_line = next(line for line in answer.source.splitlines() if len(line) > 40)

    def plant(notebook):
        first_code_cell(notebook, solution=True).source += "\n    ### BEGIN SOLUTION"
        next(c for c in notebook.cells if c.cell_type == "markdown" and is_solution(c)).source = model_line

    findings = bundle_findings(
        COURSE, ASSIGNMENT, zip_bytes(with_notebook(bundle_contents(COURSE, ASSIGNMENT), ASSIGNMENT, plant))
    )
    assert len(findings) == 2
    assert "holds the marker '### BEGIN SOLUTION'" in findings[0]
    assert f"holds a written answer's model text: {model_line.strip()!r}" in findings[1]


def test_an_extra_or_missing_file_is_caught():
    contents = bundle_contents(COURSE, ASSIGNMENT)
    for extra in (f"{ASSIGNMENT}/{ASSIGNMENT}_solution.ipynb", "source/01_tensors/01_tensors.ipynb", f"{ASSIGNMENT}/"):
        findings = bundle_findings(COURSE, ASSIGNMENT, zip_bytes({**contents, extra: b""}))
        assert findings == [f"{extra}: not a file a student receives (only {', '.join(bundle_names(ASSIGNMENT))})"]
    without = {name: data for name, data in contents.items() if not name.endswith("checks.py")}
    assert bundle_findings(COURSE, ASSIGNMENT, zip_bytes(without)) == [f"{ASSIGNMENT}/checks.py: missing"]
    changed = {**contents, f"{ASSIGNMENT}/checks.py": contents[f"{ASSIGNMENT}/checks.py"] + b"\nANSWER = 42\n"}
    assert bundle_findings(COURSE, ASSIGNMENT, zip_bytes(changed)) == [
        f"{ASSIGNMENT}/checks.py: not the course's check helpers (checks.py of autograder/kernel/)"
    ]
    assert bundle_findings(COURSE, ASSIGNMENT, b"not a zip")[0].startswith(f"{ASSIGNMENT}.zip: not a readable zip")


def test_executed_outputs_are_caught(course_copy):
    def plant(notebook):
        cell = first_code_cell(notebook, solution=False)
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="tensor([1., 0., 0.])\n")]
        cell.execution_count = 3

    contents = with_notebook(bundle_contents(COURSE, ASSIGNMENT), ASSIGNMENT, plant)
    findings = bundle_findings(COURSE, ASSIGNMENT, zip_bytes(contents))
    assert len(findings) == 2
    assert findings[0].endswith("holds 1 executed output(s)") and findings[1].endswith("(execution count 3)")

    # in release/, outputs go unnoticed by the release comparison (it ignores outputs): check finds them by the bundle
    course_copy.release_notebook(ASSIGNMENT).write_bytes(read_zip(zip_bytes(contents))[bundle_names(ASSIGNMENT)[0]])
    assert [f for f in bundle_check(course_copy, ASSIGNMENT) if "executed output" in f]


def test_layout_holds_release_files_only(tmp_path, cli):
    layout = tmp_path / "student-repo"
    (layout / ".git").mkdir(parents=True)
    done = cli("release", "--output", str(tmp_path / "dist"), "--layout", str(layout))
    assert done.returncode == 0, done.stdout + done.stderr
    files = sorted(str(p.relative_to(layout)) for p in layout.rglob("*") if p.is_file())
    expected = ["README.md", "requirements.txt"] + [
        f"{i}/{name}" for i in COURSE.assignment_ids() for name in (f"{i}.ipynb", "checks.py")
    ]
    assert files == sorted(expected)
    assert (layout / "01_tensors" / "01_tensors.ipynb").read_bytes() == COURSE.release_notebook(ASSIGNMENT).read_bytes()


def documented_command(text, assignment_id):
    """The terminal check a text gives for the bundle: ``.venv/bin/nbgrader validate <id>.ipynb``."""
    commands = set(re.findall(r"\.venv/bin/nbgrader validate [\w.]+\.ipynb", text))
    assert commands == {f".venv/bin/nbgrader validate {assignment_id}.ipynb"}, commands
    return commands.pop()


@pytest.mark.parametrize("assignment_id", ["07_hvp_challenge"])
def test_the_documented_check_works_in_an_unpacked_bundle(tmp_path, assignment_id):
    """Unzipped far from the repository, with only a Python environment as `.venv` (this one, but nothing of the
    repository importable), the command of the notebook's "Before you submit" and of the README tells an
    unanswered notebook from a finished one."""
    data = zip_bytes(bundle_contents(COURSE, assignment_id))
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        archive.extractall(tmp_path)
    folder = tmp_path / assignment_id
    notebook = read_notebook(folder / f"{assignment_id}.ipynb")
    before_you_submit = next(c.source for c in notebook.cells if c.source.startswith("## Before you submit"))
    command = documented_command(before_you_submit, assignment_id)
    assert command == documented_command((folder / "README.md").read_text(), assignment_id)
    (folder / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "JUPYTER_SERVER_ROOT": str(folder),
        "COURSE_DEVICE": "cpu",
    }  # no PYTHONPATH: the repository is not importable
    assert subprocess.run([str(folder / ".venv/bin/python"), "-c", "import autograder"], cwd=folder, env=env).returncode

    def run():
        return subprocess.run(["bash", "-c", command], cwd=folder, env=env, capture_output=True, text=True)

    unanswered = run()
    assert unanswered.returncode == 0  # nbgrader validate exits 0 either way: the docs say to read its output
    assert "VALIDATION FAILED" in unanswered.stdout + unanswered.stderr, unanswered.stdout + unanswered.stderr
    assert "NotImplementedError" in unanswered.stdout

    # the student's answers: the reference solution's, in the solution cells of the release notebook
    reference = {grade_id(c): c.source for c in read_notebook(COURSE.reference_notebook(assignment_id)).cells}
    for cell in notebook.cells:
        if is_solution(cell):
            cell.source = reference[grade_id(cell)]
    nbformat.write(notebook, folder / f"{assignment_id}.ipynb")
    answered = run()
    assert "Success! Your notebook passes all the tests." in answered.stdout, answered.stdout + answered.stderr
