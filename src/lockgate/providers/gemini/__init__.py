"""Google Gemini native streaming (`POST {base}/v1beta/models/{model}:streamGenerateContent
?alt=sse`): the Gemini API, and servers compatible with it. `--base-url` is the host root
(`https://generativelanguage.googleapis.com`): the transport appends `/v1beta/models/…`.

The key belongs in `GEMINI_API_KEY`, or else `GOOGLE_API_KEY` (`KEY_VARIABLES`, in that
order; the registry entry names the first), and is sent only in the `x-goog-api-key`
header.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ..base import Provider
from .codec import GeminiCodec
from .errors import classify_gemini_failure
from .options import GeminiOptions

if TYPE_CHECKING:
    from ...gateway import Gateway
    from ...scripted.renderer import Renderer
    from ...scripted.scenario import Scenario
    from ...transport import Transport, TransportOptions

__all__ = ["DEFAULT_MODEL", "KEY_VARIABLES", "PROVIDER"]

# The balanced default for an agent loop: fast, with thinking, on the free tier too.
DEFAULT_MODEL = "gemini-2.5-flash"
# Where the key may be, first match wins (google-genai itself prefers GOOGLE_API_KEY when
# both are set; lockgate names its own variable first, as the registry entry does).
KEY_VARIABLES = ("GEMINI_API_KEY", "GOOGLE_API_KEY")


def _transport(options: TransportOptions) -> Transport:
    from .transport import GeminiTransport  # imports httpx2's client: only when needed

    return GeminiTransport(options)


def _gateway() -> Gateway:
    from .gateway import GATEWAY

    return GATEWAY


def _render() -> Renderer:
    from .render import RENDERER

    return RENDERER


def _scenarios() -> Sequence[Scenario]:
    from .scenarios import SCENARIOS

    return SCENARIOS


def _unplayable() -> Mapping[str, str]:
    from .scenarios import NEUTRAL_NOT_EXPRESSIBLE

    return NEUTRAL_NOT_EXPRESSIBLE


PROVIDER = Provider(
    name="gemini",
    title="Google Gemini",
    key_variable=KEY_VARIABLES[0],
    base_url_variable="GOOGLE_GEMINI_BASE_URL",
    default_model=DEFAULT_MODEL,
    base_url_hint="https://generativelanguage.googleapis.com",
    make_codec=GeminiCodec.from_options,
    make_transport=_transport,
    classify_error=classify_gemini_failure,
    render=_render,
    scenarios=_scenarios,
    options=GeminiOptions,
    unplayable=_unplayable,
    key_fallbacks=KEY_VARIABLES[1:],
    gateway=_gateway,
)
