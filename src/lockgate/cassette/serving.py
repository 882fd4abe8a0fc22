"""Recorded exchanges as scripted turns: what `lockgate serve --cassette` and the pytest
fixture `lockgate_cassette` serve.

Every exchange becomes a playback turn (`Turn.playback`) with the faults applied; `random:SEED`
draws its own faults for each exchange (`draw_faults`, seeded by SEED and the exchange's
number), so `describe` names the faults each exchange got and a run can be repeated exactly.
All the exchanges of one server speak one protocol (a folder that mixes them is refused).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..scripted.script import Turn
from .faults import Fault, draw_faults, parse_fault, playback
from .format import Cassette

__all__ = [
    "Exchange",
    "FaultOption",
    "RequestMatcher",
    "exchanges",
    "parse_fault_option",
    "protocol_of",
]

_RANDOM = re.compile(r"random:([0-9]{1,18})")


@dataclass(frozen=True, slots=True)
class FaultOption:
    """One `--fault`: a fault, or `random:SEED` (`fault` None)."""

    fault: Fault | None = None
    seed: int | None = None

    def __str__(self) -> str:
        return str(self.fault) if self.fault is not None else f"random:{self.seed}"


def parse_fault_option(text: str) -> FaultOption:
    """A fault spec or `random:SEED`; ValueError with a one-line reason."""
    if text.startswith("random:") or text == "random":
        match = _RANDOM.fullmatch(text)
        if match is None:
            raise ValueError(f"fault {text[:80]!r} is not of the form random:SEED (a whole number)")
        return FaultOption(seed=int(match.group(1)))
    return FaultOption(fault=parse_fault(text))


@dataclass(frozen=True, slots=True)
class Exchange:
    """One recorded exchange as served: its number (1-based), the faults it gets and its
    turn."""

    number: int
    cassette: Cassette
    faults: tuple[Fault, ...]
    turn: Turn

    def describe(self) -> str:
        """`exchange 2 (chat, NAME): cut:inside=4` — enough to repeat it exactly."""
        name = self.cassette.source.rsplit("/", 1)[-1] or "<cassette>"
        applied = ", ".join(str(fault) for fault in self.faults) or "no fault"
        return f"exchange {self.number} ({self.cassette.protocol}, {name}): {applied}"


def protocol_of(cassettes: Sequence[Cassette]) -> str:
    """The one protocol the cassettes speak; ValueError when they mix protocols."""
    protocols = sorted({cassette.protocol for cassette in cassettes})
    if len(protocols) != 1:
        raise ValueError(
            f"the cassettes speak {', '.join(protocols)}; one server speaks one protocol "
            "(serve each protocol's cassettes from their own folder)"
        )
    return protocols[0]


def exchanges(
    cassettes: Sequence[Cassette],
    options: Sequence[FaultOption | Fault | str] = (),
    *,
    timing: Literal["recorded", "fast"] = "fast",
) -> list[Exchange]:
    """Each cassette's playback turn with every option applied (in order); ValueError (one
    line, naming the cassette) when a fault does not fit an exchange."""
    resolved = [
        parse_fault_option(option)
        if isinstance(option, str)
        else (FaultOption(fault=option) if isinstance(option, Fault) else option)
        for option in options
    ]
    served: list[Exchange] = []
    for number, cassette in enumerate(cassettes, 1):
        faults: list[Fault] = []
        for option in resolved:
            if option.fault is not None:
                faults.append(option.fault)
            elif option.seed is not None:
                faults.extend(draw_faults((option.seed << 20) + number, cassette))
        try:
            played = playback(cassette, faults, timing=timing)
        except ValueError as exc:
            raise ValueError(f"{cassette.source or 'the cassette'}: {exc}") from None
        turn = Turn(status=played.status, playback=played.steps, raw_headers=played.headers)
        served.append(Exchange(number, cassette, tuple(faults), turn))
    return served


class RequestMatcher:
    """`--match request`: each request gets the first unused exchange whose recorded request
    body equals its body (None: none does). For `ScriptedServer.select`."""

    def __init__(self, served: Sequence[Exchange]) -> None:
        self._unused = list(served)

    def __call__(self, request: Any) -> Turn | None:
        body = _canonical(getattr(request, "body", None))
        for index, exchange in enumerate(self._unused):
            if _canonical(exchange.cassette.request) == body:
                del self._unused[index]
                return exchange.turn
        return None


def _canonical(body: object) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
