"""Reading a file a user names (a cassette, a script, a config, a secret): a regular file
only, under a size bound, and never a wait.

A named pipe, a device, a socket or a folder is refused before anything is read, and the
file is opened non-blocking (a pipe swapped in after the check cannot hang the read either);
the bytes are read in pieces up to the bound, never a buffer of the whole bound up front.
Every problem is a `FileProblem` with a one-line reason naming the file.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["FileProblem", "read_regular"]

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a device"),
    (stat.S_ISBLK, "a device"),
)
_READ_CHUNK = 1 << 20


class FileProblem(ValueError):
    """A file that cannot be read as asked, with a one-line reason naming it."""


def _not_regular(mode: int) -> str | None:
    """What a file that is not a regular file is ("a named pipe", …), or None."""
    if stat.S_ISREG(mode):
        return None
    return next((kind for test, kind in _KINDS if test(mode)), "another kind of file")


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of the regular file `path`, at most `limit` of them (FileProblem: it
    cannot be read, is not a regular file, or is larger)."""
    raw, too_large = b"", False
    try:
        kind = _not_regular(os.stat(path).st_mode)
        if kind is None:
            flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
            descriptor = os.open(path, flags | getattr(os, "O_CLOEXEC", 0))
            try:
                # It may have been swapped for another kind of file since the stat.
                status = os.fstat(descriptor)
                kind = _not_regular(status.st_mode)
                too_large = status.st_size > limit
                raw = b"" if kind is not None or too_large else _read_bounded(descriptor, limit)
            finally:
                os.close(descriptor)
    except OSError as exc:
        raise FileProblem(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:  # a NUL byte in the path
        raise FileProblem(f"cannot read {path!r}: {exc}") from None
    if kind is not None:
        raise FileProblem(f"{path}: not a regular file ({kind})")
    if too_large or len(raw) > limit:
        raise FileProblem(f"{path}: larger than {limit} bytes")
    return raw


def _read_bounded(descriptor: int, limit: int) -> bytes:
    """At most `limit + 1` bytes of an open file, read in pieces (the file may grow while
    it is read)."""
    pieces: list[bytes] = []
    total = 0
    while total <= limit:
        piece = os.read(descriptor, min(_READ_CHUNK, limit + 1 - total))
        if not piece:
            break
        pieces.append(piece)
        total += len(piece)
    return b"".join(pieces)
