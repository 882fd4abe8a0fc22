"""The HTTP client every transport is given (an official SDK's, or lockgate's own).

The SDKs own connections, auth, base URLs and status mapping (`sdk.SDKTransport`); a
provider without a suitable SDK uses this client directly. This module decides how the
client is built, the same way for every provider:

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
import functools
import json
import os
import re
import ssl
import sys
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx2

from .errors import StreamInterrupted
from .transport import check_timeout

__all__ = [
    "ERROR_BODY_CAP_BYTES",
    "STREAM_HEADERS",
    "RawStream",
    "bounded_client",
    "describe",
    "encode_body",
]

ERROR_BODY_CAP_BYTES = 64 * 1024
_BODY_HEADERS = ("content-encoding", "content-length", "transfer-encoding")
# Streams are asked for uncompressed, so that no server can inflate an event flood.
STREAM_HEADERS = {"Accept-Encoding": "identity"}


def encode_body(request: Mapping[str, Any]) -> bytes:
    """A request as UTF-8 JSON, sent as the codec built it. A lone surrogate (model output
    can carry one) becomes its JSON escape instead of failing the encoding."""
    text = json.dumps(request, ensure_ascii=False, separators=(",", ":"))
    return text.encode("utf-8", "backslashreplace")


# aiohttp's payload errors quote an inner error with a status it never received:
# `<TransferEncodingError: 400, message='Not enough data …'>`; the status is not the
# server's, so it is left out.
_INNER_PAYLOAD_ERROR = re.compile(r"<(\w+): \d{3}, message='([^']*)'>")


def describe(exc: BaseException) -> str:
    """`Type: first line of the message` (for connection and stream errors)."""
    text = str(exc).strip().splitlines()
    if not text:
        return type(exc).__name__
    first = _INNER_PAYLOAD_ERROR.sub(r"\1: \2", text[0])
    return f"{type(exc).__name__}: {first}"


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


@functools.cache
def _verify_context(trust_env: bool, cert_file: str | None, cert_dir: str | None) -> ssl.SSLContext:
    return httpx2.create_ssl_context(trust_env=trust_env)


def shared_ssl_context(trust_env: bool) -> ssl.SSLContext:
    """The context that verifies servers against the system's CA certificates (or
    `SSL_CERT_FILE` / `SSL_CERT_DIR` when `trust_env`), loaded once per process and
    setting: loading the certificates costs about 20 ms of CPU, every client the same."""
    if not trust_env:
        return _verify_context(False, None, None)
    return _verify_context(True, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))


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
        "verify": shared_ssl_context(trust_env),
    }
    if transport is not None:
        options["transport"] = transport
    client: httpx2.AsyncClient = bounded(**options)
    return client
