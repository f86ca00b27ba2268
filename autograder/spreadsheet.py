"""CSV cells a spreadsheet never runs as formulas: the one rule every CSV the product writes follows.

OWASP's "CSV Injection" page: a spreadsheet (Excel, LibreOffice, Google Sheets) reads a cell that starts with
``=``, ``+``, ``-``, ``@``, a tab or a carriage return as a formula, and a formula can run commands or send the
sheet's contents away; a leading ``'`` makes it text. Students write their own names, e-mails and file names
on the platforms, so any text cell of grades.csv, task_results.csv, manifest.csv, student_ids.csv,
class_results.csv or task_results_all.csv may be hostile.
"""

from __future__ import annotations

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
"""What makes a spreadsheet read a CSV cell as a formula (OWASP, CSV injection)."""


def cell(value: object) -> object:
    """``value`` as a CSV cell: a string starting with :data:`FORMULA_START` with a leading ``'``; any other value
    (a number the product writes: scores are never negative) as it is."""
    return f"'{value}" if isinstance(value, str) and value.startswith(FORMULA_START) else value
