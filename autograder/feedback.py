"""Stage ``feedback``: what ``nbgrader generate_feedback`` may show a student.

nbgrader's feedback page is the autograded notebook rendered as HTML, and
autograde has put the instructor's test cells back in it, hidden tests
included. :class:`HideHiddenTests` (registered in ``nbgrader_config.py``)
runs before the page is rendered and, in every autograder-tests cell:

- replaces the lines between ``### BEGIN HIDDEN TESTS`` and
  ``### END HIDDEN TESTS`` with one comment saying how many are hidden;
- turns an error raised on a hidden line into "A hidden test failed: <label>"
  (the check's label names what was checked, e.g. ``one_hot(empty labels,
  4).shape``; the expected value on the message's next line is dropped), or,
  when the student's own code raised, the exception's type and message;
- keeps a visible test's traceback, minus frames outside the notebook's cells
  (they show the grader's file paths) and minus the hidden lines IPython
  quotes as context around the failing line;
- drops the check records (values checked, kept for the grader);
- explains a cell that lost its points only by writing to stderr (a warning).

The student still sees which tasks passed and failed, and why the visible
tests failed.
"""

from __future__ import annotations

import re

import nbformat
from nbformat import NotebookNode
from nbgrader.preprocessors import NbGraderPreprocessor

from .checks import RECORD_MIME_TYPE
from .course import HIDDEN_TEST_MARKERS, is_autograder_tests
from .verdict import MISMATCH

STDERR_NOTE = (
    "\nThis test cell wrote to the error stream (above: usually a warning from your code), "
    "and nbgrader gives such a cell no points. Make your function run without warnings.\n"
)
ANSI = re.compile(r"\x1b\[[0-9;]*m")
CELL_FRAME = re.compile(r"Cell In\s*\[\d*\],\s*line (\d+)")
"""How IPython names a frame in a notebook cell: ``Cell In[7], line 4``."""
SOURCE_LINE = re.compile(r"^\s*(?:-*>)?\s*(\d+) ")
"""A source line IPython quotes in a frame: ``      4 code`` or ``----> 4 code``."""


class HideHiddenTests(NbGraderPreprocessor):
    """nbgrader preprocessor for generate_feedback: hidden tests and their expected values never reach a student."""

    def preprocess_cell(self, cell: NotebookNode, resources: dict, index: int) -> tuple[NotebookNode, dict]:
        if cell.cell_type != "code" or not is_autograder_tests(cell):
            return cell, resources
        hidden = hidden_lines(cell.source)
        cell.source = visible_source(cell.source)
        cell.outputs = [shown(output, hidden) for output in cell.outputs if not is_record(output)]
        if any(o.get("name") == "stderr" for o in cell.outputs) and not any(
            o.get("output_type") == "error" for o in cell.outputs
        ):
            cell.outputs.append(nbformat.v4.new_output("stream", name="stdout", text=STDERR_NOTE))
        return cell, resources


def hidden_lines(source: str) -> set[int]:
    """1-based numbers of the lines of ``source`` inside the hidden-test markers (markers included)."""
    begin, end = HIDDEN_TEST_MARKERS
    lines, inside = set(), False
    for number, line in enumerate(source.splitlines(), start=1):
        if line.strip() == begin:
            inside = True
        if inside:
            lines.add(number)
        if line.strip() == end:
            inside = False
    return lines


def visible_source(source: str) -> str:
    """``source`` with each hidden-test block (markers included) replaced by one comment line."""
    hidden = hidden_lines(source)
    kept: list[str] = []
    run = 0
    for number, line in enumerate([*source.splitlines(), ""], start=1):
        if number in hidden:
            run += 1
            continue
        if run:
            kept.append(f"# ({max(run - 2, 0)} lines of hidden tests, not shown)")
            run = 0
        kept.append(line)
    return "\n".join(kept[:-1])


def is_record(output: NotebookNode) -> bool:
    return output.get("output_type") == "display_data" and RECORD_MIME_TYPE in output.get("data", {})


def shown(output: NotebookNode, hidden: set[int]) -> NotebookNode:
    """An output as the feedback page may show it."""
    if output.get("output_type") != "error":
        return output
    frames = [ANSI.sub("", frame) for frame in output.get("traceback", [])]
    cell_lines = [int(m.group(1)) for frame in frames if (m := CELL_FRAME.search(frame))]
    if not cell_lines or cell_lines[0] in hidden:
        first_line = str(output.get("evalue", "")).splitlines()[0] if output.get("evalue") else ""
        if output.get("ename") == "AssertionError":
            message = f"A hidden test failed: {first_line}"
        elif output.get("ename") == MISMATCH:
            message = f"Judged outside the kernel: {first_line}"
        else:
            message = f"A hidden test raised {output.get('ename')}: {first_line}"
        output.traceback = [message]
        output.evalue = first_line
        return output
    kept = output.get("traceback", [])
    cell_frames = [frame for frame in kept[1:-1] if CELL_FRAME.search(ANSI.sub("", frame))]
    cell_frames[0] = _without_lines(cell_frames[0], hidden)
    output.traceback = [kept[0], *cell_frames, kept[-1]]
    return output


def _without_lines(frame: str, hidden: set[int]) -> str:
    """A traceback frame of the test cell without the context lines IPython shows from ``hidden``."""
    kept = []
    for line in frame.split("\n"):
        number = SOURCE_LINE.match(ANSI.sub("", line))
        if number is None or int(number.group(1)) not in hidden:
            kept.append(line)
    return "\n".join(kept)
