"""Every file of a download, archives inside it opened within bounds; the download itself is only read.

A download is a folder or a zip. Zips found inside it (a student's
``work.zip``, a platform's zip inside nbgrader zip_collect's ``archive/``)
are extracted into a scratch folder, never beside the originals, and their
members are listed as if they lay where the zip lies (``alice/01_tensors/work.zip``
holding ``01_tensors.ipynb`` reads as ``alice/01_tensors/01_tensors.ipynb``).

Bounds are on what is extracted, counted as it is written: a member past
:data:`MAX_MEMBER_BYTES`, or taking the download's archives together past
:data:`MAX_BYTES` (a zip bomb, or too big to grade), whatever it compressed
to (an honest log of repeated lines compresses a thousandfold). A member that
breaks a bound, would land outside its folder (absolute, ``..``, a link),
cannot be read (encrypted, corrupt) or cannot be written (a name longer than
the file system allows, a file where a folder of that name is) is refused
with a note. In the download's own zip, whose members belong to many
students, that member alone is refused, and the rest is read. An archive
inside the download belongs to one student (the one its place names): it is
refused as a whole, as is one deeper than :data:`MAX_DEPTH` or with more than
:data:`MAX_MEMBERS` members, and the rest of the download goes on. Only a
download's zip that cannot be read at all, or holds more than
:data:`MAX_DOWNLOAD_MEMBERS` members, refuses the download.

A zip may hold two members of one name (zip tools that add a file again
append it). Extracting it leaves the later one (``unzip -o``, Python's
``extractall``, file managers that overwrite): that one is read, as an
instructor unzipping the download would see it; each earlier one is
extracted apart, so nothing is overwritten, and listed as not taken with that
rule, under its name and ``[member N of M so named]``.
"""

from __future__ import annotations

import contextlib
import lzma
import os
import shutil
import stat
import zipfile
import zlib
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

MAX_DEPTH = 3
"""Archives inside archives opened, counting the download's own zip as 1."""
MAX_MEMBERS = 5000
"""Members one archive inside the download may hold."""
MAX_DOWNLOAD_MEMBERS = 100_000
"""Members the download's own zip may hold (a platform's zip of a large course)."""
MAX_BYTES = 1 << 30
"""Bytes all archives of one download may expand to (1 GiB), counted as they are extracted."""
MAX_MEMBER_BYTES = 256 << 20
"""Bytes one member may expand to (256 MiB), counted as it is extracted; a notebook with plots is a few MiB."""
LEFTOVERS = {".ipynb_checkpoints", "__MACOSX", "__pycache__", ".DS_Store", "Thumbs.db"}
"""Names editors, OSes and zip tools add: listed in the manifest as leftovers, never graded."""


@dataclass(frozen=True)
class Entry:
    """One file of the download."""

    name: str
    """As the manifest shows it: its path in the download, ``!`` after each archive it came out of."""
    logical: str
    """POSIX path the shapes match: archive members placed where their archive lies."""
    path: Path
    """Where its bytes can be read: the original file, or its extracted copy in the scratch folder."""
    archives: tuple[str, ...] = ()
    """Logical paths of the archives it came out of, outermost first."""


@dataclass
class Listing:
    """The files of a download and what was done with its archives, links and leftovers."""

    entries: list[Entry] = field(default_factory=list)
    """Files to map to students."""
    opened: list[tuple[str, str]] = field(default_factory=list)
    """(name, note) of each archive opened or refused, each member refused, each link or leftover not followed."""
    unopened: list[tuple[Entry, str]] = field(default_factory=list)
    """Each archive inside the download refused or holding no file, each member of the download's zip refused
    (``path``: the archive), and each earlier member of a name a later one takes (``path``: its copy extracted
    apart), as an Entry of its own whose path says whose it is, and why."""
    expanded: int = 0
    """Bytes written to the scratch folder so far."""


class Refused(Exception):
    """An archive that is not opened (the message says why)."""


def is_archive(path: Path) -> bool:
    """A ``.zip`` file that is a readable zip."""
    return path.suffix.lower() == ".zip" and path.is_file() and zipfile.is_zipfile(path)


def list_download(download: Path, scratch: Path) -> Listing:
    """Every file under ``download`` (a folder, or a zip whose members are then the download's files).

    Nothing under ``download`` is written; archives are extracted under ``scratch``.
    """
    listing = Listing()
    if download.is_dir():
        _walk(download, prefix="", logical="", archives=(), depth=0, scratch=scratch, listing=listing)
    else:
        _open(download, name="", logical="", archives=(), depth=1, scratch=scratch, listing=listing)
    return listing


def _walk(
    folder: Path,
    *,
    prefix: str,
    logical: str,
    archives: tuple[str, ...],
    depth: int,
    scratch: Path,
    listing: Listing,
) -> None:
    for path in sorted(folder.iterdir()):
        name, where = f"{prefix}{path.name}", f"{logical}{path.name}"
        if path.is_symlink():
            listing.opened.append((name, "a link: not followed"))
        elif path.name in LEFTOVERS:
            listing.opened.append((name, "left by an editor, OS or zip tool: not graded"))
        elif path.is_dir():
            _walk(
                path,
                prefix=f"{name}/",
                logical=f"{where}/",
                archives=archives,
                depth=depth,
                scratch=scratch,
                listing=listing,
            )
        elif is_archive(path):
            _open(path, name=name, logical=where, archives=archives, depth=depth + 1, scratch=scratch, listing=listing)
        else:
            listing.entries.append(Entry(name=name, logical=where, path=path, archives=archives))


def _open(
    archive: Path, *, name: str, logical: str, archives: tuple[str, ...], depth: int, scratch: Path, listing: Listing
) -> None:
    """Extract one archive (its members then walked), or note why it is refused.

    Raises:
        Refused: the download's own zip (``name`` empty) cannot be read, or holds too many members.
    """
    target = scratch / str(len(list(scratch.iterdir())))
    whole = Entry(name, logical, archive, archives)
    try:
        if depth > MAX_DEPTH:
            raise Refused(f"archive nested more than {MAX_DEPTH} deep")
        count = _extract(whole, target, listing)
    except Refused as refusal:
        shutil.rmtree(target, ignore_errors=True)
        shutil.rmtree(_apart(target), ignore_errors=True)
        if not name:
            raise
        listing.opened.append((name, f"archive refused: {refusal}"))
        listing.unopened.append((whole, f"archive refused: {refusal}"))
        return
    if name:
        listing.opened.append((name, f"archive opened ({count} members)"))
    _walk(
        target,
        prefix=f"{name}!" if name else "",
        logical=_parent(logical),
        archives=(*archives, logical) if logical else archives,
        depth=depth,
        scratch=scratch,
        listing=listing,
    )
    inside = [entry.name for entry in listing.entries] + [entry.name for entry, _ in listing.unopened]
    if name and not any(found.startswith(f"{name}!") for found in inside):
        listing.unopened.append((whole, "the archive holds no file"))


REPLACED = (
    "not taken: a later member of the same name is what extracting the archive leaves (unzip tools overwrite), "
    "so that one is read; this one was extracted apart"
)
"""The note of each earlier member of a name that a later member of the same archive takes."""


def _extract(archive: Entry, target: Path, listing: Listing) -> int:
    """Extract ``archive`` (the download's own zip where its name is empty) into ``target`` within the bounds;
    return how many of its members were extracted.

    Each earlier member of a name a later one takes is extracted apart and listed (:data:`REPLACED`). In the
    download's own zip a member that breaks a bound, escapes, is a link, or cannot be read or written is refused
    alone, with a note (and as an Entry of ``listing.unopened``, whose path says whose it is); in an archive
    inside the download it refuses the archive.

    Raises:
        Refused: the zip cannot be read or holds too many members; in an archive inside the download, a member
            refused.
    """
    download = not archive.name
    try:
        handle = zipfile.ZipFile(archive.path)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as error:
        raise Refused(f"cannot be read ({error})") from error
    with handle:
        members, bound = handle.infolist(), MAX_DOWNLOAD_MEMBERS if download else MAX_MEMBERS
        if len(members) > bound:
            raise Refused(f"{len(members)} members, more than {bound}")
        target.mkdir(parents=True)
        named = Counter(_place(info) for info in members if not info.is_dir())
        seen: Counter[str] = Counter()
        extracted, replaced = 0, []
        for info in members:
            place = _place(info)
            seen[place] += not info.is_dir()
            earlier = not info.is_dir() and seen[place] < named[place]
            shown = f"{info.filename} [member {seen[place]} of {named[place]} so named]" if earlier else info.filename
            try:
                _check_member(info)
                if info.is_dir():
                    with contextlib.suppress(OSError):  # a folder is no file: what fails to go in it is refused
                        (target / info.filename).mkdir(parents=True, exist_ok=True)
                elif earlier:
                    apart = _apart(target) / str(seen[place]) / info.filename
                    _member(handle, info, apart, listing)
                    replaced.append(replace(_inside(archive, info, shown), path=apart))
                else:
                    _member(handle, info, target / info.filename, listing)
                extracted += 1
            except Refused as refusal:
                if not download:
                    raise
                listing.opened.append((shown, f"refused: {refusal}"))
                listing.unopened.append((_inside(archive, info, shown), f"refused: {refusal}"))
        listing.opened += [(entry.name, REPLACED) for entry in replaced]
        listing.unopened += [(entry, REPLACED) for entry in replaced]
        return extracted


def _place(info: zipfile.ZipInfo) -> str:
    """Where a member lands in its folder, as a key: ``a//b``, ``./a/b`` and ``a/b`` land in one place."""
    return str(PurePosixPath(info.filename))


def _apart(target: Path) -> Path:
    """Where the earlier members of a name another member takes are extracted, beside ``target``."""
    return target.with_name(f"{target.name}-replaced")


def _inside(archive: Entry, info: zipfile.ZipInfo, shown: str) -> Entry:
    """A member of ``archive`` as listed (``shown`` as its name), its path the archive's."""
    member = info.filename.replace("\\", "/")
    if not archive.name:  # the download's own zip: its members are the download's files
        return Entry(shown, member, archive.path)
    logical = f"{_parent(archive.logical)}{member}"
    return Entry(f"{archive.name}!{shown}", logical, archive.path, (*archive.archives, archive.logical))


def _parent(logical: str) -> str:
    """The folder an archive at ``logical`` lies in, as the prefix of its members' logical paths ('' at the top)."""
    return str(PurePosixPath(logical).parent) + "/" if "/" in logical else ""


UNREADABLE = (zipfile.BadZipFile, zlib.error, lzma.LZMAError, NotImplementedError, RuntimeError, EOFError, ValueError)
"""What reading a corrupt, encrypted or oddly compressed member raises (besides OSError)."""


def _member(handle: zipfile.ZipFile, info: zipfile.ZipInfo, destination: Path, listing: Listing) -> None:
    """Extract one member to ``destination``, its bytes counted as they are written (``listing.expanded``).

    Raises:
        Refused: it expands past :data:`MAX_MEMBER_BYTES` or takes the download past :data:`MAX_BYTES`, or it
            cannot be read or written (a name too long, a file where a folder of its path is); what was written
            of it is removed.
    """
    limit = min(MAX_MEMBER_BYTES, MAX_BYTES - listing.expanded)
    written = 0
    try:
        destination.parent.mkdir(parents=True, exist_ok=True)
        with handle.open(info) as source, destination.open("wb") as sink:
            while chunk := source.read(1 << 20):
                written += len(chunk)
                if written > limit:
                    if limit < MAX_MEMBER_BYTES:
                        raise Refused(f"{info.filename!r} takes the download past {MAX_BYTES} bytes extracted")
                    raise Refused(f"{info.filename!r} expands past {limit} bytes (a zip bomb, or too big to grade)")
                sink.write(chunk)
    except (Refused, OSError, *UNREADABLE) as error:
        with contextlib.suppress(OSError):  # a name too long to write was never written
            if destination.is_file():
                destination.unlink()
        if isinstance(error, Refused):
            raise
        reason = error.strerror if isinstance(error, OSError) and error.strerror else error  # no scratch path
        raise Refused(f"member {info.filename!r} cannot be extracted ({reason})") from error
    listing.expanded += written


def _check_member(info: zipfile.ZipInfo) -> None:
    path = PurePosixPath(info.filename.replace("\\", "/"))
    if path.is_absolute() or ".." in path.parts or (path.parts and ":" in path.parts[0]):
        raise Refused(f"member {info.filename!r} would be extracted outside its folder")
    if stat.S_ISLNK(info.external_attr >> 16):
        raise Refused(f"member {info.filename!r} is a link")
    if info.flag_bits & 0x1:
        raise Refused(f"member {info.filename!r} is encrypted")


def under(path: Path, folder: Path) -> bool:
    """Whether ``path`` is ``folder`` or inside it, links resolved."""
    resolved, base = Path(os.path.realpath(path)), Path(os.path.realpath(folder))
    return resolved == base or base in resolved.parents
