"""`lockgate serve`: a scripted, fault-injecting provider on loopback, in any protocol.

HTTP/1.1 over asyncio streams. Each POST to the protocol's path gets the next scripted
turn: an HTTP error with its body and headers, a dropped connection, or a chunked body in
the protocol's media type (`text/event-stream`, or the renderer's own: Bedrock's binary
`application/vnd.amazon.eventstream`) whose faults are real at the byte and socket level
(fragmentation inside UTF-8 characters, CRLF, keep-alives, stalls, slow drips, resets with
RST, frames that never end). A request that does not ask for a stream gets the protocol's
JSON response for the same reply, with the same fault (`script.json_answer`: a fault stays
a fault). Any other method or path is answered 404/405, logged, and consumes no turn; so is
a request that is not well-formed HTTP/1.1 with a JSON object body (400, logged). A
WebSocket upgrade at the protocol's path is served by a protocol with a WebSocket mode
(Responses: `lab.websocket`, each `response.create` on the socket the next turn), and
otherwise (`websocket=False`, or another protocol) answered 426 Upgrade Required, logged:
an HTTP-only server, from which a client that tries a WebSocket first, as Codex does, falls
back to HTTP at once. A script that runs out answers 400 with `x-should-retry: false`,
which no SDK retries. A playback turn (a recorded exchange, `cassette.faults.playback`) is
sent as recorded: its status, its headers, its reads as chunks, its pauses, resets and
hangs. It records what each request carried (never the credential itself) and whether the
client closed early. How each answer is written is `lab.answers`' (`TurnWriter`), in the
wire of the request's path (`renderer.routed`: Bedrock's server answers Converse and
InvokeModel); this module routes requests to turns.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..jsonlimits import parse_json
from ..scripted.renderer import Renderer, WebSocketRenderer, routed
from ..scripted.reply import OpeningError
from ..scripted.script import Turn
from .answers import TurnWriter
from .answers import reset as _reset
from .answers import send_json as _send_json
from .recorded import RecordedRequest
from .websocket import handshake_problem, serve_websocket

MAX_REQUEST_BYTES = 8 * 1024 * 1024
MAX_HEAD_BYTES = 64 * 1024
MAX_REQUEST_DEPTH = 64  # JSON nesting of a request body


class BadRequest(Exception):
    """A request this server cannot take: answered 400, logged, no turn consumed."""


@dataclass(slots=True)
class ScriptedServer:
    """A running scripted server: its base URL and what it has received."""

    host: str
    port: int
    turns: list[Turn]
    protocol: Renderer
    requests: list[RecordedRequest] = field(default_factory=list)
    paused: asyncio.Event = field(default_factory=asyncio.Event)  # a stream went silent
    active: int = 0
    answered: int = 0  # turns consumed
    _settled: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    log: Callable[[str], None] | None = None  # one line per request that consumes no turn
    # Instead of the next turn in order: the turn for this request (None: none matches,
    # answered 404 and logged, no turn consumed).
    select: Callable[[RecordedRequest], Turn | None] | None = None
    # Answer a WebSocket upgrade at the protocol's path where the protocol has a WebSocket
    # mode (`lab.websocket`); False: answer it 426, as a server that speaks HTTP only.
    websocket: bool = True

    def next_turn(self, request: RecordedRequest) -> Turn | OpeningError:
        """The turn for a request on a WebSocket (consumed), or the error that answers it
        (no turn matches, the script ran out)."""
        if self.select is not None:
            turn = self.select(request)
            if turn is None:
                return OpeningError(
                    404, "invalid", "no recorded exchange matches this request; not retryable"
                )
        elif self.turns:
            turn = self.turns.pop(0)
        else:
            return OpeningError(
                400,
                "exhausted",
                f"the scripted server has no turn left for this request (it answered "
                f"{self.answered}); not retryable",
            )
        self.answered += 1
        return turn

    @property
    def stray_requests(self) -> list[RecordedRequest]:
        """Requests that took no turn: to another method or path than the protocol's
        (answered 404/405), or asking for a WebSocket (answered 426)."""
        return [request for request in self.requests if not request.consumed_turn]

    async def settle(self) -> None:
        """Wait (up to 5 s) until no connection is being handled: the log is then final."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5.0):
                while self.active:
                    self._settled.clear()
                    await self._settled.wait()

    @property
    def base_url(self) -> str:
        """The base URL a client of the protocol is given (as its SDK takes it)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return self.protocol.base_url(f"http://{host}:{self.port}")

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.active += 1
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await self._handle(reader, writer)
        except asyncio.CancelledError:
            writer.transport.abort()  # shutting down: drop the connection quietly
        except Exception as exc:  # never a traceback from a connection: one line, dropped
            writer.transport.abort()
            if self.log is not None:
                self.log(f"connection dropped: {type(exc).__name__}: {exc}")
        finally:
            if task is not None:
                self._tasks.discard(task)
            self.active -= 1
            self._settled.set()

    async def _refuse(
        self,
        writer: asyncio.StreamWriter,
        request: RecordedRequest,
        outcome: str,
        logged: str,
        error: OpeningError,
    ) -> None:
        """Answer `request` with the protocol's error body for `error` (not to be retried),
        consuming no turn; `logged` follows `METHOD PATH: ` in the log."""
        request.consumed_turn = False
        request.outcome = outcome
        if self.log is not None:
            self.log(f"{request.method} {request.path}: {logged}")
        body = self.protocol.error_body(error)
        await _send_json(writer, error.status, body, {"x-should-retry": "false"})

    def _stray(self, request: RecordedRequest) -> None:
        if self.log is not None:
            self.log(
                f"{request.method} {request.path}: {request.outcome}; this server answers "
                f"POST {self.protocol.path} (no turn consumed)"
            )

    async def shutdown(self) -> None:
        """Stop every connection still being handled, quietly."""
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=2)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                request = await _read_request(reader)
            except BadRequest as exc:
                if self.log is not None:
                    self.log(f"bad request: {exc}; answered 400 (no turn consumed)")
                body = self.protocol.error_body(OpeningError(400, "invalid", f"bad request: {exc}"))
                await _send_json(writer, 400, body, {"x-should-retry": "false"})
                return
            self.requests.append(request)
            if asks_websocket(request.headers) and self.protocol.answers(request.path):
                if self.websocket and isinstance(self.protocol, WebSocketRenderer):
                    problem = handshake_problem(request.method, request.headers)
                    if problem is None:
                        await serve_websocket(self, reader, writer, request, self.protocol)
                        return
                    await self._refuse(
                        writer,
                        request,
                        "HTTP 400 (bad WebSocket handshake)",
                        f"{problem}; answered 400 (no turn consumed)",
                        OpeningError(400, "invalid", f"bad WebSocket handshake: {problem}"),
                    )
                    return
                await self._refuse(
                    writer,
                    request,
                    "HTTP 426 (WebSocket upgrade)",
                    "a WebSocket upgrade; answered 426 (this server speaks HTTP only; "
                    "no turn consumed)",
                    OpeningError(
                        426, "invalid", "this server speaks HTTP only: send the request over HTTP"
                    ),
                )
                return
            if not self.protocol.answers(request.path):
                request.consumed_turn = False
                request.outcome = "HTTP 404 (not this protocol's path)"
                self._stray(request)
                message = f"not found: this server answers POST {self.protocol.path}"
                await _send_json(writer, 404, {"error": {"message": message}}, {})
                return
            if request.method != "POST":
                request.consumed_turn = False
                request.outcome = "HTTP 405 (not POST)"
                self._stray(request)
                message = f"method not allowed: this server answers POST {self.protocol.path}"
                await _send_json(writer, 405, {"error": {"message": message}}, {"allow": "POST"})
                return
            problem = self._body_problem(request.body)
            if problem is not None:
                await self._refuse(
                    writer,
                    request,
                    "HTTP 400 (bad request body)",
                    f"{problem}; answered 400 (no turn consumed)",
                    OpeningError(400, "invalid", f"bad request: {problem}"),
                )
                return
            if self.select is not None:
                turn = self.select(request)
                if turn is None:
                    await self._refuse(
                        writer,
                        request,
                        "HTTP 404 (no turn matches this request)",
                        "no unused turn matches this request body; answered 404 (no turn consumed)",
                        OpeningError(
                            404,
                            "invalid",
                            "no recorded exchange matches this request; not retryable",
                        ),
                    )
                    return
            else:
                turn = self.turns.pop(0) if self.turns else None
            if turn is None:
                request.outcome = "HTTP 400 (script exhausted)"
                exhausted = OpeningError(
                    400,
                    "exhausted",
                    f"the scripted server has no turn left for this request (it answered "
                    f"{self.answered}); not retryable",
                )
                body = self.protocol.error_body(exhausted)
                await _send_json(writer, 400, body, {"x-should-retry": "false"})
                return
            self.answered += 1
            protocol = routed(self.protocol, request.path)  # the wire this path speaks
            answering = TurnWriter(protocol, self.paused)
            error = turn.opening_error(protocol)
            if turn.playback is not None:
                request.outcome = "playback" if turn.status == 200 else f"HTTP {turn.status}"
                finished = await answering.play(reader, writer, turn, request.timeline)
                request.client_closed_early = not finished
                request.timeline.append(
                    (time.monotonic(), "finished" if finished else "client closed")
                )
            elif turn.connection_error:
                request.outcome = "dropped"
                _reset(writer)
            elif error is not None:
                status, error_body, error_headers = error
                request.outcome = f"HTTP {status}"
                await _send_json(writer, status, error_body, error_headers)
            elif not protocol.is_streaming(request.path, request.body):
                if turn.reply is None:
                    request.outcome = "HTTP 400 (this turn only streams)"
                    only = OpeningError(400, "exhausted", "this scripted turn only streams")
                    await _send_json(writer, 400, protocol.error_body(only), {})
                else:
                    request.outcome, request.client_closed_early = await answering.answer_json(
                        reader, writer, turn, request.timeline
                    )
            else:
                request.outcome = "stream"
                finished = await answering.stream(reader, writer, turn, request.timeline)
                request.client_closed_early = not finished
                request.timeline.append(
                    (time.monotonic(), "finished" if finished else "client closed")
                )
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    @staticmethod
    def _body_problem(body: Any) -> str | None:
        """Why a POST body cannot be a request of any protocol lockgate speaks, or None."""
        if type(body) is not dict:
            return "the body is not a JSON object"
        if "stream" in body and type(body["stream"]) is not bool:
            return "'stream' must be true or false"
        return None


def asks_websocket(headers: Mapping[str, str]) -> bool:
    """Whether a request asks to switch to a WebSocket (`Upgrade: websocket`)."""
    return any(
        part.strip().lower() == "websocket" for part in headers.get("upgrade", "").split(",")
    )


async def _read_request(reader: asyncio.StreamReader) -> RecordedRequest:
    """One HTTP/1.1 request; BadRequest for anything else (an HTTP/0.9 line, a head over
    the cap, a bad or repeated `content-length`, a body over the cap or nested too deep)."""
    line = await _head_line(reader)
    parts = line.decode("latin-1").rstrip("\r\n").split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest("not an HTTP/1.x request line")
    method, path, _ = parts
    size = len(line)
    headers: dict[str, str] = {}
    lengths: list[str] = []
    while (header_line := await _head_line(reader)) != b"\r\n":
        size += len(header_line)
        if size > MAX_HEAD_BYTES:
            raise BadRequest(f"the request head is over {MAX_HEAD_BYTES} bytes")
        name, colon, value = header_line.decode("latin-1").partition(":")
        if colon:
            name = name.strip().lower()
            if name == "content-length":
                lengths.append(value.strip())
            headers[name] = value.strip()
    if len(lengths) > 1:
        raise BadRequest("more than one content-length header")
    if "chunked" in headers.get("transfer-encoding", "").lower():
        raise BadRequest("chunked request bodies are not supported; send content-length")
    text = lengths[0] if lengths else "0"
    if not text.isdigit():
        raise BadRequest(f"content-length {text!r} is not a number of bytes")
    length = int(text)
    if length > MAX_REQUEST_BYTES:
        raise BadRequest(f"the body is over {MAX_REQUEST_BYTES} bytes")
    raw = await reader.readexactly(length) if length else b""
    if "authorization" in headers:  # record that a credential came, never the credential
        scheme, space, _ = headers["authorization"].partition(" ")
        headers["authorization"] = f"{scheme} [redacted]" if space else "[redacted]"
    for name in ("api-key", "x-api-key", "x-goog-api-key"):
        if name in headers:
            headers[name] = "[redacted]"
    body: Any = None
    if raw:
        try:
            body = parse_json(raw.decode("utf-8"), MAX_REQUEST_DEPTH)
        except (UnicodeDecodeError, ValueError):
            body = raw.decode("utf-8", "replace")  # not JSON: the request is refused later
    return RecordedRequest(method, path, headers, body)


async def _head_line(reader: asyncio.StreamReader) -> bytes:
    """One CRLF-ended line of the request head (BadRequest when a line is too long)."""
    try:
        return await reader.readuntil(b"\r\n")
    except asyncio.LimitOverrunError:
        raise BadRequest(f"a request head line is over the {MAX_HEAD_BYTES}-byte limit") from None


def check_loopback(host: str) -> str:
    """`host` if it is a loopback address (`localhost` becomes 127.0.0.1); else ValueError."""
    address = "127.0.0.1" if host == "localhost" else host
    try:
        loopback = ipaddress.ip_address(address).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ValueError(
            f"{host!r} is not a loopback address; the scripted server listens only there"
        )
    return address


@contextlib.asynccontextmanager
async def serve_script(
    turns: Sequence[Turn],
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    provider: str | None = None,
    log: Callable[[str], None] | None = None,
    select: Callable[[RecordedRequest], Turn | None] | None = None,
    websocket: bool = True,
) -> AsyncIterator[ScriptedServer]:
    """Run a scripted server speaking `provider`'s protocol on loopback for the duration of
    the block (`select`: see `ScriptedServer.select`)."""
    from ..providers import provider as registry_entry

    address = check_loopback(host)
    state = ScriptedServer(
        address,
        port,
        list(turns),
        registry_entry(provider).render(),
        log=log,
        select=select,
        websocket=websocket,
    )
    server = await asyncio.start_server(state.handle, address, port)
    state.port = server.sockets[0].getsockname()[1]
    try:
        yield state
    finally:
        server.close()
        await state.shutdown()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 2)


class ServerThread:
    """`serve_script` on its own event loop in a background thread, for synchronous code
    (a subprocess test, a benchmark). On exit it waits for open connections to finish, so
    `server.requests` is final, then stops the server.

        with ServerThread(turns) as running:
            subprocess.run([..., "--base-url", running.base_url])
            running.server.requests
    """

    def __init__(
        self,
        turns: Sequence[Turn],
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        provider: str | None = None,
        log: Callable[[str], None] | None = None,
        select: Callable[[RecordedRequest], Turn | None] | None = None,
        websocket: bool = True,
    ) -> None:
        check_loopback(host)
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.server: ScriptedServer | None = None

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            context = serve_script(
                turns, host, port, provider=provider, log=log, select=select, websocket=websocket
            )
            async with context as server:
                self.server = server
                self._ready.set()
                await self._stop.wait()
                await server.settle()

        self._thread = threading.Thread(target=lambda: asyncio.run(main()), daemon=True)

    def __enter__(self) -> ServerThread:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the scripted server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    @property
    def base_url(self) -> str:
        if self.server is None:
            raise RuntimeError("the scripted server is not running")
        return self.server.base_url
