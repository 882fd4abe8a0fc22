"""The provider registry: one entry per protocol lockgate speaks.

Provider-specific code lives only in its folder here (`providers/<name>/`); adding a provider
touches that folder and one line below. The CLI, the lab and the tests pick providers from
this registry.
"""

from __future__ import annotations

from .anthropic import PROVIDER as ANTHROPIC
from .base import CodecOptions, Provider, TransportOptions
from .chat import PROVIDER as CHAT
from .responses import PROVIDER as RESPONSES

__all__ = [
    "DEFAULT_PROVIDER",
    "PROVIDERS",
    "CodecOptions",
    "Provider",
    "TransportOptions",
    "provider",
]

PROVIDERS: dict[str, Provider] = {entry.name: entry for entry in (RESPONSES, CHAT, ANTHROPIC)}


DEFAULT_PROVIDER = RESPONSES.name  # what `run`, `serve` and the lab's helpers speak by default


def provider(name: str | None = None) -> Provider:
    """The registry entry for `name`, or the default provider's (KeyError names the known
    providers)."""
    if name is None:
        name = DEFAULT_PROVIDER
    try:
        return PROVIDERS[name]
    except KeyError:
        known = ", ".join(PROVIDERS)
        raise KeyError(f"unknown provider {name!r} (known: {known})") from None
