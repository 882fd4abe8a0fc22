"""Bedrock ConverseStream transport: `POST {base}/model/{modelId}/converse-stream` over
lockgate's own bounded HTTP client, authenticated with a Bedrock API key.

The key (`AWS_BEARER_TOKEN_BEDROCK`, the variable boto3 and the AWS SDKs read) is sent as
`Authorization: Bearer <key>`, as Bedrock takes API keys. SigV4 signing with AWS credentials
is not done here yet (issue 29, later work). The base URL is `--base-url`, else
`AWS_ENDPOINT_URL_BEDROCK_RUNTIME` (boto3's variable), else
`https://bedrock-runtime.{region}.amazonaws.com` with the region from `AWS_REGION`, then
`AWS_DEFAULT_REGION`, then `us-east-1`. The model id (or an inference-profile ARN, which holds
`:` and `/`) is one encoded path segment.

What it keeps from `lockgate.http`, as every transport does: no redirects, error bodies read
under the 64 KiB cap, `Accept-Encoding: identity`, finite timeouts, `http_transport`
replacing the network in tests, every connection error an `OpenFailure` (retryable) with the
key redacted. A non-2xx answer is an opening failure classified from its JSON body and its
`x-amzn-errortype` header (`errors.classify_bedrock_failure`); a 2xx body is handed to the
event-stream framer as a `RawStream`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import httpx2

from ...credentials import Redactor
from ...errors import OpenFailure
from ...eventstream import MEDIA_TYPE
from ...http import ERROR_BODY_CAP_BYTES, STREAM_HEADERS, RawStream, bounded_client, describe
from ...http import encode_body as _encode_body
from ...transport import TransportOptions, base_url_problem
from .codec import stream_path
from .errors import classify_bedrock_failure

__all__ = ["BASE_URL_VARIABLE", "KEY_VARIABLE", "BedrockTransport", "default_base_url"]

KEY_VARIABLE = "AWS_BEARER_TOKEN_BEDROCK"
BASE_URL_VARIABLE = "AWS_ENDPOINT_URL_BEDROCK_RUNTIME"


def default_base_url() -> str:
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    return f"https://bedrock-runtime.{region}.amazonaws.com"


def _base_url(options: TransportOptions) -> str:
    if options.base_url is not None:
        return options.base_url.rstrip("/")
    value = os.environ.get(BASE_URL_VARIABLE)
    if value is None:
        return default_base_url()
    problem = base_url_problem(value)
    if problem is not None:
        raise ValueError(f"{BASE_URL_VARIABLE}: {problem}")
    return value.rstrip("/")


class BedrockTransport:
    """Opens ConverseStream event streams."""

    def __init__(self, options: TransportOptions) -> None:
        self.redactor = Redactor([options.api_key])
        self._base_url = _base_url(options)
        self._headers = {
            "Authorization": f"Bearer {options.api_key}",
            "Content-Type": "application/json",
            "Accept": MEDIA_TYPE,
            **STREAM_HEADERS,
        }
        self._client = bounded_client(
            httpx2.AsyncClient,
            timeout=options.timeout,
            read_timeout=options.read_timeout,
            trust_env=options.trust_env,
            transport=options.http_transport,
        )
        self._closed = False

    def url(self, model: str) -> str:
        return f"{self._base_url}{stream_path(model)}"

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
        status = response.status_code
        if 300 <= status < 400:
            raise OpenFailure(
                f"HTTP {status}: redirects are not followed (a request is never re-sent to "
                "another origin)",
                retryable=False,
                status=status,
            )
        try:
            document: object = json.loads(response.content[:ERROR_BODY_CAP_BYTES])
        except ValueError:
            document = None
        try:
            failure = classify_bedrock_failure(status, document, dict(response.headers))
        except Exception:  # a classifier must never let server bytes crash the client
            failure = OpenFailure(f"HTTP {status}", retryable=False, status=status)
        raise failure

    async def aclose(self) -> None:
        self._closed = True
        await self._client.aclose()
