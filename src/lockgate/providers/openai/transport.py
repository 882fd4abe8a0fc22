"""OpenAI transport through the official SDK.

The SDK owns connections, auth, base URL, headers, timeouts and HTTP status mapping, always
with `max_retries=0`: lockgate's boundary is the one retry owner. The body is taken *raw*
(`with_streaming_response`) and decoded by lockgate's bounded SSE decoder.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, cast

import httpx
import openai
from openai import AsyncOpenAI

from ..errors import OpenFailure, StreamInterrupted
from .openai_errors import classify_openai_failure

DEFAULT_TIMEOUT_SECONDS = 30.0


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


class OpenAIResponsesTransport:
    """Opens `POST {base_url}/responses` streams with the official `openai` SDK."""

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        read_timeout: float | None = None,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        """`timeout` bounds connecting, writing and waiting for the response head;
        `read_timeout` (default: `timeout`) is the SDK's per-read silence backstop. Keep it
        above the boundary's idle timeout so that lockgate's own, clearer, check fires first."""
        self._client = AsyncOpenAI(
            api_key=api_key,
            base_url=base_url,
            max_retries=0,
            timeout=openai.Timeout(timeout, read=read_timeout or timeout),
            # The SDK takes legacy httpx clients too (tests use httpx.MockTransport).
            http_client=cast(Any, http_client),
        )

    async def open(self, request: Mapping[str, Any]) -> _SDKByteStream:
        create = cast(Callable[..., Any], self._client.responses.with_streaming_response.create)
        context = create(**request)
        try:
            response = await context.__aenter__()
        except openai.APIStatusError as exc:
            raise classify_openai_failure(exc.status_code, exc.body, exc.response.headers) from None
        except openai.APIConnectionError as exc:  # includes APITimeoutError
            cause = exc.__cause__ or exc  # the SDK wraps the HTTP library's error
            raise OpenFailure(f"connection failed: {_describe(cause)}", retryable=True) from None
        return _SDKByteStream(context, response)

    async def aclose(self) -> None:
        await self._client.close()
