"""What the OpenAI Responses and Chat providers share: the official `openai` SDK as transport
(`transport.py`, imported only when a transport is made), OpenAI error bodies (`errors.py`),
what a model name implies (`models.py`), the history rules of both encoders
(`history.py`), their lab conventions (`render.py`), and `openai_provider`, which builds
either registry entry from what differs."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal

from ..base import CodecOptions, Provider
from .errors import classify_openai_failure

if TYPE_CHECKING:
    from ...codec import ProviderCodec
    from ...gateway import Gateway
    from ...scripted.renderer import Renderer
    from ...scripted.scenario import Scenario
    from ...transport import Transport, TransportOptions

__all__ = ["openai_provider"]

KEY_VARIABLE = "OPENAI_API_KEY"
BASE_URL_VARIABLE = "OPENAI_BASE_URL"
DEFAULT_MODEL = "gpt-4.1-mini"
BASE_URL_HINT = "https://api.openai.com/v1"

Endpoint = Literal["responses", "chat"]


def openai_provider(
    endpoint: Endpoint,
    title: str,
    make_codec: Callable[[CodecOptions], ProviderCodec],
    options: type | None = None,
) -> Provider:
    """The registry entry of one OpenAI endpoint: its folder (`providers/<endpoint>/`) holds
    the renderer (`render.RENDERER`), the scenarios (`scenarios.SCENARIOS`) and the
    gateway (`gateway.GATEWAY`)."""
    package = f"lockgate.providers.{endpoint}"

    def make_transport(transport_options: TransportOptions) -> Transport:
        from .transport import OpenAITransport  # imports the SDK: only when needed

        return OpenAITransport(transport_options, endpoint)

    def render() -> Renderer:
        renderer: Renderer = importlib.import_module(f"{package}.render").RENDERER
        return renderer

    def scenarios() -> Sequence[Scenario]:
        own: Sequence[Scenario] = importlib.import_module(f"{package}.scenarios").SCENARIOS
        return own

    def gateway() -> Gateway:
        own: Gateway = importlib.import_module(f"{package}.gateway").GATEWAY
        return own

    return Provider(
        name=endpoint,
        title=title,
        key_variable=KEY_VARIABLE,
        base_url_variable=BASE_URL_VARIABLE,
        default_model=DEFAULT_MODEL,
        base_url_hint=BASE_URL_HINT,
        make_codec=make_codec,
        make_transport=make_transport,
        classify_error=classify_openai_failure,
        render=render,
        scenarios=scenarios,
        options=options,
        gateway=gateway,
    )
