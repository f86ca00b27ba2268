"""Stage ``intake``: read a download of submissions, account for every file, place the work in submitted/.

A download is a folder or a zip in one of the shapes of
:mod:`autograder.pipeline.intake.shapes` (nbgrader's own layouts, Canvas, Moodle,
Blackboard, Gradescope), detected from its file names or named by the
instructor (``--format``). Archives inside it are opened within bounds
(:mod:`autograder.pipeline.intake.archives`), students are mapped to course ids
(:mod:`autograder.pipeline.intake.roster`), and every file of the download gets one
line in the manifest: graded, a copy not graded (and which one was), the
platform's metadata, or not taken and why. The download is only ever read.

Who a file belongs to is decided by where the platform put it: the download's
own layout (the shallowest level at which the platform's naming rule applies,
wrapper folders above it allowed; for an archive's member, the outermost
archive the rule names) and the platform's metadata at the download's root
(Gradescope's ``submission_metadata.yml`` beside the ``submission_<id>/``
folders, Blackboard's receipts), never a name or a claim inside a student's
own upload (a subfolder, an archive member, a file named as the platform's
metadata). Such a name naming another submission never moves the file: it
stays the uploader's (one of their files or copies), the manifest row says
what it claimed, and the uploader's submission notes it and is ``review``;
the other student keeps exactly their own work (see :mod:`.shapes`).

Which copy is graded when a student handed in more than one notebook for an
assignment (a resubmission, two sections, a draft beside the final, a blank
notebook beside a filled one): the latest submission time the platform gives,
then the notebook with the most solution cells changed from the release, then
Canvas's later upload (``-2`` over ``-1`` over none), then the one named
``<assignment_id>.ipynb``, then the last by name. The others are
named in the notes with the rule that decided, and the submission's status is ``review``.

Submission times come only from the platform (Blackboard's receipt and file
names, Gradescope's metadata) or from nbgrader's own ``timestamp.txt`` in its
``<student>/<assignment>/`` layout; a ``timestamp.txt`` in a student's upload
to a platform is the student's and is not trusted. Canvas's and Moodle's
downloads hold no time: their submissions have none (a Canvas ``_LATE_`` file
is noted as late, without how late).
"""

from __future__ import annotations

import difflib
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from .. import structure
from ...course import Course, CourseError, grade_id, is_solution
from ...table import columns
from .archives import Entry, Listing, Refused, list_download, under
from .roster import Mapper, Mapping, Roster, write_csv, write_mapping
from .shapes import FORMATS, SHAPES, TIMESTAMP, ZIP_COLLECT, Claim, Shape, _utc

__all__ = ["FORMATS", "Intake", "Roster", "Submission", "opened", "place", "refuse_course_folders", "write_mapping"]

COURSE_STATE = ("submitted", "autograded", "feedback")
"""Course folders grading writes: a download may not be, hold or lie inside one of them."""


@dataclass
class Submission:
    """One student's work for one assignment, as chosen from the download."""

    student_id: str
    assignment_id: str
    notebook: Path
    """The file graded (read, never written)."""
    source: str
    """Its name in the download (as the manifest shows it)."""
    timestamp: datetime | None = None
    """When the platform (or nbgrader) says it was submitted, UTC; written to submitted/ as timestamp.txt."""
    notes: list[str] = field(default_factory=list)
    """What intake did to it (e.g. a renamed notebook, repairs, copies not graded), shown to the instructor."""
    status: str = "ok"
    """``ok``, ``repaired``, ``unattempted``, ``review`` or ``invalid notebook``: see :func:`place`."""
    review: bool = False
    """Intake chose among several copies: the status is ``review`` whatever the notebook holds."""
    platform_late: bool = False
    """The platform marked it late without a time (Canvas's ``_LATE_``): late, by how much not known."""


@dataclass(frozen=True)
class ManifestRow:
    """One file of the download and what became of it."""

    file: str
    status: str
    """``graded``, ``copy not graded``, ``platform metadata``, ``archive opened``, ``refused`` (an archive, or a
    member of the download's zip) or ``not taken``."""
    student_id: str = ""
    assignment_id: str = ""
    note: str = ""


MANIFEST_COLUMNS = ["file", "status", "student_id", "assignment", "note"]


@dataclass
class Intake:
    """What intake made of a download."""

    format: str
    """The shape read (``zip_collect (canvas)`` for a platform download inside zip_collect's folders)."""
    detected: str
    """One line saying how the shape was chosen."""
    submissions: list[Submission]
    manifest: list[ManifestRow]
    """Every file of the download, once."""
    mappings: list[Mapping]
    """Each student of the download and the course id it maps to."""
    left_out: dict[str, list[str]] = field(default_factory=dict)
    """Student id -> what of theirs was not taken and why, for each student with no submission."""


def refuse_course_folders(course: Course, download: Path) -> None:
    """Refuse a download that is, holds or lies inside the course's submitted/, autograded/ or feedback/.

    Grading writes those folders (it would replace a student's original with
    the normalised copy), so they are never read as a download.

    Raises:
        CourseError: saying what to pass instead.
    """
    for stage in COURSE_STATE:
        folder = course.root / stage
        if under(download, folder) or (folder.exists() and under(folder, download)):
            raise CourseError(
                f"{download} is the course's own {stage}/ folder (or holds it, or lies inside it): grading writes "
                f"there, so it would replace the students' files it reads. Pass what you downloaded instead (the "
                f"platform's zip, or nbgrader zip_collect's downloaded/<assignment_id>/archive/ folder), or a copy: "
                f"cp -r {course.root / stage} /tmp/{stage}-copy && python -m autograder grade /tmp/{stage}-copy"
            )


@contextmanager
def opened(
    download: Path,
    *,
    course: Course,
    release: Callable[[str], NotebookNode],
    format: str | None = None,
    roster: Roster | None = None,
    assignment: str | None = None,
) -> Iterator[Intake]:
    """Read ``download`` (folder or zip); the submissions' files stay readable until the context ends.

    ``release(assignment_id)`` gives the release notebook (to count answered
    cells); ``format`` forces a shape (one of :data:`FORMATS`), else it is
    detected; ``roster`` maps platform identities to course students;
    ``assignment`` says the whole download is that assignment (a platform's
    download is per assignment), whatever the notebooks are named.

    Raises:
        CourseError: the path does not exist, is neither a folder nor a zip,
            or is a zip that cannot be opened safely (see :mod:`.archives`),
            or ``format`` or ``assignment`` is unknown.
    """
    if not download.exists():
        raise CourseError(f"{download} does not exist")
    if download.is_file() and not download.suffix.lower() == ".zip":
        raise CourseError(f"{download} is neither a folder nor a zip file")
    if format is not None and format not in FORMATS:
        raise CourseError(f"unknown format {format!r}: one of {', '.join(FORMATS)}")
    if assignment is not None and assignment not in course.assignment_ids():
        raise CourseError(f"no such assignment in source/: {assignment}")
    with tempfile.TemporaryDirectory(prefix="submissions-") as scratch:
        try:
            listing = list_download(download, Path(scratch))
        except Refused as refusal:
            raise CourseError(f"{download}: {refusal}") from refusal
        yield _read(
            listing, download=download, course=course, release=release, format=format, roster=roster, forced=assignment
        )


def _read(
    listing: Listing,
    *,
    download: Path,
    course: Course,
    release: Callable[[str], NotebookNode],
    format: str | None,
    roster: Roster | None,
    forced: str | None,
) -> Intake:
    opened_rows = {name: ManifestRow(name, _opened_status(note), note=note) for name, note in listing.opened}
    ids = course.assignment_ids()
    entries, hints, rows = _zip_collect(listing.entries, download=download, ids=ids, forced=format == "zip_collect")
    inner = None if format in (None, "zip_collect") else format
    shape, detected = _detect(entries, ids=ids, forced=inner)
    try:
        metadata, metadata_notes = shape.metadata(entries)
    except ValueError as error:
        metadata, metadata_notes = {}, {}
        detected += f"; its metadata cannot be read: {error}"
    trusted_times = _nbgrader_times(entries, shape) if shape.name == "nbgrader" else {}
    candidates: dict[tuple[str, str], list[_Candidate]] = {}
    mapper = Mapper(roster, format=shape.name)
    others: dict[str, list[str]] = {}
    conflicts: dict[str, str] = {}  # file -> what a name inside its uploader's upload claimed (its manifest note)
    suspects: dict[str, list[str]] = {}  # student -> the notes of such files of theirs: their submission is review
    for archive, note in listing.unopened:
        # A student whose archive is refused or holds nothing is still a student of the download.
        students = [
            mapper.map(platform_id=c.platform_id, name=c.name, email=c.email).student.student_id
            for c in shape.claims(archive, metadata)
        ]
        opened_rows[archive.name] = replace(opened_rows[archive.name], student_id=" + ".join(students))
        _flag(shape, archive, students, conflicts=conflicts, suspects=suspects)
        for student in students:
            others.setdefault(student, []).append(f"{archive.name} ({note})")
    rows += opened_rows.values()
    for entry in entries:
        if entry.name in metadata_notes:
            rows.append(ManifestRow(entry.name, "platform metadata", note=metadata_notes[entry.name]))
            continue
        claims = shape.claims(entry, metadata)
        if not claims:
            rows.append(ManifestRow(entry.name, "not taken", note=shape.unclaimed(entry, metadata)))
            continue
        students = [
            mapper.map(platform_id=c.platform_id, name=c.name, email=c.email).student.student_id for c in claims
        ]
        who = " + ".join(students)
        _flag(shape, entry, students, conflicts=conflicts, suspects=suspects)
        base = claims[0].file_id.rsplit("/", 1)[-1]
        if base == TIMESTAMP:
            trusted = entry.logical in trusted_times
            rows.append(
                ManifestRow(
                    entry.name,
                    "platform metadata" if trusted else "not taken",
                    who,
                    note="nbgrader's submission time" if trusted else (
                        "a timestamp.txt the student wrote is not trusted: times come from the platform"
                    ),
                )
            )
            continue
        if not base.endswith(".ipynb"):
            rows.append(ManifestRow(entry.name, "not taken", who, note="not a notebook: not graded, not copied"))
            for student in students:
                others.setdefault(student, []).append(base)
            continue
        hint = hints.get(entry.name)
        stem = Path(base).stem.removesuffix(f"-{claims[0].resubmission}" if claims[0].resubmission else "")
        assignment_id, naming = _resolve(claims[0].assignment_id or stem, ids)  # Canvas's -N is its own naming
        if forced and assignment_id != forced:
            assignment_id, naming = forced, f"named {base!r}: graded as {forced} (--assignment)"
        elif hint and assignment_id is None:
            assignment_id, naming = hint, f"named {base!r} in zip_collect's {hint}/archive/: graded as {hint}"
        if assignment_id is None:
            rows.append(ManifestRow(entry.name, "not taken", who, note=naming))
            continue
        folder = entry.logical.rsplit("/", 1)[0] if "/" in entry.logical else ""
        for claim, student in zip(claims, students):
            when = claim.timestamp or trusted_times.get(f"{folder}/{TIMESTAMP}")
            found = _Candidate(entry, replace(claim, timestamp=when), naming)
            candidates.setdefault((student, assignment_id), []).append(found)
    shared = {
        student_id: f"platform ids {', '.join(platform_ids)} all map to {student_id} in the roster: their work is "
        "taken as one student's, check the roster"
        for student_id, platform_ids in mapper.shared().items()
    }
    submissions = []
    for (student_id, assignment_id), found in sorted(candidates.items()):
        submission, copies = _choose(student_id, assignment_id, found, release=release(assignment_id))
        if others.get(student_id):
            names = others[student_id]
            submission.notes.append(f"files not graded: {', '.join(names[:10])}{' ...' if len(names) > 10 else ''}")
        if student_id in suspects:
            submission.notes += suspects[student_id]
            submission.review = True
        if student_id in shared:
            submission.notes.append(shared[student_id])
            submission.review = True
            copies[0] = replace(copies[0], note="; ".join(filter(None, [copies[0].note, shared[student_id]])))
        submissions.append(submission)
        rows += copies
    placed = {s.student_id for s in submissions}
    left_out = {
        m.student.student_id: [
            *others.get(m.student.student_id, []),
            *suspects.get(m.student.student_id, []),
            *filter(None, [shared.get(m.student.student_id)]),
        ]
        for m in mapper.mappings.values()
        if m.student.student_id not in placed
    }
    rows = [replace(r, note="; ".join(filter(None, [r.note, conflicts[r.file]]))) if r.file in conflicts else r
            for r in rows]
    rows = _one_row_per_file(rows)
    if hints:
        detected = f"format: zip_collect (nbgrader's downloaded/<assignment_id>/archive/) holding {detected[8:]}"
    label = f"zip_collect ({shape.name})" if hints else shape.name
    return Intake(label, detected, submissions, rows, list(mapper.mappings.values()), left_out)


def _flag(
    shape: Shape, entry: Entry, students: list[str], *, conflicts: dict[str, str], suspects: dict[str, list[str]]
) -> None:
    """Note a name inside ``entry``'s uploaders' own upload that claims another submission (:meth:`Shape.conflicts`):
    ``conflicts[entry.name]`` is its manifest note, ``suspects[student]`` gets one for each uploader's submission
    (then ``review``). The file stays the uploaders'."""
    if named := shape.conflicts(entry):
        who = " + ".join(students)
        claimed = f"named inside {who}'s own upload as {', '.join(named)}"
        conflicts[entry.name] = f"{claimed}: a name in a student's upload never moves a file, it is {who}'s"
        for student in students:
            suspects.setdefault(student, []).append(f"{entry.name} is {claimed}: kept as this student's, read it")


def _opened_status(note: str) -> str:
    if note.startswith(("archive refused", "refused")):
        return "refused"
    return "archive opened" if note.startswith("archive opened") else "not taken"


def _one_row_per_file(rows: list[ManifestRow]) -> list[ManifestRow]:
    """Merge rows of one file (a group's notebook graded for each student) into one, sorted by file name."""
    merged: dict[str, ManifestRow] = {}
    for row in rows:
        if row.file in merged:
            first = merged[row.file]
            students = " + ".join(s for s in (first.student_id, row.student_id) if s)
            notes = "; ".join(n for n in (first.note, row.note) if n)
            merged[row.file] = replace(first, student_id=students, note=notes)
        else:
            merged[row.file] = row
    return [merged[name] for name in sorted(merged)]


def _zip_collect(
    entries: list[Entry], *, download: Path, ids: list[str], forced: bool
) -> tuple[list[Entry], dict[str, str], list[ManifestRow]]:
    """Entries of zip_collect's archive/ rebased to it, the assignment each comes from, and rows for the rest.

    Without a ``downloaded/<assignment_id>/archive/`` (or ``extracted/`` alone)
    in the download's path, the entries are returned as they are. The folder
    is looked for outside every archive (in an entry's outermost archive's path,
    else its own): one inside an archive is a student's upload, not nbgrader's.
    """
    pattern = re.compile(ZIP_COLLECT.format(ids="|".join(re.escape(a) for a in ids) or "(?!)"))
    context = "/".join(download.resolve().parts[-2:])
    found = {entry.name: pattern.match(f"{context}/{(*entry.archives, entry.logical)[0]}") for entry in entries}
    steps = {match["step"] for match in found.values() if match}
    if not steps:
        if forced:
            raise CourseError(f"{download} holds no downloaded/<assignment_id>/archive/ folder of nbgrader zip_collect")
        return entries, {}, []
    step = "archive" if "archive" in steps else "extracted"
    kept, hints, rows = [], {}, []
    for entry in entries:
        match = found[entry.name]
        if match and match["step"] == step:
            outer = (*entry.archives, entry.logical)[0]
            prefix = outer[: len(outer) - len(match["rest"])]
            archives = tuple(a[len(prefix) :] if a.startswith(prefix) else a for a in entry.archives)
            kept.append(replace(entry, logical=entry.logical[len(prefix) :], archives=archives))
            hints[entry.name] = match["assignment_id"]
        elif match:
            note = "zip_collect's extracted copy of archive/ (archive/ is read)"
            rows.append(ManifestRow(entry.name, "not taken", note=note))
        else:
            note = "outside zip_collect's downloaded/<assignment_id>/archive/"
            rows.append(ManifestRow(entry.name, "not taken", note=note))
    return kept, hints, rows


def _detect(entries: list[Entry], *, ids: list[str], forced: str | None) -> tuple[Shape, str]:
    """The shape named, or the one that claims the most notebooks (gradescope only with its metadata file)."""
    if forced:
        return SHAPES[forced](ids), f"format: {forced} (as --format says)"
    notebooks = [entry for entry in entries if entry.logical.endswith(".ipynb")]
    counts = []
    for name, kind in SHAPES.items():
        shape = kind(ids)
        try:
            metadata, _ = shape.metadata(entries)
        except ValueError:
            metadata = {}
        counts.append((sum(1 for entry in notebooks if shape.strict_claims(entry, metadata)), name, shape))
    best = max(counts, key=lambda c: c[0])
    if best[0] == 0:
        return SHAPES["nbgrader"](ids), f"format: none recognised among {len(notebooks)} notebook(s); read as nbgrader"
    count = f"{best[0]} of {len(notebooks)} notebook(s) named that way"
    return best[2], f"format: {best[1]} detected ({count}; --format forces one)"


def _nbgrader_times(entries: list[Entry], shape: Shape) -> dict[str, datetime]:
    """nbgrader's own ``<student>/<assignment>/timestamp.txt`` (in the download, folder or zip, not in an archive
    inside it, which is a student's): its logical path -> time."""
    times = {}
    for entry in entries:
        if not entry.archives and entry.logical.endswith(f"/{TIMESTAMP}"):
            claims = shape.claims(entry, {})
            if claims and claims[0].file_id == TIMESTAMP:
                when = _utc(entry.path.read_text(errors="replace").strip())
                if when:
                    times[entry.logical] = when
    return times


COPY_SUFFIX = re.compile(r"(?:\s*\(\d+\)|-\d+|\s+copy)$", re.IGNORECASE)
"""What browsers, OSes and Canvas add to a file name handed in twice: ``x (1)``, ``x-1``, ``x copy``."""


def _resolve(name: str, ids: list[str]) -> tuple[str | None, str]:
    """The assignment a notebook (or folder) name means, and a note when it is not the exact id.

    ``01_tensors`` is 01_tensors; ``01_Tensors``, ``01_tensors (1)``,
    ``01_tensors-2`` and ``01_tensors_final`` are near misses graded as
    01_tensors with a note; anything else is not taken, with the closest
    assignment ids as a hint.
    """
    if name in ids:
        return name, ""
    plain = name.casefold().strip()
    while COPY_SUFFIX.search(plain):
        plain = COPY_SUFFIX.sub("", plain).strip()
    for assignment_id in ids:
        wanted = assignment_id.casefold()
        if plain == wanted or re.match(rf"{re.escape(wanted)}[\s_.-]", plain):
            return assignment_id, f"named {name!r}: did you mean {assignment_id}? graded as {assignment_id}"
    close = difflib.get_close_matches(name, ids, n=2, cutoff=0.7)
    hint = f"did you mean {' or '.join(close)}?" if close else f"assignments are {', '.join(ids)}"
    return None, f"no assignment {name!r}: {hint} (--assignment ID grades a whole download as one)"


@dataclass(frozen=True)
class _Candidate:
    entry: Entry
    claim: Claim
    naming: str


EARLIEST = datetime.min.replace(tzinfo=timezone.utc)
CHOICE_RULES = ("the latest submission time", "the most answered solution cells", "Canvas's later upload")
"""The rules that choose among a student's copies, in order (the module's docstring), as a note names the one that
decided (then the copy named ``<assignment_id>.ipynb``, then the last by name)."""


def _choose(
    student_id: str, assignment_id: str, found: list[_Candidate], *, release: NotebookNode
) -> tuple[Submission, list[ManifestRow]]:
    """The copy graded (see the module's rule) as a Submission, and a manifest row for each copy."""
    if len(found) == 1:
        answered = {found[0].entry.name: 0}  # nothing to choose between
    else:
        answered = {c.entry.name: _answered_cells(c.entry.path, release=release) for c in found}

    def rank(candidate: _Candidate) -> tuple:
        exact = candidate.claim.file_id.rsplit("/", 1)[-1] == f"{assignment_id}.ipynb"
        claim = candidate.claim
        return (claim.timestamp or EARLIEST, answered[candidate.entry.name], claim.resubmission, exact)

    ordered = sorted(sorted(found, key=lambda c: c.entry.name, reverse=True), key=rank, reverse=True)
    chosen, rest = ordered[0], ordered[1:]
    if rest:  # the first rule that tells the graded copy from the next one
        deciders = [*CHOICE_RULES, f"named {assignment_id}.ipynb"]
        decided = next(
            (rule for rule, a, b in zip(deciders, rank(chosen), rank(rest[0])) if a != b), "the last by name"
        )
    base = chosen.claim.file_id.rsplit("/", 1)[-1]
    renamed = f"notebook {base!r} graded as '{assignment_id}.ipynb'" if base != f"{assignment_id}.ipynb" else ""
    notes = [note for note in (chosen.naming or renamed,) if note]
    if chosen.claim.late:
        notes.append("late: the platform marked it late (the download does not say by how much)")
    if rest:
        notes.append(
            f"{len(found)} copies handed in; graded {chosen.entry.name} ({decided}); "
            f"not graded: {', '.join(c.entry.name for c in rest)}"
        )
    submission = Submission(
        student_id,
        assignment_id,
        notebook=chosen.entry.path,
        source=chosen.entry.name,
        timestamp=chosen.claim.timestamp,
        notes=notes,
        review=bool(rest),
        platform_late=chosen.claim.late,
    )
    rows = [ManifestRow(chosen.entry.name, "graded", student_id, assignment_id, "; ".join(notes))]
    rows += [
        ManifestRow(c.entry.name, "copy not graded", student_id, assignment_id, f"{chosen.entry.name} was graded")
        for c in rest
    ]
    return submission, rows


def _answered_cells(path: Path, *, release: NotebookNode) -> int:
    """How many solution cells of the notebook at ``path`` differ from ``release``'s; -1 if it is not a readable
    notebook (:func:`autograder.pipeline.structure.normalise_file`: malformed, or too large)."""
    normalised = structure.normalise_file(path, release=release)
    return len(_answered(normalised.notebook, release)) if normalised.readable else -1


def _answered(notebook: NotebookNode, release: NotebookNode) -> set[str]:
    stubs = {grade_id(cell): cell.source.strip() for cell in release.cells if is_solution(cell)}
    return {
        grade_id(cell)
        for cell in notebook.cells
        if is_solution(cell) and grade_id(cell) in stubs and cell.source.strip() != stubs[grade_id(cell)]
    }


def place(course: Course, submission: Submission, *, release: NotebookNode) -> Path:
    """Write a submission, validated and normalised, to ``submitted/<student>/<assignment>/``.

    The notebook is rebuilt on the structure of ``release`` by
    :func:`autograder.pipeline.structure.normalise_file` and written as
    ``<assignment_id>.ipynb``, with nbgrader's ``timestamp.txt`` when the
    submission time is known. ``submission.status`` says what happened:
    ``ok``, ``unattempted`` (no solution cell changed from the release),
    ``repaired`` (notes say what), ``review`` (intake chose among several copies,
    or its code touches the grading machinery: graded as usual, to be read by
    a person) or ``invalid notebook`` (graded as the unchanged release, so
    every autograded cell scores 0).
    Nothing else of the student's is copied, so nothing a student adds (a
    ``torch.py``, a ``checks.py``) can shadow a module the tests import.
    The previous autograded/ and feedback/ copies of this submission are
    removed, so nbgrader grades exactly the new work; grades kept in the
    gradebook (manual grades included) stay.
    """
    destination = course.root / "submitted" / submission.student_id / submission.assignment_id
    if destination.exists():
        shutil.rmtree(destination)
    destination.mkdir(parents=True)
    expected = f"{submission.assignment_id}.ipynb"
    normalised = structure.normalise_file(submission.notebook, release=release)
    nbformat.write(normalised.notebook, destination / expected)
    if submission.timestamp:
        (destination / TIMESTAMP).write_text(f"{submission.timestamp:%Y-%m-%d %H:%M:%S.%f} UTC")
    submission.notes.extend(normalised.repairs)
    if normalised.review:
        submission.notes.append(f"touches the grading machinery, read it: {'; '.join(normalised.review[:5])}")
    answered = _answered(normalised.notebook, release) if normalised.readable else set()
    submission.status = (
        "invalid notebook"
        if not normalised.readable
        else "review"
        if normalised.review or submission.review
        else "repaired"
        if normalised.repairs
        else "unattempted"
        if not answered
        else "ok"
    )
    for stage in ("autograded", "feedback"):
        stale = course.root / stage / submission.student_id / submission.assignment_id
        if stale.exists():
            shutil.rmtree(stale)
    return destination


def write_manifest(rows: list[ManifestRow], path: Path) -> None:
    """Write the manifest CSV (:data:`MANIFEST_COLUMNS`), one row per file of the download (see
    :func:`.roster.write_csv`)."""
    cells = [[row.file, row.status, row.student_id, row.assignment_id, row.note] for row in rows]
    write_csv(path, MANIFEST_COLUMNS, cells)


def manifest_summary(rows: list[ManifestRow], *, limit: int = 10) -> str:
    """The manifest in short: a count per status, then the files not taken or refused (at most ``limit``).

    ``limit=0`` gives the counts alone (``grade --dry-run`` prints them below the whole manifest).
    """
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.status] = counts.get(row.status, 0) + 1
    lines = [f"{len(rows)} file(s): " + ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))]
    flagged = [row for row in rows if row.status in ("not taken", "refused", "copy not graded")]
    lines += [f"  {row.status}: {row.file}: {row.note}" for row in flagged[:limit]]
    if 0 < limit < len(flagged):
        lines.append(f"  ... {len(flagged) - limit} more in the manifest")
    return "\n".join(lines)


def manifest_table(rows: list[ManifestRow]) -> str:
    """The whole manifest as a plain-text table (``grade --dry-run``)."""
    return columns(
        ["file", "status", "student", "assignment", "note"],
        [[row.file, row.status, row.student_id, row.assignment_id, row.note] for row in rows],
    )
