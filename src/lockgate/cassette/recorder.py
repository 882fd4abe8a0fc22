"""Recording real sessions as cassettes: `lockgate run --record DIR`, `lockgate proxy --record
DIR`.

`CassetteRecorder` owns one folder: each exchange it records becomes one file,
`NNNN-<protocol>-<YYYYmmddTHHMMSS>.cassette.jsonl` (NNNN counting on from the highest number
already in the folder, so that nothing there is overwritten; a name taken meanwhile, by
another recorder in the same folder, moves on to the next number), written atomically
(`format.save`, never replacing a file). An `Exchange` is filled in as the exchange goes:
the response head (`head`), every transport read with its time since the head (`read`, or
`tap` around the body), how the body ended (`end`), the verdict (`decide`), then `finish`
writes it.

Nothing secret reaches the disk. Before a cassette is written, every secret (the key, the
client's credentials, each `--redact-env` value) is replaced with `[redacted]` in the body,
the request, the headers and the base URL; credential and cookie headers are dropped
(`format.public_headers`), and so are headers a server could not send back as they are
(`format.header_problem`: a value holding a control character or bytes that are not
text); the base URL loses any `user:password@` and query. The body is
redacted whole, across read boundaries: the reads are joined, the secrets replaced in the
joined bytes, and the bytes split again at the original boundaries (a boundary inside a
secret moves to the end of its replacement). A secret is found in each form lockgate
redacts (`credentials.Redactor`: raw, JSON-escaped, Python `repr`/`ascii`), and in any JSON
string escaping of its characters (`\\u0073`, `\\u005C`, `\\/`, `\\n` …, hex digits in either
case). Bytes that are not UTF-8 are matched and kept as bytes. The replacement is applied
until no secret remains (should a secret overlap `[redacted]` itself, what is left of it is
removed instead), so the replacement never leaves a secret behind.

A response on a relayed Responses WebSocket (`lockgate proxy --record`, the relay's
`proxy/relay_response.py`) is one exchange too (`CassetteRecorder.websocket_exchange`):
method `WS`, the socket's upstream path, the `response.create` body as the request, status
200 and `content-type: text/event-stream`, and each upstream message of the response one
read, written as the SSE frame that carries it (`websocket_read`: `event: <type>` and its
text as `data`), so that a cassette reader, `serve --cassette` (over HTTP or, its WebSocket
mode, one message per frame again) and the faults (one event per message) take it as they
take an SSE exchange; a socket that broke before the response's end ends `reset`.

`RecordingTransport` wraps a `Transport` for `lockgate run`: each `open` records one
exchange. An opened stream is recorded as status 200 with the protocol's stream content type
(`text/event-stream`, or Bedrock's `application/vnd.amazon.eventstream`: the SDK's response
head is not visible through the transport seam); a failed opening with an
HTTP status as that status with an empty body (the SDK keeps the error body) and the
refusal it caused (a connection failure, without a status, is not an HTTP exchange and is
not recorded). The verdict of a stream comes from the client's observer events (pass
`RecordingTransport.observe` to the client's observer): `DecisionReady` is `accepted` with
its tool calls; `ResponseFailed` is `refused` with its kind and the tool calls that began; a
`Retrying` after a stream (a transient failure before any content, `--retry-unstarted`) is
`refused` without a kind. A stream still open when the transport closes (an interrupt) is
written without a verdict.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
import re
import threading
import time
import urllib.parse
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..credentials import REDACTED
from ..errors import OpenFailure
from ..events import DecisionReady, ResponseFailed, Retrying, ToolCallStarted
from ..eventstream import MEDIA_TYPE as EVENTSTREAM_MEDIA_TYPE
from .format import (
    CASSETTE_SUFFIX,
    Cassette,
    CassetteError,
    CassetteExistsError,
    Ending,
    Read,
    Verdict,
    header_problem,
    public_headers,
    save,
)

if TYPE_CHECKING:
    from ..events import Event
    from ..transport import ByteStream, Transport

__all__ = [
    "CassetteRecorder",
    "Exchange",
    "RecordingTransport",
    "SecretScrubber",
    "check_folder",
    "public_base_url",
    "request_path",
    "websocket_read",
]

_REDACTED = REDACTED.encode()
_REPLACING_PASSES = 4  # passes with `[redacted]` before what is left of a secret is removed
_NAME = re.compile(r"^(\d{4,})-")
_SHORT_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "/": "\\/",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
}


def _raw(text: str) -> bytes:
    """`text` as the bytes it came from (an environment value that was not UTF-8 holds
    surrogate escapes)."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


def _hex(value: int) -> bytes:
    """Four hex digits matching either case."""
    return b"".join(
        f"[{c}{c.upper()}]".encode() if c.isalpha() else c.encode() for c in f"{value:04x}"
    )


def _char(char: str) -> bytes:
    """Every way one character of a secret may appear: itself, a JSON `\\uXXXX` escape (a
    surrogate pair beyond the BMP), its short JSON escape."""
    options: list[bytes] = []  # the escapes first: a `\\` is taken as the start of one
    code = ord(char)
    if code > 0xFFFF:
        code -= 0x10000
        options.append(
            rb"\\u" + _hex(0xD800 + (code >> 10)) + rb"\\u" + _hex(0xDC00 + (code & 0x3FF))
        )
    else:
        options.append(rb"\\u" + _hex(code))
    if char in _SHORT_ESCAPES:
        options.append(re.escape(_SHORT_ESCAPES[char].encode()))
    options.append(re.escape(_raw(char)))
    return b"(?:" + b"|".join(options) + b")"


def _quoted(secret: str) -> set[str]:
    """The forms `repr` and `ascii` write the secret in (either quote escaped, as
    `credentials.Redactor` knows them)."""
    forms: set[str] = set()
    for quoted in (repr(secret), ascii(secret)):
        inner = quoted[1:-1]
        forms.add(inner)
        forms.add(inner.replace("\\'", "'") if quoted[0] == "'" else inner.replace("'", "\\'"))
    return forms


class SecretScrubber:
    """Replaces secrets in bytes and text (see the module docstring for the forms), and in
    bytes split into reads, keeping the split."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        alternatives: list[tuple[int, bytes]] = []
        for secret in {s for s in secrets if s}:
            alternatives.append((len(_raw(secret)), b"".join(_char(c) for c in secret)))
            for form in _quoted(secret):
                alternatives.append((len(_raw(form)), re.escape(_raw(form))))
        # At one position the longest alternative is tried first.
        alternatives.sort(key=lambda item: (-item[0], item[1]))
        patterns = [pattern for _, pattern in alternatives]
        self._pattern = re.compile(b"|".join(patterns), re.DOTALL) if patterns else None

    def __bool__(self) -> bool:
        return self._pattern is not None

    def contains(self, data: bytes) -> bool:
        """Whether `data` holds a secret in any form."""
        return self._pattern is not None and self._pattern.search(data) is not None

    def split(self, pieces: Sequence[bytes]) -> list[bytes]:
        """`pieces` joined, every secret replaced, split again where the pieces met (a cut
        inside a secret moves to the end of its replacement). Same length as `pieces`."""
        data = b"".join(pieces)
        cuts: list[int] = []
        position = 0
        for piece in pieces[:-1]:
            position += len(piece)
            cuts.append(position)
        data, cuts = self._scrub(data, cuts)
        bounds = [0, *cuts, len(data)]
        return [data[bounds[i] : bounds[i + 1]] for i in range(len(bounds) - 1)] if pieces else []

    def data(self, data: bytes) -> bytes:
        return self._scrub(data, [])[0]

    def text(self, text: str) -> str:
        if self._pattern is None:
            return text
        return self.data(_raw(text)).decode("utf-8", "surrogateescape")

    def value(self, value: Any) -> Any:
        """A JSON value with every string in it (keys too) redacted, then its JSON text
        redacted too (a secret split over escapes); kept as text if that no longer parses."""
        if self._pattern is None:
            return value
        walked = self._walk(value)
        text = json.dumps(walked, ensure_ascii=False)
        scrubbed = self.text(text)
        if scrubbed == text:
            return walked
        try:
            return json.loads(scrubbed)
        except ValueError:
            return scrubbed

    def _walk(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {self.text(str(k)): self._walk(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self._walk(item) for item in value]
        return value

    def _scrub(self, data: bytes, cuts: list[int]) -> tuple[bytes, list[int]]:
        pattern = self._pattern
        if pattern is None:
            return data, cuts
        passes = 0
        while True:
            matches = list(pattern.finditer(data))
            if not matches:
                return data, cuts
            # Should a secret overlap the replacement itself, replacing cannot end: after a
            # few passes what is left of a secret is removed (each such pass shortens).
            replacement = _REDACTED if passes < _REPLACING_PASSES else b""
            passes += 1
            out = bytearray()
            moved: list[int] = []
            index = 0
            delta = 0
            position = 0
            for match in matches:
                start, end = match.span()
                out += data[position:start]
                while index < len(cuts) and cuts[index] <= start:
                    moved.append(cuts[index] + delta)
                    index += 1
                while index < len(cuts) and cuts[index] < end:
                    moved.append(start + delta + len(replacement))
                    index += 1
                out += replacement
                delta += len(replacement) - (end - start)
                position = end
            out += data[position:]
            moved.extend(cut + delta for cut in cuts[index:])
            data, cuts = bytes(out), moved


def public_base_url(url: str) -> str:
    """`url` without `user:password@`, query or fragment."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host if port is None else f"{host}:{port}"
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def request_path(protocol: str, request: Mapping[str, Any]) -> str:
    """The path `lockgate run` posts a protocol's request to, below its base URL."""
    if protocol == "responses":
        return "/responses"
    if protocol == "chat":
        return "/chat/completions"
    if protocol == "anthropic":
        return "/v1/messages"
    if protocol == "gemini":
        from ..providers.gemini.codec import stream_path

        model = request.get("model")
        return stream_path(model) if isinstance(model, str) else "/"
    if protocol == "bedrock":
        from ..providers.bedrock.codec import stream_path as converse_stream_path

        model = request.get("model")
        return converse_stream_path(model) if isinstance(model, str) else "/"
    return "/"


def _streamed_media_type(protocol: str) -> str:
    """The content type of a protocol's stream (`text/event-stream`, or Bedrock's binary
    `application/vnd.amazon.eventstream`), as its lab renderer states it."""
    from ..providers import provider
    from ..scripted.renderer import SSE_MEDIA_TYPE, media_type

    try:
        return media_type(provider(protocol).render())
    except KeyError:
        return SSE_MEDIA_TYPE


def check_folder(folder: Path) -> Path:
    """`folder` if it is a directory this process can create files in, else CassetteError
    with a one-line reason."""
    try:
        usable = folder.is_dir()
        writable = usable and os.access(folder, os.W_OK | os.X_OK)
    except (OSError, ValueError) as exc:  # a NUL byte, a name too long
        raise CassetteError(f"--record {str(folder)!r}: cannot use this folder ({exc})") from None
    if not usable:
        raise CassetteError(f"--record {folder}: not an existing folder")
    if not writable:
        raise CassetteError(f"--record {folder}: the folder is not writable")
    return folder


def _highest(folder: Path) -> int:
    highest = 0
    try:
        names = [entry.name for entry in folder.iterdir()]
    except OSError:
        return 0
    for name in names:
        match = _NAME.match(name)
        if match is not None and name.endswith(CASSETTE_SUFFIX):
            highest = max(highest, int(match.group(1)))
    return highest


class CassetteRecorder:
    """Writes the exchanges of one session into `folder` (checked now: CassetteError if it
    is not a writable folder). `secrets` are redacted from every cassette; an exchange may
    add its own. A cassette that cannot be written is counted in `errors` (one line each),
    never raised into the session."""

    def __init__(self, folder: Path, *, secrets: Sequence[str] = ()) -> None:
        self.folder = check_folder(folder)
        self.secrets = tuple(s for s in secrets if s)
        self.saved: list[Path] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._number = _highest(folder)
        self._scrubber = SecretScrubber(self.secrets)

    def exchange(
        self,
        protocol: str,
        base_url: str,
        method: str,
        path: str,
        request: Any,
        *,
        secrets: Iterable[str] = (),
        clock: Callable[[], float] | None = None,
    ) -> Exchange:
        """A new exchange, to be filled in and `finish`ed."""
        extra = tuple(s for s in secrets if s and s not in self.secrets)
        scrubber = SecretScrubber((*self.secrets, *extra)) if extra else self._scrubber
        return Exchange(self, scrubber, protocol, base_url, method, path, request, clock)

    def websocket_exchange(self, protocol: str, base_url: str, path: str, request: Any) -> Exchange:
        """A new exchange for one response on a relayed WebSocket (see the module's
        docstring): its head is given, its messages go in with `Exchange.message`."""
        exchange = self.exchange(protocol, base_url, "WS", path, request)
        exchange.head(200, (("content-type", "text/event-stream"),))
        return exchange

    def write(self, cassette: Cassette, moment: datetime.datetime) -> Path:
        """Save `cassette` under the next free number (CassetteError if it cannot be)."""
        stamp = moment.strftime("%Y%m%dT%H%M%S")
        protocol = re.sub(r"[^A-Za-z0-9_.]+", "_", cassette.protocol) or "unknown"
        with self._lock:
            while True:
                self._number += 1
                path = self.folder / f"{self._number:04d}-{protocol}-{stamp}{CASSETTE_SUFFIX}"
                if path.exists() or path.is_symlink():
                    continue
                try:
                    save(cassette, path, replace=False)
                except CassetteExistsError:
                    continue  # taken since the look: the next number
                break
            self.saved.append(path)
        return path


class Exchange:
    """One exchange being recorded (see the module docstring)."""

    def __init__(
        self,
        recorder: CassetteRecorder,
        scrubber: SecretScrubber,
        protocol: str,
        base_url: str,
        method: str,
        path: str,
        request: Any,
        clock: Callable[[], float] | None,
    ) -> None:
        self._recorder = recorder
        self._scrubber = scrubber
        self.protocol = protocol
        self.base_url = base_url
        self.method = method
        self.path = path.split("?", 1)[0]
        self.request = request
        self.started = datetime.datetime.now(datetime.UTC)
        self.status: int | None = None
        self.headers: tuple[tuple[str, str], ...] = ()
        self.verdict: Verdict | None = None
        self.calls = 0  # tool calls seen beginning (for a refusal's verdict)
        self._clock = clock
        self._head_at = 0.0
        self._times: list[float] = []
        self._pieces: list[bytes] = []
        self._end: Ending = "clean"
        self._end_at: float | None = None
        self.done = False

    def _now(self) -> float:
        if self._clock is None:
            try:
                self._clock = asyncio.get_running_loop().time
            except RuntimeError:
                self._clock = time.monotonic
        return self._clock()

    def head(self, status: int, headers: Iterable[tuple[str, str]] = ()) -> None:
        """The response head arrived (read times count from now)."""
        self.status = status
        self.headers = tuple((str(k), str(v)) for k, v in headers)
        self._head_at = self._now()

    def read(self, data: bytes) -> None:
        if self.done or not data:
            return
        self._times.append(max(0.0, self._now() - self._head_at))
        self._pieces.append(bytes(data))

    def message(self, data: bytes) -> None:
        """One WebSocket message of the response, recorded as the SSE frame carrying it."""
        self.read(websocket_read(data))

    def end(self, how: Ending) -> None:
        """How the body ended (the first call counts)."""
        if self.done or self._end_at is not None:
            return
        self._end = how
        self._end_at = max(0.0, self._now() - self._head_at)

    def decide(self, verdict: Verdict | None) -> None:
        if not self.done:
            self.verdict = verdict

    async def tap(self, body: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
        """`body` as it comes, every read recorded, and how it ended."""
        how: Ending = "clean"
        try:
            async for chunk in body:
                self.read(chunk)
                yield chunk
        except GeneratorExit:  # the reader stopped: what it read is what is recorded
            raise
        except (asyncio.CancelledError, TimeoutError):
            how = "timeout"
            raise
        except BaseException:
            how = "reset"
            raise
        finally:
            self.end(how)

    def discard(self) -> None:
        """Nothing is written for this exchange."""
        self.done = True

    def cassette(self) -> Cassette:
        """The exchange as a cassette, every secret redacted."""
        scrub = self._scrubber
        pieces = self._scrubbed_pieces()
        reads = tuple(Read(at, data) for at, data in zip(self._times, pieces, strict=True) if data)
        status = self.status if self.status is not None and 100 <= self.status <= 599 else 502
        return Cassette(
            protocol=self.protocol,
            base_url=scrub.text(public_base_url(self.base_url)),
            method=scrub.text(self.method),
            path=scrub.text(self.path),
            request=scrub.value(self.request),
            status=status,
            headers=tuple(
                (scrub.text(name), scrub.text(value))
                for name, value in public_headers(self.headers)
                if header_problem(name, value) is None
            ),
            recorded_at=self.started.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            reads=reads,
            verdict=self.verdict,
            end=self._end,
            end_at=self._end_at,
        )

    def _scrubbed_pieces(self) -> list[bytes]:
        """The reads, every secret redacted: an event-stream body message by message (its
        frames re-encoded, `eventstream_scrub`), any other as bytes."""
        scrub = self._scrubber
        kind = next((value for name, value in self.headers if name.lower() == "content-type"), "")
        if scrub and kind.split(";", 1)[0].strip().lower() == EVENTSTREAM_MEDIA_TYPE:
            from .eventstream_scrub import scrub_eventstream

            return scrub_eventstream(scrub, self._pieces)
        return scrub.split(self._pieces)

    def finish(self) -> Path | None:
        """Write the cassette (once; later calls do nothing). None if it was discarded or
        could not be written (the reason is in the recorder's `errors`)."""
        if self.done:
            return None
        self.done = True
        try:
            return self._recorder.write(self.cassette(), self.started)
        except CassetteError as exc:
            self._recorder.errors.append(str(exc))
        except Exception as exc:  # a value that cannot be written as JSON, a failed scrub
            self._recorder.errors.append(f"cannot record an exchange: {type(exc).__name__}")
        return None


def websocket_read(message: bytes) -> bytes:
    """A WebSocket text message as the SSE frame that carries it: `event:` its JSON `type`
    (when it has one), and each of its lines a `data:` line (the SSE reader joins them
    with LF again)."""
    kind = None
    with contextlib.suppress(ValueError, RecursionError):
        value = json.loads(message)
        if type(value) is dict and type(value.get("type")) is str:
            kind = value["type"]
    lines = message.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
    head = (
        b"" if kind is None or not _EVENT_NAME.fullmatch(kind) else b"event: %s\n" % kind.encode()
    )
    return head + b"".join(b"data: %s\n" % line for line in lines) + b"\n"


_EVENT_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,200}")


class _RecordedStream:
    """An opened body whose reads go into an exchange."""

    def __init__(self, inner: ByteStream, exchange: Exchange) -> None:
        self._inner = inner
        self._exchange = exchange
        self._iterator: AsyncIterator[bytes] | None = None

    def __aiter__(self) -> AsyncIterator[bytes]:
        self._iterator = self._exchange.tap(self._inner)
        return self._iterator

    async def aclose(self) -> None:
        iterator, self._iterator = self._iterator, None
        close = getattr(iterator, "aclose", None)
        try:
            if close is not None:
                await close()
        finally:
            await self._inner.aclose()


class RecordingTransport:
    """A transport that records each exchange of `inner` (see the module docstring). Give
    `observe` the client's events: it sets each stream's verdict and writes it."""

    def __init__(
        self,
        inner: Transport,
        recorder: CassetteRecorder,
        *,
        protocol: str,
        base_url: str,
        path: Callable[[Mapping[str, Any]], str] | None = None,
    ) -> None:
        self._inner = inner
        self.recorder = recorder
        self.protocol = protocol
        self.base_url = base_url
        self._path = path or (lambda request: request_path(protocol, request))
        self._pending: list[Exchange] = []

    @property
    def redactor(self) -> Any:
        """The inner transport's redactor, if it has one (the client uses it)."""
        return getattr(self._inner, "redactor", None)

    async def open(self, request: Mapping[str, Any], *, attempt: int = 0) -> ByteStream:
        body = dict(request)
        if self.protocol in ("gemini", "bedrock"):
            body.pop("model", None)  # it travels in the path
        exchange = self.recorder.exchange(
            self.protocol, self.base_url, "POST", self._path(request), body
        )
        try:
            stream = await self._inner.open(request, attempt=attempt)
        except OpenFailure as failure:
            if failure.status is not None and 100 <= failure.status <= 599:
                exchange.head(failure.status)
                exchange.decide(Verdict("refused", str(failure.kind), 0))
                exchange.finish()
            else:
                exchange.discard()
            raise
        except BaseException:
            exchange.discard()
            raise
        exchange.head(200, [("content-type", _streamed_media_type(self.protocol))])
        self._pending.append(exchange)
        return _RecordedStream(stream, exchange)

    def observe(self, event: Event) -> None:
        """An observer: the client's events give the open stream its verdict."""
        if not self._pending:
            return
        if isinstance(event, ToolCallStarted):
            self._pending[-1].calls += 1
        elif isinstance(event, DecisionReady):
            self._settle(Verdict("accepted", None, len(event.message.tool_calls)))
        elif isinstance(event, ResponseFailed):
            self._settle(Verdict("refused", event.kind, self._pending[-1].calls))
        elif isinstance(event, Retrying):
            self._settle(Verdict("refused", None, self._pending[-1].calls))

    def _settle(self, verdict: Verdict) -> None:
        pending, self._pending = self._pending, []
        for exchange in pending[:-1]:
            exchange.finish()
        pending[-1].decide(verdict)
        pending[-1].finish()

    async def aclose(self) -> None:
        pending, self._pending = self._pending, []
        for exchange in pending:
            exchange.finish()
        await self._inner.aclose()
