"""A transport that opens a provider's stream over lockgate's own bounded HTTP client (no
SDK), as the Gemini and Bedrock transports do: `POST` of the request (its `model` taken out
of the body and put in the URL), the key redacted from every connection error, no
redirects, and a failed opening classified from its capped error body.

Imported only by those transports (it imports httpx2's client).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any

import httpx2

from ..credentials import Redactor
from ..errors import OpenFailure
from ..http import ERROR_BODY_CAP_BYTES, RawStream, bounded_client, describe
from ..http import encode_body as _encode_body
from ..transport import ErrorClassifier, TransportOptions, base_url_problem

__all__ = ["DirectTransport", "configured_base_url"]


def configured_base_url(
    options: TransportOptions, variable: str, default: Callable[[], str]
) -> str:
    """`--base-url`, else the environment variable `variable` (checked), else `default()`;
    without a trailing slash."""
    if options.base_url is not None:
        return options.base_url.rstrip("/")
    value = os.environ.get(variable)
    if value is None:
        return default()
    problem = base_url_problem(value)
    if problem is not None:
        raise ValueError(f"{variable}: {problem}")
    return value.rstrip("/")


class DirectTransport:
    """Opens streams with one bounded `httpx2.AsyncClient`; a provider gives its base URL,
    headers, error classifier and `url(model)`, and may read its error bodies its own way
    (`error_document`)."""

    def __init__(
        self,
        options: TransportOptions,
        base_url: str,
        headers: Mapping[str, str],
        classify: ErrorClassifier,
    ) -> None:
        self.redactor = Redactor([options.api_key])
        self._base_url = base_url
        self._headers = dict(headers)
        self._classify = classify
        self._client = bounded_client(
            httpx2.AsyncClient,
            timeout=options.timeout,
            read_timeout=options.read_timeout,
            trust_env=options.trust_env,
            transport=options.http_transport,
        )
        self._closed = False

    def url(self, model: str) -> str:
        raise NotImplementedError

    def error_document(self, content: bytes) -> object:
        """The JSON error document of a failed opening (at most the capped bytes), or None."""
        try:
            document: object = json.loads(content)
        except ValueError:
            return None
        return document

    async def open(self, request: Mapping[str, Any], *, attempt: int = 0) -> RawStream:
        if self._closed:
            raise OpenFailure("the transport is closed; no request made", retryable=False)
        body = dict(request)
        model = body.pop("model", None)
        if type(model) is not str or not model:
            raise OpenFailure("the request names no model; no request made", retryable=False)
        http_request = self._client.build_request(
            "POST", self.url(model), content=_encode_body(body), headers=self._headers
        )
        try:
            response = await self._client.send(http_request, stream=True)
        except (httpx2.HTTPError, OSError) as exc:
            message = self.redactor(f"connection failed: {describe(exc)}")
            raise OpenFailure(message, retryable=True) from None
        if response.is_success:
            return RawStream(response)
        # Not 2xx: the body was already read under the cap and the connection closed.
        status = response.status_code
        if 300 <= status < 400:
            raise OpenFailure(
                f"HTTP {status}: redirects are not followed (a request is never re-sent to "
                "another origin)",
                retryable=False,
                status=status,
            )
        document = self.error_document(response.content[:ERROR_BODY_CAP_BYTES])
        try:
            failure = self._classify(status, document, dict(response.headers))
        except Exception:  # a classifier must never let server bytes crash the client
            failure = OpenFailure(f"HTTP {status}", retryable=False, status=status)
        raise failure

    async def aclose(self) -> None:
        self._closed = True
        await self._client.aclose()
