"""nbgrader's filesystem exchange with submissions closed to other students (the hub's students use it through
``ExchangeFactory.submit``).

nbgrader's own submit leaves each submission world-readable (files 0644) and world-writable (folder 0777), hidden
only by its unlisted name. :class:`PrivateSubmit` then closes it to everyone but its student, and opens it for
reading to the group that owns ``inbound/`` (the instructor who releases and collects) with a POSIX ACL: the mode's
group bits cannot do it, as a student is not in that group and so cannot keep the group on what they write.
"""

from __future__ import annotations

import os
import struct

from nbgrader.exchange.default.submit import ExchangeSubmit

ACL_XATTR = "system.posix_acl_access"


def access_acl(mode: int, gid: int, permissions: int) -> bytes:
    """A POSIX access ACL in Linux's extended-attribute format (``acl_ea.h``: version 2, then tag/permissions/id
    entries) that keeps the owner, owning group and others of ``mode`` and adds ``permissions`` (a 3-bit rwx value)
    for group ``gid``; the mask is the owning group's bits with those."""
    entries = [
        (0x01, (mode >> 6) & 7, 0xFFFFFFFF),  # owner
        (0x04, (mode >> 3) & 7, 0xFFFFFFFF),  # owning group
        (0x08, permissions, gid),  # the named group
        (0x10, ((mode >> 3) & 7) | permissions, 0xFFFFFFFF),  # mask
        (0x20, mode & 7, 0xFFFFFFFF),  # others
    ]
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *entry) for entry in entries)


class PrivateSubmit(ExchangeSubmit):
    """nbgrader's submit, then the submission readable by its student and by the group of ``inbound/`` only."""

    def copy_files(self) -> None:
        """Submit as nbgrader does, then close the submission: folders 0700 and files 0600, each with an ACL giving
        the group of ``inbound/`` read (and, for folders, search)."""
        super().copy_files()
        submission = os.path.join(self.inbound_path, self.assignment_filename)
        instructor = os.stat(self.inbound_path).st_gid
        for folder, _, files in os.walk(submission):
            for name in files:
                path = os.path.join(folder, name)
                os.chmod(path, 0o600)
                os.setxattr(path, ACL_XATTR, access_acl(0o600, instructor, 4))
            os.chmod(folder, 0o700)
            os.setxattr(folder, ACL_XATTR, access_acl(0o700, instructor, 5))
