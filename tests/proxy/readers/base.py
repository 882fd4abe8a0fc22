"""What every reader shares: a read event, a reader and the protocols it reads, and the line
and UTF-8 rules more than one of them follows."""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

Chunks = Sequence[bytes]


@dataclass(frozen=True, slots=True)
class ReadEvent:
    """One event as a reader dispatched it: its `event:` name (None: the frame named none,
    or the reader does not read names) and its data."""

    event: str | None
    data: str


@dataclass(frozen=True, slots=True)
class Reader:
    """A client's SSE rules. `names`: it reads `event:` names (a data-line reader reads only
    `data:` lines, each on its own); `protocols`: the protocols it is a client of;
    `compared`: its reading of an SSE body must be lockgate's (not so for a reader of JSON
    answers, which reads nothing of SSE)."""

    name: str
    read: Callable[[Chunks], list[ReadEvent]]
    names: bool
    protocols: frozenset[str]
    compared: bool = True


_ALL = frozenset({"responses", "chat", "anthropic", "gemini"})
_GEMINI = frozenset({"gemini"})
_LINE_END = re.compile(r"\r\n|\r|\n")
_NEWLINE_CHAR = re.compile(r"[\r\n]")
_NEWLINE_BYTE = re.compile(rb"[\r\n]")


def _utf8(errors: str = "replace") -> codecs.IncrementalDecoder:
    return codecs.getincrementaldecoder("utf-8")(errors)


def _same_json(value: object) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)
