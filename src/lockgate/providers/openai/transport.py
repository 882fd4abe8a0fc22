"""OpenAI transport through the official SDK, for the Responses and Chat Completions
endpoints.

The SDK owns connections, auth, base URL, default headers and HTTP status mapping, always
with `max_retries=0`: lockgate's client is the one retry owner. The request body is sent as
the codec built it (already-encoded JSON: none of the SDK's per-field request transform,
which costs most of a second for a long history), and the response body is taken raw and
decoded by lockgate's bounded SSE decoder. The HTTP client is `lockgate.http`'s: no
redirects, capped error bodies, the aiohttp backend by default.

Environment variables the SDK itself honours when lockgate does not set the value:
`OPENAI_BASE_URL` (without `--base-url`), `OPENAI_ORG_ID`, `OPENAI_PROJECT_ID`, and the
proxy variables (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`, `NO_PROXY`).
`OPENAI_CUSTOM_HEADERS` cannot replace the key: lockgate pins the `Authorization` header.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, cast

import httpx2
import openai

from ...credentials import Redactor
from ...errors import OpenFailure
from ...http import RawStream, bounded_client, describe, encode_body
from ..base import TransportOptions
from .errors import classify_openai_failure

Endpoint = Literal["responses", "chat"]
PATHS: dict[str, str] = {"responses": "/responses", "chat": "/chat/completions"}


class OpenAITransport:
    """Opens `POST {base_url}/responses` or `/chat/completions` streams with the `openai`
    SDK."""

    def __init__(self, options: TransportOptions, endpoint: Endpoint) -> None:
        self.redactor = Redactor([options.api_key])
        self._path = PATHS[endpoint]
        self._closed = False
        base = (
            openai.DefaultAioHttpClient
            if options.backend == "aiohttp" and options.http_transport is None
            else openai.DefaultAsyncHttpxClient
        )
        read_timeout = options.read_timeout or options.timeout
        self._client = openai.AsyncOpenAI(
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
                self._path,
                cast_to=httpx2.Response,
                content=encode_body(request),
                stream=True,
                stream_cls=openai.AsyncStream[object],
            )
        except openai.APIStatusError as exc:
            raise classify_openai_failure(exc.status_code, exc.body, exc.response.headers) from None
        except openai.APIConnectionError as exc:  # includes APITimeoutError
            cause = exc.__cause__ or exc  # the SDK wraps the HTTP library's error
            message = self.redactor(f"connection failed: {describe(cause)}")
            raise OpenFailure(message, retryable=True) from None
        return RawStream(cast(httpx2.Response, response))

    async def aclose(self) -> None:
        self._closed = True
        await self._client.close()
