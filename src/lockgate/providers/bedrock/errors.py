"""Bedrock error responses (for the ConverseStream provider), in provider-neutral terms.

A failed Bedrock call answers with a JSON body `{"message": "..."}` (recorded: HTTP 400
"The provided model identifier is invalid.") and names the error in the
`x-amzn-errortype` header (`ThrottlingException:http://internal.amazon.com/…`: the part
before the colon). Bedrock states no rate-limit reset time; the status decides a retry
(`retry.classify_opening_failure`: 408, 429 and 5xx), and a `ServiceQuotaExceededException`
is a spent quota (terminal). A gateway in front may answer `{"error": {"message"}}`, which is
read too.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from ...errors import OpenFailure
from ...retry import ErrorDetails, classify_opening_failure

__all__ = ["ERROR_TYPE_HEADER", "bedrock_error_details", "classify_bedrock_failure"]

ERROR_TYPE_HEADER = "x-amzn-errortype"
QUOTA_TYPES = frozenset({"ServiceQuotaExceededException"})


def bedrock_error_details(body: object, headers: Mapping[str, str]) -> ErrorDetails:
    lowered = {key.lower(): value for key, value in headers.items()}
    kind = lowered.get(ERROR_TYPE_HEADER, "").split(":", 1)[0].strip()
    message: object = None
    if isinstance(body, dict):
        message = body.get("message", body.get("Message"))
        nested = body.get("error")
        if message is None and isinstance(nested, dict):  # a gateway's error shape in front
            message = nested.get("message")
        if not kind and isinstance(body.get("__type"), str):
            kind = str(body["__type"]).rsplit("#", 1)[-1]
    return ErrorDetails(
        code=kind,
        message=message if isinstance(message, str) else "",
        quota_exhausted=kind in QUOTA_TYPES,
    )


def classify_bedrock_failure(
    status: int, body: object, headers: Mapping[str, str] | None = None, *, now: float | None = None
) -> OpenFailure:
    """An HTTP error while opening a ConverseStream, from its status, body and headers."""
    headers = headers or {}
    return classify_opening_failure(
        status,
        bedrock_error_details(body, headers),
        headers,
        now=time.time() if now is None else now,
    )
