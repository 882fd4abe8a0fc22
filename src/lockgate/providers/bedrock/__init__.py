"""AWS Bedrock ConverseStream (`POST {base}/model/{modelId}/converse-stream`): a binary
`application/vnd.amazon.eventstream` body (`lockgate.eventstream`), judged by the same gate
as every other protocol. `--base-url` is the bedrock-runtime endpoint
(`https://bedrock-runtime.us-east-1.amazonaws.com`); the key is a Bedrock API key in
`AWS_BEARER_TOKEN_BEDROCK`, sent as a bearer token (the proxy can sign with SigV4 instead,
`proxy/sigv4.py`). The proxy also gates InvokeModel for Anthropic models (`invoke.py`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ..base import Provider
from .codec import BedrockCodec
from .errors import classify_bedrock_failure

if TYPE_CHECKING:
    from ...gateway import Gateway
    from ...scripted.renderer import Renderer
    from ...scripted.scenario import Scenario
    from ...transport import Transport, TransportOptions

__all__ = ["DEFAULT_MODEL", "PROVIDER"]

# A cross-region inference profile of a Sonnet-class model: the balanced default.
DEFAULT_MODEL = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"


def _transport(options: TransportOptions) -> Transport:
    from .transport import BedrockTransport  # imports httpx2's client: only when needed

    return BedrockTransport(options)


def _gateway() -> Gateway:
    from .gateway import GATEWAY

    return GATEWAY


def _render() -> Renderer:
    from .server_render import RENDERER

    return RENDERER


def _scenarios() -> Sequence[Scenario]:
    from .scenarios import SCENARIOS

    return SCENARIOS


def _unplayable() -> Mapping[str, str]:
    from .scenarios import NEUTRAL_NOT_EXPRESSIBLE

    return NEUTRAL_NOT_EXPRESSIBLE


PROVIDER = Provider(
    name="bedrock",
    title="AWS Bedrock ConverseStream",
    key_variable="AWS_BEARER_TOKEN_BEDROCK",
    base_url_variable="AWS_ENDPOINT_URL_BEDROCK_RUNTIME",
    default_model=DEFAULT_MODEL,
    base_url_hint="https://bedrock-runtime.us-east-1.amazonaws.com",
    make_codec=BedrockCodec.from_options,
    make_transport=_transport,
    classify_error=classify_bedrock_failure,
    gateway=_gateway,
    render=_render,
    scenarios=_scenarios,
    unplayable=_unplayable,
)
