"""Cassettes from other recorders: the real-streams JSON files (one exchange each) and
vcrpy / pytest-recording cassettes (YAML or JSON, one exchange per interaction).

Every source is read and converted before anything is written (`import_sources`), so that a
bad file costs nothing but its one-line `CassetteError`; `write_imported` then saves each
cassette atomically (`format.save`), and never over a file already there: when any of the
names is taken, nothing is written (the names come from the sources, so a taken name is
almost always the same exchange imported before; a renamed copy would be judged twice).
Their recorded read boundaries are not known: each body is one read at t=0. The verdict is
null (lockgate did not decide on them when they were recorded): `lockgate lab --cassettes`
takes the unfaulted run as the reference.

What one import holds is bounded: every response body, once decoded (gzip, deflate,
base64, YAML `!!binary`), counts against `MAX_IMPORT_BYTES` for the whole import, and a
compressed body is decompressed piece by piece under what is left of it, so that a small
compressed file that would decompress to gigabytes costs no more than the bound before its
one-line `CassetteError`. Only regular files are read (`format.read_text`): a named pipe, a
device, a socket or a folder given as a source (or named like one in a source folder) is a
one-line error, never a hang. Header names and values are checked as `format.load` checks
them (`format.header_problem`): a value holding CR or LF is a bad source.

What is dropped: credentials and cookies (`public_headers`), the query of the URL (where
keys travel), and the headers that no longer describe the stored body (`content-encoding`
once a gzip or deflate body is decompressed, `content-length`, `transfer-encoding`,
`connection`, `keep-alive`). What is skipped, each with a reason: Bedrock recordings (a
binary event stream lockgate does not speak), interactions of no protocol lockgate speaks
(`GET /models`, embeddings, …), and successful responses that are not event streams.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import email.utils
import json
import re
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .format import (
    CASSETTE_SUFFIX,
    MAX_CASSETTE_BYTES,
    Cassette,
    CassetteError,
    CassetteExistsError,
    Read,
    header_problem,
    read_text,
    save,
)
from .format import public_headers as _public_headers

__all__ = [
    "MAX_IMPORT_BYTES",
    "PROTOCOLS",
    "SOURCE_SUFFIXES",
    "BodyBudget",
    "Imported",
    "Skipped",
    "Sources",
    "import_file",
    "import_sources",
    "protocol_of_path",
    "source_files",
    "write_imported",
]

PROTOCOLS = ("responses", "chat", "anthropic", "gemini")
SOURCE_SUFFIXES = (".json", ".yaml", ".yml")
# Headers that describe the transfer, not the stored (decoded, whole) body.
_TRANSFER_HEADERS = frozenset(
    {"content-length", "transfer-encoding", "connection", "keep-alive", "content-encoding"}
)
_WHAT_URL = re.compile(r"\((?:POST|GET|PUT) (\S+?)\)")
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


def protocol_of_path(path: str) -> str | None:
    """The protocol a request path speaks, or None (`/chat/completions` → chat,
    `/responses` → responses, `/messages` → anthropic, `:streamGenerateContent` →
    gemini)."""
    path = path.split("?", 1)[0].split("#", 1)[0].rstrip("/")
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
    for name, value in headers:
        if name.lower() == "content-type":
            return value.split(";", 1)[0].strip().lower() == "text/event-stream"
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


# --- the real-streams JSON files --------------------------------------------------------------

_DEFAULT_PATHS = {
    "responses": "/v1/responses",
    "chat": "/v1/chat/completions",
    "anthropic": "/v1/messages",
    "gemini": "/v1beta/models/model:streamGenerateContent",
}


def _real_stream(
    document: Mapping[str, Any], where: str, stem: str, protocol: str | None, budget: BodyBudget
) -> Sources:
    recorded = document.get("protocol")
    if not isinstance(recorded, str):
        raise CassetteError(f"{where}: `protocol` is missing or not a string")
    if recorded == "bedrock":
        reason = "a Bedrock ConverseStream recording: not a protocol lockgate speaks"
        return Sources((), (Skipped(where, reason),))
    if recorded not in PROTOCOLS:
        return Sources((), (Skipped(where, f"protocol {recorded!r} is not one lockgate speaks"),))
    if protocol is not None and recorded != protocol:
        return Sources((), (Skipped(where, f"a {recorded} recording, not --protocol {protocol}"),))
    status = document.get("status")
    if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
        raise CassetteError(f"{where}: `status` is not an HTTP status")
    body = document.get("body")
    if not isinstance(body, str):
        raise CassetteError(f"{where}: `body` is missing or not a string")
    headers = document.get("headers") or {}
    if not isinstance(headers, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        raise CassetteError(f"{where}: `headers` must be an object of strings")
    _check_headers(headers.items(), where)
    source = document.get("source")
    what = source.get("what") if isinstance(source, Mapping) else None
    found = _WHAT_URL.search(what) if isinstance(what, str) else None
    method = "POST"
    url = _DEFAULT_PATHS[recorded]
    if found is not None:
        url = found.group(1)
        method = found.group(0)[1:].split(" ", 1)[0]
    try:
        data = body.encode("utf-8")
    except UnicodeEncodeError:
        raise CassetteError(f"{where}: `body` holds a lone surrogate") from None
    budget.take(len(data), where)
    cassette = _cassette(
        recorded,
        url,
        method,
        document.get("request"),
        status,
        list(headers.items()),
        data,
        where,
    )
    return Sources((Imported(stem + CASSETTE_SUFFIX, cassette, where),), ())


# --- vcrpy / pytest-recording ---------------------------------------------------------------


def _yaml(text: str, where: str) -> object:
    try:
        import yaml
    except ImportError:  # pragma: no cover - a dependency of lockgate
        raise CassetteError(f"{where}: reading YAML cassettes needs PyYAML") from None

    class _Loader(yaml.SafeLoader):
        """The safe loader (which already reads `!!binary` as bytes), also reading the
        Python tags some vcrpy versions write for bytes and text (`!!python/bytes`,
        `!!python/unicode`, `!!python/str`) as data, never as objects. Aliases are refused:
        recorders write none, and a few kilobytes of nested aliases expand without bound."""

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.events.AliasEvent):
                event = self.peek_event()  # type: ignore[no-untyped-call]
                raise yaml.composer.ComposerError(
                    None, None, "YAML aliases are not read", event.start_mark
                )
            return super().compose_node(parent, index)

    def _bytes(loader: yaml.SafeLoader, node: yaml.Node) -> bytes:
        value = loader.construct_scalar(node)  # type: ignore[arg-type]
        try:
            return base64.b64decode(str(value))
        except (binascii.Error, ValueError):
            raise yaml.constructor.ConstructorError(
                None, None, "!!python/bytes is not base64", node.start_mark
            ) from None

    def _str(loader: yaml.SafeLoader, node: yaml.Node) -> str:
        return str(loader.construct_scalar(node))  # type: ignore[arg-type]

    _Loader.add_constructor("tag:yaml.org,2002:python/bytes", _bytes)
    _Loader.add_constructor("tag:yaml.org,2002:python/unicode", _str)
    _Loader.add_constructor("tag:yaml.org,2002:python/str", _str)
    try:
        return yaml.load(text, Loader=_Loader)  # a SafeLoader subclass: data, never objects
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise CassetteError(f"{where}{line}: not a YAML cassette ({problem})") from None
    except RecursionError:
        raise CassetteError(f"{where}: nested too deeply") from None


def _header_pairs(raw: object, where: str) -> list[tuple[str, str]]:
    """vcrpy headers (`{name: [value, …]}` or `{name: value}`) as pairs in order."""
    if raw is None:
        return []
    if not isinstance(raw, Mapping):
        raise CassetteError(f"{where}: `headers` is not a mapping")
    pairs: list[tuple[str, str]] = []
    for name, values in raw.items():
        for value in values if isinstance(values, list) else [values]:
            if not isinstance(name, str) or isinstance(value, Mapping | list):
                raise CassetteError(f"{where}: header {name!r} is not text")
            pairs.append((name, str(value)))
    _check_headers(pairs, where)
    return pairs


def _check_headers(pairs: Iterable[tuple[str, str]], where: str) -> None:
    """Every header one a server can send as is (`format.header_problem`), dropped or not:
    a source holding one that is not is a bad source."""
    for name, value in pairs:
        problem = header_problem(name, value)
        if problem is not None:
            raise CassetteError(f"{where}: {problem}")


def _body_bytes(raw: object, where: str) -> bytes:
    if isinstance(raw, Mapping):
        raw = raw.get("string", b"")
    if raw is None:
        return b""
    if isinstance(raw, bytes):
        return raw
    if isinstance(raw, str):
        try:
            return raw.encode("utf-8")
        except UnicodeEncodeError:
            raise CassetteError(f"{where}: the body holds a lone surrogate") from None
    raise CassetteError(f"{where}: the response body is neither text nor `!!binary`")


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


def _status(raw: object, where: str) -> int:
    code = raw.get("code") if isinstance(raw, Mapping) else raw
    if isinstance(code, str) and code.isdigit():
        code = int(code)
    if isinstance(code, bool) or not isinstance(code, int) or not 100 <= code <= 599:
        raise CassetteError(f"{where}: the response status is not an HTTP status")
    return code


def _interaction(
    raw: object, where: str, name: str, protocol: str | None, budget: BodyBudget
) -> Imported | Skipped:
    if not isinstance(raw, Mapping):
        raise CassetteError(f"{where}: an interaction is not a mapping")
    request, response = raw.get("request"), raw.get("response")
    if not isinstance(request, Mapping) or not isinstance(response, Mapping):
        raise CassetteError(f"{where}: an interaction needs a `request` and a `response`")
    uri = request.get("uri")
    method = request.get("method", "POST")
    if not isinstance(uri, str) or not isinstance(method, str):
        raise CassetteError(f"{where}: the request needs a `uri` and a `method`")
    status = _status(response.get("status", response.get("status_code")), where)
    headers = _header_pairs(response.get("headers"), where)
    body = _body_bytes(response.get("body"), where)
    spoken = protocol_of_path(_split_url(uri)[1])
    if spoken is None and protocol is None:
        path = _split_url(uri)[1]
        return Skipped(
            where,
            f"{method.upper()} {path} is no protocol lockgate speaks "
            "(give --protocol to import it as one)",
        )
    chosen = protocol or spoken
    assert chosen is not None
    if method.upper() != "POST":
        return Skipped(where, f"a {method.upper()} request, not a model request")
    decoded = _decoded(body, headers, where, budget)
    if isinstance(decoded, str):
        return Skipped(where, decoded)
    if status < 400 and not _is_event_stream(headers):
        return Skipped(where, f"HTTP {status} without an event stream (not a streamed response)")
    budget.take(len(decoded), where)
    cassette = _cassette(
        chosen, uri, method, _request_json(request.get("body")), status, headers, decoded, where
    )
    return Imported(name, cassette, where)


def _vcr(
    document: Mapping[str, Any], where: str, stem: str, protocol: str | None, budget: BodyBudget
) -> Sources:
    interactions = document.get("interactions")
    if not isinstance(interactions, list):
        raise CassetteError(f"{where}: `interactions` is not a list")
    imported: list[Imported] = []
    skipped: list[Skipped] = []
    for index, raw in enumerate(interactions):
        name = f"{stem}-{index}{CASSETTE_SUFFIX}"
        result = _interaction(raw, f"{where}#{index}", name, protocol, budget)
        if isinstance(result, Imported):
            imported.append(result)
        else:
            skipped.append(result)
    if not interactions:
        skipped.append(Skipped(where, "no interactions"))
    return Sources(tuple(imported), tuple(skipped))


# --- files ------------------------------------------------------------------------------------


def _stem(path: Path) -> str:
    name = path.name
    for suffix in SOURCE_SUFFIXES:
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return name


def import_file(
    path: Path, protocol: str | None = None, *, budget: BodyBudget | None = None
) -> Sources:
    """The exchanges of one source file (a real-streams JSON file or a vcrpy cassette,
    told apart by their fields); CassetteError, one line naming the file, for anything
    else. Its decoded bodies count against `budget` (default: a budget of its own)."""
    budget = BodyBudget() if budget is None else budget
    if protocol is not None and protocol not in PROTOCOLS:
        raise CassetteError(f"unknown protocol {protocol!r} (known: {', '.join(PROTOCOLS)})")
    where = str(path)
    text = read_text(path, "utf-8-sig")  # other recorders may write a byte-order mark
    document: object
    if path.suffix.lower() == ".json" or text.lstrip().startswith("{"):
        try:
            document = json.loads(text)
        except ValueError as exc:
            raise CassetteError(f"{where}: not JSON ({exc})") from None
        except RecursionError:
            raise CassetteError(f"{where}: nested too deeply") from None
    else:
        document = _yaml(text, where)
    if isinstance(document, Mapping) and "interactions" in document:
        return _vcr(document, where, _stem(path), protocol, budget)
    if isinstance(document, Mapping) and "protocol" in document and "body" in document:
        return _real_stream(document, where, _stem(path), protocol, budget)
    raise CassetteError(
        f"{where}: neither a vcrpy cassette (`interactions`) nor a recorded stream "
        "(`protocol`, `body`)"
    )


def source_files(sources: Sequence[Path]) -> list[Path]:
    """The files to read: each file given, and every `*.json`, `*.yaml`, `*.yml` in a
    folder given (name order, not recursive; one so named that is not a regular file, a
    folder or a named pipe, is read as a file and refused)."""
    files: list[Path] = []
    for source in sources:
        if source.is_dir():
            found = sorted(p for p in source.iterdir() if p.name.lower().endswith(SOURCE_SUFFIXES))
            if not found:
                raise CassetteError(f"{source}: no *.json, *.yaml or *.yml files in this folder")
            files.extend(found)
        else:
            files.append(source)
    return files


def import_sources(sources: Sequence[Path], protocol: str | None = None) -> Sources:
    """Every exchange of every source, converted (nothing written yet), their decoded
    bodies under `MAX_IMPORT_BYTES` in all. Two exchanges that would take the same file name
    get `-2`, `-3`, … before the suffix."""
    imported: list[Imported] = []
    skipped: list[Skipped] = []
    taken: set[str] = set()
    budget = BodyBudget()
    for path in source_files(sources):
        found = import_file(path, protocol, budget=budget)
        skipped.extend(found.skipped)
        for item in found.imported:
            name, number = item.name, 1
            while name in taken:
                number += 1
                name = item.name.removesuffix(CASSETTE_SUFFIX) + f"-{number}{CASSETTE_SUFFIX}"
            taken.add(name)
            imported.append(Imported(name, item.cassette, item.origin))
    return Sources(tuple(imported), tuple(skipped))


def write_imported(found: Sources, folder: Path) -> list[Path]:
    """Save every imported cassette in `folder` (made if missing), each atomically and
    never over a file already there: when any name is taken, CassetteError naming it and
    nothing written. (Should a file appear under a name while the others are written, that
    one is refused all the same, `format.save(replace=False)`, and the error names it.)"""
    if folder.exists() and not folder.is_dir():
        raise CassetteError(f"{folder}: not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CassetteError(f"cannot make {folder}: {exc.strerror or exc}") from None
    taken = [
        folder / item.name
        for item in found.imported
        if (folder / item.name).is_symlink() or (folder / item.name).exists()
    ]
    if taken:
        more = f" (and {len(taken) - 1} more)" if len(taken) > 1 else ""
        raise CassetteError(
            f"{taken[0]} already exists{more}; cassette import never overwrites a cassette "
            "(remove it, or import --to another folder)"
        )
    written: list[Path] = []
    for item in found.imported:
        path = folder / item.name
        try:
            save(item.cassette, path, replace=False)
        except CassetteExistsError:
            done = f" ({len(written)} written before it)" if written else ""
            raise CassetteError(
                f"{path} already exists: it appeared during the import and was not "
                f"overwritten{done}"
            ) from None
        written.append(path)
    return written
