"""OpenAI transport through the official SDK, for the Responses and Chat Completions
endpoints.

The SDK owns connections, auth, base URL, headers, timeouts and HTTP status mapping, always
with `max_retries=0`: lockgate's client is the one retry owner. The body is taken *raw*
(`with_streaming_response`) and decoded by lockgate's bounded SSE decoder.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Literal, cast

import openai
from openai import AsyncOpenAI

from ...credentials import Redactor
from ...errors import OpenFailure, StreamInterrupted
from ..base import TransportOptions
from .errors import classify_openai_failure

Endpoint = Literal["responses", "chat"]


class _SDKByteStream:
    """The raw body of one streaming response."""

    def __init__(self, context: Any, response: Any) -> None:
        self._context = context
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.iter_bytes():
                yield chunk
        except Exception as exc:
            raise StreamInterrupted(_describe(exc)) from None

    async def aclose(self) -> None:
        await self._context.__aexit__(None, None, None)


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


class OpenAITransport:
    """Opens `POST {base_url}/responses` or `/chat/completions` streams with the `openai`
    SDK."""

    def __init__(self, options: TransportOptions, endpoint: Endpoint) -> None:
        self.redactor = Redactor([options.api_key])
        self._endpoint = endpoint
        self._closed = False
        self._client = AsyncOpenAI(
            api_key=options.api_key,
            base_url=options.base_url,
            max_retries=0,
            timeout=openai.Timeout(options.timeout, read=options.read_timeout or options.timeout),
            # The SDK takes legacy httpx clients too (tests use httpx.MockTransport).
            http_client=cast(Any, options.http_client),
        )

    async def open(self, request: Mapping[str, Any]) -> _SDKByteStream:
        if self._closed:
            raise OpenFailure("the transport is closed; no request made", retryable=False)
        resource: Any = (
            self._client.responses
            if self._endpoint == "responses"
            else self._client.chat.completions
        )
        create = cast(Callable[..., Any], resource.with_streaming_response.create)
        context = create(**request)
        try:
            response = await context.__aenter__()
        except openai.APIStatusError as exc:
            raise classify_openai_failure(exc.status_code, exc.body, exc.response.headers) from None
        except openai.APIConnectionError as exc:  # includes APITimeoutError
            cause = exc.__cause__ or exc  # the SDK wraps the HTTP library's error
            message = self.redactor(f"connection failed: {_describe(cause)}")
            raise OpenFailure(message, retryable=True) from None
        return _SDKByteStream(context, response)

    async def aclose(self) -> None:
        self._closed = True
        await self._client.close()
