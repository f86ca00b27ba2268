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
from dataclasses import dataclass, replace
from pathlib import Path

from ... import spreadsheet
from ...course import CourseError

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
        """A roster of ``rows`` (a CSV's dicts, :data:`ROSTER_COLUMNS`).

        Raises:
            CourseError: one platform_id on two rows (it would merge two students); the message names the rows.
        """
        self.by_key: dict[str, Student] = {}
        self.original: dict[str, str] = {}
        """Safe student id -> the roster's own, where that was not safe."""
        self.ids: set[str] = set()
        """The (safe) course ids the roster gives: a derived id is never one of them."""
        rows_of: dict[str, list[int]] = {}
        for number, row in enumerate(rows, start=2):
            if (row.get("platform_id") or "").strip():
                rows_of.setdefault(_key(row["platform_id"]), []).append(number)
        if twice := {key: numbers for key, numbers in rows_of.items() if len(numbers) > 1}:
            said = "; ".join(f"{key!r} on rows {', '.join(map(str, numbers))}" for key, numbers in twice.items())
            raise CourseError(f"roster: a platform_id given to more than one row (each is one student): {said}")
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
            self.ids.add(student.student_id)
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
            CourseError: no such file, no ``student_id`` column, or a platform_id on two rows.
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


class Mapper:
    """The course student of each platform identity of one download, ids never shared by accident.

    A derived id (:func:`map_student`) that is a roster's id or another
    identity's derived id gets ``-`` and 6 hex digits of a SHA-256 of the
    identity added, so two people never merge unless the roster says so;
    where it does (two platform ids, one course id), :meth:`shared` names them.
    """

    def __init__(self, roster: Roster | None, *, format: str) -> None:
        self.roster, self.format = roster, format
        self.mappings: dict[tuple[str, str], Mapping] = {}
        """(platform id, name) -> its mapping, in the order met."""

    def map(self, *, platform_id: str, name: str, email: str) -> Mapping:
        """The mapping of one platform identity (the same for every file of it)."""
        key = (platform_id, name)
        if key in self.mappings:
            return self.mappings[key]
        mapping = map_student(self.roster, format=self.format, platform_id=platform_id, name=name, email=email)
        taken = {m.student.student_id for m in self.mappings.values()} | (self.roster.ids if self.roster else set())
        derived = mapping.student.student_id
        if mapping.source.startswith("derived") and derived in taken:
            digest = hashlib.sha256(f"{self.format}\n{platform_id}\n{name}".encode()).hexdigest()[:6]
            student = replace(mapping.student, student_id=f"{derived}-{digest}")
            mapping = replace(mapping, student=student, source=f"{mapping.source} ({derived!r} is another's)")
        self.mappings[key] = mapping
        return mapping

    def shared(self) -> dict[str, list[str]]:
        """Course ids the roster gives to more than one platform id -> those platform ids."""
        found: dict[str, list[str]] = {}
        for mapping in self.mappings.values():
            ids = found.setdefault(mapping.student.student_id, [])
            if mapping.platform_id not in ids:
                ids.append(mapping.platform_id)
        return {student_id: sorted(ids) for student_id, ids in found.items() if len(ids) > 1}


def write_csv(path: Path, header: list[str], rows: list[list[str]]) -> None:
    """Write a CSV (UTF-8, quoted as needed) whose cells a spreadsheet never runs
    (:func:`autograder.spreadsheet.cell`)."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows([spreadsheet.cell(value) for value in row] for row in rows)


def write_mapping(mappings: list[Mapping], path: Path) -> None:
    """Write student_ids.csv: one row per platform identity, with the course student id it maps to."""
    rows = [[m.student.student_id, m.format, m.platform_id, m.name, m.email, m.source] for m in mappings]
    write_csv(path, MAPPING_COLUMNS, rows)
