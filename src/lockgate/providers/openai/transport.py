"""OpenAI transport: the official `openai` SDK behind `lockgate.http.SDKTransport`, for the
Responses and Chat Completions endpoints (`SDKTransport` and `lockgate.http` say what the
SDK owns and what lockgate keeps). Sending the codec's already-encoded body spares the SDK's
per-field request transform, which costs most of a second for a long history.

Environment variables the SDK itself honours when lockgate does not set the value:
`OPENAI_BASE_URL` (without `--base-url`), `OPENAI_ORG_ID`, `OPENAI_PROJECT_ID`, and the
proxy variables (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`, `NO_PROXY`).
`OPENAI_CUSTOM_HEADERS` cannot replace the key: lockgate pins the `Authorization` header.
"""

from __future__ import annotations

from typing import Literal

import openai

from ...sdk import SDK, SDKTransport
from ...transport import TransportOptions
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
