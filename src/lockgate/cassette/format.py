"""The cassette format: one recorded HTTP exchange per file, JSON Lines, versioned.

Line 1, the header (a JSON object):

| field | value |
| --- | --- |
| `lockgate_cassette` | the format version (`1`) |
| `protocol` | the provider that speaks it (`responses`, `chat`, `anthropic`, `gemini`) |
| `base_url` | the server's base URL, without credentials (no `user:password@`, no query) |
| `method`, `path` | the request line (`path` without its query) |
| `request` | the request body (JSON, as sent, credentials never in it) |
| `status` | the response status |
| `headers` | the response headers, `[name, value]` pairs in order, without credentials or cookies |
| `recorded_at` | when it was recorded (UTC, ISO 8601) |
| `verdict` | what lockgate decided (`outcome` `accepted` or `refused`, `kind`, `calls`), or null |

Then one line per transport read, in order: `{"t": SECONDS, "text": "…"}` (the read's bytes
as UTF-8 text) or `{"t": SECONDS, "base64": "…"}` (where they are not UTF-8 on their own,
e.g. a read that ends inside a character); `t` is the read's time since the response head
arrived. A last line may say how the body ended: `{"end": "clean" | "reset" | "timeout", "t":
SECONDS}` (absent: `clean`).

Events are not stored: they are derived from the bytes when a cassette is loaded
(`Cassette.frames`), so that a fault can address an event and a byte alike. What a reader does
not know (a newer version, a field of the wrong type, a line that is not JSON) is a
`CassetteError` with a one-line reason naming the file and line.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..sse import RawFrame, SSEFramer

__all__ = [
    "CASSETTE_SUFFIX",
    "CASSETTE_VERSION",
    "MAX_CASSETTE_BYTES",
    "SECRET_HEADERS",
    "Cassette",
    "CassetteError",
    "Ending",
    "Read",
    "Verdict",
    "dumps",
    "load",
    "load_all",
    "loads",
    "public_headers",
    "read_text",
    "save",
]

CASSETTE_VERSION = 1
CASSETTE_SUFFIX = ".cassette.jsonl"
MAX_CASSETTE_BYTES = 256 * 1024 * 1024  # a file larger than this is not read
Ending = Literal["clean", "reset", "timeout"]
_ENDINGS: tuple[Ending, ...] = ("clean", "reset", "timeout")


class CassetteError(ValueError):
    """A cassette that cannot be read or written, with a one-line reason."""


@dataclass(frozen=True, slots=True)
class Read:
    """One transport read: its time since the response head (seconds) and its bytes."""

    at: float
    data: bytes


@dataclass(frozen=True, slots=True)
class Verdict:
    """What lockgate decided on the exchange when it was recorded."""

    outcome: Literal["accepted", "refused"]
    kind: str | None = None  # the failure kind of a refusal (`invalid_batch`, …)
    calls: int = 0  # the tool calls the decision released (accepted) or that streamed

    def as_json(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "kind": self.kind, "calls": self.calls}


@dataclass(frozen=True, slots=True)
class Cassette:
    """One recorded exchange (see the module docstring)."""

    protocol: str
    base_url: str
    method: str
    path: str
    request: Any
    status: int
    headers: tuple[tuple[str, str], ...]
    recorded_at: str
    reads: tuple[Read, ...]
    verdict: Verdict | None = None
    end: Ending = "clean"
    end_at: float | None = None
    source: str = field(default="", compare=False)  # where it was loaded from

    @property
    def body(self) -> bytes:
        """Every byte of the response body, in order."""
        return b"".join(read.data for read in self.reads)

    def header(self, name: str) -> str | None:
        """The first value of a response header (case-insensitive), or None."""
        wanted = name.lower()
        for key, value in self.headers:
            if key.lower() == wanted:
                return value
        return None

    @property
    def streamed(self) -> bool:
        """Whether the response is an event stream (else a whole body: JSON, an error)."""
        kind = self.header("content-type") or ""
        return kind.split(";", 1)[0].strip().lower() == "text/event-stream"

    def frames(self) -> tuple[list[RawFrame], bytes]:
        """The body's SSE frames (raw bytes and event each) and the bytes after the last
        (none of a clean stream's). The framer has no size bound here: a cassette is read
        whole already."""
        body = self.body
        framer = SSEFramer(max(len(body), 1))
        frames = framer.feed(body)
        frames.extend(framer.finish())
        return frames, framer.tail


def _encode_read(read: Read) -> dict[str, Any]:
    try:
        return {"t": round(read.at, 6), "text": read.data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"t": round(read.at, 6), "base64": base64.b64encode(read.data).decode("ascii")}


def dumps(cassette: Cassette) -> str:
    """The cassette as JSON Lines (every line ends with a newline)."""
    header = {
        "lockgate_cassette": CASSETTE_VERSION,
        "protocol": cassette.protocol,
        "base_url": cassette.base_url,
        "method": cassette.method,
        "path": cassette.path,
        "request": cassette.request,
        "status": cassette.status,
        "headers": [[name, value] for name, value in cassette.headers],
        "recorded_at": cassette.recorded_at,
        "verdict": None if cassette.verdict is None else cassette.verdict.as_json(),
    }
    lines = [json.dumps(header, ensure_ascii=False)]
    lines.extend(json.dumps(_encode_read(read), ensure_ascii=False) for read in cassette.reads)
    if cassette.end != "clean" or cassette.end_at is not None:
        end: dict[str, Any] = {"end": cassette.end}
        if cassette.end_at is not None:
            end["t"] = round(cassette.end_at, 6)
        lines.append(json.dumps(end))
    return "\n".join(lines) + "\n"


def _field(record: Mapping[str, Any], name: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = record.get(name)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise CassetteError(f"{where}: `{name}` is missing or of the wrong type")
    return value


def _time(record: Mapping[str, Any], where: str) -> float:
    value = record.get("t")
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e9:
        raise CassetteError(f"{where}: `t` must be a number of seconds, 0 or more")
    return float(value)


def _verdict(value: object, where: str) -> Verdict | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or value.get("outcome") not in ("accepted", "refused"):
        raise CassetteError(f"{where}: `verdict` must be null or name an outcome")
    kind = value.get("kind")
    calls = value.get("calls", 0)
    if kind is not None and not isinstance(kind, str):
        raise CassetteError(f"{where}: `verdict.kind` must be a string or null")
    if isinstance(calls, bool) or not isinstance(calls, int) or calls < 0:
        raise CassetteError(f"{where}: `verdict.calls` must be a whole number")
    return Verdict(value["outcome"], kind, calls)


def loads(text: str, source: str = "<cassette>") -> Cassette:
    """A cassette from its JSON Lines text; CassetteError (naming `source` and the line)
    for anything else."""
    lines = text.splitlines()
    if not lines or not lines[0].strip():
        raise CassetteError(f"{source}: empty, not a cassette")
    records: list[Mapping[str, Any]] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            raise CassetteError(f"{source}:{number}: not a JSON line") from None
        if not isinstance(record, dict):
            raise CassetteError(f"{source}:{number}: not a JSON object")
        records.append(record)
    header = records[0]
    where = f"{source}:1"
    version = header.get("lockgate_cassette")
    if version != CASSETTE_VERSION:
        if isinstance(version, int) and not isinstance(version, bool):
            raise CassetteError(
                f"{where}: cassette version {version}; this lockgate reads {CASSETTE_VERSION}"
            )
        raise CassetteError(f"{where}: not a lockgate cassette (no `lockgate_cassette` field)")
    headers = _field(header, "headers", list, where)
    pairs: list[tuple[str, str]] = []
    for pair in headers:
        if not (
            isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) for p in pair)
        ):
            raise CassetteError(f"{where}: every header must be a [name, value] pair of strings")
        pairs.append((pair[0], pair[1]))
    status = _field(header, "status", int, where)
    if not 100 <= status <= 599:
        raise CassetteError(f"{where}: status {status} is not an HTTP status")
    reads: list[Read] = []
    end: Ending = "clean"
    end_at: float | None = None
    for number, record in enumerate(records[1:], 2):
        where = f"{source}:{number}"
        if end_at is not None or end != "clean":
            raise CassetteError(f"{where}: a line after the body's end")
        if "end" in record:
            if record["end"] not in _ENDINGS:
                raise CassetteError(f"{where}: `end` must be one of {', '.join(_ENDINGS)}")
            end = record["end"]
            end_at = _time(record, where) if "t" in record else None
            continue
        at = _time(record, where)
        if isinstance(record.get("text"), str):
            try:
                data = record["text"].encode("utf-8")
            except UnicodeEncodeError:
                raise CassetteError(f"{where}: `text` holds a lone surrogate") from None
        elif isinstance(record.get("base64"), str):
            try:
                data = base64.b64decode(record["base64"], validate=True)
            except (binascii.Error, ValueError):
                raise CassetteError(f"{where}: `base64` is not base64") from None
        else:
            raise CassetteError(f"{where}: a read needs `text` or `base64`")
        reads.append(Read(at, data))
    return Cassette(
        protocol=_field(header, "protocol", str, f"{source}:1"),
        base_url=_field(header, "base_url", str, f"{source}:1"),
        method=_field(header, "method", str, f"{source}:1"),
        path=_field(header, "path", str, f"{source}:1"),
        request=header.get("request"),
        status=status,
        headers=tuple(pairs),
        recorded_at=_field(header, "recorded_at", str, f"{source}:1"),
        reads=tuple(reads),
        verdict=_verdict(header.get("verdict"), f"{source}:1"),
        end=end,
        end_at=end_at,
        source=source,
    )


def read_text(path: Path, encoding: str = "utf-8") -> str:
    """A file's text, read under `MAX_CASSETTE_BYTES`; CassetteError with a one-line reason
    naming the file when it cannot be read, is too large or is not text in `encoding`."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_CASSETTE_BYTES + 1)
    except OSError as exc:
        raise CassetteError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:  # a NUL byte in the path
        raise CassetteError(f"cannot read {path!r}: {exc}") from None
    if len(raw) > MAX_CASSETTE_BYTES:
        raise CassetteError(f"{path}: larger than {MAX_CASSETTE_BYTES} bytes")
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError:
        raise CassetteError(f"{path}: not UTF-8 text") from None


def load(path: Path) -> Cassette:
    """One cassette file; CassetteError with a one-line reason when it cannot be read."""
    return loads(read_text(path), str(path))


def load_all(target: Path) -> list[Cassette]:
    """A cassette file, or every `*.cassette.jsonl` in a folder, in name order (a folder
    without any is an error)."""
    if target.is_dir():
        files = sorted(p for p in target.iterdir() if p.name.endswith(CASSETTE_SUFFIX))
        if not files:
            raise CassetteError(f"{target}: no *{CASSETTE_SUFFIX} files in this folder")
        return [load(p) for p in files]
    return [load(target)]


def save(cassette: Cassette, path: Path) -> None:
    """Write a cassette atomically: a temporary file in the same folder, flushed, then
    renamed over `path`, so that no reader ever sees half a cassette."""
    text = dumps(cassette)
    folder = path.parent
    try:
        handle = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed below, renamed after
            "w", encoding="utf-8", dir=folder, prefix=".", suffix=".tmp", delete=False
        )
    except OSError as exc:
        raise CassetteError(f"cannot write in {folder}: {exc.strerror or exc}") from None
    try:
        with handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(handle.name, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(handle.name)
        raise CassetteError(f"cannot write {path}: {exc.strerror or exc}") from None


# Headers a cassette never keeps: credentials and cookies, in either direction.
SECRET_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "x-api-key",
        "api-key",
        "x-goog-api-key",
        "cookie",
        "set-cookie",
        "x-lockgate-token",
    }
)


def public_headers(items: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """Header pairs without credentials or cookies (`SECRET_HEADERS`, any case)."""
    return tuple((name, value) for name, value in items if name.lower() not in SECRET_HEADERS)
