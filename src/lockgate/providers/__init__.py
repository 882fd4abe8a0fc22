"""The provider registry: one entry per protocol lockgate speaks.

Provider-specific code lives only in its folder here (`providers/<name>/`, whose package
defines `PROVIDER`); adding a provider is that folder and its name in `NAMES` below. The CLI,
the lab and the tests pick providers from this registry.
"""

from __future__ import annotations

import importlib

from .base import CodecOptions, Provider

__all__ = [
    "DEFAULT_PROVIDER",
    "NAMES",
    "PROVIDERS",
    "CodecOptions",
    "Provider",
    "provider",
]

NAMES = (
    "responses",
    "chat",
    "anthropic",
    "gemini",
    "bedrock",
)  # one word per provider: its folder's name

PROVIDERS: dict[str, Provider] = {
    name: importlib.import_module(f".{name}", __name__).PROVIDER for name in NAMES
}

DEFAULT_PROVIDER = NAMES[0]  # what `run`, `serve` and the lab's helpers speak by default


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
