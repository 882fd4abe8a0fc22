"""OpenAI error responses: the body's code/type, terminal quota codes, and the
`x-ratelimit-reset-*` headers, turned into provider-neutral `ErrorDetails`."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping

from ...errors import OpenFailure
from ...retry import ErrorDetails, classify_opening_failure, parse_go_duration

# 429 has two meanings; these codes say retrying never helps (read from codes, not prose).
QUOTA_CODES = frozenset({"insufficient_quota", "billing_hard_limit_reached", "usage_limit_reached"})
# An input over the model's context window: OpenAI's code, and what compatible servers
# (vLLM, llama.cpp, LiteLLM's own) say without it.
CONTEXT_CODES = frozenset({"context_length_exceeded", "string_above_max_length"})
_OVER_WINDOW = re.compile(
    r"maximum context length|context length exceeded|context window|exceeds the context size"
    r"|too many tokens in the prompt",
    re.I,
)


def _reset_wait(headers: Mapping[str, str]) -> float | None:
    """`x-ratelimit-reset-{requests,tokens}` as Go durations. A limit known to have capacity
    left (`x-ratelimit-remaining-*` not 0) does not count; of the others the longest wins."""
    lowered = {key.lower(): value.strip() for key, value in headers.items()}
    waits = []
    for key, value in lowered.items():
        if not key.startswith("x-ratelimit-reset-"):
            continue
        remaining = lowered.get("x-ratelimit-remaining-" + key.removeprefix("x-ratelimit-reset-"))
        wait = parse_go_duration(value)
        if wait is not None and remaining in (None, "0"):
            waits.append(wait)
    return max(waits) if waits else None


def openai_error_details(body: object, headers: Mapping[str, str]) -> ErrorDetails:
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        error = body if isinstance(body, dict) else {}
    code, kind, message = (error.get(name) for name in ("code", "type", "message"))
    code = code if isinstance(code, str) else ""
    kind = kind if isinstance(kind, str) else ""
    return ErrorDetails(
        code=code or kind,
        message=message if isinstance(message, str) else "",
        quota_exhausted=code in QUOTA_CODES or kind in QUOTA_CODES,
        reset_wait=_reset_wait(headers),
        context_exceeded=code in CONTEXT_CODES
        or (isinstance(message, str) and _OVER_WINDOW.search(message) is not None),
    )


def classify_openai_failure(
    status: int, body: object, headers: Mapping[str, str] | None = None, *, now: float | None = None
) -> OpenFailure:
    headers = headers or {}
    details = openai_error_details(body, headers)
    return classify_opening_failure(
        status, details, headers, now=time.time() if now is None else now
    )


# The proxy's own errors in OpenAI's shape: (type, code) by status.
_PROXY_ERRORS = {
    400: ("invalid_request_error", "invalid_request_error"),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "forbidden"),
    408: ("invalid_request_error", "request_timeout"),
    413: ("invalid_request_error", "request_too_large"),
    426: ("invalid_request_error", "upgrade_required"),
    502: ("server_error", "bad_gateway"),
    503: ("server_error", "overloaded"),
    504: ("server_error", "gateway_timeout"),
}


def openai_error_body(status: int, message: str, param: str | None = None) -> bytes:
    """An error of the proxy's own as OpenAI's SDKs read it: `{"error": {"message",
    "type", "param", "code"}}`."""
    import json

    kind, code = _PROXY_ERRORS.get(
        status, ("invalid_request_error" if status < 500 else "server_error", "proxy_error")
    )
    error = {"message": message, "type": kind, "param": param, "code": code}
    return json.dumps({"error": error}).encode()
