"""The shapes downloads come in, each as an nbgrader ``FileNameCollectorPlugin`` regular expression.

Each shape's ``named_regexp`` follows the contract of nbgrader's zip_collect
(``nbgrader/plugins/zipcollect.py``: ``student_id`` and ``file_id`` named
groups, optionally ``first_name``, ``last_name``, ``email``, ``timestamp``) and
is applied, through nbgrader's own ``FileNameCollectorPlugin``, to a file's
POSIX path in the download; as they start with ``(?:.*?/)??`` (any wrapper
folders above the platform's layout) they also work as
``c.FileNameCollectorPlugin.named_regexp`` for ``nbgrader zip_collect``,
which matches absolute paths.

Who a file belongs to is decided by where the platform put it, never by a name
inside a student's upload: the rule is applied at the shallowest level of a
path where it holds (the wrapper prefix is lazy, a name part is the first that
fits), and to a file inside an archive it is applied to the outermost archive
it names (a Canvas ``lovelaceada_1001_5001_work.zip`` is Ada's, whatever its
members are called); an archive the rule does not name (a platform's zip in
zip_collect's ``archive/``, a wrapper zip) is a wrapper. What lies below that
level is the student's own upload: a name there that the rule would read as
another submission (``alice/01_tensors/bob/01_tensors/...``, a Moodle folder in
a Moodle folder, a Gradescope ``submission_<id>/`` or ``submission_metadata.yml``
in a submission) is a conflict (:meth:`Shape.conflicts`), and the platform's
own files (Blackboard's receipts, Gradescope's metadata) are only read outside
every student's upload. Naming rules, from each platform's documents:

- ``nbgrader``: ``<student_id>/<assignment_id>/<notebook>.ipynb``, nbgrader's
  own ``submitted/`` layout (what ``nbgrader collect`` and ``zip_collect``
  write, ``timestamp.txt`` beside the notebook written by nbgrader), under any
  wrapper folders.
- ``canvas``: "Download Submissions" is one flat zip of
  ``<lastnamefirstname>_<user id>_<file id>_<original name>`` (canvas-lms
  ``lib/content_zipper.rb``: ``get_filename``, ``add_upload_submission``), the name
  part the sortable name lower-cased with characters other than word characters
  and ``-`` dropped or made ``-`` (``smith--jane``, ``müllerjosé``: any text
  without ``_``), ``_LATE_`` (``_late_`` in newer Canvas) after the
  name for work handed in after the due date; Canvas adds ``-1``, ``-2`` to an
  original name handed in again. No submission time is in the download: a
  late file is marked late (:attr:`Claim.late`), how late is not known.
- ``moodle``: "Download all submissions" holds one folder per student
  (``mod/assign/classes/downloader.php``), ``<Full Name>_<participant id>_assignsubmission_file/``
  (Moodle 4; ``..._file_/`` in Moodle 3; online text in ``..._assignsubmission_onlinetext/``),
  the student's files inside, the full name's ``_`` made spaces; with "Download submissions
  in folders" off, flat ``<Full Name>_<participant id>_assignsubmission_file_<file>``. No time.
- ``blackboard``: "Assignment File Download" gives
  ``<assignment>_<username>_attempt_<YYYY-MM-DD-HH-MM-SS>_<original name>``
  per file and ``<assignment>_<username>_attempt_<YYYY-MM-DD-HH-MM-SS>.txt``, a
  receipt with ``Name: <Full Name> (<username>)``, ``Date Submitted:`` (in the
  server's local time zone, ``EST``, ``MEZ``, ...) and the files' original
  names (the very example of nbgrader's ``named_regexp`` help). Assignment
  names and usernames may both hold ``_``: the username is the receipt's, else
  what follows the assignment name, the prefix all files of the download share.
- ``gradescope``: "Export Submissions" holds ``submission_<id>/`` folders and,
  beside them, ``submission_metadata.yml`` mapping each folder to
  ``:submitters:`` (``:name:``, ``:sid:``, ``:email:``; several for a group)
  and ``:created_at:``, the time Gradescope received it.
- ``zip_collect``: nbgrader's ``downloaded/<assignment_id>/archive/`` folder
  holding a platform's download (``extracted/`` beside it is zip_collect's
  copy, not read again); the assignment comes from the folder, the students
  from the platform shape found inside.
"""

from __future__ import annotations

import logging
import os
import re
import warnings
from dataclasses import dataclass, replace
from datetime import date, datetime, timezone

import yaml
from dateutil import parser as dateparser
from nbgrader.plugins.zipcollect import FileNameCollectorPlugin

from .archives import Entry

QUIET = logging.getLogger("autograder.pipeline.intake.shapes")
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
    resubmission: int = 0
    """Canvas's ``-N`` after a name handed in again: the Nth later upload of that name (0: none)."""
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

    def owner(self, entry: Entry) -> tuple[dict, int] | None:
        """The platform's naming of ``entry``: the groups of the first of its archives (outermost first), then of
        its own path, that the rule names at its shallowest level, and that one's index in
        ``(*entry.archives, entry.logical)``; None when none is named so."""
        for index, path in enumerate((*entry.archives, entry.logical)):
            if (groups := self.match(path)) is not None:
                return groups, index
        return None

    def strict_claims(self, entry: Entry, metadata: dict) -> list[Claim]:
        """Claims by the shape's regular expression on the path or, inside an archive, the outermost archive it
        names (:meth:`owner`), the member's own name then being the file's.

        Detection counts these: they are what the platform's naming rule produces.
        """
        found = self.owner(entry)
        if found is None:
            return []
        groups, index = found
        if index < len(entry.archives):
            groups["file_id"] = entry.logical.rsplit("/", 1)[-1]
        return self.read(groups, metadata)

    def conflicts(self, entry: Entry) -> list[str]:
        """The submissions that ``entry``'s names inside its owner's own upload claim to be, other than the owner's.

        The upload is what lies below the platform's naming (:meth:`owner`): the
        file's name past the platform's part, and each archive member's path in
        its archive. Each is read by the rule at every level; a different
        :meth:`identity` (a username, a participant id, a ``submission_<id>``)
        is a conflict, given as that identity, sorted. The
        file stays the owner's whatever these say; empty when nothing claims
        another submission or ``entry`` is in no submission.
        """
        found = self.owner(entry)
        if found is None:
            return []
        groups, index = found
        chain = (*entry.archives, entry.logical)
        inside = [groups["file_id"] or ""]
        for archive, member in zip(chain[index:], chain[index + 1 :]):
            inside.append(member[len(archive.rsplit("/", 1)[0]) + 1 :] if "/" in archive else member)
        named = set()
        for path in inside:
            parts = path.split("/")
            for depth in range(len(parts)):
                other = self.match("/".join(parts[depth:]))
                if other is not None and self.identity(other) != self.identity(groups):
                    named.add(self.identity(other))
        return sorted(named)

    def identity(self, groups: dict) -> str:
        """The submission a matched path names, as the rule's groups give it (its ``student_id``)."""
        return groups["student_id"]

    def read(self, groups: dict, metadata: dict) -> list[Claim]:
        """The claims of one matched path; ``metadata`` is what :meth:`metadata` read."""
        return [Claim(groups["student_id"], groups.get("name") or "", groups["file_id"], late=bool(groups.get("late")))]

    def unclaimed(self, entry: Entry, metadata: dict) -> str:
        """Why ``entry``, which :meth:`claims` gives no student, is not taken (its manifest note)."""
        return f"not in the {self.name} shape ({self.description})"

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
        return rf"(?:.*?/)??(?P<student_id>[^/]+)/(?P<assignment_id>{ids})/(?P<file_id>(?:[^/]+/)*[^/]+)$"

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
    description = (
        "<lastnamefirstname>[_LATE]_<user id>_<file id>_<file>, or [LATE_]anon_<anonymous id>_<file id>_<file> "
        "(Canvas Download Submissions)"
    )
    named_regexp = (
        r"(?:.*?/)??(?:(?P<anonymous_late>LATE_)?(?P<anonymous_id>anon_[0-9A-Za-z]+)"
        r"|(?P<name>[^/_]+)(?P<late>_LATE|_late)?_(?P<student_id>\d+))_(?P<attachment_id>\d+)_(?P<file_id>[^/]+)$"
    )
    """Canvas's ``ContentZipper#get_filename``: ``<sortable name>[_LATE]_<user id>``, or with anonymous grading
    ``[LATE_]anon_<anonymous id>`` (no name), then ``_<file id>_<file name>``. The anonymous form is tried first,
    so an all-digit anonymous id is not read as a student named "anon"."""

    def identity(self, groups: dict) -> str:
        return groups["anonymous_id"] or groups["student_id"]

    def read(self, groups: dict, metadata: dict) -> list[Claim]:
        if groups["anonymous_id"]:
            groups = {**groups, "student_id": groups["anonymous_id"], "late": groups["anonymous_late"]}
        (claim,) = super().read(groups, metadata)
        again = re.search(r"-(\d+)(?:\.[^./-]*)?$", groups["file_id"])
        return [replace(claim, resubmission=int(again[1]) if again else 0)]


class Moodle(Shape):
    name = "moodle"
    description = "<Full Name>_<id>_assignsubmission_file/<file> or, flat, ..._file_<file> (Moodle Download all)"
    named_regexp = (
        r"(?:.*?/)??(?P<name>[^/]+?)_(?P<student_id>\d+)_assignsubmission_(?:file|onlinetext)(?:_?/|_)"
        r"(?P<file_id>(?:[^/]+/)*[^/]+)$"
    )
    """In folders ``..._file/`` (Moodle 4), ``..._file_/`` (Moodle 3), or flat ``..._file_<file>``; the name is the
    shortest that fits, so a flat file handed in as ``Bea_32_assignsubmission_file_x`` stays its uploader's."""


class Blackboard(Shape):
    name = "blackboard"
    description = "<assignment>_<user>_attempt_<YYYY-MM-DD-HH-MM-SS>_<file> and a .txt receipt (Blackboard)"
    named_regexp = (
        r"(?:.*?/)??(?P<student_id>[^/]+?)_attempt_"
        r"(?P<timestamp>\d{4}-\d\d-\d\d-\d\d-\d\d-\d\d)(?:_(?P<file_id>[^/]+)|\.txt)$"
    )
    """``student_id`` is the attempt's prefix, ``<assignment>_<username>``: :meth:`metadata` splits it."""

    def read(self, groups: dict, metadata: dict) -> list[Claim]:
        if not groups["file_id"]:
            return []  # the receipt itself: see metadata()
        user, name = _blackboard_user(groups["student_id"], metadata)
        times, attempt = metadata.get("times", {}), _attempt(groups)
        when = times[attempt] if attempt in times else _name_time(groups)
        return [Claim(user, name, groups["file_id"], timestamp=when)]

    def metadata(self, entries: list[Entry]) -> tuple[dict, dict[str, str]]:
        """The assignment name, each receipt's name and username by prefix, its ``Date Submitted:`` by attempt.

        The username is the receipt's ``Name: <Full Name> (<username>)``; else
        what follows the assignment name: the receipts' prefix less their
        username, else the longest prefix (up to a ``_``) all the download's
        attempts share. A download of one student without receipt keeps the
        whole prefix as the id (never a guess at the last ``_``). A receipt time
        in an unknown zone is not used (``times`` holds None for that attempt).
        Only the platform's files are read: a receipt or attempt name inside a
        student's upload (a member of an attempt's zip) is that student's file.
        """
        owners = [(entry, self.owner(entry)) for entry in entries]
        matched = [(entry, found[0]) for entry, found in owners if found and found[1] == len(entry.archives)]
        receipts = {}
        for entry, groups in matched:
            if not groups["file_id"]:
                receipts[entry.name] = (groups, entry.path.read_text(errors="replace"))
        named = {groups["student_id"]: blackboard_user(text) for groups, text in receipts.values()}
        assignment = next(
            (prefix[: -len(user) - 1] for prefix, (_, user) in named.items() if user and prefix.endswith(f"_{user}")),
            None,
        )
        prefixes = sorted({groups["student_id"] for _, groups in matched})
        if assignment is None and len(prefixes) > 1:
            assignment = os.path.commonprefix(prefixes).rsplit("_", 1)[0]
        found = {"assignment": assignment, "named": named, "times": {}}
        times, notes = found["times"], {}
        for name, (groups, text) in receipts.items():
            when, problem = blackboard_receipt(text)
            if when or problem:
                times[_attempt(groups)] = when
            said = f"submitted {when:%Y-%m-%d %H:%M:%S} UTC" if when else problem
            said = said or "no Date Submitted: the name's is used"
            notes[name] = f"Blackboard receipt of {_blackboard_user(groups['student_id'], found)[0]}: {said}"
        return found, notes


class Gradescope(Shape):
    name = "gradescope"
    description = "submission_<id>/<file> and submission_metadata.yml (Gradescope Export Submissions)"
    named_regexp = r"(?:.*?/)??(?P<student_id>submission_\d+)/(?P<file_id>(?:[^/]+/)*[^/]+)$"

    def read(self, groups: dict, metadata: dict) -> list[Claim]:
        claims = metadata.get("submitters", {}).get(groups["student_id"], [])
        return [replace(claim, file_id=groups["file_id"]) for claim in claims]

    def unclaimed(self, entry: Entry, metadata: dict) -> str:
        """A ``submission_<id>/`` folder that the metadata does not list, or whose record cannot be read: whose it
        is cannot be known, so its files are not taken (never graded under a made-up student); other files: as
        :meth:`Shape.unclaimed`."""
        groups = self.match(entry.logical)
        if groups is None:
            return super().unclaimed(entry, metadata)
        folder = groups["student_id"]
        listing = f"{GRADESCOPE_METADATA} does not list it" if metadata else f"no readable {GRADESCOPE_METADATA}"
        if folder in metadata.get("unreadable", {}):
            listing = f"its record in {GRADESCOPE_METADATA} cannot be read ({metadata['unreadable'][folder]})"
        return (
            f"{folder}/ is a Gradescope submission folder but {listing}: whose work it is is not known, so it is "
            "not taken (Export Submissions lists every submission there: export again, or grade it by hand)"
        )

    def metadata(self, entries: list[Entry]) -> tuple[dict, dict[str, str]]:
        """The submitters and times of the platform's ``submission_metadata.yml`` (``submitters`` and
        ``unreadable``, as :func:`gradescope_metadata` reads them; one per download, the first is read), the one
        outside every ``submission_<id>/`` folder (beside them): a file of that name inside a submission folder,
        or inside an archive one holds, is the student's (:meth:`conflicts`), never read."""
        found = [entry for entry in entries if _is_metadata(entry.logical) and self.owner(entry) is None]
        if not found:
            return {}, {}
        submitters, unreadable = gradescope_metadata(found[0].path.read_text(errors="replace"), source=found[0].name)
        said = f"Gradescope metadata: submitters and times of {len(submitters)} submission(s)"
        if unreadable:
            names = sorted(unreadable)
            said += f"; {len(names)} record(s) not read: {', '.join(names[:5])}{' ...' if len(names) > 5 else ''}"
        notes = {found[0].name: said}
        notes |= {entry.name: f"another {GRADESCOPE_METADATA}: {found[0].name} is read" for entry in found[1:]}
        return {"submitters": submitters, "unreadable": unreadable}, notes

    def conflicts(self, entry: Entry) -> list[str]:
        """As :meth:`Shape.conflicts`, and ``submission_metadata.yml`` for such a file inside a submission."""
        found = super().conflicts(entry)
        return [*found, GRADESCOPE_METADATA] if _is_metadata(entry.logical) and self.owner(entry) else found


def _is_metadata(path: str) -> bool:
    return path.rsplit("/", 1)[-1] == GRADESCOPE_METADATA


def _blackboard_user(prefix: str, metadata: dict) -> tuple[str, str]:
    """(username, full name) of a Blackboard attempt prefix ``<assignment>_<username>``, from what
    :meth:`Blackboard.metadata` read."""
    name, user = metadata.get("named", {}).get(prefix, ("", ""))
    assignment = metadata.get("assignment")
    if not user and assignment is not None and prefix.startswith(f"{assignment}_"):
        user = prefix[len(assignment) + 1 :]
    return user or prefix, name


def _name_time(groups: dict) -> datetime:
    """The attempt's time in a Blackboard file name, read as UTC (the name says no zone)."""
    return datetime.strptime(groups["timestamp"], "%Y-%m-%d-%H-%M-%S").replace(tzinfo=timezone.utc)


def _attempt(groups: dict) -> str:
    return f"{groups['student_id']}_attempt_{groups['timestamp']}"


def _extension(path: str) -> str:
    tail = path.rsplit("/", 1)[-1]
    return "." + tail.rsplit(".", 1)[-1] if "." in tail else ""


SHAPES = {shape.name: shape for shape in (Nbgrader, Canvas, Moodle, Blackboard, Gradescope)}
"""Platform shapes by name (``zip_collect`` is a folder around one of them)."""
FORMATS = ["zip_collect", *SHAPES]
"""What ``grade --format`` accepts."""

ZIP_COLLECT = r"(?:^|.*?/)(?P<assignment_id>{ids})/(?P<step>archive|extracted)/(?P<rest>.+)$"
"""nbgrader zip_collect's ``downloaded/<assignment_id>/{archive,extracted}/`` (its ``archive_directory``
and ``extracted_directory``), matched on the download's path with its two last folders before it, at the
shallowest level, outside every archive (one inside a student's zip is the student's)."""


MAX_FIELD = 1000
"""Characters of one field of Gradescope's metadata read (an id, a name, an e-mail, a time, a folder's name)."""


def gradescope_metadata(text: str, *, source: str) -> tuple[dict[str, list[Claim]], dict[str, str]]:
    """``submission_<id>`` -> one :class:`Claim` per submitter (``file_id`` left empty), from the YAML; and
    ``submission_<id>`` -> why its record is not read, for each record not in Gradescope's form (no
    ``:submitters:`` list, a submitter that is not a mapping or has no ``:sid:``, ``:email:`` or ``:name:``, a
    field that is a list or a mapping, or longer than :data:`MAX_FIELD`): nothing says whose that folder is,
    and the other records are read.

    Only single values are read, never a list or mapping a field holds: YAML's aliases share one structure
    however often it is named, so a small file can stand for one too large to walk (a "billion laughs").

    Raises:
        ValueError: not YAML, or not a mapping of submission folders (then no record can be read).
    """
    try:
        data = yaml.safe_load(text)
    except (yaml.YAMLError, ValueError) as error:  # ValueError: an integer past Python's 4300 digits
        raise ValueError(f"{source} is not YAML: {error}") from error
    if not isinstance(data, dict):
        raise ValueError(f"{source} is not a mapping of submission folders")
    found, unreadable = {}, {}
    for folder, record in data.items():
        if len(str(folder)) > MAX_FIELD:  # a key is a single value: no folder has such a name
            continue
        try:
            found[str(folder)] = _submitters(record)
        except ValueError as problem:
            unreadable[str(folder)] = str(problem)
    return found, unreadable


def _submitters(record: object) -> list[Claim]:
    """The claims of one record of Gradescope's metadata.

    Raises:
        ValueError: the record is not in Gradescope's form (the message says how).
    """
    if not isinstance(record, dict):
        raise ValueError("its record is not a mapping")
    people = record.get(":submitters")
    if not isinstance(people, list) or not people:
        raise ValueError("its record has no :submitters: list")
    when = _utc(_single(record.get(":created_at"), ":created_at"))
    claims = []
    for person in people:
        if not isinstance(person, dict):
            raise ValueError("a submitter is not a mapping of :name:, :sid: and :email:")
        sid, email, name = (str(_single(person.get(key), key)) for key in (":sid", ":email", ":name"))
        if not (sid or email or name):
            raise ValueError("a submitter has no :sid:, :email: or :name:")
        claims.append(Claim(platform_id=sid or email or name, name=name, file_id="", timestamp=when, email=email))
    return claims


def _single(value: object, key: str) -> object:
    """``value`` when it is one value: a text (its length bounded), a number or a time; '' for none.

    Raises:
        ValueError: a list, a mapping or any other structure, or a text longer than :data:`MAX_FIELD`.
    """
    if value is None:
        return ""
    if not isinstance(value, (str, int, float, date)):
        raise ValueError(f"its {key} is not a single value")
    if isinstance(value, str) and len(value) > MAX_FIELD:
        raise ValueError(f"its {key} is longer than {MAX_FIELD} characters")
    return value


def blackboard_user(text: str) -> tuple[str, str]:
    """(full name, username) of a Blackboard receipt's ``Name: Jane Smith (jane_smith)``; ('', '') without one."""
    for line in text.splitlines():
        if found := re.fullmatch(r"Name:\s*(.*?)\s*\(([^()]+)\)\s*", line):
            return found[1], found[2].strip()
    return "", ""


def blackboard_receipt(text: str) -> tuple[datetime | None, str]:
    """The ``Date Submitted:`` of a Blackboard receipt (UTC) and '', or None and why it is not used.

    A receipt without ``Date Submitted:`` gives (None, '').
    """
    for line in text.splitlines():
        if line.startswith("Date Submitted:"):
            when, problem = read_time(line.split(":", 1)[1].replace("o'clock", ""))
            return when, problem and f"Date Submitted {problem}: the time is not used"
    return None, ""


ZONES = {
    **dict.fromkeys(["UTC", "GMT", "Z", "WET"], 0),
    **{"EST": -5, "EDT": -4, "CST": -6, "CDT": -5, "MST": -7, "MDT": -6, "PST": -8, "PDT": -7},
    **{"AKST": -9, "AKDT": -8, "HST": -10, "BST": 1, "WEST": 1},
    **{"CET": 1, "CEST": 2, "MEZ": 1, "MESZ": 2, "EET": 2, "EEST": 3, "MSK": 3},
    **{"JST": 9, "KST": 9, "AWST": 8, "ACST": 9.5, "AEST": 10, "AEDT": 11, "NZST": 12, "NZDT": 13},
}
"""Offsets from UTC, in hours, of the zone abbreviations servers write (``CST`` is US Central, as Blackboard's
US servers write it). One that names several zones (``IST``: India, Ireland, Israel) is left out: unknown."""
TZINFOS = {name: int(hours * 3600) for name, hours in ZONES.items()}


def read_time(value: object) -> tuple[datetime | None, str]:
    """A time as UTC and '', or None and why: a datetime (YAML reads Gradescope's times as such) or a string
    dateutil reads, its zone an offset or one of :data:`ZONES` (no zone: UTC); an unknown or ambiguous zone
    abbreviation gives None, never a guess."""
    if isinstance(value, str):
        with warnings.catch_warnings():
            warnings.simplefilter("error", dateparser.UnknownTimezoneWarning)
            try:
                value = dateparser.parse(value, fuzzy=True, tzinfos=TZINFOS)
            except dateparser.UnknownTimezoneWarning as unknown:
                zone = str(unknown).split()[1]
                return None, f"is in an unknown time zone {zone!r}"
            except (ValueError, OverflowError):
                return None, ""
    if not isinstance(value, datetime):
        return None, ""
    return value.replace(tzinfo=value.tzinfo or timezone.utc).astimezone(timezone.utc), ""


def _utc(value: object) -> datetime | None:
    """:func:`read_time`'s time alone."""
    return read_time(value)[0]
