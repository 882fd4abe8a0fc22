"""OpenAI transport: the official `openai` SDK behind lockgate's `SDKTransport`, for the
Responses and Chat Completions endpoints.

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

from typing import Literal

import openai

from ...http import SDK, SDKTransport
from ..base import TransportOptions
from .errors import classify_openai_failure

Endpoint = Literal["responses", "chat"]
PATHS: dict[str, str] = {"responses": "/responses", "chat": "/chat/completions"}

OPENAI_SDK = SDK(
    client=openai.AsyncOpenAI,
    aiohttp_client=openai.DefaultAioHttpClient,
    httpx_client=openai.DefaultAsyncHttpxClient,
    stream=openai.AsyncStream[object],
    status_error=openai.APIStatusError,
    connection_error=openai.APIConnectionError,
    credential_headers=lambda key: {"Authorization": f"Bearer {key}"},
)


class OpenAITransport(SDKTransport):
    """Opens `POST {base_url}/responses` or `/chat/completions` streams with the `openai`
    SDK."""

    def __init__(self, options: TransportOptions, endpoint: Endpoint) -> None:
        super().__init__(options, OPENAI_SDK, PATHS[endpoint], classify_openai_failure)
