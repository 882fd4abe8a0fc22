"""The HTTP client lockgate hands every official SDK.

The SDKs own connections, auth, base URLs and status mapping; this module only decides how
their HTTP client is built, the same way for every provider:

- no redirects: a provider request (instructions, history, file contents) is never re-sent
  to another origin;
- error bodies are read under a cap, *decompressed* bytes counted: the SDKs read a non-2xx
  body whole before raising, so a 1 GiB (or gzip-bombed) error body would otherwise be held
  in memory; what fits is kept, so the JSON error of any real provider is classified as
  before; a body that breaks off keeps what arrived (the status is still the status, not a
  connection error);
- finite, positive timeouts only (a NaN timer never fires);
- an HTTP backend's own errors that the SDK does not know (aiohttp's `ClientResponseError`
  for a response head with too many or too long header lines) become an
  `httpx2.RemoteProtocolError`, so the SDK reports a connection error instead of letting a
  foreign exception escape;
- proxy variables honoured or ignored (`trust_env`; the lab's own loopback server ignores
  them);
- the aiohttp-backed client (the SDKs' `DefaultAioHttpClient`) or their httpx one.
"""

from __future__ import annotations

import contextlib
import json
import sys
import urllib.parse
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import httpx2

from .credentials import Redactor
from .errors import OpenFailure, StreamInterrupted
from .transport import check_timeout

if TYPE_CHECKING:
    from .providers.base import ErrorClassifier, TransportOptions

__all__ = [
    "ERROR_BODY_CAP_BYTES",
    "SDK",
    "RawStream",
    "SDKTransport",
    "base_url_problem",
    "bounded_client",
    "check_timeout",
    "describe",
    "encode_body",
]

ERROR_BODY_CAP_BYTES = 64 * 1024
_BODY_HEADERS = ("content-encoding", "content-length", "transfer-encoding")


def base_url_problem(text: str) -> str | None:
    """None for an http(s) URL with a host, a valid port and no `user:password@` (the key
    comes from the environment, never from the URL); else a one-line reason."""
    if not text:
        return "the URL is empty"
    if any(c.isspace() or not c.isprintable() for c in text):
        return "the URL must not contain spaces or control characters"
    try:
        parts = urllib.parse.urlsplit(text)
        port = parts.port
    except ValueError as exc:
        return f"{text!r} is not a valid URL ({exc})"
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        return f"{text!r} is not an http(s) URL with a host"
    if parts.username is not None or parts.password is not None:
        return "the URL must not carry user:password (the key comes from the environment)"
    if port == 0:
        return f"{text!r} has port 0"
    return None


def encode_body(request: Mapping[str, Any]) -> bytes:
    """A request as UTF-8 JSON, sent as the codec built it. A lone surrogate (model output
    can carry one) becomes its JSON escape instead of failing the encoding."""
    text = json.dumps(request, ensure_ascii=False, separators=(",", ":"))
    return text.encode("utf-8", "backslashreplace")


def describe(exc: BaseException) -> str:
    """`Type: first line of the message` (for connection and stream errors)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


class RawStream:
    """The raw body of one streaming response (an `httpx2.Response`, whatever the SDK)."""

    __slots__ = ("_response",)

    def __init__(self, response: httpx2.Response) -> None:
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.aiter_bytes():
                yield chunk
        except Exception as exc:
            raise StreamInterrupted(describe(exc)) from None

    async def aclose(self) -> None:
        await self._response.aclose()


def _backend_error(exc: Exception) -> bool:
    """Whether `exc` is an HTTP backend's own error (aiohttp's, when it is loaded)."""
    aiohttp = sys.modules.get("aiohttp")
    client_error = getattr(aiohttp, "ClientError", None)
    return isinstance(client_error, type) and isinstance(exc, client_error)


async def _capped(response: httpx2.Response, cap: int) -> httpx2.Response:
    """The same response with at most `cap` decoded bytes of its body, already read; the
    connection of the original is closed (its rest is never read)."""
    kept = bytearray()
    try:
        async for piece in response.aiter_bytes():
            kept += piece
            if len(kept) > cap:
                break
    except Exception as exc:
        # The body broke off (a reset, a short body, bad gzip): the status still stands,
        # with what arrived of the body, rather than becoming a connection error.
        if not isinstance(exc, httpx2.HTTPError | OSError) and not _backend_error(exc):
            raise
    finally:
        with contextlib.suppress(Exception):
            await response.aclose()
    headers = httpx2.Headers(response.headers)
    for name in _BODY_HEADERS:
        headers.pop(name, None)
    return httpx2.Response(
        response.status_code,
        headers=headers,
        content=bytes(kept[:cap]),
        request=response.request,
        extensions=response.extensions,
    )


class _BoundedErrorBodies:
    """Mixed into an SDK's HTTP client class: every non-2xx response's body is capped
    before the SDK reads it, and backend errors become httpx2 errors."""

    async def send(self, request: httpx2.Request, **kwargs: Any) -> httpx2.Response:
        stream = kwargs.pop("stream", False)
        try:
            response: httpx2.Response = await super().send(  # type: ignore[misc]
                request, stream=True, **kwargs
            )
        except Exception as exc:
            if isinstance(exc, httpx2.HTTPError) or not _backend_error(exc):
                raise
            message = f"{type(exc).__name__}: {exc}"
            raise httpx2.RemoteProtocolError(message, request=request) from exc
        if not response.is_success:
            return await _capped(response, ERROR_BODY_CAP_BYTES)
        if not stream:
            await response.aread()
        return response


def bounded_client(
    base: type[httpx2.AsyncClient],
    *,
    timeout: float,
    read_timeout: float | None,
    trust_env: bool,
    transport: httpx2.AsyncBaseTransport | None = None,
) -> httpx2.AsyncClient:
    """An instance of the SDK's client class `base` (its `DefaultAioHttpClient` or
    `DefaultAsyncHttpxClient`, which carry the SDK's own connection limits) with the rules
    of this module. `read_timeout` None: no per-read timer (the client's one watchdog per
    response bounds silence; a per-read timer re-armed on every read costs more than the
    rest of the read). `transport` replaces the network (tests)."""
    check_timeout(timeout, "timeout")
    if read_timeout is not None:
        check_timeout(read_timeout, "read timeout")
    bounded = type(f"Bounded{base.__name__}", (_BoundedErrorBodies, base), {})
    options: dict[str, Any] = {
        "timeout": httpx2.Timeout(timeout, read=read_timeout),
        "follow_redirects": False,
        "trust_env": trust_env,
    }
    if transport is not None:
        options["transport"] = transport
    client: httpx2.AsyncClient = bounded(**options)
    return client


@dataclass(frozen=True, slots=True)
class SDK:
    """What a provider's official SDK supplies to `SDKTransport`: its async client class,
    its two HTTP client classes, its stream class and its two exception types (the official
    SDKs share these shapes)."""

    client: Callable[..., Any]
    aiohttp_client: type[httpx2.AsyncClient]
    httpx_client: type[httpx2.AsyncClient]
    stream: Any
    status_error: type[Exception]
    connection_error: type[Exception]
    credential_headers: Callable[[str], dict[str, str]]  # the header(s) the SDK sends the key in


_STREAM_HEADERS = {"Accept-Encoding": "identity"}


class SDKTransport:
    """Opens `POST {base_url}{path}` streams through a provider's official SDK: the SDK owns
    auth, base URL, default headers and status mapping (`max_retries=0`); the request body is
    sent as the codec built it, and the raw response body is handed to lockgate's decoder.
    The credential header is pinned, so an SDK's custom-headers variable cannot replace it.
    """

    def __init__(
        self,
        options: TransportOptions,
        sdk: SDK,
        path: str,
        classify: ErrorClassifier,
    ) -> None:
        self.redactor = Redactor([options.api_key])
        self._sdk = sdk
        self._path = path
        self._classify = classify
        self._closed = False
        use_aiohttp = options.backend == "aiohttp" and options.http_transport is None
        read_timeout = options.read_timeout
        self._client = sdk.client(
            api_key=options.api_key,
            base_url=options.base_url,
            max_retries=0,
            timeout=httpx2.Timeout(options.timeout, read=read_timeout),
            # The credential header is pinned (custom-header variables cannot replace it);
            # streams are asked for uncompressed, so no server can inflate an event flood.
            default_headers={**sdk.credential_headers(options.api_key), **_STREAM_HEADERS},
            http_client=bounded_client(
                sdk.aiohttp_client if use_aiohttp else sdk.httpx_client,
                timeout=options.timeout,
                read_timeout=read_timeout,
                trust_env=options.trust_env,
                transport=options.http_transport,
            ),
        )

    async def open(self, request: Mapping[str, Any], *, attempt: int = 0) -> RawStream:
        if self._closed:
            raise OpenFailure("the transport is closed; no request made", retryable=False)
        try:
            # With `cast_to=httpx2.Response` the SDK hands back the unread response.
            response = await self._client.post(
                self._path,
                cast_to=httpx2.Response,
                content=encode_body(request),
                # The SDK would say 0 on every attempt: lockgate, the retry owner, knows.
                options={"headers": {"x-stainless-retry-count": str(attempt)}},
                stream=True,
                stream_cls=self._sdk.stream,
            )
        except self._sdk.status_error as exc:
            status = getattr(exc, "status_code", 0)
            body = getattr(exc, "body", None)
            headers = getattr(getattr(exc, "response", None), "headers", {})
            try:
                failure = self._classify(status, body, headers)
            except Exception:  # a classifier must never let server bytes crash the client
                failure = OpenFailure(f"HTTP {status}", retryable=False, status=status)
            raise failure from None
        except self._sdk.connection_error as exc:  # includes the SDK's timeout error
            cause = exc.__cause__ or exc  # the SDK wraps the HTTP library's error
            message = self.redactor(f"connection failed: {describe(cause)}")
            raise OpenFailure(message, retryable=True) from None
        return RawStream(cast(httpx2.Response, response))

    async def aclose(self) -> None:
        self._closed = True
        await self._client.close()
