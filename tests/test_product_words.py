"""The product speaks only of itself: no tracked text file talks about how the project was developed.

``findings`` scans text for development words: this project's step or issue numbers, commit hashes cited as
such, words about who ran what or on which machine, and dated measurements. An upstream project's issue may be
cited (nbgrader's, jsonschema's, an ``owner/repo#N`` or a github.com issue URL). The patterns are kept
specific, so that honest text (a fixture's date, ``autograder/grading/session.py``, a Jupyter session, a busy
machine in a notebook's advice) does not match. Notebooks are scanned by their cells' sources, not outputs.

The planted phrases below are written as adjacent string literals, so that this file passes its own scan.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

UPSTREAM = {
    "alembic", "bleach", "bubblewrap", "bwrap", "canvas", "canvas-lms", "chromium", "cpython", "dask", "hypothesis",
    "ipykernel", "ipython", "jsonschema", "jupyter", "jupyterlab", "matplotlib", "moodle", "nbclient", "nbconvert",
    "nbformat", "nbgrader", "nbval", "numpy", "pip", "playwright", "pygments", "pytest", "pytest-xdist", "python",
    "pytorch", "pyzmq", "sqlalchemy", "torch", "tqdm", "upstream", "zeromq",
}  # fmt: skip
"""Projects whose issue numbers may be cited ("nbgrader issue 1908")."""

PATTERNS: dict[str, re.Pattern[str]] = {
    "step number": re.compile(r"\bstops?\s+\d+\b", re.IGNORECASE),
    "issue number": re.compile(r"(?:([\w./-]+)[\s(]+)?\bissues?\s+#?\d+\b", re.IGNORECASE),
    "issue reference": re.compile(
        r"(?:\(|\b(?:see|fix|fixes|fixed|close|closes|closed|resolve|resolves|resolved|issue|pr|for|per|in|after)\s)"
        r"#\d+\b(?!-)",
        re.IGNORECASE,
    ),
    "commit hash": re.compile(
        r"\bcommits?\s+[0-9a-f]{7,40}\b"
        r"|\b(?:at|since|until|before|after|from)\s+(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b(?![-.,:/]?\d)"
        r"|\((?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\)",
        re.IGNORECASE,
    ),
    "who ran it": re.compile(
        r"\bthis\s+(?:stop|session)\b|\bthe\s+stop\s+before\b|\bsub-?agents?\b"
        r"|\b(?:a|another|other)\s+helpers?(?:'s|')?\s+(?:jobs?|test\s+runs?|runs?|ran|measured|session)\b"
        r"|\bother\s+helpers\b",
        re.IGNORECASE,
    ),
    "which machine": re.compile(
        r"\b(?:quiet|idle)\s+(?:\d-core\s+)?machine\b|\bfresh\s+clones?\b|\bload\s+average\b"
        r"|\bdevice\s+machines?\b|\b(?:was|were)\s+(?:not\s+)?lent\b",
        re.IGNORECASE,
    ),
    "dated measurement": re.compile(
        r"\b(?:measured|timed|benchmarked|took)\b[^\n]{0,40}?\b20\d\d-\d\d-\d\d\b"
        r"|\b20\d\d-\d\d-\d\d\b[^\n]{0,20}?\b(?:measured|timed|benchmarked)\b",
        re.IGNORECASE,
    ),
}


@dataclass(frozen=True)
class Finding:
    line: int
    kind: str
    text: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.kind}: {self.text!r}"


def findings(text: str) -> list[Finding]:
    """The development words in ``text``, each with its line (counted from 1), its kind and the words matched."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for kind, pattern in PATTERNS.items():
            for match in pattern.finditer(line):
                if kind == "issue number" and _upstream(match.group(1)):
                    continue
                found.append(Finding(number, kind, match.group(0)))
    return found


def _upstream(word: str | None) -> bool:
    """Whether the word before "issue N" names an upstream project (or an owner/repo)."""
    if not word:
        return False
    word = word.strip("(.,;:'\"`").lower()
    return word in UPSTREAM or "/" in word


def tracked_text(path: Path) -> str | None:
    """What of a tracked file is scanned: a notebook's cell sources (outputs are left out), a text file's
    text; None for a binary file."""
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if path.suffix == ".ipynb":
        cells = json.loads(text)["cells"]
        return "\n".join(
            "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"] for cell in cells
        )
    return text


def tracked_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return [ROOT / name for name in listed.split("\0") if name and (ROOT / name).is_file()]


def test_no_tracked_file_speaks_of_the_projects_development():
    files = tracked_files()
    assert any(path.name == "README.md" for path in files)
    problems = []
    for path in files:
        text = tracked_text(path)
        if text is None:
            continue
        problems += [f"{path.relative_to(ROOT)} {finding}" for finding in findings(text)]
    assert not problems, "development words in the product:\n" + "\n".join(problems)


PLANTED = [
    ("step number", "Measured in st" "op 27, after the change."),
    ("step number", "the demo (st" "ops 24 to 27)"),
    ("issue number", "just over the 20 minutes aimed at (iss" "ue 17)."),
    ("issue number", "where CI's minutes go, see Iss" "ue #17"),
    ("issue reference", "the flaky test (fixes " "#" "17)"),
    ("issue reference", "a slower path (" "#" "31)"),
    ("commit hash", "a second run after the review's mend (co" "mmit 1c413e5)"),
    ("commit hash", "the same tree, built a" "t 1535090"),
    ("commit hash", "after the mend (1988" "ec1)"),
    ("who ran it", "Measured on a qu" "iet machine (th" "is stop)"),
    ("who ran it", "275.3 s the st" "op before"),
    ("who ran it", "while other hel" "pers' test runs shared it"),
    ("who ran it", "another hel" "per's jobs were on the machine"),
    ("who ran it", "as a sub" "agent ran it"),
    ("who ran it", "not measured in th" "is session"),
    ("which machine", "on a qu" "iet machine, nothing else running"),
    ("which machine", "A fresh cl" "one of this version took 16 min"),
    ("which machine", "at lo" "ad average 5 to 41"),
    ("which machine", "no dev" "ice machine was l" "ent"),
    ("dated measurement", "demo took 153 s, meas" "ured on 2026-" "12-01"),
]


@pytest.mark.parametrize(("kind", "phrase"), PLANTED, ids=[f"{k}: {p}" for k, p in PLANTED])
def test_the_check_finds_a_planted_development_word(kind, phrase):
    found = findings(f"Some honest text.\n{phrase}\nMore honest text.")
    assert [finding.kind for finding in found if finding.line == 2].count(kind) >= 1, found


HONEST = [
    "Where the gradebook has the assignment's due date (--duedate=\"2026-11-30 12:00 UTC\")",
    "submitted 2026-11-30 10:00:00 UTC, 6h 30min late",
    "one nbgrader process per run (`autograder/grading/session.py`)",
    "the kernel of a Jupyter session; the test session's fixture",
    "`nbgrader validate` itself exits 0 even when a test fails (nbgrader issue 1908).",
    "No schema (jsonschema issue 1428; the processes of a run)",
    "pytest-xdist ignores its groups (pytest-dev/pytest-xdist#1386)",
    "the workflow at a glance: [Download](#1-download-from-the-platform), [Grade](#3-grade)",
    "see https://github.com/jupyter/nbgrader/issues/1908 for the details",
    '"constant: labels.shape[0] -> labels.shape[-1] #2": "labels is 1-D"',
    'color="black" if is_real else "#888888"',
    "[five](&#106;avascript:alert(1))",
    "on a busy machine several threads can stall each other",
    "Run All stops at that cell; the kernel stops after 60 s",
    "a helper function that moves whole batches; rebind a helper",
    "time it with nothing else running, and take the median",
    "a test cell with 1000000 rows; can_view((1000000, 1000000), (1, 1000000))",
    "each notebook is stored under a hash of exactly what ran (sha256 e3b0c442...)",
]


@pytest.mark.parametrize("text", HONEST)
def test_honest_text_has_no_finding(text):
    assert findings(text) == []


OUTSIDE_TEXT = re.compile(r"\b(?:original\s+)?lessons?(?:'s)?\b", re.IGNORECASE)
"""A "lesson" in a notebook's text: the course is made of assignments and notebooks, so the word can only point
at a text the students never get (the notebooks must each stand on their own)."""


def outside_text_mentions(notebook: Path) -> list[str]:
    """Each cell of ``notebook`` whose source speaks of a lesson, as ``cell N: 'words matched'`` (N from 1)."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    mentions = []
    for number, cell in enumerate(cells, start=1):
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        mentions += [f"cell {number}: {match.group(0)!r}" for match in OUTSIDE_TEXT.finditer(source)]
    return mentions


def test_no_source_notebook_refers_to_a_text_students_never_see():
    notebooks = sorted((ROOT / "source").glob("*/*.ipynb"))
    assert len(notebooks) == 7
    problems = [f"{path.relative_to(ROOT)} {mention}" for path in notebooks for mention in outside_text_mentions(path)]
    assert not problems, "notebook text that refers to a lesson students do not have:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    "phrase",
    [
        "The less" "on claims a fixed percentage; there is none.",
        "in the layout of the less" "on's \"Expected output\"",
        "as the original Less" "on says",
        "the lab that closes the less" "ons",
    ],
)
def test_the_notebook_check_finds_a_planted_lesson(phrase, tmp_path):
    notebook = tmp_path / "planted.ipynb"
    cells = [{"cell_type": "markdown", "source": ["Honest text.\n"]}, {"cell_type": "markdown", "source": [phrase]}]
    notebook.write_text(json.dumps({"cells": cells}), encoding="utf-8")
    assert [mention.split(":")[0] for mention in outside_text_mentions(notebook)] == ["cell 2"]
