"""Anthropic transport through the official `anthropic` SDK (`POST {base}/v1/messages`).

The SDK owns connections, auth, the base URL (the host root: it appends `/v1/messages`
itself), default headers (`anthropic-version`) and HTTP status mapping, always with
`max_retries=0`: lockgate's client is the one retry owner. The request body is sent as the
codec built it (already-encoded JSON bytes, none of the SDK's per-field preparation) and the
response body is taken raw and decoded by lockgate's bounded SSE decoder. The HTTP client
is `lockgate.http`'s: no redirects, capped error bodies, the aiohttp backend by default.

The SDK sends the API key as `Authorization: Bearer <key>` (anthropic 2.16,
`_api_key_auth`); lockgate pins that header through `default_headers`, so that
`ANTHROPIC_CUSTOM_HEADERS` cannot replace the key. Because the key is passed explicitly,
the SDK reads none of its credential sources (`ANTHROPIC_API_KEY`, `ANTHROPIC_AUTH_TOKEN`,
`ANTHROPIC_PROFILE`, `ANTHROPIC_CONFIG_DIR` and the config files on disk, the
`ANTHROPIC_IDENTITY_TOKEN*` / federation variables).

Environment variables the SDK itself still honours: `ANTHROPIC_BASE_URL` (without
`--base-url`), `ANTHROPIC_CUSTOM_HEADERS` (newline-separated `Name: value` headers added to
every request; they cannot replace the pinned credential), `ANTHROPIC_LOG` (SDK logging),
`ANTHROPIC_OPEN_TELEMETRY` and its `…_PROPAGATION`, `…_TRACES_CONTENT_MODE`,
`…_TRACES_MAX_CONTENT_BYTES` companions (the SDK's OpenTelemetry tracing, which may record
request content), and the proxy variables (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`,
`NO_PROXY`, unless `trust_env` is off).

An in-stream `event: error` is not an exception here (the raw body is read, not the SDK's
typed stream): the decoder reports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import anthropic
import httpx2

from ...credentials import Redactor
from ...errors import OpenFailure
from ...http import RawStream, bounded_client, describe, encode_body
from ..base import TransportOptions
from .errors import classify_anthropic_failure

__all__ = ["PATH", "AnthropicTransport"]

PATH = "/v1/messages"


class AnthropicTransport:
    """Opens `POST {base_url}/v1/messages` streams with the `anthropic` SDK."""

    def __init__(self, options: TransportOptions) -> None:
        self.redactor = Redactor([options.api_key])
        self._closed = False
        base = (
            anthropic.DefaultAioHttpClient
            if options.backend == "aiohttp" and options.http_transport is None
            else anthropic.DefaultAsyncHttpxClient
        )
        read_timeout = options.read_timeout or options.timeout
        self._client = anthropic.AsyncAnthropic(
            api_key=options.api_key,
            base_url=options.base_url,
            max_retries=0,
            timeout=httpx2.Timeout(options.timeout, read=read_timeout),
            default_headers={"Authorization": f"Bearer {options.api_key}"},
            http_client=bounded_client(
                base,
                timeout=options.timeout,
                read_timeout=read_timeout,
                trust_env=options.trust_env,
                transport=options.http_transport,
            ),
        )

    async def open(self, request: Mapping[str, Any]) -> RawStream:
        if self._closed:
            raise OpenFailure("the transport is closed; no request made", retryable=False)
        try:
            # With `cast_to=httpx2.Response` the SDK hands back the unread response.
            response = await self._client.post(
                PATH,
                cast_to=httpx2.Response,
                content=encode_body(request),
                stream=True,
                stream_cls=anthropic.AsyncStream[object],
            )
        except anthropic.APIStatusError as exc:
            # `.body` is the whole JSON document (`{"type": "error", "error": {…}}`).
            raise classify_anthropic_failure(
                exc.status_code, exc.body, exc.response.headers
            ) from None
        except anthropic.APIConnectionError as exc:  # includes APITimeoutError
            cause = exc.__cause__ or exc  # the SDK wraps the HTTP library's error
            message = self.redactor(f"connection failed: {describe(cause)}")
            raise OpenFailure(message, retryable=True) from None
        return RawStream(cast(httpx2.Response, response))

    async def aclose(self) -> None:
        self._closed = True
        await self._client.close()
