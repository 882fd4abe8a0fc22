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

import os

from ...eventstream import MEDIA_TYPE
from ...http import STREAM_HEADERS
from ...transport import TransportOptions
from ..direct import DirectTransport, configured_base_url
from .codec import stream_path
from .errors import classify_bedrock_failure

__all__ = ["BASE_URL_VARIABLE", "KEY_VARIABLE", "BedrockTransport", "default_base_url"]

KEY_VARIABLE = "AWS_BEARER_TOKEN_BEDROCK"
BASE_URL_VARIABLE = "AWS_ENDPOINT_URL_BEDROCK_RUNTIME"


def default_base_url() -> str:
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    return f"https://bedrock-runtime.{region}.amazonaws.com"


class BedrockTransport(DirectTransport):
    """Opens ConverseStream event streams."""

    def __init__(self, options: TransportOptions) -> None:
        super().__init__(
            options,
            configured_base_url(options, BASE_URL_VARIABLE, default_base_url),
            {
                "Authorization": f"Bearer {options.api_key}",
                "Content-Type": "application/json",
                "Accept": MEDIA_TYPE,
                **STREAM_HEADERS,
            },
            classify_bedrock_failure,
        )

    def url(self, model: str) -> str:
        return f"{self._base_url}{stream_path(model)}"
