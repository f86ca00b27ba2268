"""Hostile files handed in as a notebook: each must be one student's ``invalid notebook``, never the batch's end.

Built in code (a 64 MiB file does not belong in git). ``MALFORMED``: name -> a function of the release
notebook returning the file's bytes.
"""

import json

import nbformat

from autograder.pipeline.structure import MAX_NOTEBOOK_BYTES


def _with(release, change):
    data = json.loads(nbformat.writes(release))
    change(data)
    return json.dumps(data).encode()


def _deep(depth):
    nested: list = []
    for _ in range(depth):
        nested = [nested]
    return nested


def _markdown_attachment(data, value):
    solutions = [c for c in data["cells"] if c["metadata"].get("nbgrader", {}).get("solution")]
    cell = next(c for c in solutions if c["cell_type"] == "markdown")
    cell["attachments"] = {"answer.png": {"image/png": value}}


MALFORMED = {
    # json.loads exhausts the recursion limit (RecursionError, not a JSONDecodeError)
    "json_nested_200000_deep": lambda release: b"[" * 200_000 + b"]" * 200_000,
    # readable JSON, but a field nested deeper than copying and validating it can go
    "attachment_nested_900_deep": lambda release: _with(release, lambda d: _markdown_attachment(d, _deep(900))),
    # an attachment of the wrong type: the rebuilt notebook would not be valid nbformat
    "attachment_of_the_wrong_type": lambda release: _with(release, lambda d: _markdown_attachment(d, {"x": 1})),
    # an integer of 5000 digits: Python's int limit makes json.loads raise a plain ValueError
    "integer_of_5000_digits": lambda release: b'{"nbformat": 4, "nbformat_minor": ' + b"7" * 5000 + b"}",
    "larger_than_the_limit": lambda release: nbformat.writes(release).encode() + b" " * MAX_NOTEBOOK_BYTES,
    "binary_png_bytes": lambda release: b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 64,
    "nbformat_99": lambda release: _with(release, lambda d: d.update(nbformat=99)),
    "nbformat_3_without_worksheets": lambda release: b'{"nbformat": 3, "nbformat_minor": 0, "metadata": {}}',
    "cells_that_are_not_objects": lambda release: _with(release, lambda d: d.update(cells=[None, 7, "x", []])),
    "nbformat_minor_a_string": lambda release: _with(release, lambda d: d.update(nbformat_minor="5")),
}
