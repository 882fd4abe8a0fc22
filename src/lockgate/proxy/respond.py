"""The proxy's last stage, the only writer to the client: an exchange's answer (its head sent
once, at `Responder.commit`, the one commit point; its pieces under the write watchdog; the
clean end or the abort), and the proxy's own answers in the speaker's error shape (a
rejection at admission, an upstream that gave no answer, an answer that cannot be judged,
the reserved paths, a request aiohttp could not parse). A rejection, a refusal and an
upstream's answer all leave through here."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from ..credentials import Redactor
from ..gateway import Gateway, Refusal
from ..http import describe
from .access import quoted
from .engine import Refused, WholeVerdict, capped_body
from .flow import Flow
from .routes import owner
from .timers import _WriteWatchdog
from .upstream import UpstreamBody

__all__ = [
    "DONT_RETRY",
    "Responder",
    "close_quietly",
    "error_status",
    "failed",
    "late_status",
    "malformed",
    "reject",
    "reserved",
    "too_long_a_wait",
    "unjudged",
    "whole",
]

# Said on a final answer after spent retries, so that the client's own do not multiply them.
DONT_RETRY = ("x-should-retry", "false")
_WAIT_HEADERS = frozenset({"retry-after", "retry-after-ms", "x-should-retry"})


# --- the proxy's own answers -----------------------------------------------------------------


def reject(
    flow: Flow,
    speaker: Gateway,
    status: int,
    message: str,
    *,
    stopping: bool = False,
    param: str | None = None,
) -> web.Response:
    """A request the proxy answers itself (admission, the body's bounds): `status` and the
    speaker's error body; a 503 says when to come back (and, stopping, closes)."""
    flow.outcome = "rejected"
    flow.status = status
    flow.reason = message
    headers = {"content-type": "application/json"}
    if status == 503:
        headers["retry-after"] = "1"
        if stopping:
            headers["connection"] = "close"
    if status == 401:
        headers["www-authenticate"] = 'Bearer realm="lockgate"'
    body = speaker.client_error_body(status, f"lockgate proxy: {message}", param)
    return web.Response(status=status, body=body, headers=headers)


def failed(
    flow: Flow,
    gateway: Gateway | None,
    speaker: Gateway,
    status: int,
    reason: str,
    redact: Redactor,
    *,
    spent: bool,
) -> tuple[web.Response, Refusal | None]:
    """No answer to pass on (the upstream could not be reached, failed before its answer, or
    answered in a form the proxy cannot read): `status` and the protocol's error body, and
    the refusal a stream whose head already went ends with instead (None: not a protocol
    request); told not to retry when the proxy spent its retries."""
    reason = redact(reason)
    flow.outcome = "error"
    flow.status = status
    flow.reason = f"opening: {reason}"
    refusal = None
    if gateway is not None:
        refusal = Refusal("opening", f"lockgate proxy: {reason}", True, 0)
        body = gateway.error_body(refusal)
    else:
        body = speaker.client_error_body(status, f"lockgate proxy: {reason}")
    headers = {"content-type": "application/json"}
    if spent:
        headers[DONT_RETRY[0]] = DONT_RETRY[1]
    return web.Response(status=status, body=body, headers=headers), refusal


def unjudged(
    flow: Flow,
    gateway: Gateway,
    kind: str,
    reason: str,
    redact: Redactor,
    *,
    transient: bool = False,
    spent: bool = False,
) -> tuple[web.Response, Refusal]:
    """A 2xx answer the gate cannot judge (or that broke before it could): refused, 502,
    the protocol's error body; and the refusal, for a stream whose head already went."""
    text = f"lockgate refused the response: {kind}: {redact(reason)}"
    refusal = Refusal(kind, text, transient, 0)
    flow.judged(Refused(refusal))
    flow.status = 502
    flow.reason = f"{kind}: {reason}"
    headers = {"content-type": "application/json"}
    if spent:
        headers[DONT_RETRY[0]] = DONT_RETRY[1]
    return web.Response(status=502, body=gateway.error_body(refusal), headers=headers), refusal


def error_status(status: int, body: bytes, headers: CIMultiDict[str]) -> web.Response:
    """An upstream's error status read whole (under the cap), passed as it came."""
    return web.Response(status=status, body=body, headers=headers)


def too_long_a_wait(
    flow: Flow,
    speaker: Gateway,
    status: int,
    headers: CIMultiDict[str],
    wait: float,
    max_wait: float,
) -> tuple[web.Response, Refusal]:
    """An error status whose server asks for a wait longer than the route's `max_wait`:
    neither waited nor passed on; the client is told not to retry, the wait in the message
    (and the refusal, for a stream whose head already went)."""
    message = (
        f"lockgate proxy: the upstream answered HTTP {status} and asks to wait "
        f"{wait:g} s before a new request, longer than this route waits "
        f"({max_wait:g} s): not retried, do not retry"
    )
    flow.reason = f"opening: {message}"
    sent = CIMultiDict(
        (name, value)
        for name, value in headers.items()
        if name.lower() not in _WAIT_HEADERS and name.lower() != "content-type"
    )
    sent["content-type"] = "application/json"
    sent[DONT_RETRY[0]] = DONT_RETRY[1]
    error = speaker.client_error_body(status, message)
    return web.Response(status=status, body=error, headers=sent), Refusal(
        "opening", message, False, 0
    )


def late_status(
    flow: Flow, status: int, body: bytes | None, transient: bool, redact: Redactor
) -> tuple[web.Response, Refusal]:
    """An error status after the client's head went out (a keep-alive before a retry):
    neither its status nor its body can follow that head, so it becomes the refusal the
    open stream ends with (`Responder.refuse_in_stream`), which says the status and the
    upstream's message."""
    excerpt = ""
    if body:
        excerpt = f": {quoted(body.decode('utf-8', 'replace'), 300)}"
    reason = redact(f"the upstream answered HTTP {status}{excerpt}")
    flow.outcome = "error"
    flow.reason = f"opening: {reason}"
    return web.Response(status=status), Refusal(
        "opening", f"lockgate proxy: {reason}", transient, 0
    )


def whole(verdict: WholeVerdict, headers: CIMultiDict[str], *, spent: bool) -> web.Response:
    """A whole answer judged: accepted, the upstream's body with its headers; refused, the
    verdict's error body (told not to retry when the proxy spent its retries)."""
    if isinstance(verdict.outcome, Refused):
        sent = CIMultiDict(verdict.headers)
        if spent:
            sent[DONT_RETRY[0]] = DONT_RETRY[1]
        return web.Response(
            status=verdict.status, body=verdict.body, content_type="application/json", headers=sent
        )
    return web.Response(status=verdict.status, body=verdict.body, headers=headers)


def malformed(
    flow: Flow, status: int, exc: BaseException | None, message: str | None
) -> web.Response:
    """aiohttp's answer to a request it could not parse (or, never expected, a handler that
    failed): the proxy's JSON error, its connection closed; `flow` says why."""
    if status == 400:
        # aiohttp's message: a line, then the bytes it stopped at and a caret under them.
        detail = message or (str(exc) if exc is not None else "")
        lines = [line.strip() for line in detail.splitlines() if line.strip(" ^")]
        reason = f"the request is not valid HTTP ({quoted(' '.join(lines), 200)})"
        flow.outcome = "rejected"
    else:
        reason = f"the proxy failed on this request (HTTP {status})"
        flow.outcome = "error"
    flow.status = status
    flow.reason = reason
    body = owner("/", {}, {}).client_error_body(status, f"lockgate proxy: {reason}")
    response = web.Response(status=status, body=body, content_type="application/json")
    response.force_close()
    return response


def reserved(
    request: web.Request,
    path: str,
    *,
    ready: bool,
    stopping: bool,
    routes: int,
    authorized: Callable[[], bool],
    metrics: Callable[[], tuple[bytes, str]] | None,
) -> web.Response:
    """The proxy's own paths: health, readiness, metrics (never forwarded)."""
    if request.method not in ("GET", "HEAD"):
        return web.json_response(
            {"error": {"message": f"lockgate proxy: {path} answers GET only"}},
            status=405,
            headers={"allow": "GET, HEAD"},
        )
    if path == "/healthz":
        return web.json_response({"status": "ok"})
    if path == "/readyz":
        if ready:
            return web.json_response({"status": "ready", "routes": routes})
        state = "stopping" if stopping else "starting"
        return web.json_response({"status": state}, status=503, headers={"retry-after": "1"})
    if not authorized():
        return web.json_response(
            {"error": {"message": "lockgate proxy: the lockgate client token is missing or wrong"}},
            status=401,
        )
    if metrics is None:
        return web.json_response(
            {"error": {"message": "lockgate proxy: metrics are off"}}, status=404
        )
    body, content_type = metrics()
    return web.Response(body=body, headers={"content-type": content_type})


# --- the client's answer, written --------------------------------------------------------------


class Responder:
    """One exchange's writes to its client: the head once (`commit`, the commit point: before
    it the proxy may still retry or answer locally, after it only in-band), the pieces (a
    client that does not take one within the silence limit has stopped reading: its
    connection is aborted), the clean end or the abort."""

    __slots__ = ("_flow", "_idle", "_request", "_watchdog", "response")

    def __init__(self, request: web.Request, flow: Flow, idle: float) -> None:
        self._request = request
        self._flow = flow
        self._idle = idle
        self._watchdog: _WriteWatchdog | None = None  # armed by the first write
        self.response: web.StreamResponse | None = None  # the client's, once its head went

    @property
    def committed(self) -> bool:
        """Whether the client's head went out (set by `commit` only)."""
        return self.response is not None

    async def commit(self, status: int, headers: Mapping[str, str]) -> web.StreamResponse:
        """The client's response head, sent once."""
        if self.response is None:
            response = web.StreamResponse(status=status, headers=CIMultiDict(headers))
            await response.prepare(self._request)
            self.response = response
        return self.response

    async def write(self, piece: bytes | None) -> None:
        """Send a piece (None: the end of the body) after the head; a client that does not
        take it within the silence limit has stopped reading, and is treated as gone (its
        connection aborted, its slot and the upstream freed): ConnectionResetError."""
        response = self.response
        assert response is not None
        watchdog = self._watchdog
        if watchdog is None:
            loop = asyncio.get_running_loop()
            watchdog = self._watchdog = _WriteWatchdog(loop, self._idle, self.abort)
        if piece is not None and self._flow.first_sent_at is None:
            self._flow.first_sent_at = time.monotonic()
        watchdog.writing()
        try:
            if piece is None:
                await response.write_eof()
            else:
                await response.write(piece)
        finally:
            watchdog.written()
        if watchdog.fired:
            raise ConnectionResetError("the client stopped reading")

    async def end(self) -> web.StreamResponse:
        """The body's clean end (a client that left meanwhile is let go)."""
        assert self.response is not None
        with contextlib.suppress(ConnectionError):
            await self.write(None)
        return self.response

    def abort(self) -> None:
        """The client's connection cut: it sees the answer did not end cleanly."""
        transport = self._request.transport
        if transport is not None:
            transport.abort()

    def stop(self) -> None:
        """The exchange ended: the write watchdog stops."""
        if self._watchdog is not None:
            self._watchdog.stop()

    async def passed(
        self,
        upstream: aiohttp.ClientResponse,
        status: int,
        headers: CIMultiDict[str],
        capped: bool,
        redactor: Redactor | None,
    ) -> web.StreamResponse:
        """The answer as it came (an error body under the cap), redacted of the held key; a
        body that breaks off ends the connection without a clean end, so the client sees it
        broke."""
        flow = self._flow
        response = await self.commit(status, headers)
        body = UpstreamBody(upstream, flow.exchange if capped else None, redactor)
        pieces: AsyncIterator[bytes] = aiter(capped_body(body) if capped else body)
        try:
            async for piece in pieces:
                await self.write(piece)
        except ConnectionError:  # the client left (or stopped reading)
            flow.outcome = "abandoned"
            self.abort()
            return response
        except Exception as exc:  # the upstream broke off (or fell silent)
            flow.outcome = "error"
            flow.reason = f"transport: the upstream body broke off ({describe(exc)})"
            self.abort()
            return response
        finally:
            await close_quietly(pieces)
        return await self.end()

    async def refuse_in_stream(
        self, gateway: Gateway | None, refusal: Refusal | None
    ) -> web.StreamResponse:
        """The proxy's own answer (an error status, no answer, a refusal) when the client's
        head already went (an upstream comment passed on as a keep-alive while a retry was
        possible): a second head cannot follow it, nor an error body inside the stream. The
        open stream ends with the protocol's refusal frame, which the client's SDK raises;
        the log keeps the status that was sent."""
        flow = self._flow
        assert self.response is not None
        flow.status = self.response.status
        if refusal is None or gateway is None:  # never expected: every such answer says
            refusal = Refusal(
                "internal_error", "lockgate proxy: the response failed after it began", False, 0
            )
        assert gateway is not None
        if flow.outcome not in ("error", "refused", "withheld"):
            flow.outcome = "error"
        return await self.refused_in_stream(gateway.refusal_frame(refusal, None))

    async def refused_in_stream(self, frame: bytes) -> web.StreamResponse:
        """The proxy's own answer when the client's head already went: the open stream ends
        with the protocol's refusal `frame` (a second head cannot follow, nor an error body
        inside the stream)."""
        assert self.response is not None
        try:
            await self.write(frame)
        except ConnectionError:
            self._flow.outcome = "abandoned"
            self.abort()
            return self.response
        return await self.end()


async def close_quietly(pieces: AsyncIterator[bytes]) -> None:
    """Close a body's iteration (an async generator, maybe left suspended), quietly."""
    close = getattr(pieces, "aclose", None)
    if close is not None:
        with contextlib.suppress(Exception):
            await close()
