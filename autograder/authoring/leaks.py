"""What of a source notebook a student must never see, and how to tell a line that gives it away.

A source notebook's secret lines are those of its solution regions (``### BEGIN SOLUTION`` ...), of its
hidden-test regions (``### BEGIN HIDDEN TESTS`` ...) and of its written answers (markdown solution cells, which
nbgrader replaces whole by "YOUR ANSWER HERE"), less every line that also stands outside them in the source (a
function's ``def`` line, a blank line, a comment): the release shows those on purpose. ``check`` looks for secret
lines in release/, ``release`` in every file of a student's bundle.
"""

from __future__ import annotations

import nbformat

from ..course import MARKERS, is_solution, regions


def secret_lines(source: nbformat.NotebookNode) -> dict[str, str]:
    """``{stripped line: what it is}`` for each secret line of ``source`` (see the module's docstring).

    What it is: ``"solution code"``, ``"hidden test code"`` or ``"a written answer's model text"``. Code comments
    (``#`` lines) inside the regions are not counted: stubs and tests share them.
    """
    secret: dict[str, str] = {}
    public = set()
    for cell in source.cells:
        written_answer = cell.cell_type == "markdown" and is_solution(cell)
        for region, line in regions(cell.source):
            stripped = line.strip()
            if written_answer and stripped:
                secret.setdefault(stripped, "a written answer's model text")
            elif region is None:
                public.add(stripped)
            elif stripped and not stripped.startswith("#"):
                secret.setdefault(stripped, f"{region} code")
    return {line: what for line, what in secret.items() if line not in public}


def leaked(line: str, secret: dict[str, str]) -> str | None:
    """What ``line`` gives away: ``the marker '### BEGIN SOLUTION'``, ``solution code: 'return x + 1'``..., or None.

    ``secret``: :func:`secret_lines` of the source notebook.
    """
    stripped = line.strip()
    if stripped in MARKERS:
        return f"the marker {stripped!r}"
    if stripped in secret:
        return f"{secret[stripped]}: {stripped!r}"
    return None
