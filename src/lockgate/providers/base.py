"""The registry entry that names a provider, and the options its codec is built from.

A provider is one folder under `providers/`: a codec (`codec.py`: the request encoder, and
`decoder.py`: the stream decoder, on `codec.ProviderCodec`), a transport (`transport.py`),
an error classifier for failed openings (`errors.py`), its own options if it has any
(`options.py`: each declared once, with the flag, help and rule the command line shows), and
its lab side (`render.py`: the neutral replies as its native bytes; `scenarios.py`: its own
scenarios). `Provider` names them all; `providers/__init__.py` lists one entry per provider.
The gate, the client, the retry owner, the SSE decoder, the loop and the display know
nothing of any one provider.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from ..defaults import MAX_OUTPUT_TOKENS

if TYPE_CHECKING:
    from ..codec import ProviderCodec
    from ..gateway import Gateway
    from ..scripted.renderer import Renderer
    from ..scripted.scenario import Scenario
    from ..transport import ErrorClassifier, Transport, TransportOptions

__all__ = [
    "CodecOptions",
    "OptionSpec",
    "Provider",
    "option",
    "option_fields",
    "whole_number",
]

Options = TypeVar("Options")
_OPTION = "lockgate.option"


@dataclass(frozen=True, slots=True)
class OptionSpec:
    """How one provider option appears on the command line: its flag, help, metavar or
    choices, and `parse`, which turns the flag's text into the option's value (ValueError
    with the rule it broke, e.g. "must be between 1024 and 10000000")."""

    flag: str
    help: str
    parse: Callable[[str], object]
    metavar: str | None = None
    choices: tuple[str, ...] | None = None


def option(
    flag: str,
    *,
    help: str,
    parse: Callable[[str], object],
    metavar: str | None = None,
    choices: tuple[str, ...] | None = None,
) -> dict[str, OptionSpec]:
    """The metadata that makes a field of a provider's options dataclass a command-line
    flag: `field(default=…, metadata=option("--flag", …))` is the one place the option is
    declared (the command line generates the flag from it)."""
    return {_OPTION: OptionSpec(flag, help, parse, metavar, choices)}


def option_fields(options_type: type) -> list[tuple[str, OptionSpec]]:
    """The (field name, spec) of every option an options dataclass declares."""
    return [
        (item.name, item.metadata[_OPTION])
        for item in dataclasses.fields(options_type)
        if _OPTION in item.metadata
    ]


def whole_number(minimum: int, maximum: int, why: str = "") -> Callable[[str], int]:
    """A parser for a whole number in [minimum, maximum]; `why` explains the minimum."""
    rule = f"must be between {minimum}{f' ({why})' if why else ''} and {maximum}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a whole number") from None
        if not minimum <= value <= maximum:
            raise ValueError(rule)
        return value

    return parse


@dataclass(frozen=True, slots=True)
class CodecOptions:
    """What a codec is built from: the model, the output-token cap, and the provider's own
    options (an instance of its `Provider.options` class; None: its defaults)."""

    model: str
    max_output_tokens: int = MAX_OUTPUT_TOKENS
    provider_options: Any = None

    def own(self, options_type: type[Options]) -> Options:
        """The provider's own options: `provider_options` when it is an `options_type`, the
        defaults when it is None; ValueError for another provider's options."""
        given = self.provider_options
        if given is None:
            return options_type()
        if not isinstance(given, options_type):
            raise ValueError(
                f"provider options {type(given).__name__} are not {options_type.__name__}"
            )
        return given


@dataclass(frozen=True, slots=True)
class Provider:
    """One registry entry: everything the CLI, the lab and the tests need to speak one
    protocol. Factories import the SDK only when called, so that `--help`, usage errors and
    the in-process lab start fast; `render` and `scenarios` import the lab side only when
    the lab or `serve` runs."""

    name: str
    title: str
    key_variable: str
    base_url_variable: str  # the SDK's own variable for the base URL (used without --base-url)
    default_model: str
    base_url_hint: str  # what `--base-url` looks like for this provider
    make_codec: Callable[[CodecOptions], ProviderCodec]
    make_transport: Callable[[TransportOptions], Transport]
    classify_error: ErrorClassifier
    render: Callable[[], Renderer]  # its lab renderer
    scenarios: Callable[[], Sequence[Scenario]]  # its own lab scenarios
    options: type | None = None  # its own options dataclass (fields declared with `option`)
    gateway: Callable[[], Gateway] | None = None  # its side of the gating engine (`proxy`)
    # Neutral scenarios its wire cannot express, each with the reason (the lab skips them).
    unplayable: Callable[[], Mapping[str, str]] | None = None
    # Variables that may hold the key when `key_variable` is not set, in order.
    key_fallbacks: tuple[str, ...] = ()
