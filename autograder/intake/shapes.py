"""The shapes downloads come in, each as an nbgrader ``FileNameCollectorPlugin`` regular expression.

Each shape's ``named_regexp`` follows the contract of nbgrader's zip_collect
(``nbgrader/plugins/zipcollect.py``: ``student_id`` and ``file_id`` named
groups, optionally ``first_name``, ``last_name``, ``email``, ``timestamp``) and
is applied, through nbgrader's own ``FileNameCollectorPlugin``, to a file's
POSIX path in the download; as they start with ``(?:.*/)?`` they also work as
``c.FileNameCollectorPlugin.named_regexp`` for ``nbgrader zip_collect``,
which matches absolute paths. Naming rules, from each platform's documents:

- ``nbgrader``: ``<student_id>/<assignment_id>/<notebook>.ipynb``, nbgrader's
  own ``submitted/`` layout (what ``nbgrader collect`` and ``zip_collect``
  write, ``timestamp.txt`` beside the notebook written by nbgrader), under any
  wrapper folders.
- ``canvas``: "Download Submissions" is one flat zip of
  ``<lastnamefirstname>_<user id>_<submission id>_<original name>``, the name
  lower-case letters only, ``_LATE_`` (``_late_`` in newer Canvas) after the
  name for work handed in after the due date; Canvas adds ``-1``, ``-2`` to an
  original name handed in again. No submission time is in the download.
- ``moodle``: "Download all submissions" holds one folder per student,
  ``<Full Name>_<participant id>_assignsubmission_file_/`` (online text in
  ``..._assignsubmission_onlinetext_/``), the student's files inside. No time.
- ``blackboard``: "Assignment File Download" gives
  ``<assignment>_<username>_attempt_<YYYY-MM-DD-HH-MM-SS>_<original name>``
  per file and ``<assignment>_<username>_attempt_<YYYY-MM-DD-HH-MM-SS>.txt``, a
  receipt with ``Name:``, ``Date Submitted:`` and the files' original names
  (the very example of nbgrader's ``named_regexp`` help).
- ``gradescope``: "Export Submissions" holds ``submission_<id>/`` folders and
  ``submission_metadata.yml`` mapping each folder to ``:submitters:`` (``:name:``,
  ``:sid:``, ``:email:``; several for a group) and ``:created_at:``, the time
  Gradescope received it.
- ``zip_collect``: nbgrader's ``downloaded/<assignment_id>/archive/`` folder
  holding a platform's download (``extracted/`` beside it is zip_collect's
  copy, not read again); the assignment comes from the folder, the students
  from the platform shape found inside.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, replace
from datetime import datetime, timezone

import yaml
from dateutil import parser as dateparser
from nbgrader.plugins.zipcollect import FileNameCollectorPlugin

from .archives import Entry

QUIET = logging.getLogger("autograder.intake.shapes")
QUIET.setLevel(logging.CRITICAL)
"""The collectors' logger: a file that does not match is a manifest line, not a warning."""

GRADESCOPE_METADATA = "submission_metadata.yml"
TIMESTAMP = "timestamp.txt"
"""nbgrader's record of when a submission was made (read by autograde for late penalties)."""


@dataclass(frozen=True)
class Claim:
    """What a shape reads from one file's path: whose it is, and what the platform says about it."""

    platform_id: str
    """The platform's id of the student (Canvas user id, Moodle participant id, Blackboard username, ...)."""
    name: str
    """The student's name as the platform writes it ('' when it gives none)."""
    file_id: str
    """The file's own name, as the student handed it in (the assignment is read from it)."""
    assignment_id: str | None = None
    """The assignment, where the shape says it (nbgrader's folder, zip_collect's ``downloaded/<id>/``)."""
    timestamp: datetime | None = None
    """When the platform received it (UTC), where the platform says so."""
    late: bool = False
    """The platform marked it late (Canvas's ``_LATE_``)."""
    email: str = ""


class Shape:
    """One naming scheme: an nbgrader FileNameCollector regular expression and how to read its groups."""

    name = ""
    description = ""
    named_regexp = ""
    """The FileNameCollector ``named_regexp``; a ``name`` group, where there is one, is the student's name."""

    def __init__(self, assignment_ids: list[str]) -> None:
        self.assignment_ids = assignment_ids
        self.collector = FileNameCollectorPlugin(named_regexp=self.regexp(), valid_ext=[""], log=QUIET)

    def regexp(self) -> str:
        return self.named_regexp

    def match(self, path: str) -> dict | None:
        """The named groups of ``path`` (POSIX, relative to the download), or None."""
        # Every file is matched, whatever its extension: the manifest says which are not notebooks.
        self.collector.valid_ext = [_extension(path)]
        return self.collector.collect(path)

    def claims(self, entry: Entry, metadata: dict) -> list[Claim]:
        """Whose ``entry`` is; empty when its path is not in this shape (a group submission: one claim per student)."""
        return self.strict_claims(entry, metadata)

    def strict_claims(self, entry: Entry, metadata: dict) -> list[Claim]:
        """Claims by the shape's regular expression on the path or, inside an archive, the archive's (innermost first).

        Detection counts these: they are what the platform's naming rule produces.
        """
        groups = self.match(entry.logical)
        for archive in reversed(entry.archives):
            if groups is not None:
                break
            groups = self.match(archive)
            if groups is not None:
                groups["file_id"] = entry.logical.rsplit("/", 1)[-1]
        return [] if groups is None else self.read(groups, metadata)

    def read(self, groups: dict, metadata: dict) -> list[Claim]:
        """The claims of one matched path; ``metadata`` is what :meth:`metadata` read."""
        return [Claim(groups["student_id"], groups.get("name") or "", groups["file_id"], late=bool(groups.get("late")))]

    def metadata(self, entries: list[Entry]) -> tuple[dict, dict[str, str]]:
        """What the platform's own files say (receipts, metadata), and a manifest note for each such file.

        Raises:
            ValueError: a metadata file cannot be read (the message names it).
        """
        return {}, {}


class Nbgrader(Shape):
    name = "nbgrader"
    description = "<student_id>/<assignment_id>/<notebook>.ipynb (nbgrader's submitted/ layout)"

    def regexp(self) -> str:
        ids = "|".join(re.escape(a) for a in self.assignment_ids) or "(?!)"
        return rf"(?:.*/)?(?P<student_id>[^/]+)/(?P<assignment_id>{ids})/(?P<file_id>(?:[^/]+/)*[^/]+)$"

    LOOSE = r"(?:.*/)?(?P<student_id>[^/]+)/(?P<assignment_id>[^/]+)/(?P<file_id>[^/]+)$"
    """``<student>/<folder>/<file>`` with any folder name: a near miss of an assignment id gets its hint."""

    def claims(self, entry: Entry, metadata: dict) -> list[Claim]:
        found = self.strict_claims(entry, metadata)
        if found or entry.archives:
            return found
        groups = re.match(self.LOOSE, entry.logical)
        return self.read(groups.groupdict(), metadata) if groups else []

    def read(self, groups: dict, metadata: dict) -> list[Claim]:
        return [Claim(groups["student_id"], "", groups["file_id"], assignment_id=groups["assignment_id"])]


class Canvas(Shape):
    name = "canvas"
    description = "<lastnamefirstname>[_LATE]_<user id>_<submission id>_<file> (Canvas Download Submissions)"
    named_regexp = (
        r"(?:.*/)?(?P<name>[a-z]+)(?P<late>_LATE|_late)?_(?P<student_id>\d+)_(?P<submission_id>\d+)"
        r"_(?P<file_id>[^/]+)$"
    )


class Moodle(Shape):
    name = "moodle"
    description = "<Full Name>_<id>_assignsubmission_file_/<file> (Moodle Download all submissions)"
    named_regexp = (
        r"(?:.*/)?(?P<name>[^/]+)_(?P<student_id>\d+)_assignsubmission_(?:file|onlinetext)_/"
        r"(?P<file_id>(?:[^/]+/)*[^/]+)$"
    )


class Blackboard(Shape):
    name = "blackboard"
    description = "<assignment>_<user>_attempt_<YYYY-MM-DD-HH-MM-SS>_<file> and a .txt receipt (Blackboard)"
    named_regexp = (
        r"(?:.*/)?(?P<assignment_name>[^/]+)_(?P<student_id>[^/_]+)_attempt_"
        r"(?P<timestamp>\d{4}-\d\d-\d\d-\d\d-\d\d-\d\d)(?:_(?P<file_id>[^/]+)|\.txt)$"
    )

    def read(self, groups: dict, metadata: dict) -> list[Claim]:
        if not groups["file_id"]:
            return []  # the receipt itself: see metadata()
        when = metadata.get(_attempt(groups)) or datetime.strptime(
            groups["timestamp"], "%Y-%m-%d-%H-%M-%S"
        ).replace(tzinfo=timezone.utc)
        return [Claim(groups["student_id"], "", groups["file_id"], timestamp=when)]

    def metadata(self, entries: list[Entry]) -> tuple[dict, dict[str, str]]:
        """Each receipt's ``Date Submitted:`` by attempt; the attempt's time in the file names where it has none."""
        times, notes = {}, {}
        for entry in entries:
            groups = self.match(entry.logical)
            if groups and not groups["file_id"]:
                when = blackboard_receipt(entry.path.read_text(errors="replace"))
                if when:
                    times[_attempt(groups)] = when
                said = f"submitted {when:%Y-%m-%d %H:%M:%S} UTC" if when else "no Date Submitted: the name's is used"
                notes[entry.name] = f"Blackboard receipt of {groups['student_id']}: {said}"
        return times, notes


class Gradescope(Shape):
    name = "gradescope"
    description = "submission_<id>/<file> and submission_metadata.yml (Gradescope Export Submissions)"
    named_regexp = r"(?:.*/)?(?P<student_id>submission_\d+)/(?P<file_id>(?:[^/]+/)*[^/]+)$"

    def read(self, groups: dict, metadata: dict) -> list[Claim]:
        return [replace(claim, file_id=groups["file_id"]) for claim in metadata.get(groups["student_id"], [])]

    def metadata(self, entries: list[Entry]) -> tuple[dict, dict[str, str]]:
        """The submitters and times of ``submission_metadata.yml`` (one per download; the first is read)."""
        found = [entry for entry in entries if entry.logical.rsplit("/", 1)[-1] == GRADESCOPE_METADATA]
        if not found:
            return {}, {}
        metadata = gradescope_metadata(found[0].path.read_text(errors="replace"), source=found[0].name)
        notes = {found[0].name: f"Gradescope metadata: submitters and times of {len(metadata)} submission(s)"}
        notes |= {entry.name: f"another {GRADESCOPE_METADATA}: {found[0].name} is read" for entry in found[1:]}
        return metadata, notes


def _attempt(groups: dict) -> str:
    return f"{groups['student_id']}_attempt_{groups['timestamp']}"


def _extension(path: str) -> str:
    tail = path.rsplit("/", 1)[-1]
    return "." + tail.rsplit(".", 1)[-1] if "." in tail else ""


SHAPES = {shape.name: shape for shape in (Nbgrader, Canvas, Moodle, Blackboard, Gradescope)}
"""Platform shapes by name (``zip_collect`` is a folder around one of them)."""
FORMATS = ["zip_collect", *SHAPES]
"""What ``grade --format`` accepts."""

ZIP_COLLECT = r"(?:^|.*/)(?P<assignment_id>{ids})/(?P<step>archive|extracted)/(?P<rest>.+)$"
"""nbgrader zip_collect's ``downloaded/<assignment_id>/{archive,extracted}/`` (its ``archive_directory``
and ``extracted_directory``), matched on the download's path with its two last folders before it."""


def gradescope_metadata(text: str, *, source: str) -> dict[str, list[Claim]]:
    """``submission_<id>`` -> one :class:`Claim` per submitter (``file_id`` left empty), from the YAML.

    Raises:
        ValueError: not YAML, or not a mapping of submissions with ``:submitters:``.
    """
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ValueError(f"{source} is not YAML: {error}") from error
    if not isinstance(data, dict):
        raise ValueError(f"{source} is not a mapping of submission folders")
    found = {}
    for folder, record in data.items():
        if not isinstance(record, dict) or not isinstance(record.get(":submitters"), list):
            raise ValueError(f"{source}: {folder!r} has no :submitters: list")
        when = _utc(record.get(":created_at"))
        found[str(folder)] = [
            Claim(
                platform_id=str(person.get(":sid") or person.get(":email") or person.get(":name")),
                name=str(person.get(":name") or ""),
                file_id="",
                timestamp=when,
                email=str(person.get(":email") or ""),
            )
            for person in record[":submitters"]
            if isinstance(person, dict)
        ]
    return found


def blackboard_receipt(text: str) -> datetime | None:
    """The ``Date Submitted:`` of a Blackboard receipt (UTC), or None when it has none that reads as a time."""
    for line in text.splitlines():
        if line.startswith("Date Submitted:"):
            return _utc(line.split(":", 1)[1].replace("o'clock", ""))
    return None


def _utc(value: object) -> datetime | None:
    """A time as UTC: a datetime (YAML reads Gradescope's times as such) or a string dateutil reads; None if neither."""
    if isinstance(value, str):
        try:
            value = dateparser.parse(value, fuzzy=True)
        except (ValueError, OverflowError):
            return None
    if not isinstance(value, datetime):
        return None
    return value.replace(tzinfo=value.tzinfo or timezone.utc).astimezone(timezone.utc)
