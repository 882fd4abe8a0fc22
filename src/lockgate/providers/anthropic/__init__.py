"""Anthropic Messages (`POST {base}/v1/messages`): Anthropic, and Messages-compatible
gateways. `--base-url` is the host root (`https://api.anthropic.com`): the SDK appends
`/v1/messages` itself."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..base import Provider
from .codec import AnthropicCodec
from .errors import classify_anthropic_failure
from .options import AnthropicOptions

if TYPE_CHECKING:
    from ...gateway import Gateway
    from ...scripted.renderer import Renderer
    from ...scripted.scenario import Scenario
    from ...transport import Transport, TransportOptions

# The newest Sonnet-class alias in the installed SDK's model list (anthropic 2.16,
# `anthropic/types/model.py`): the balanced default for an agent loop.
DEFAULT_MODEL = "claude-sonnet-5-5"


def _transport(options: TransportOptions) -> Transport:
    from .transport import AnthropicTransport  # imports the SDK: only when needed

    return AnthropicTransport(options)


def _render() -> Renderer:
    from .render import RENDERER

    return RENDERER


def _scenarios() -> Sequence[Scenario]:
    from .scenarios import SCENARIOS

    return SCENARIOS


def _gateway() -> Gateway:
    from .gateway import GATEWAY

    return GATEWAY


PROVIDER = Provider(
    name="anthropic",
    title="Anthropic Messages",
    key_variable="ANTHROPIC_API_KEY",
    base_url_variable="ANTHROPIC_BASE_URL",
    default_model=DEFAULT_MODEL,
    base_url_hint="https://api.anthropic.com",
    make_codec=AnthropicCodec.from_options,
    make_transport=_transport,
    classify_error=classify_anthropic_failure,
    render=_render,
    scenarios=_scenarios,
    options=AnthropicOptions,
    gateway=_gateway,
)
