"""Recorded response bodies decoded under one import's bound: `BodyBudget` (what is left of
`MAX_IMPORT_BYTES`) and the content codings undone (gzip, deflate) piece by piece, never past
what is left of it."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from .format import MAX_CASSETTE_BYTES, CassetteError

# The response bodies one import holds in all, decoded (a cassette larger than this could
# not be read back anyway).
MAX_IMPORT_BYTES = MAX_CASSETTE_BYTES
_INFLATE_PIECE = 1 << 16  # the most a decompressor writes before its output is counted


class BodyBudget:
    """What is left of `MAX_IMPORT_BYTES` for the decoded response bodies of one import."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = MAX_IMPORT_BYTES if limit is None else limit
        self.left = self.limit

    def over(self, where: str) -> CassetteError:
        """The one-line error for a body that does not fit in what is left."""
        if self.left == self.limit:
            return CassetteError(
                f"{where}: the response body decodes past {self.limit} bytes, the most one "
                "import holds"
            )
        return CassetteError(
            f"{where}: the response bodies decode past {self.limit} bytes in all, the most "
            "one import holds (import fewer sources at a time)"
        )

    def take(self, size: int, where: str) -> None:
        """Count a decoded body of `size` bytes; CassetteError past the bound."""
        if size > self.left:
            raise self.over(where)
        self.left -= size


def _decoded(
    body: bytes, headers: Sequence[tuple[str, str]], where: str, budget: BodyBudget
) -> bytes | str:
    """The body without its content coding (gzip, deflate), or the reason it cannot be.
    Each coding is undone piece by piece, never past what is left of `budget`
    (CassetteError); the caller counts what is kept."""
    try:
        return _undo_codings(body, headers, where, budget.left)
    except _PastLimit:
        raise budget.over(where) from None


def _undo_codings(
    body: bytes, headers: Sequence[tuple[str, str]], where: str, limit: int
) -> bytes | str:
    codings = [
        part.strip().lower()
        for name, value in headers
        if name.lower() == "content-encoding"
        for part in value.split(",")
        if part.strip()
    ]
    for coding in reversed(codings):
        if coding == "identity":
            continue
        if coding in ("gzip", "x-gzip"):
            body = _gunzip(body, where, limit)
        elif coding == "deflate":
            try:
                body = _inflate(body, zlib.MAX_WBITS, limit)
            except zlib.error:
                try:
                    body = _inflate(body, -zlib.MAX_WBITS, limit)
                except zlib.error:
                    raise CassetteError(
                        f"{where}: the body says content-encoding deflate but is not"
                    ) from None
        else:
            return f"content-encoding {coding} is not one this importer decodes"
    return body


class _PastLimit(Exception):
    """A decompressor's output went past its limit."""


def _inflate_member(data: bytes, wbits: int, limit: int, out: bytearray) -> bytes:
    """Decompress one zlib, raw deflate or gzip stream at the start of `data` into `out`,
    `_INFLATE_PIECE` bytes at a time, never past `limit` bytes in `out` (`_PastLimit`);
    zlib.error when it is not one, or is cut short. Returns the bytes after it."""
    decompressor = zlib.decompressobj(wbits)
    pending = data
    while not decompressor.eof:
        room = limit + 1 - len(out)
        piece = decompressor.decompress(pending, min(_INFLATE_PIECE, room))
        out += piece
        if len(out) > limit:
            raise _PastLimit
        pending = decompressor.unconsumed_tail
        if not piece and not pending:
            raise zlib.error("the compressed stream is cut short")
    return decompressor.unused_data


def _inflate(data: bytes, wbits: int, limit: int) -> bytes:
    """One zlib or raw deflate stream, decompressed under `limit` (what follows it is
    ignored, as `zlib.decompress` ignores it)."""
    out = bytearray()
    _inflate_member(data, wbits, limit, out)
    return bytes(out)


def _gunzip(data: bytes, where: str, limit: int) -> bytes:
    """gzip (one member or several, NUL padding between them allowed, as `gzip.decompress`
    reads it), decompressed under `limit`; CassetteError when it is not gzip, `_PastLimit`
    past the limit."""
    out = bytearray()
    rest = data
    try:
        while rest:
            rest = _inflate_member(rest, zlib.MAX_WBITS | 16, limit, out).lstrip(b"\0")
    except zlib.error:
        raise CassetteError(
            f"{where}: the body says content-encoding gzip but is not gzip"
        ) from None
    return bytes(out)
