"""What an import yields (`Imported`, `Skipped`, `Sources`) and the parts every importer
shares: the protocols a recorded request path speaks, and one exchange made a cassette (the
URL without credentials or query, the kept headers, the recorded date, one read at t=0)."""

from __future__ import annotations

import datetime
import email.utils
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ..eventstream import MEDIA_TYPE as EVENTSTREAM_MEDIA_TYPE
from .format import Cassette, CassetteError, Read, header_problem
from .format import public_headers as _public_headers

PROTOCOLS = ("responses", "chat", "anthropic", "gemini", "bedrock")
# Headers that describe the transfer, not the stored (decoded, whole) body.
_TRANSFER_HEADERS = frozenset(
    {"content-length", "transfer-encoding", "connection", "keep-alive", "content-encoding"}
)


@dataclass(frozen=True, slots=True)
class Imported:
    """One converted exchange and the file name it is written under."""

    name: str
    cassette: Cassette
    origin: str  # the source file (and interaction) it came from


@dataclass(frozen=True, slots=True)
class Skipped:
    """An exchange not converted, and why."""

    origin: str
    reason: str


@dataclass(frozen=True, slots=True)
class Sources:
    """Everything read from the sources: what converts, and what is skipped."""

    imported: tuple[Imported, ...]
    skipped: tuple[Skipped, ...]


_BEDROCK_PATH = re.compile(
    r"/model/[^/]+/(converse-stream|converse|invoke-with-response-stream|invoke)$"
)


def protocol_of_path(path: str) -> str | None:
    """The protocol a request path speaks, or None (`/chat/completions` → chat,
    `/responses` → responses, `/messages` → anthropic, `:streamGenerateContent` →
    gemini, `/model/{id}/converse-stream` and Bedrock's other runtime paths → bedrock)."""
    path = path.split("?", 1)[0].split("#", 1)[0].rstrip("/")
    if _BEDROCK_PATH.search(path):
        return "bedrock"
    if path.endswith(":streamGenerateContent"):
        return "gemini"
    if path.endswith("/chat/completions"):
        return "chat"
    if path.endswith("/messages"):
        return "anthropic"
    if path.endswith("/responses") or re.search(r"/responses/[^/]+$", path):
        return "responses"
    return None


def _split_url(url: str) -> tuple[str, str]:
    """(base URL without credentials or query, path without query) of a recorded URL."""
    url = url.split("#", 1)[0]
    parts = urlsplit(url)
    if parts.scheme in ("http", "https") and parts.hostname:
        host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
        try:
            port = parts.port
        except ValueError:
            port = None
        netloc = host if port is None else f"{host}:{port}"
        return f"{parts.scheme}://{netloc}", parts.path or "/"
    # Not a URL (a recorder's placeholder such as `<OLLAMA_API_BASE>/chat/completions`).
    return "", url.split("?", 1)[0]


def _recorded_at(headers: Iterable[tuple[str, str]]) -> str:
    """The response's `Date` as UTC ISO 8601, or "" (not known)."""
    for name, value in headers:
        if name.lower() == "date":
            try:
                when = email.utils.parsedate_to_datetime(value)
            except (TypeError, ValueError, IndexError):
                return ""
            if when.tzinfo is None:
                when = when.replace(tzinfo=datetime.UTC)
            return when.astimezone(datetime.UTC).isoformat().replace("+00:00", "Z")
    return ""


def _kept_headers(pairs: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    return _public_headers((n, v) for n, v in pairs if n.lower() not in _TRANSFER_HEADERS)


def _is_event_stream(headers: Iterable[tuple[str, str]]) -> bool:
    """Whether the response streamed: SSE, or the AWS binary event stream (Bedrock)."""
    for name, value in headers:
        if name.lower() == "content-type":
            kind = value.split(";", 1)[0].strip().lower()
            return kind in ("text/event-stream", EVENTSTREAM_MEDIA_TYPE)
    return False


def _request_json(raw: object) -> Any:
    """A recorded request body as JSON (None when absent or not JSON)."""
    if isinstance(raw, Mapping) and "string" in raw:  # an older vcrpy layout
        raw = raw["string"]
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            return None
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):
            return None
    if isinstance(raw, Mapping | list):
        return raw
    return None


def _cassette(
    protocol: str,
    url: str,
    method: str,
    request: Any,
    status: int,
    headers: Sequence[tuple[str, str]],
    body: bytes,
    source: str,
) -> Cassette:
    base_url, path = _split_url(url)
    kept = _kept_headers(headers)
    return Cassette(
        protocol=protocol,
        base_url=base_url,
        method=method.upper(),
        path=path,
        request=request,
        status=status,
        headers=kept,
        recorded_at=_recorded_at(kept),
        reads=(Read(0.0, body),) if body else (),
        source=source,
    )


def _check_headers(pairs: Iterable[tuple[str, str]], where: str) -> None:
    """Every header one a server can send as is (`format.header_problem`), dropped or not:
    a source holding one that is not is a bad source."""
    for name, value in pairs:
        problem = header_problem(name, value)
        if problem is not None:
            raise CassetteError(f"{where}: {problem}")
