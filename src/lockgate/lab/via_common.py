"""What the naive clients of `lab --via proxy` share, over HTTP (`via_proxy.py`) and over
the Responses WebSocket (`via_websocket.py`): their credential and silence limit, a run's
result, and a request with the other client's tools declared too."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ..scripted.scenario import OtherClient, Scenario
from .runner import LAB_API_KEY

__all__ = [
    "NAIVE_HEADERS",
    "NAIVE_READ_TIMEOUT_SECONDS",
    "ProxyLabResult",
    "declaring",
    "tally",
]

# The naive client's credential: the scripted server takes any, and the proxy passes it on
# (the same header for every protocol: the naive client knows no provider).
NAIVE_HEADERS = {"authorization": f"Bearer {LAB_API_KEY}"}

# The naive client's own silence limit (longer than the proxy's: the proxy decides first).
NAIVE_READ_TIMEOUT_SECONDS = 1.5


@dataclass(frozen=True, slots=True)
class ProxyLabResult:
    scenario: Scenario
    provider: str
    run_tools: int  # the tools `lockgate run` executed
    naive_tools: int  # the calls the naive client saw (and executed) through the proxy
    direct_tools: int  # the calls it would have executed without the proxy
    requests: int
    passed: int  # answers the proxy passed unchanged
    withheld: int  # answers the proxy ended with its error
    problems: tuple[str, ...]
    declared: bool = False  # the requests declared the other client's tools too
    expected_tools: int = 0  # what the naive client must execute through the proxy
    upgrade: int | None = None  # the status its WebSocket upgrade got through the proxy
    websocket: bool = False  # the naive client spoke the Responses WebSocket

    @property
    def as_expected(self) -> bool:
        return not self.problems


def declaring(request: Mapping[str, Any], other: OtherClient) -> dict[str, Any]:
    """`request` with the other client's tools declared too: at the start of its `input`
    in an `additional_tools` item (`in_input`, Codex's way), else after its `tools`."""
    body = dict(request)
    if other.in_input:
        item = {"type": "additional_tools", "role": "developer", "tools": list(other.declares)}
        items = body.get("input")
        body["input"] = [item, *(items if isinstance(items, list) else [])]
    else:
        tools = body.get("tools")
        body["tools"] = [*(tools if isinstance(tools, list) else []), *other.declares]
    return body


A = TypeVar("A")


def tally(
    outcomes: Sequence[str],
    via: Sequence[A],
    direct: Sequence[A],
    same: Callable[[A, A], bool],
    requests: int,
    problems: list[str],
    noun: str = "answer",
    compared: str = "the bytes",
) -> tuple[int, int]:
    """The answers the proxy passed and withheld (by the log's `outcomes`, in order); each
    one passed must be what the naive client got directly (`same`), and there must be one
    answer a request: what is not is added to `problems`."""
    passed = withheld = 0
    for number, (through, plain) in enumerate(zip(via, direct, strict=False), 1):
        outcome = outcomes[number - 1] if number <= len(outcomes) else "unlogged"
        if outcome == "passed":
            passed += 1
            if not same(through, plain):
                problems.append(f"{noun} {number}: passed, but not {compared} sent directly")
        elif outcome in ("withheld", "refused"):
            withheld += 1
    if len(via) != requests:
        problems.append(f"{len(via)} answers to {requests} requests")
    return passed, withheld
