"""Recorded traffic as a fault suite: cassettes (one recorded exchange per JSON Lines file,
`format.py`), written by `lockgate run --record` and `lockgate proxy --record`, served by
`lockgate serve --cassette` with faults overlaid, and judged by `lockgate lab --cassettes`."""

from __future__ import annotations

from .format import (
    CASSETTE_SUFFIX,
    CASSETTE_VERSION,
    SECRET_HEADERS,
    Cassette,
    CassetteError,
    Read,
    Verdict,
    dumps,
    load,
    load_all,
    loads,
    public_headers,
    save,
)

__all__ = [
    "CASSETTE_SUFFIX",
    "CASSETTE_VERSION",
    "SECRET_HEADERS",
    "Cassette",
    "CassetteError",
    "Read",
    "Verdict",
    "dumps",
    "load",
    "load_all",
    "loads",
    "public_headers",
    "save",
]
