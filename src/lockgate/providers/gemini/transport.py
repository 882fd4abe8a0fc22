"""Gemini transport: `POST {base}/v1beta/models/{model}:streamGenerateContent?alt=sse` over
lockgate's own bounded HTTP client (`lockgate.http.bounded_client` with `httpx2.AsyncClient`),
not through the official `google-genai` SDK.

Why not the SDK (read in google-genai 3.6.1, `_api_client.py`, `models.py`, `errors.py`):
it has no public seam that hands back the raw body without retrying. Its streaming call
(`models.generate_content_stream`) parses the SSE body itself into typed chunks; the raw
response exists only behind private methods (`BaseApiClient._async_request`,
`_build_request`). Its aiohttp path retries a failed connection on its own (a 1-10 s sleep
and a second attempt) unless `HttpRetryOptions` is set, which then hands every retry to
tenacity; its `timeout` is one number of milliseconds applied to connecting and to every
read; and it reads credentials and the base URL from its own variables (`GOOGLE_API_KEY`
over `GEMINI_API_KEY`). lockgate owns retries, silence and deadlines itself, so the SDK is
the reference for the wire shapes only.

What this transport keeps from `lockgate.http`, as every SDK transport does: no redirects
(a 3xx is a terminal opening failure: a request is never re-sent to another origin), error
bodies read under the 64 KiB cap, `trust_env` for proxy variables, `Accept-Encoding:
identity`, finite timeouts (`timeout` for connecting and sending, `read_timeout` per read
only when asked), `http_transport` replacing the network in tests, and every connection
error an `OpenFailure` (retryable) with the key redacted. `TransportOptions.backend` does
not apply: there is one HTTP client.

The key travels only in the `x-goog-api-key` header, never in the URL (`?key=` would end
up in proxy and server logs). The base URL is the host root (default
`https://generativelanguage.googleapis.com`, or `GOOGLE_GEMINI_BASE_URL` without
`--base-url`, the variable the SDK honours); `/v1beta/models/…` is appended to it.

The status decides before the body: Google answers HTTP errors with `Content-Type:
text/event-stream` and a JSON body (recorded), so any non-2xx is an opening failure
classified from that JSON (`errors.classify_gemini_failure`), and only a 2xx body is handed
to the SSE decoder as a `RawStream`. An `error` chunk inside a 200 stream is the decoder's.
"""

from __future__ import annotations

import json

from ...http import STREAM_HEADERS
from ...transport import TransportOptions
from ..direct import DirectTransport, configured_base_url
from .codec import stream_path
from .errors import classify_gemini_failure

__all__ = [
    "BASE_URL_VARIABLE",
    "DEFAULT_BASE_URL",
    "KEY_HEADER",
    "GeminiTransport",
]

DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com"
BASE_URL_VARIABLE = "GOOGLE_GEMINI_BASE_URL"  # google-genai's `_base_url.py` reads it too
KEY_HEADER = "x-goog-api-key"


def _error_document(content: bytes) -> object:
    """The JSON error document of a failed opening (at most the capped bytes): parsed, or
    the text of an SSE-framed one (`data: {...}`), or None."""
    text = content.decode("utf-8", "replace").strip()
    if text.startswith("data:"):
        text = text.removeprefix("data:").strip()
    try:
        document: object = json.loads(text)
    except ValueError:
        return None
    return document


class GeminiTransport(DirectTransport):
    """Opens Gemini `streamGenerateContent` SSE streams. The `attempt` of an opening (the
    retries before it) is not sent: Google's API has no retry-count header, and the SDK
    sends none."""

    def __init__(self, options: TransportOptions) -> None:
        super().__init__(
            options,
            configured_base_url(options, BASE_URL_VARIABLE, lambda: DEFAULT_BASE_URL),
            {
                KEY_HEADER: options.api_key,
                "Content-Type": "application/json",
                "Accept": "text/event-stream",
                **STREAM_HEADERS,  # uncompressed, so that no server can inflate an event flood
            },
            classify_gemini_failure,
        )

    def url(self, model: str) -> str:
        return f"{self._base_url}{stream_path(model)}?alt=sse"

    def error_document(self, content: bytes) -> object:
        return _error_document(content)
