"""Anthropic transport: the official `anthropic` SDK behind `lockgate.http.SDKTransport`,
for `POST {base}/v1/messages` (`SDKTransport` and `lockgate.http` say what the SDK owns and
what lockgate keeps). The base URL is the host root: the SDK appends `/v1/messages` itself,
and sends the `anthropic-version` header.

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

import anthropic

from ...sdk import SDK, SDKTransport
from ...transport import TransportOptions
from .errors import classify_anthropic_failure

__all__ = ["ANTHROPIC_SDK", "PATH", "AnthropicTransport"]

PATH = "/v1/messages"

ANTHROPIC_SDK = SDK(
    client=anthropic.AsyncAnthropic,
    aiohttp_client=anthropic.DefaultAioHttpClient,
    httpx_client=anthropic.DefaultAsyncHttpxClient,
    stream=anthropic.AsyncStream[object],
    status_error=anthropic.APIStatusError,  # `.body` is the whole JSON error document
    connection_error=anthropic.APIConnectionError,
    # anthropic 2.16 sends the key as a bearer token (`_api_key_auth`)
    credential_headers=lambda key: {"Authorization": f"Bearer {key}"},
)


class AnthropicTransport(SDKTransport):
    """Opens `POST {base_url}/v1/messages` streams with the `anthropic` SDK."""

    def __init__(self, options: TransportOptions) -> None:
        super().__init__(options, ANTHROPIC_SDK, PATH, classify_anthropic_failure)
