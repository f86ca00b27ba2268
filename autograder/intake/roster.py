"""Course student ids for the students of a download: from a roster, or derived, stable and safe.

nbgrader uses a student id as a folder name and as a glob (``autograde "*"``
matches folders, so ``Kim [2]`` matches nothing), and its exports write it
into CSV; a safe id (:func:`safe_id`) is ASCII letters, digits, ``_``,
``-`` and ``.`` only, and never starts with ``.``.
"""

from __future__ import annotations

import csv
import hashlib
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from ..course import CourseError

SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
ROSTER_COLUMNS = ("student_id", "platform_id", "name", "email", "first_name", "last_name")
"""A roster's columns: ``student_id`` and one of ``platform_id``, ``name``, ``email`` at least; names optional."""
MAPPING_COLUMNS = ["student_id", "format", "platform_id", "name", "email", "from"]


def safe_id(text: str) -> str:
    """``text`` when it is safe; else its ASCII letters and digits joined by ``_`` and a hash of ``text``.

    The hash (6 hex digits of SHA-256) keeps two different originals apart
    (``Kim [2]`` and ``Kim 2`` give ``Kim_2-1a2b3c`` and ``Kim_2-4d5e6f``); the
    same original always gives the same id.
    """
    if SAFE.fullmatch(text):
        return text
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    stem = re.sub(r"[^A-Za-z0-9]+", "_", ascii_text).strip("_") or "student"
    return f"{stem}-{hashlib.sha256(text.encode()).hexdigest()[:6]}"


@dataclass(frozen=True)
class Student:
    """A student of the course, as the exports name them."""

    student_id: str
    first_name: str = ""
    last_name: str = ""
    email: str = ""


@dataclass(frozen=True)
class Mapping:
    """How one platform identity became a course student id (a row of student_ids.csv)."""

    student: Student
    format: str
    platform_id: str
    name: str
    email: str
    source: str
    """``roster``, ``derived`` (no roster given) or ``derived, not in the roster``."""


class Roster:
    """Platform ids, emails and names -> course students, read from the instructor's CSV."""

    def __init__(self, rows: list[dict[str, str]]) -> None:
        self.by_key: dict[str, Student] = {}
        self.original: dict[str, str] = {}
        """Safe student id -> the roster's own, where that was not safe."""
        for row in rows:
            given = row["student_id"].strip()
            if safe_id(given) != given:
                self.original[safe_id(given)] = given
            student = Student(
                safe_id(given),
                (row.get("first_name") or "").strip(),
                (row.get("last_name") or "").strip(),
                (row.get("email") or "").strip(),
            )
            for key in (row.get("platform_id"), row.get("email"), row.get("name")):
                if key and key.strip():
                    self.by_key.setdefault(_key(key), student)
            if student.first_name or student.last_name:
                self.by_key.setdefault(_key(f"{student.first_name} {student.last_name}"), student)
                self.by_key.setdefault(_key(f"{student.last_name}{student.first_name}"), student)

    @classmethod
    def read(cls, path: Path) -> Roster:
        """Read a roster CSV (UTF-8, a header row naming :data:`ROSTER_COLUMNS`).

        Raises:
            CourseError: no such file, or no ``student_id`` column.
        """
        try:
            with path.open(newline="", encoding="utf-8-sig") as handle:
                rows = list(csv.DictReader(handle))
        except OSError as error:
            raise CourseError(f"cannot read the roster {path}: {error}") from error
        if not rows or "student_id" not in rows[0]:
            raise CourseError(f"{path}: a roster needs a header row with student_id (and platform_id, name or email)")
        return cls(rows)

    def find(self, *, platform_id: str, name: str, email: str) -> Student | None:
        """The roster's student with this platform id, else this email, else this name (case and spacing ignored)."""
        for key in (platform_id, email, name):
            if key and (student := self.by_key.get(_key(key))):
                return student
        return None


def _key(text: str) -> str:
    return " ".join(text.casefold().split())


def map_student(roster: Roster | None, *, format: str, platform_id: str, name: str, email: str) -> Mapping:
    """The course student for one platform identity: the roster's, else a safe id derived from the platform's.

    Derived ids are the platform id where it names the student (nbgrader's
    folder, Blackboard's username, Gradescope's SID or email), made safe by
    :func:`safe_id`; for Canvas and Moodle, whose ids are numbers, the name's
    ASCII letters and digits and the id (``smithjane_1234``, ``Jane_Smith_57``).
    """
    found = roster.find(platform_id=platform_id, name=name, email=email) if roster else None
    if found:
        original = roster.original.get(found.student_id)
        source = f"roster (its id {original!r} made safe)" if original else "roster"
        return Mapping(found, format, platform_id, name, email, source)
    if format in ("canvas", "moodle") and name and platform_id.isdigit():
        letters = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
        derived = "_".join([*re.findall(r"[A-Za-z0-9]+", letters), platform_id])
    else:
        derived = safe_id(platform_id)
    source = "derived, not in the roster" if roster else "derived"
    return Mapping(Student(derived, email=email), format, platform_id, name, email, source)


def write_mapping(mappings: list[Mapping], path: Path) -> None:
    """Write student_ids.csv: one row per platform identity, with the course student id it maps to."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(MAPPING_COLUMNS)
        for m in mappings:
            writer.writerow([m.student.student_id, m.format, m.platform_id, m.name, m.email, m.source])
