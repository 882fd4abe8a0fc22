"""The lab's clients: every registered provider, and the variants a provider's server also
answers (Bedrock's serves InvokeModel for Anthropic models beside Converse: the variant
`bedrock-invoke`, `providers/bedrock/lab_invoke.py`). A variant is a `Provider` the registry
does not hold (no `lockgate run --provider` speaks it): the lab runs on it every neutral
scenario its provider runs, but those its own wire cannot play (`Provider.unplayable`),
against the server of the provider that names it (`VariantRenderer.lab_variants`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..providers.base import Provider

__all__ = [
    "VariantRenderer",
    "lab_entry",
    "server_provider",
    "variants_of",
    "with_variants",
]


@runtime_checkable
class VariantRenderer(Protocol):
    """A renderer whose server also answers the lab clients it names."""

    def lab_variants(self) -> tuple[Provider, ...]: ...


def variants_of(name: str) -> tuple[Provider, ...]:
    """The lab variants of the registered provider `name` (none for most)."""
    from ..providers import PROVIDERS

    entry = PROVIDERS.get(name)
    if entry is None:
        return ()
    renderer = entry.render()
    return renderer.lab_variants() if isinstance(renderer, VariantRenderer) else ()


def _all_variants() -> dict[str, tuple[str, Provider]]:
    """Every variant by name: the provider whose server answers it, and its entry."""
    from ..providers import PROVIDERS

    return {variant.name: (name, variant) for name in PROVIDERS for variant in variants_of(name)}


def lab_entry(name: str | None) -> Provider:
    """The registry entry for `name`, or the lab variant so named (KeyError otherwise)."""
    from ..providers import PROVIDERS, provider

    if name is None or name in PROVIDERS:
        return provider(name)
    found = _all_variants().get(name)
    if found is None:
        return provider(name)  # the registry's KeyError, naming the known providers
    return found[1]


def server_provider(name: str | None) -> str | None:
    """The registered provider whose server answers `name` (itself, for a registered one)."""
    if name is None:
        return None
    found = _all_variants().get(name)
    return name if found is None else found[0]


def with_variants(names: Iterable[str]) -> list[str]:
    """`names`, each followed by its lab variants' names."""
    return [each for name in names for each in (name, *(v.name for v in variants_of(name)))]
