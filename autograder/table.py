"""The plain-text table the commands print (results, class report, intake's manifest, demo)."""

from __future__ import annotations


def columns(headers: list[str], rows: list[list[str]]) -> str:
    """Plain-text table: left-aligned columns two spaces apart, a rule under the headers."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows)]
    lines = ["  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip() for row in [headers, *rows]]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)
