"""The Responses provider's own options, each declared once (the command line makes its
flag from the declaration)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..base import option

Continuation = Literal["stateless", "native"]
_CONTINUATIONS: dict[str, Continuation] = {"stateless": "stateless", "native": "native"}
_REASONING: dict[str, bool | None] = {"auto": None, "on": True, "off": False}


def _continuation(text: str) -> Continuation:
    try:
        return _CONTINUATIONS[text]
    except KeyError:
        raise ValueError("must be 'stateless' or 'native'") from None


def _encrypted_reasoning(text: str) -> bool | None:
    try:
        return _REASONING[text]
    except KeyError:
        raise ValueError("must be 'auto', 'on' or 'off'") from None


@dataclass(frozen=True, slots=True)
class ResponsesOptions:
    """`continuation`: `stateless` sends the full history with `store: false` every time;
    `native` stores responses and continues them with `previous_response_id`.
    `encrypted_reasoning`: ask for `reasoning.encrypted_content` so reasoning items can be
    replayed (None: decide from the model name, since other models reject the include)."""

    continuation: Continuation = field(
        default="stateless",
        metadata=option(
            "--continuation",
            choices=("stateless", "native"),
            parse=_continuation,
            help="stateless: full history, store false (default); native: store true and "
            "previous_response_id",
        ),
    )
    encrypted_reasoning: bool | None = field(
        default=None,
        metadata=option(
            "--encrypted-reasoning",
            choices=("auto", "on", "off"),
            parse=_encrypted_reasoning,
            help="ask for encrypted reasoning to replay (auto: reasoning models)",
        ),
    )
