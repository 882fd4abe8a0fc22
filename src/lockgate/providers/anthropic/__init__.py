"""Anthropic Messages (`POST {base}/v1/messages`): Anthropic, and Messages-compatible
gateways. `--base-url` is the host root (`https://api.anthropic.com`): the SDK appends
`/v1/messages` itself."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...transport import Transport
from ..base import CodecOptions, Provider, TransportOptions
from .codec import AnthropicCodec
from .errors import classify_anthropic_failure

if TYPE_CHECKING:
    from ...lab.protocol import LabProtocol

# The newest Sonnet-class alias in the installed SDK's model list (anthropic 2.16,
# `anthropic/types/model.py`): the balanced default for an agent loop.
DEFAULT_MODEL = "claude-sonnet-5-5"


def _codec(options: CodecOptions) -> AnthropicCodec:
    return AnthropicCodec.from_options(options)


def _transport(options: TransportOptions) -> Transport:
    from .transport import AnthropicTransport  # imports the SDK: only when needed

    return AnthropicTransport(options)


def _lab() -> LabProtocol:
    from .lab import AnthropicLab

    return AnthropicLab()


PROVIDER = Provider(
    name="anthropic",
    title="Anthropic Messages",
    key_variable="ANTHROPIC_API_KEY",
    base_url_variable="ANTHROPIC_BASE_URL",
    default_model=DEFAULT_MODEL,
    base_url_hint="https://api.anthropic.com",
    make_codec=_codec,
    make_transport=_transport,
    classify_error=classify_anthropic_failure,
    lab=_lab,
    options=frozenset({"thinking_budget"}),
)
