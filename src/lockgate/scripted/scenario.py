"""What a lab scenario is, and what a run of it must show."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..conversation import Usage
from ..errors import FailureKind
from .reply import LAB_MODEL, Call, Reply, Say
from .script import Faults, Turn

if TYPE_CHECKING:
    from .renderer import Renderer

EDIT_FIX = {"path": "calculator.py", "old": "return a - b", "new": "return a + b"}
FIXED_SOURCE = "def add(a, b):\n    return a + b\n"


@dataclass(frozen=True, slots=True)
class Expectation:
    """What a scenario must show. `outcome` is `model_finished`, `model_refused`,
    `turn_limit`, `interrupted` or a failure kind (a provider failure)."""

    outcome: str
    attempts: int
    tools_executed: int
    fixed: bool = False
    answer: str | None = None  # the final assistant text, when it matters
    closed_early: int | None = None  # over HTTP: streams the client left early (None: racy)

    @property
    def is_failure(self) -> bool:
        return self.outcome not in {"model_finished", "model_refused", "turn_limit"}


BOTH: frozenset[str] = frozenset({"inprocess", "http"})
HTTP_ONLY: frozenset[str] = frozenset({"http"})


@dataclass(frozen=True, slots=True)
class LabOptions:
    """How the client is configured for a scenario."""

    model: str = LAB_MODEL
    neutral: bool = False  # the neutral provider (normalized events on the wire), not a codec
    provider_options: Any = None  # the provider's own options (`CodecOptions.provider_options`)
    recovery_budget: int = 0  # 0: recovery off (stop on a rejected batch)
    retry_unstarted: bool = False
    close_fails: frozenset[int] = frozenset()  # client side: these openings' closes fail


@dataclass(frozen=True, slots=True)
class OtherClient:
    """What a client other than lockgate does in a scenario that `lockgate run` does not:
    how `lockgate lab --via proxy`'s naive client plays it (`lab.via_proxy`).

    `declares`: tools it declares beside lockgate's own, which `lockgate run` cannot (a
    custom tool, a `namespace` group, a built-in tool it executes itself), as the protocol
    declares them; in the request's `tools`, or with `in_input` as Codex's default model
    declares them, in an `additional_tools` input item. The naive client plays the scenario
    through the proxy once with the requests `lockgate run` sent (it must then execute
    exactly what `lockgate run` executed: a call of an undeclared tool runs nowhere), and
    once more with these declared in every request: it must then execute exactly
    `executes` calls (the proxy releases a call of a declared tool in a batch it judged
    whole).

    `websocket_first`: before its first request it asks for a WebSocket at the request's
    path (`GET` with `Upgrade: websocket`), as Codex's built-in provider does, and falls
    back to HTTP when answered `426 Upgrade Required`; the proxy must answer so itself and
    never pass the upgrade on."""

    declares: tuple[Mapping[str, Any], ...] = ()
    in_input: bool = False
    executes: int = 0
    websocket_first: bool = False


@dataclass(frozen=True, slots=True)
class Observation:
    """What a run showed beyond its outcome, for scenario-specific checks."""

    requests: tuple[Mapping[str, Any], ...]  # request bodies, in order
    delays: tuple[float, ...]  # opening delays requested (the lab does not sleep them)
    usage: Usage | None  # summed over every response that reported usage
    stopped: str
    protocol: Renderer


Check = Callable[[Observation], list[str]]


def no_check(observation: Observation) -> list[str]:
    return []


@dataclass(frozen=True, slots=True)
class Scenario:
    """`protocols`: the providers it runs on (None: every registered one). `other_client`:
    what a client other than lockgate does in it (the naive client of `lockgate lab --via
    proxy`)."""

    name: str
    summary: str
    expect: Expectation
    turns: Callable[[], list[Turn]]
    transports: frozenset[str] = BOTH
    options: LabOptions = LabOptions()
    check: Check = no_check
    protocols: frozenset[str] | None = None
    other_client: OtherClient = OtherClient()

    def runs_on(self, provider: str) -> bool:
        return self.protocols is None or provider in self.protocols


def own(provider: str, *scenarios: Scenario) -> tuple[Scenario, ...]:
    """A protocol's own scenarios: they run on `provider` only."""
    only = frozenset({provider})
    return tuple(dataclasses.replace(scenario, protocols=only) for scenario in scenarios)


def failure(kind: FailureKind | str, *, closed_early: int | None = None) -> Expectation:
    """A failure expectation: one opening, nothing executed."""
    return Expectation(str(kind), attempts=1, tools_executed=0, closed_early=closed_early)


def answered(attempts: int = 1, answer: str | None = None) -> Expectation:
    """A text answer after `attempts` openings, nothing executed."""
    return Expectation(
        "model_finished", attempts=attempts, tools_executed=0, answer=answer, closed_early=0
    )


def finished(attempts: int, tools_executed: int, *, fixed: bool = False) -> Expectation:
    """The model finished after `attempts` openings and `tools_executed` tool runs (`fixed`:
    the fixture's bug is fixed)."""
    return Expectation("model_finished", attempts, tools_executed, fixed=fixed, closed_early=0)


def waited(expected: float, tolerance: float = 0.0) -> Check:
    """The run waited once, `expected` seconds (within `tolerance`) before retrying."""

    def check(observation: Observation) -> list[str]:
        delays = observation.delays
        if len(delays) == 1 and abs(delays[0] - expected) <= tolerance:
            return []
        return [f"waited {delays}, expected ({expected:g},)"]

    return check


def stopped_with(word: str) -> Check:
    """The stop names `word` (a provider's finish reason or failure kind)."""

    def check(observation: Observation) -> list[str]:
        if word not in observation.stopped:
            return [f"the stop does not name {word}: {observation.stopped!r}"]
        return []

    return check


def result_of(observation: Observation, request: int, call_id: str) -> str:
    """The result request number `request` sends back for `call_id`, placed where the
    protocol wants it (empty if absent or misplaced)."""
    return observation.protocol.tool_result(observation.requests[request], call_id) or ""


# --- turns ---------------------------------------------------------------------------------


def reply_turn(reply: Reply, faults: Faults | None = None) -> Turn:
    return Turn(reply=reply, faults=faults or Faults())


def text_turn(response_id: str, text: str = "The bug is in add.", pieces: int = 4) -> Turn:
    """A turn whose reply is only answer text."""
    return reply_turn(Reply(response_id, (Say(text, pieces),)))


def call_turn(number: int, name: str, arguments: dict[str, str], text: str = "") -> Turn:
    """Turn `number` of the repair conversation: one call, after optional text."""
    parts: tuple[Say | Call, ...] = (Say(text),) if text else ()
    call = Call(f"call_repair_{number}", name, arguments)
    return reply_turn(Reply(f"resp_repair_{number}", (*parts, call)))
