"""Stage ``release``: the zip a student receives for an assignment, checked to hold nothing secret.

``dist/<id>.zip`` holds one folder, ``<id>/``, with the release notebook ``<id>.ipynb`` (from release/, as nbgrader
generate_assignment made it), ``checks.py`` (the check helpers its test cells import), a short ``README.md`` (what
the assignment is, install, start, check, submit) and ``requirements.txt`` (the packages a student needs, pinned as
in the repository's requirements.txt: :data:`STUDENT_PACKAGES`). Nothing else: no source notebook, no reference
notebook, no ``autograder`` package. A student checks the work with nbgrader's Validate button or
``nbgrader validate <id>.ipynb``, both of which need only those packages.

Every bundle is checked before it is written (:func:`bundle_findings`): only those four files; no solution marker,
no secret line of the source notebook (:func:`autograder.authoring.leaks.secret_lines`) in the notebook's cells,
README or requirements; no executed output in the notebook; ``checks.py`` byte for byte the course's check
helpers. ``python -m autograder check`` builds and checks every bundle too.
"""

from __future__ import annotations

import io
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from ..course import CHECKS_MODULE, ROOT, Course, CourseError, cell_number, read_notebook, task_headings
from .leaks import leaked, secret_lines

STUDENT_PACKAGES = ("torch", "numpy", "matplotlib", "jupyterlab", "ipykernel", "nbgrader")
"""What a student installs: the notebooks' imports (torch, numpy, matplotlib), JupyterLab and its Python kernel,
and nbgrader for the Validate button and ``nbgrader validate``. Their versions are read from the repository's
requirements.txt (:func:`student_requirements`); pip resolves what they pull in."""

BUNDLE_FILES = ("{id}.ipynb", "checks.py", "README.md", "requirements.txt")
"""The files of an assignment's bundle, inside its folder ``<id>/``; ``{id}`` is the assignment id."""

ZIP_TIME = (2000, 1, 1, 0, 0, 0)
"""The modification time of every member of a bundle: the same release gives the same bytes."""


@dataclass
class Bundle:
    """One assignment's bundle: where it was written (None: refused) and why it was refused."""

    assignment_id: str
    path: Path | None
    findings: list[str] = field(default_factory=list)


def bundle_names(assignment_id: str) -> list[str]:
    """The member names of ``<id>.zip``, in order: ``<id>/<id>.ipynb``, ``<id>/checks.py``, ..."""
    return [f"{assignment_id}/{name.format(id=assignment_id)}" for name in BUNDLE_FILES]


def student_requirements() -> str:
    """The students' requirements.txt: :data:`STUDENT_PACKAGES` pinned as the repository's requirements.txt (the
    environment the course is built and graded in, whatever course directory it grades) pins them.

    Raises:
        CourseError: that requirements.txt is missing or does not pin one of them (``name==version``).
    """
    path = ROOT / "requirements.txt"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise CourseError(f"cannot read {path}: {error}") from error
    pins = {}
    for line in text.splitlines():
        if match := re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*(\S+)", line):
            pins[_normalized(match.group(1))] = f"{match.group(1)}=={match.group(2)}"
    missing = [name for name in STUDENT_PACKAGES if _normalized(name) not in pins]
    if missing:
        raise CourseError(f"{path} pins no version of {', '.join(missing)} (a line `name==version` each)")
    return (
        "# Python 3.11. In the folder you unpacked the assignment into:\n"
        "#   python3.11 -m venv .venv && .venv/bin/pip install -r requirements.txt\n"
        "# On Linux, pip installs torch's CUDA build (large); for the CPU build add\n"
        "#   --extra-index-url https://download.pytorch.org/whl/cpu\n"
        + "".join(f"{pins[_normalized(name)]}\n" for name in STUDENT_PACKAGES)
    )


def _normalized(name: str) -> str:
    """A package name as pip compares them (PEP 503): lower case, runs of ``-_.`` as one ``-``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def student_readme(course: Course, assignment_id: str) -> str:
    """The bundle's README.md: what the assignment is, install, start JupyterLab, check, submit."""
    notebook = f"{assignment_id}.ipynb"
    title = _title(read_notebook(course.release_notebook(assignment_id))) or assignment_id
    return f"""# {assignment_id}: {title}

One assignment of the PyTorch Tensors course: the notebook `{notebook}`, which you
fill in and submit, and `checks.py`, the check helpers its test cells import (keep
it beside the notebook, unchanged).

## Install (once, Python 3.11)

In this folder:

```bash
python3.11 -m venv .venv
.venv/bin/pip install -r requirements.txt
```

On Windows: `py -3.11 -m venv .venv` and `.venv\\Scripts\\pip install -r requirements.txt`
(then `.venv\\Scripts\\` wherever these steps say `.venv/bin/`). An environment made for
an earlier assignment of the course does too.

## Start JupyterLab

In this folder:

```bash
.venv/bin/jupyter lab {notebook}
```

(`.venv/bin/jupyter lab` opens the same folder.) Work top to bottom: replace each
`raise NotImplementedError()` with your code and run the test cell below it. More
tests, hidden ones, check the same functions when your work is graded.

## Check your work

1. *Kernel -> Restart Kernel and Run All Cells*.
2. Press **Validate** in the notebook's toolbar: it runs the notebook as grading will
   and lists each test cell that still fails.
3. Or, in JupyterLab's terminal (*File -> New -> Terminal*), in this folder:

   ```bash
   .venv/bin/nbgrader validate {notebook}
   ```

   It prints `Success! Your notebook passes all the tests.` or `VALIDATION FAILED ON
   N CELL(S)!` followed by each failing cell and its error. Read what it prints: it
   exits with status 0 either way.

## Submit

Save the notebook, then upload `{notebook}` as it is, under its own name, to the
assignment on your course's platform. Do not edit the test cells; only the
notebook is graded.
"""


def _title(notebook: nbformat.NotebookNode) -> str | None:
    """The notebook's first heading, without its ``#`` marks (``Assignment 1 - PyTorch tensors``)."""
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
    return None


def bundle_contents(course: Course, assignment_id: str) -> dict[str, bytes]:
    """``{member name: bytes}`` of ``<id>.zip``, in :func:`bundle_names`'s order, from release/ and the repository's
    requirements.txt.

    Raises:
        CourseError: the release notebook or checks.py is missing (run ``python -m autograder build``), or the
            requirements cannot be read (:func:`student_requirements`).
    """
    released = course.release / assignment_id
    files = [released / f"{assignment_id}.ipynb", released / "checks.py"]
    for path in files:
        if not path.is_file():
            raise CourseError(f"{path} is missing: run `python -m autograder build {assignment_id}`")
    contents = [
        files[0].read_bytes(),
        files[1].read_bytes(),
        student_readme(course, assignment_id).encode(),
        student_requirements().encode(),
    ]
    return dict(zip(bundle_names(assignment_id), contents))


def zip_bytes(contents: dict[str, bytes]) -> bytes:
    """A zip of ``contents`` (``{member name: bytes}``), deflated, every member dated :data:`ZIP_TIME`."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in contents.items():
            member = zipfile.ZipInfo(name, date_time=ZIP_TIME)
            member.compress_type = zipfile.ZIP_DEFLATED
            member.external_attr = 0o644 << 16
            archive.writestr(member, data)
    return buffer.getvalue()


def read_zip(data: bytes) -> dict[str, bytes]:
    """``{member name: bytes}`` of a zip's members (folders' entries too, as empty), in the zip's order.

    Raises:
        CourseError: ``data`` is not a readable zip.
    """
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return {member.filename: archive.read(member) for member in archive.infolist()}
    except (zipfile.BadZipFile, OSError, ValueError) as error:  # ValueError: a member of unknown compression
        raise CourseError(f"not a readable zip: {error}") from error


def bundle_findings(course: Course, assignment_id: str, data: bytes) -> list[str]:
    """What is wrong with ``data``, the bytes of ``<id>.zip``: each finding names the member and, for a leak, the
    line (``01_tensors/README.md, line 12 holds solution code: 'return x + 1'``; in the notebook, the cell, as
    ``check`` names it, and the line in the cell). Empty when the bundle holds only what a student may see.

    Findings: a member other than :func:`bundle_names` or one of them missing; a solution or hidden-test marker or
    a secret line of the source notebook (:func:`autograder.authoring.leaks.secret_lines`) in any line of the
    notebook's cells, README.md or requirements.txt; a code cell with outputs or an execution count (the release is
    handed out unexecuted: an output may show a reference result); ``checks.py`` other than the course's check
    helpers (:data:`autograder.course.CHECKS_MODULE`); a file that is not UTF-8 text or a notebook that does not read.

    Raises:
        CourseError: the source notebook cannot be read.
    """
    try:
        contents = read_zip(data)
    except CourseError as error:
        return [f"{assignment_id}.zip: {error}"]
    secret = secret_lines(read_notebook(course.source_notebook(assignment_id)))
    expected = bundle_names(assignment_id)
    notebook, checks = expected[0], expected[1]
    allowed = ", ".join(expected)
    findings = [f"{name}: not a file a student receives (only {allowed})" for name in contents if name not in expected]
    findings += [f"{name}: missing" for name in expected if name not in contents]
    for name in expected:
        if name not in contents:
            continue
        if name == checks:
            if contents[name] != CHECKS_MODULE.read_bytes():
                findings.append(f"{name}: not the course's check helpers ({CHECKS_MODULE.name} of autograder/kernel/)")
            continue
        try:
            text = contents[name].decode("utf-8")
        except UnicodeDecodeError as error:
            findings.append(f"{name}: not UTF-8 text ({error})")
            continue
        findings += _notebook_findings(name, text, secret) if name == notebook else _text_findings(name, text, secret)
    return findings


def _text_findings(name: str, text: str, secret: dict[str, str]) -> list[str]:
    return [
        f"{name}, line {number} holds {what}"
        for number, line in enumerate(text.splitlines(), 1)
        if (what := leaked(line, secret))
    ]


def _notebook_findings(name: str, text: str, secret: dict[str, str]) -> list[str]:
    try:
        notebook = nbformat.reads(text, as_version=4)
    except (ValueError, nbformat.ValidationError) as error:  # NotJSONError is a ValueError
        return [f"{name}: not a readable notebook ({error})"]
    findings = []
    for index, (cell, task) in enumerate(zip(notebook.cells, task_headings(notebook))):
        place = f"{name}: {cell_number(index)}" + (f", under {task.title!r}" if task else "")
        for number, line in enumerate(cell.source.splitlines(), 1):
            if what := leaked(line, secret):
                findings.append(f"{place}, line {number} holds {what}")
        if cell.cell_type == "code" and cell.get("outputs"):
            findings.append(f"{place} holds {len(cell.outputs)} executed output(s)")
        if cell.cell_type == "code" and cell.get("execution_count") is not None:
            findings.append(f"{place} has been executed (execution count {cell.execution_count})")
    return findings


def release(
    course: Course, *, assignment_ids: list[str] | None = None, output: Path, layout: Path | None = None
) -> list[Bundle]:
    """Write ``output/<id>.zip`` for each assignment (default: all) whose bundle passes :func:`bundle_findings`;
    a failing one is not written (an earlier zip of that name is left as it was) and comes back with its findings.

    ``layout``: also write there, when every bundle passed, the student repository's files (the shape an
    nbgitpuller link pulls): ``<id>/<id>.ipynb`` and ``<id>/checks.py`` per assignment, and at the top README.md
    (:func:`layout_readme`) and requirements.txt. Other files in ``layout`` (a clone's ``.git``) are left alone.

    Raises:
        CourseError: an id is not an assignment of the course; a release file or the requirements are missing.
    """
    bundles = []
    chosen = course.chosen(assignment_ids)
    checked = {}
    for assignment_id in chosen:
        data = zip_bytes(bundle_contents(course, assignment_id))
        findings = bundle_findings(course, assignment_id, data)
        if findings:
            bundles.append(Bundle(assignment_id, None, findings))
            continue
        output.mkdir(parents=True, exist_ok=True)
        path = output / f"{assignment_id}.zip"
        path.write_bytes(data)
        bundles.append(Bundle(assignment_id, path))
        checked[assignment_id] = read_zip(data)
    if layout is not None and all(bundle.path for bundle in bundles):
        write_layout(course, layout, checked)
    return bundles


def write_layout(course: Course, layout: Path, checked: dict[str, dict[str, bytes]]) -> list[Path]:
    """Write the student repository's files into ``layout`` from the checked bundles' contents (``{id: {member
    name: bytes}}``): each ``<id>/<id>.ipynb`` and ``<id>/checks.py``, README.md and requirements.txt at the top.
    Returns the paths written."""
    written = []
    for assignment_id, contents in checked.items():
        for name in bundle_names(assignment_id)[:2]:
            written.append(_write(layout / name, contents[name]))
    written.append(_write(layout / "README.md", layout_readme(course, list(checked)).encode()))
    written.append(_write(layout / "requirements.txt", student_requirements().encode()))
    return written


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def layout_readme(course: Course, assignment_ids: list[str]) -> str:
    """The student repository's README.md: the assignments it holds, install, open, check, submit."""
    rows = "".join(
        f"| `{i}/{i}.ipynb` | {_title(read_notebook(course.release_notebook(i))) or i} |\n" for i in assignment_ids
    )
    return f"""# PyTorch Tensors: the assignments

| notebook | assignment |
|---|---|
{rows}
Each notebook's test cells import the `checks.py` beside it: keep them together.

## Install (once, Python 3.11)

```bash
python3.11 -m venv .venv
.venv/bin/pip install -r requirements.txt
```

On a course hub these packages are installed for you.

## Work, check, submit

Open a notebook in JupyterLab (`.venv/bin/jupyter lab`), replace each
`raise NotImplementedError()` with your code and run the test cell below it.
Before you submit: *Kernel -> Restart Kernel and Run All Cells*, then press
**Validate** in the notebook's toolbar, or in the notebook's folder run
`nbgrader validate <id>.ipynb` (it exits with status 0 even when a test fails:
read what it prints). Upload `<id>.ipynb` as it is, under its own name, to the
assignment on your course's platform.
"""
