"""The cassette format: one recorded HTTP exchange per file, JSON Lines, versioned.

Line 1, the header (a JSON object):

| field | value |
| --- | --- |
| `lockgate_cassette` | the format version (`1`) |
| `protocol` | the provider that speaks it (`responses`, `chat`, `anthropic`, `gemini`, `bedrock`) |
| `base_url` | the server's base URL, without credentials (no `user:password@`, no query) |
| `method`, `path` | the request line (`path` without its query) |
| `request` | the request body (JSON, as sent, credentials never in it) |
| `status` | the response status |
| `headers` | the response headers, `[name, value]` pairs in order, without credentials or cookies |
| `recorded_at` | when it was recorded (UTC, ISO 8601) |
| `verdict` | what lockgate decided (`outcome` `accepted` or `refused`, `kind`, `calls`), or null |

Then one line per transport read, in order: `{"t": SECONDS, "text": "…"}` (the read's bytes
as UTF-8 text) or `{"t": SECONDS, "base64": "…"}` (where they are not UTF-8 on their own,
e.g. a read that ends inside a character, and every read of a binary body: a response whose
content type is `application/vnd.amazon.eventstream`, Bedrock's); `t` is the read's time
since the response head arrived. A reader takes either form for any read, so a cassette
written before binary bodies were recorded reads as it did. A last line may say how the
body ended: `{"end": "clean" | "reset" | "timeout", "t": SECONDS}` (absent: `clean`).

Events are not stored: they are derived from the bytes when a cassette is loaded
(`Cassette.frames`: the SSE frames of a `text/event-stream` body, the binary messages of an
event-stream body, `eventstream_frames`), so that a fault can address an event and a byte
alike. What a reader does not know (a newer version, a field of the wrong type, a line that
is not JSON) is a `CassetteError` with a one-line reason naming the file and line.

Every line ends with a line feed and holds no other character a common line splitter splits
on: JSON escapes the control characters, and the writer also escapes U+0085, U+2028 and
U+2029 (which `str.splitlines` and JavaScript's line terminators split on) and lone
surrogates, as JSON `u` escapes. The reader splits on line feeds alone, so that a file
written before the writer escaped them still reads. A response header must be one a server
can send as is (`header_problem`: a token for a name, no control character but tab in a
value): one that is not, such as a value holding CR or LF that would add a header of its own
when served, is refused when read and never written. The writer refuses whatever the reader
would refuse, and a cassette larger than `MAX_CASSETTE_BYTES`. Only regular files are read
(`read_text`): a named pipe, a device, a socket or a folder is refused before any read, and
the open never waits (it is non-blocking), so nothing hangs on one.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import errno
import json
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..eventstream import MEDIA_TYPE as EVENTSTREAM_MEDIA_TYPE
from ..files import FileProblem, read_regular
from ..sse import RawFrame, SSEFramer

__all__ = [
    "CASSETTE_SUFFIX",
    "CASSETTE_VERSION",
    "MAX_CASSETTE_BYTES",
    "SECRET_HEADERS",
    "Cassette",
    "CassetteError",
    "CassetteExistsError",
    "Ending",
    "Read",
    "Verdict",
    "Wire",
    "dumps",
    "header_problem",
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
Wire = Literal["sse", "eventstream"]
_ENDINGS: tuple[Ending, ...] = ("clean", "reset", "timeout")


class CassetteError(ValueError):
    """A cassette that cannot be read or written, with a one-line reason."""


class CassetteExistsError(CassetteError):
    """`save(..., replace=False)` found a file already at the path (left as it was)."""


# Characters JSON leaves raw in a string that a line splitter may split on (`str.splitlines`,
# JavaScript's line terminators), and lone surrogates (no UTF-8 for them): written escaped.
_SPLITS_OR_NOT_UTF8 = re.compile("[\x85\u2028\u2029\ud800-\udfff]")
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# In a header value: every control character but tab (CR, LF and NUL among them), and lone
# surrogates (a value that is not text).
_NOT_IN_VALUE = re.compile("[\x00-\x08\x0a-\x1f\x7f\ud800-\udfff]")


def _json_line(value: object) -> str:
    """`value` as one JSON line that every line splitter reads as one line."""
    text = json.dumps(value, ensure_ascii=False)
    return _SPLITS_OR_NOT_UTF8.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def header_problem(name: str, value: str) -> str | None:
    """Why a response header cannot be sent as is (its name is not an HTTP token, or its
    value holds a control character other than tab, such as CR, LF or NUL, or a lone
    surrogate: bytes that were not text), or None."""
    shown = repr(name[:60])
    if _TOKEN.fullmatch(name) is None:
        return f"header name {shown} is not an HTTP token"
    if _NOT_IN_VALUE.search(value) is not None:
        return (
            f"header {shown} holds a control character (CR, LF, NUL, ...) or bytes that are "
            "not text in its value"
        )
    return None


def _check_headers(headers: Iterable[tuple[str, str]], where: str) -> None:
    for name, value in headers:
        problem = header_problem(name, value)
        if problem is not None:
            raise CassetteError(f"{where}: {problem}")


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
    def wire(self) -> Wire | None:
        """How the body is framed: `sse` (`text/event-stream`), `eventstream` (the binary
        `application/vnd.amazon.eventstream`), or None (a whole body: JSON, an error)."""
        kind = (self.header("content-type") or "").split(";", 1)[0].strip().lower()
        if kind == "text/event-stream":
            return "sse"
        if kind == EVENTSTREAM_MEDIA_TYPE:
            return "eventstream"
        return None

    @property
    def streamed(self) -> bool:
        """Whether the response is an event stream (else a whole body: JSON, an error)."""
        return self.wire is not None

    def frames(self) -> tuple[list[RawFrame], bytes]:
        """The body's frames (raw bytes and event each: SSE frames, or binary event-stream
        messages) and the bytes after the last (none of a clean stream's). The framer has no
        size bound here: a cassette is read whole already."""
        body = self.body
        if self.wire == "eventstream":
            from .eventstream_frames import frames as eventstream_frames

            return eventstream_frames(body)
        framer = SSEFramer(max(len(body), 1))
        frames = framer.feed(body)
        frames.extend(framer.finish())
        return frames, framer.tail


def _encode_read(read: Read, binary: bool = False) -> dict[str, Any]:
    if binary:
        return {"t": round(read.at, 6), "base64": base64.b64encode(read.data).decode("ascii")}
    try:
        return {"t": round(read.at, 6), "text": read.data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"t": round(read.at, 6), "base64": base64.b64encode(read.data).decode("ascii")}


def dumps(cassette: Cassette) -> str:
    """The cassette as JSON Lines (every line ends with a newline, and holds no other
    character a line splitter splits on); CassetteError for a header `header_problem`
    refuses."""
    return _dumps(cassette, cassette.source or "<cassette>")


def _dumps(cassette: Cassette, where: str) -> str:
    _check_headers(cassette.headers, where)
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
    lines = [_json_line(header)]
    binary = cassette.wire == "eventstream"
    lines.extend(_json_line(_encode_read(read, binary)) for read in cassette.reads)
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
    for anything else. Lines are split on line feeds alone (see the module docstring)."""
    lines = text.split("\n")
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
    _check_headers(pairs, where)
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
    """A regular file's text, read under `MAX_CASSETTE_BYTES` (`files.read_regular`: a
    named pipe, a device, a socket or a folder is refused without blocking); CassetteError
    with a one-line reason naming the file when it cannot be read, is not a regular file, is
    too large or is not text in `encoding`."""
    try:
        raw = read_regular(path, MAX_CASSETTE_BYTES)
    except FileProblem as exc:
        raise CassetteError(str(exc)) from None
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError:
        raise CassetteError(f"{path}: not UTF-8 text") from None


def load(path: Path) -> Cassette:
    """One cassette file; CassetteError with a one-line reason when it cannot be read."""
    return loads(read_text(path), str(path))


def load_all(target: Path) -> list[Cassette]:
    """A cassette file, or every `*.cassette.jsonl` in a folder, in name order (a folder
    without any is an error; so is one of them that is not a regular file)."""
    if target.is_dir():
        files = sorted(p for p in target.iterdir() if p.name.endswith(CASSETTE_SUFFIX))
        if not files:
            raise CassetteError(f"{target}: no *{CASSETTE_SUFFIX} files in this folder")
        return [load(p) for p in files]
    return [load(target)]


def save(cassette: Cassette, path: Path, *, replace: bool = True) -> None:
    """Write a cassette atomically: a temporary file in the same folder, flushed, then
    renamed over `path` (`replace`) or linked to `path` only if nothing is there (else
    `CassetteExistsError`, the file there left as it was), so that no reader ever sees half
    a cassette. CassetteError for a cassette no reader would read back (see `dumps`, and
    `MAX_CASSETTE_BYTES`)."""
    data = _dumps(cassette, str(path)).encode("utf-8")
    if len(data) > MAX_CASSETTE_BYTES:
        raise CassetteError(
            f"cannot write {path}: {len(data)} bytes, more than the {MAX_CASSETTE_BYTES} a "
            "cassette may hold"
        )
    folder = path.parent
    try:
        handle = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed below, renamed after
            "wb", dir=folder, prefix=".", suffix=".tmp", delete=False
        )
    except OSError as exc:
        raise CassetteError(f"cannot write in {folder}: {exc.strerror or exc}") from None
    try:
        with handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if replace:
            os.replace(handle.name, path)
        else:
            _place_new(Path(handle.name), path)
    except FileExistsError:
        raise CassetteExistsError(f"{path}: already exists (not overwritten)") from None
    except OSError as exc:
        raise CassetteError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(handle.name)


def _place_new(written: Path, path: Path) -> None:
    """Give the finished file `written` the name `path` unless `path` exists
    (FileExistsError): a hard link, which fails when the name is taken; where the file
    system has none, the name is taken first with an exclusive create, then replaced."""
    try:
        os.link(written, path)
        return
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(descriptor)
    try:
        os.replace(written, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise


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
