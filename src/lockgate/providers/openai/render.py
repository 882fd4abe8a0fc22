"""OpenAI's conventions for the lab, shared by the Responses and Chat renderers: error
bodies (`{"error": {message, type, param, code}}`) and the `x-ratelimit-*` headers."""

from __future__ import annotations

from typing import Any

from ...scripted.reply import OpeningError

# kind → (type, code) as OpenAI sends them
_ERRORS: dict[str, tuple[str, str]] = {
    "auth": ("invalid_request_error", "invalid_api_key"),
    "quota": ("insufficient_quota", "insufficient_quota"),
    "rate_limit": ("requests", "rate_limit_exceeded"),
    "overloaded": ("server_error", "server_is_overloaded"),
    "server": ("server_error", "server_error"),
    "unavailable": ("server_error", "server_error"),
    "exhausted": ("invalid_request_error", "script_exhausted"),
    "invalid": ("invalid_request_error", "invalid_request"),
}


def openai_error_body(error: OpeningError) -> dict[str, Any]:
    error_type, code = _ERRORS[error.kind]
    return {"error": {"message": error.message, "type": error_type, "param": None, "code": code}}


def openai_reset_headers(seconds: float) -> dict[str, str]:
    """Requests exhausted, resetting in `seconds`; tokens with capacity left (their longer
    reset must not count)."""
    return {
        "x-ratelimit-limit-requests": "500",
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": f"{seconds:g}s",
        "x-ratelimit-remaining-tokens": "39000",
        "x-ratelimit-reset-tokens": "6m0s",
    }
