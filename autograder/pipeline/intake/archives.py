"""Every file of a download, archives inside it opened within bounds; the download itself is only read.

A download is a folder or a zip. Zips found inside it (a student's
``work.zip``, a platform's zip inside nbgrader zip_collect's ``archive/``)
are extracted into a scratch folder, never beside the originals, and their
members are listed as if they lay where the zip lies (``alice/01_tensors/work.zip``
holding ``01_tensors.ipynb`` reads as ``alice/01_tensors/01_tensors.ipynb``).
An archive deeper than :data:`MAX_DEPTH`, with more than :data:`MAX_MEMBERS`
members (:data:`MAX_DOWNLOAD_MEMBERS` for the download's own zip), expanding
past :data:`MAX_BYTES` or :data:`MAX_RATIO` times its
compressed size (a zip bomb), holding a member that would land outside its
folder (absolute, ``..``, a link) or that cannot be read (encrypted, corrupt)
is refused as a whole with a note, and the rest of the download goes on; in
the download's own zip such a member is refused alone.
"""

from __future__ import annotations

import os
import shutil
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

MAX_DEPTH = 3
"""Archives inside archives opened, counting the download's own zip as 1."""
MAX_MEMBERS = 5000
"""Members one archive inside the download may hold."""
MAX_DOWNLOAD_MEMBERS = 100_000
"""Members the download's own zip may hold (a platform's zip of a large course)."""
MAX_BYTES = 1 << 30
"""Bytes all archives of one download may expand to (1 GiB)."""
MAX_RATIO = 200
"""Largest uncompressed/compressed size of one member; text notebooks compress about 3-10x."""
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
    """Each archive inside the download refused or holding no file, and each member of the download's zip
    refused, as an Entry of its own (``path``: the archive) whose path says whose it is, and why."""
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
    """Extract one archive (its members then walked), or note why it is refused."""
    target = scratch / str(len(list(scratch.iterdir())))
    try:
        if depth > MAX_DEPTH:
            raise Refused(f"archive nested more than {MAX_DEPTH} deep")
        count = _extract(archive, target, listing, download=not name)
    except Refused as refusal:
        shutil.rmtree(target, ignore_errors=True)
        if not name:
            raise
        listing.opened.append((name, f"archive refused: {refusal}"))
        listing.unopened.append((Entry(name, logical, archive, archives), f"archive refused: {refusal}"))
        return
    if name:
        listing.opened.append((name, f"archive opened ({count} members)"))
    parent = str(PurePosixPath(logical).parent) + "/" if "/" in logical else ""
    _walk(
        target,
        prefix=f"{name}!" if name else "",
        logical=parent,
        archives=(*archives, logical) if logical else archives,
        depth=depth,
        scratch=scratch,
        listing=listing,
    )
    inside = [entry.name for entry in listing.entries] + [entry.name for entry, _ in listing.unopened]
    if name and not any(found.startswith(f"{name}!") for found in inside):
        listing.unopened.append((Entry(name, logical, archive, archives), "the archive holds no file"))


def _extract(archive: Path, target: Path, listing: Listing, *, download: bool) -> int:
    """Extract ``archive`` into ``target`` within the bounds; return its member count.

    In the ``download``'s own zip a member that escapes, is a link or is
    encrypted is refused alone, with a note (and as an Entry of
    ``listing.unopened``, whose path says whose it is); in an archive inside
    the download it refuses the archive.

    Raises:
        Refused: a bound is exceeded, a member escapes or is a link (not in the download's own zip), or the zip
            cannot be read.
    """
    try:
        with zipfile.ZipFile(archive) as handle:
            members, bound = handle.infolist(), MAX_DOWNLOAD_MEMBERS if download else MAX_MEMBERS
            if len(members) > bound:
                raise Refused(f"{len(members)} members, more than {bound}")
            for info in list(members):
                try:
                    _check_member(info)
                except Refused as refusal:
                    if not download:
                        raise
                    members.remove(info)
                    listing.opened.append((info.filename, f"refused: {refusal}"))
                    member = info.filename.replace("\\", "/")
                    listing.unopened.append((Entry(info.filename, member, archive), f"refused: {refusal}"))
            target.mkdir(parents=True)
            for info in members:
                destination = target / info.filename
                if info.is_dir():
                    destination.mkdir(parents=True, exist_ok=True)
                    continue
                destination.parent.mkdir(parents=True, exist_ok=True)
                limit = min(MAX_BYTES - listing.expanded, max(info.compress_size, 1) * MAX_RATIO)
                with handle.open(info) as source, destination.open("wb") as sink:
                    written = 0
                    while chunk := source.read(1 << 20):
                        written += len(chunk)
                        if written > limit:
                            raise Refused(
                                f"{info.filename!r} expands past {limit} bytes (a zip bomb, or too big to grade)"
                            )
                        sink.write(chunk)
                listing.expanded += written
            return len(members)
    except (zipfile.BadZipFile, RuntimeError, NotImplementedError, OSError, EOFError) as error:
        raise Refused(f"cannot be read ({error})") from error


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
