"""What a real reader ended with (`Read`: the calls it holds, its text, what it raised), and
the constants every client is run with."""

from __future__ import annotations

import json
from dataclasses import dataclass

KEY = "sk-placeholder-not-a-key"
# What litellm's logging warns after a stream with thinking blocks (its own model's type).
LITELLM_WARNING = "Pydantic serializer warnings"
MODEL = "lab-model"
# The model litellm is told (whatever the recording's): a name that selects no tokenizer of
# the Hugging Face hub (litellm fetches one for llama and command-r names).
LITELLM_MODEL = "lockgate-model"
ROUTES = ("direct", "proxy", "transport")


# --- what a reader ended with -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HeldCall:
    """A call a reader holds: its id and name (None: it has none), its argument text where
    it keeps one (Chat, Responses, litellm), and the arguments as it parsed them (else the
    text parsed as JSON; `UNPARSED` where it is no JSON)."""

    id: str | None
    name: str | None
    arguments: str | None
    value: object
    form: str = "function"  # or "custom" (free text), or a built-in tool's item type


@dataclass(frozen=True, slots=True)
class Read:
    reader: str
    route: str
    calls: tuple[HeldCall, ...]
    text: str
    raised: str | None  # the exception's type and message; None: it read to the end


class _Unparsed:
    def __repr__(self) -> str:
        return "<not JSON>"


UNPARSED = _Unparsed()


def _parsed(text: str | None) -> object:
    if text is None:
        return None
    if text == "":
        return {}
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return UNPARSED
