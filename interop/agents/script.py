"""What the hostile server answers one request with (`wire.py` renders it for each protocol,
`eventstream_wire.py` for the AWS event stream): its calls, or a text answer, and how it
ends."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .outcomes import Terminal

__all__ = ["Call", "Script"]

_MODEL_FALLBACK = "hostile-model"


@dataclass(frozen=True)
class Call:
    """One tool call as the server sends it."""

    name: str
    arguments: str  # JSON text (a function call) or the raw input (a custom tool call)
    custom: bool = False  # a Responses custom (freeform) tool call
    namespace: str | None = None  # a Responses namespaced function

    def halves(self) -> tuple[str, str]:
        middle = max(1, len(self.arguments) // 2)
        return self.arguments[:middle], self.arguments[middle:]

    def argument_object(self) -> dict[str, Any]:
        value = json.loads(self.arguments)
        return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class Script:
    """One response: its calls (or a text answer) and how it ends."""

    calls: tuple[Call, ...] = ()
    text: str | None = None
    cut: bool = False  # end inside the last call's arguments (nothing after them)
    terminal: Terminal = Terminal.SUCCESS
    model: str = _MODEL_FALLBACK
    fault: str | None = None  # an event-stream fault (`bedrock` only): "bad-crc", "cut-in-frame"
