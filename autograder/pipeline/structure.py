"""Stage ``structure``: validate a submitted notebook and normalise it to its release notebook before it runs.

The release notebook is the template. What a student may change is the
source of solution cells (code to write, written answers) and of ordinary
unlocked cells, and they may add cells of their own. Everything else is put
back as the release has it, with a note for each repair:

- test cells (autograder tests) and locked cells get the release's source,
  so an edited test cannot pass itself; a deleted one is put back in place;
- a deleted solution cell comes back as the release's empty stub;
- a cell whose grade_id was changed, or a second copy of a grade cell, runs
  as an ordinary added cell (the first copy is the graded one);
- cell types, nbgrader metadata and cell order come from the release, and
  metadata that changes how or whether a cell runs (``skip-execution`` and
  ``raises-exception`` tags, nbgrader fields on added cells) is dropped;
- the notebook's kernelspec and language_info come from the release;
- stored outputs and execution counts are cleared (nbgrader re-executes).

Added cells keep their place after the release cell they followed, so a
helper function a student wrote in a cell of their own still runs before the
tests that need it. A file that cannot be read as a notebook (empty, not
UTF-8, not JSON, not a notebook) is graded as the unchanged release: zero for
every autograded cell, with a message saying why, instead of stopping the batch; the notebook graded in its
place carries the message in its metadata (:data:`UNREADABLE`), for the student's feedback page.
So is any file that makes reading or rebuilding it fail in any way (nesting
deep enough to exhaust Python's recursion limit, a field of the wrong type,
a rebuilt notebook that is not valid nbformat 4) and a file larger than
:data:`MAX_NOTEBOOK_BYTES` (never read whole).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from ..course import cell_number, grade_id, is_autograder_tests, is_solution
from ..kernel.machinery import findings, protected_names

MAX_NOTEBOOK_BYTES = 64 * 2**20
"""A submitted notebook larger than this (64 MiB; outputs are cleared anyway) is an invalid notebook."""

EXECUTION_TAGS = frozenset({"skip-execution", "raises-exception"})
"""Cell tags that nbclient (and so nbgrader) obeys when it executes a notebook: they are never taken from a student."""


UNREADABLE = ("autograder", "unreadable")
"""Where in its notebook metadata (``metadata["autograder"]["unreadable"]``) the blank release graded for a file
that could not be read says why (:func:`unreadable`); autograde keeps it (nbgrader_config.py)."""


class UnreadableNotebook(ValueError):
    """The submitted bytes are not a Jupyter notebook; the message says why, in words for the student."""


@dataclass
class Normalised:
    """A submission after validation: the notebook to grade and what was repaired."""

    notebook: NotebookNode
    readable: bool
    """False when the file could not be read and the unchanged release stands in for it."""
    repairs: list[str] = field(default_factory=list)
    """One sentence per repair, for the student's and instructor's report."""
    review: list[str] = field(default_factory=list)
    """What the student's code does that touches the grading machinery (:func:`autograder.kernel.machinery.findings`),
    one line per finding with its cell, for a person to read."""


def parse(raw: bytes) -> tuple[NotebookNode, list[str]]:
    """Read notebook bytes as nbformat 4, converting older formats.

    Returns:
        The notebook and notes about conversions (e.g. from nbformat 3).

    Raises:
        UnreadableNotebook: empty, not UTF-8, not JSON, not a notebook, or an
            nbformat version nbformat cannot convert.
    """
    if len(raw) > MAX_NOTEBOOK_BYTES:
        raise UnreadableNotebook(f"the file is larger than {MAX_NOTEBOOK_BYTES // 2**20} MiB")
    if not raw.strip():
        raise UnreadableNotebook("the file is empty")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise UnreadableNotebook(f"the file is not UTF-8 text ({error.reason} at byte {error.start})") from error
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise UnreadableNotebook(
            f"the file is not valid JSON ({error.msg} at line {error.lineno}, column {error.colno})"
        ) from error
    except RecursionError as error:
        raise UnreadableNotebook("the file's JSON is nested too deeply to be a notebook") from error
    if not isinstance(data, dict) or not isinstance(data.get("nbformat"), int):
        raise UnreadableNotebook("the file is JSON but not a Jupyter notebook (no nbformat version)")
    notes = []
    if data["nbformat"] != 4:
        notes.append(f"converted from nbformat {data['nbformat']} to nbformat 4")
    try:
        notebook = nbformat.reads(text, as_version=4, capture_validation_error={})
    except Exception as error:  # nbformat raises many types for malformed notebooks
        raise UnreadableNotebook(f"nbformat cannot read it ({type(error).__name__}: {error})"[:300]) from error
    if not isinstance(notebook.get("cells"), list):
        raise UnreadableNotebook("the notebook has no list of cells")
    return notebook, notes


def normalise(raw: bytes, *, release: NotebookNode) -> Normalised:
    """Validate a submitted notebook's bytes and rebuild it on the structure of ``release``.

    Args:
        raw: the submitted file's bytes.
        release: the assignment's release notebook (what the student started from).

    Returns:
        The notebook to grade, whether the file was readable, and the repairs made.
        Never raises for bad input: a file that cannot be read or rebuilt into a
        valid notebook, whatever the error, gives the unchanged release.
    """
    try:
        submitted, repairs = parse(raw)
        rebuilt = _rebuilt(submitted, release, repairs)
        nbformat.validate(rebuilt.notebook)  # what the student wrote into it (sources, attachments) is nbformat
        return rebuilt
    except UnreadableNotebook as error:
        return unreadable(release, f"not a readable notebook: {error}")
    except Exception as error:  # whatever the file makes the rebuild trip on: one student's problem, not the batch's
        problem = f"not a readable notebook: it cannot be rebuilt ({type(error).__name__}: {error})"
        return unreadable(release, problem[:300])


def normalise_file(path: Path, *, release: NotebookNode) -> Normalised:
    """:func:`normalise` of the file at ``path``, read no further than :data:`MAX_NOTEBOOK_BYTES` + 1 bytes
    (a larger file, or one that cannot be read, is an invalid notebook)."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_NOTEBOOK_BYTES + 1)
    except OSError as error:
        problem = f"not a readable notebook: the file cannot be read ({error.strerror or error})"
        return unreadable(release, problem)
    return normalise(raw, release=release)


def _rebuilt(submitted: NotebookNode, release: NotebookNode, repairs: list[str]) -> Normalised:
    cells = [cell for cell in submitted.cells if isinstance(cell, dict) and "cell_type" in cell]
    if len(cells) != len(submitted.cells):
        repairs.append(f"{len(submitted.cells) - len(cells)} malformed cell(s) without a cell_type dropped")
    matches, added = _match(cells, release.cells, repairs)
    notebook = copy.deepcopy(release)
    notebook.cells = []
    for index, template in enumerate(release.cells):
        notebook.cells.append(_restored(template, matches.get(index), repairs))
        notebook.cells.extend(_plain(cell, repairs) for cell in added.get(index, []))
    notebook.cells[0:0] = [_plain(cell, repairs) for cell in added.get(-1, [])]
    order = _matched_order(cells, matches)
    if order != sorted(order):
        repairs.append("cells were moved: graded in the release's order")
    for key in ("kernelspec", "language_info"):
        submitted_value = submitted.get("metadata", {}).get(key)
        submitted_name = submitted_value.get("name") if isinstance(submitted_value, dict) else submitted_value
        if submitted_name != release.metadata.get(key, {}).get("name"):
            repairs.append(f"notebook metadata {key} changed: the release's is used")
    protected = protected_names(
        [cell.source for cell in release.cells if cell.cell_type == "code" and not _student_written(cell)
         and not is_autograder_tests(cell)]
    )
    review = [
        f"{cell_number(index)}: {finding}"
        for index, cell in enumerate(notebook.cells)
        if cell.cell_type == "code" and _student_written(cell)
        for finding in findings(cell.source, protected=protected)
    ]
    return Normalised(notebook=notebook, readable=True, repairs=repairs, review=review)


def _student_written(cell: NotebookNode) -> bool:
    """A code cell whose source comes from the student (a solution, an added cell or an unlocked example)."""
    nbgrader = cell.metadata.get("nbgrader", {})
    return bool(nbgrader.get("solution")) or not nbgrader.get("locked", False)


def unreadable(release: NotebookNode, problem: str) -> Normalised:
    """What a file that cannot be read is graded as: :func:`blank`, ``problem`` (why, in words for the student) its
    one repair and, in its metadata, at :data:`UNREADABLE`."""
    notebook = blank(release)
    section, key = UNREADABLE
    notebook.metadata[section] = {key: problem}
    return Normalised(notebook=notebook, readable=False, repairs=[problem])


def blank(release: NotebookNode) -> NotebookNode:
    """The release notebook with outputs cleared: what an empty submission is graded as."""
    notebook = copy.deepcopy(release)
    for cell in notebook.cells:
        _clear_outputs(cell)
    return notebook


def _key(cell: NotebookNode) -> tuple[str, str] | None:
    """How a cell is recognised: by grade_id for nbgrader cells, else by cell id."""
    nbgrader = cell.get("metadata", {}).get("nbgrader")
    if isinstance(nbgrader, dict) and isinstance(nbgrader.get("grade_id"), str):
        return ("grade_id", nbgrader["grade_id"])
    if isinstance(cell.get("id"), str):
        return ("id", cell["id"])
    return None


def _match(
    cells: list[NotebookNode], templates: list[NotebookNode], repairs: list[str]
) -> tuple[dict[int, NotebookNode], dict[int, list[NotebookNode]]]:
    """Pair student cells with release cells; the rest are added cells, keyed by the release cell they follow."""
    by_key = {_key(template): index for index, template in enumerate(templates)}
    graded_ids = {key[1] for key in by_key if key is not None and key[0] == "grade_id"}
    matches: dict[int, NotebookNode] = {}
    added: dict[int, list[NotebookNode]] = {}
    anchor = -1
    for cell in cells:
        key = _key(cell)
        index = by_key.get(key)
        if index is not None and index not in matches:
            matches[index] = cell
            anchor = index
            continue
        if key is not None and key[0] == "grade_id":
            if key[1] in graded_ids:
                repairs.append(f"grade cell {key[1]!r} appears more than once: the first copy is graded")
            else:
                repairs.append(f"unknown grade_id {key[1]!r} (changed or invented): the cell runs as an added cell")
        added.setdefault(anchor, []).append(cell)
    for index, template in enumerate(templates):
        if index not in matches and _key(template) is not None and _key(template)[0] == "grade_id":
            what = "its empty stub is graded" if is_solution(template) else "the release's is graded"
            repairs.append(f"cell {grade_id(template)!r} was deleted: {what}")
    return matches, added


def _matched_order(cells: list[NotebookNode], matches: dict[int, NotebookNode]) -> list[int]:
    position = {id(cell): index for index, cell in matches.items()}
    return [position[id(cell)] for cell in cells if id(cell) in position]


def _restored(template: NotebookNode, student: NotebookNode | None, repairs: list[str]) -> NotebookNode:
    """The release cell, carrying the student's source where the student may write."""
    cell = copy.deepcopy(template)
    _clear_outputs(cell)
    if student is None:
        return cell
    name = grade_id(template) if _key(template)[0] == "grade_id" else f"cell {template.get('id')}"
    locked = bool(template.metadata.get("nbgrader", {}).get("locked"))
    writable = is_solution(template) or (not locked and "nbgrader" not in template.metadata)
    source = student.get("source", "")
    source = "".join(source) if isinstance(source, list) else str(source)
    if student.get("cell_type") != template.cell_type:
        repairs.append(f"{name} was changed from {template.cell_type} to {student.get('cell_type')}: restored")
    if writable:
        cell.source = source
        if template.cell_type == "markdown" and isinstance(student.get("attachments"), dict):
            cell.attachments = copy.deepcopy(student["attachments"])
    elif source != template.source:
        repairs.append(f"{name} was edited: the release's version is graded")
    if _execution_metadata(student) != _execution_metadata(template):
        repairs.append(f"{name}: changed nbgrader metadata or execution tags were reset")
    return cell


def _plain(cell: NotebookNode, repairs: list[str]) -> NotebookNode:
    """An added cell as an ordinary cell: its source and type only."""
    source = cell.get("source", "")
    source = "".join(source) if isinstance(source, list) else str(source)
    tags = set(cell.get("metadata", {}).get("tags", []) or []) & EXECUTION_TAGS
    if tags:
        repairs.append(f"added cell: execution tags {sorted(tags)} removed")
    if cell.get("cell_type") == "code":
        return nbformat.v4.new_code_cell(source)
    if cell.get("cell_type") == "markdown":
        return nbformat.v4.new_markdown_cell(source)
    return nbformat.v4.new_raw_cell(source)


def _execution_metadata(cell: NotebookNode) -> tuple:
    metadata = cell.get("metadata", {})
    nbgrader = metadata.get("nbgrader", {})
    nbgrader = {k: v for k, v in nbgrader.items() if k not in ("checksum",)} if isinstance(nbgrader, dict) else nbgrader
    tags = set(metadata.get("tags", []) or []) & EXECUTION_TAGS if isinstance(metadata.get("tags"), list) else None
    return (json.dumps(nbgrader, sort_keys=True, default=str), sorted(tags) if tags is not None else None)


def _clear_outputs(cell: NotebookNode) -> None:
    if cell.cell_type == "code":
        cell.outputs = []
        cell.execution_count = None
