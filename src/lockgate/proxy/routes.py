"""Which protocol a request speaks, from its method and path: what the proxy and the gating
transport route by. `POST …/responses` is OpenAI Responses, `POST …/chat/completions` is
Chat Completions, `POST …/messages` is Anthropic Messages, whatever prefix comes before
(`/v1`, a gateway's own); anything else (another path, another method) is no protocol
request and passes to the upstream unchanged.
"""

from __future__ import annotations

from ..providers import provider as get_provider
from ..providers.base import Provider

__all__ = ["GATED_SUFFIXES", "route"]

# The path ends each gated protocol has, and the provider that speaks it.
GATED_SUFFIXES: tuple[tuple[str, str], ...] = (
    ("/chat/completions", "chat"),
    ("/responses", "responses"),
    ("/messages", "anthropic"),
)


def route(method: str, path: str) -> Provider | None:
    """The provider a request is gated with (None: it passes unchanged). `path` is the
    request's path without its query."""
    if method.upper() != "POST":
        return None
    trimmed = path.rstrip("/")
    for suffix, name in GATED_SUFFIXES:
        if trimmed.endswith(suffix):
            return get_provider(name)
    return None
