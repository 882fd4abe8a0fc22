"""The judge: a recorded exchange (optionally faulted, `faults.playback`) through lockgate's
own client, and the lab's rules on what it must decide.

`judge` plays the exchange to `StreamingModelClient` with the provider's codec, the tools the
recorded request declares (schemas checked where usable), one attempt, a short idle timeout
(`IDLE_SECONDS`) and a deadline; on the virtual-time loop (`run_virtual`) a stall costs no
wall-clock time. The result is a `Judgement`: accepted with the released `Decision` (text,
refusal, calls as name and exact arguments), or refused with the failure kind.

`lab` applies the rules of `lockgate lab --cassettes`: each cassette is judged unfaulted
first — a recorded verdict must be reproduced (accepted with as many calls; refused, and as
the same kind where it names one) — and then under every fault of `fault_points` (or a
seeded sample of them, `budget`). A violation is a faulted run that releases a decision
other than the unfaulted one (releasing anything where the unfaulted run refused counts), or,
where the fault must not matter (`preserves_decision`), one that does not release exactly
it (or that releases something where the unfaulted run refused).

One exception, counted apart as `undetectable`: on a protocol whose events carry no sequence
numbers and no terminal summary of the output (Chat Completions, Anthropic Messages, Gemini,
Bedrock Converse: `UNNUMBERED`), dropping, duplicating or swapping a content event
(`REWRITING`) makes another complete, well-formed response, which no client can tell from
one the provider sent; when lockgate accepts it, the release differs from the unfaulted one
without any rule of the protocol being broken. They are reported (so that a reader sees,
e.g., that a dropped Anthropic `input_json_delta` can release a call with fewer arguments),
not failed on. On
Responses (`sequence_number`, the terminal event's output) such a change is a violation.
"""

from __future__ import annotations

import asyncio
import json
import random
import selectors
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from ..client import StreamingModelClient
from ..conversation import Message, ToolSpec
from ..errors import OpenFailure, ResponseFailure
from ..retry import RetryPolicy
from ..scripted.script import Action, play
from .faults import Fault, Playback, fault_points, playback, preserves_decision
from .format import Cassette

if TYPE_CHECKING:
    from ..providers.base import Provider

__all__ = [
    "DEADLINE_SECONDS",
    "IDLE_SECONDS",
    "REWRITING",
    "UNNUMBERED",
    "CassetteRow",
    "Decision",
    "Judgement",
    "LabReport",
    "Violation",
    "VirtualTimeLoop",
    "cassette_tools",
    "judge",
    "lab",
    "run_virtual",
    "speaker",
]

IDLE_SECONDS = 1.0  # the judge's idle timeout (virtual seconds on `VirtualTimeLoop`)
DEADLINE_SECONDS = 30.0
UNNUMBERED = frozenset({"chat", "anthropic", "gemini", "bedrock"})  # no numbers, no summary
REWRITING = frozenset({"drop", "duplicate", "reorder"})  # faults that rewrite the event list
_HISTORY = (Message("user", "(a recorded exchange)"),)
T = TypeVar("T")


# --- virtual time ---------------------------------------------------------------------------


class _SkippingSelector(selectors.DefaultSelector):
    """Never sleeps: a wait for a timer moves the loop's clock to it instead."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:  # no timer at all: only I/O can wake the loop
            return super().select(None)
        ready = super().select(0)
        if not ready and timeout > 0:
            self._loop.skipped += timeout
        return ready


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock runs with the wall clock while it works and jumps over
    every wait for a timer: a 30 s stall takes no time, and a timer never fires early or
    late because the machine is busy. For in-process work only (no sockets)."""

    def __init__(self) -> None:
        self.skipped = 0.0
        super().__init__(_SkippingSelector(self))

    def time(self) -> float:
        return time.monotonic() + self.skipped


def run_virtual(work: Callable[[], Any]) -> Any:
    """Run the coroutine `work()` makes on a fresh virtual-time loop (in this thread, which
    must not be running a loop)."""
    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(work())


# --- the tools a recorded request declares --------------------------------------------------


def speaker(cassette: Cassette) -> Provider:
    """The client that speaks the recorded exchange: its protocol's, or the lab variant
    whose server path it is (Bedrock's InvokeModel for Anthropic models:
    `providers.variants`)."""
    from ..providers import provider
    from ..providers.variants import variants_of

    for variant in variants_of(cassette.protocol):
        if variant.render().answers(cassette.path):
            return variant
    return provider(cassette.protocol)


def cassette_tools(cassette: Cassette) -> tuple[ToolSpec, ...]:
    """The function tools the recorded request exposes (what a call may name), with their
    schemas where usable: the provider's gateway reads them; Gemini's
    `tools[*].functionDeclarations` are read here (`parametersJsonSchema`, else the
    OpenAPI-subset `parameters`, which only the names of its properties are kept of)."""
    from ..gateway import declared_tool

    request = cassette.request if isinstance(cassette.request, Mapping) else {}
    entry = speaker(cassette)
    if entry.gateway is not None:
        return entry.gateway().tools(request, validate_schemas=True)
    specs: list[ToolSpec] = []
    tools = request.get("tools")
    for tool in tools if isinstance(tools, list) else []:
        declarations = tool.get("functionDeclarations") if isinstance(tool, Mapping) else None
        for declaration in declarations if isinstance(declarations, list) else []:
            if not isinstance(declaration, Mapping):
                continue
            schema = declaration.get("parametersJsonSchema", declaration.get("parameters"))
            spec = declared_tool(
                declaration.get("name"),
                declaration.get("description"),
                schema,
                validate_schemas=True,
            )
            if spec is not None:
                specs.append(spec)
    return tuple(specs)


# --- playing a (faulted) exchange to the client ---------------------------------------------


class _PlayedStream:
    def __init__(self, steps: Sequence[Action]) -> None:
        self._steps = steps
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for piece in play(self._steps):
            yield piece

    async def aclose(self) -> None:
        self.closed = True


class _PlaybackTransport:
    """A transport whose one opening is a playback: an error status is the provider's
    failed opening (classified by its rules), anything else the body's steps."""

    def __init__(self, played: Playback, protocol: str) -> None:
        from ..providers import provider

        self._played = played
        self._classify = provider(protocol).classify_error

    async def open(self, request: Mapping[str, Any], *, attempt: int = 0) -> _PlayedStream:
        await asyncio.sleep(0)
        played = self._played
        if played.status >= 400:
            raw = b"".join(step for step in played.steps if isinstance(step, bytes))
            try:
                body: object = json.loads(raw)
            except (ValueError, RecursionError):
                body = None
            raise self._classify(played.status, body, dict(played.headers))
        return _PlayedStream(played.steps)

    async def aclose(self) -> None:
        """Nothing to release: there is no connection."""


@dataclass(frozen=True, slots=True)
class Decision:
    """What an accepted response released."""

    text: str
    refusal: str
    calls: tuple[tuple[str, str], ...]  # (name, exact arguments JSON), in order
    paused: bool = False

    @classmethod
    def of(cls, message: Message) -> Decision:
        calls = tuple((call.name, call.arguments_json) for call in message.tool_calls)
        return cls(message.content, message.refusal, calls, message.paused)

    def as_json(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "refusal": self.refusal,
            "calls": [{"name": name, "arguments": args} for name, args in self.calls],
            "paused": self.paused,
        }


@dataclass(frozen=True, slots=True)
class Judgement:
    """Accepted with its decision, or refused with the failure kind (and its message)."""

    accepted: bool
    kind: str  # "accepted", or the failure kind
    decision: Decision | None = None
    detail: str = ""


async def judge(
    cassette: Cassette,
    faults: Sequence[Fault] = (),
    *,
    idle_timeout: float = IDLE_SECONDS,
    deadline: float = DEADLINE_SECONDS,
    tools: Sequence[ToolSpec] | None = None,
) -> Judgement:
    """Play the cassette (with `faults`) to lockgate's client; what it decides. ValueError
    when a fault addresses an event the exchange does not have."""
    from ..providers.base import CodecOptions

    played = playback(cassette, faults)
    entry = speaker(cassette)
    client = StreamingModelClient(
        entry.make_codec(CodecOptions("recorded-model")),
        _PlaybackTransport(played, cassette.protocol),
        retry=RetryPolicy(attempts=1),
        idle_timeout=idle_timeout,
        deadline=deadline,
    )
    specs = cassette_tools(cassette) if tools is None else tools
    try:
        message = await client.complete(_HISTORY, specs)
    except (OpenFailure, ResponseFailure) as failure:
        return Judgement(False, str(failure.kind), None, failure.message)
    return Judgement(True, "accepted", Decision.of(message))


# --- the lab's rules ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Violation:
    cassette: str
    fault: str | None  # the fault's spec; None: the unfaulted run
    reason: str


@dataclass(frozen=True, slots=True)
class CassetteRow:
    """One cassette's runs (the unfaulted one included)."""

    cassette: str
    protocol: str
    runs: int
    accepted: int
    refused: int
    violations: tuple[Violation, ...]
    baseline: Judgement
    undetectable: tuple[Violation, ...] = ()  # see the module docstring


@dataclass(frozen=True, slots=True)
class LabReport:
    rows: tuple[CassetteRow, ...]
    interrupted: bool = False

    @property
    def runs(self) -> int:
        return sum(row.runs for row in self.rows)

    @property
    def violations(self) -> tuple[Violation, ...]:
        return tuple(v for row in self.rows for v in row.violations)

    @property
    def undetectable(self) -> tuple[Violation, ...]:
        return tuple(v for row in self.rows for v in row.undetectable)


def _shown(judgement: Judgement) -> str:
    if not judgement.accepted:
        return f"refused ({judgement.kind})"
    assert judgement.decision is not None
    decision = judgement.decision
    calls = ", ".join(f"{name}({args[:40]})" for name, args in decision.calls) or "no calls"
    return f"released {len(decision.text)} chars of text and {calls}"


def _unfaulted_problem(cassette: Cassette, base: Judgement) -> str | None:
    verdict = cassette.verdict
    if verdict is None:
        return None
    if verdict.outcome == "accepted":
        if not base.accepted:
            return (
                f"the recorded verdict accepted {verdict.calls} call(s); lockgate now refuses "
                f"({base.kind}: {base.detail})"
            )
        assert base.decision is not None
        if len(base.decision.calls) != verdict.calls:
            return (
                f"the recorded verdict accepted {verdict.calls} call(s); lockgate now releases "
                f"{len(base.decision.calls)}"
            )
        return None
    if base.accepted:
        return f"the recorded verdict refused ({verdict.kind}); lockgate now {_shown(base)}"
    if verdict.kind is not None and verdict.kind != base.kind:
        return f"the recorded verdict refused as {verdict.kind}; lockgate now as {base.kind}"
    return None


def _faulted_problem(
    cassette: Cassette, fault: Fault, base: Judgement, got: Judgement, idle: float
) -> tuple[str, bool] | None:
    """What is wrong with a faulted run, and whether it is `undetectable` (see the module
    docstring); None: nothing."""
    must_keep = preserves_decision(fault, cassette, idle)
    if got.accepted and (not base.accepted or got.decision != base.decision):
        where = "the unfaulted run refused" if not base.accepted else "the unfaulted run differs"
        undetectable = not must_keep and fault.kind in REWRITING and cassette.protocol in UNNUMBERED
        return f"{_shown(got)}; {where}", undetectable
    if must_keep and base.accepted and not got.accepted:
        return f"must release exactly the unfaulted decision; {_shown(got)}: {got.detail}", False
    return None


def _plan(cassettes: Sequence[Cassette], budget: int | None, seed: int) -> list[list[Fault]]:
    """The faults to run on each cassette: all of `fault_points`, or `budget` of them in
    all, drawn uniformly over every cassette's points with a generator seeded by `seed`."""
    points = [fault_points(cassette) for cassette in cassettes]
    total = sum(len(p) for p in points)
    if budget is None or budget >= total:
        return points
    rng = random.Random(f"lockgate-lab-cassettes:{seed}")
    chosen = sorted(rng.sample(range(total), budget))
    plan: list[list[Fault]] = [[] for _ in cassettes]
    start = 0
    index = 0
    for number, found in enumerate(points):
        end = start + len(found)
        while index < len(chosen) and chosen[index] < end:
            plan[number].append(found[chosen[index] - start])
            index += 1
        start = end
    return plan


def _name(cassette: Cassette) -> str:
    source = cassette.source.replace("\\", "/").rsplit("/", 1)[-1]
    return source or f"<{cassette.protocol} cassette>"


async def _lab_one(
    cassette: Cassette, faults: Sequence[Fault], idle: float, stop: threading.Event | None
) -> CassetteRow:
    name = _name(cassette)
    tools = cassette_tools(cassette)
    base = await judge(cassette, idle_timeout=idle, tools=tools)
    violations: list[Violation] = []
    undetectable: list[Violation] = []
    problem = _unfaulted_problem(cassette, base)
    if problem is not None:
        violations.append(Violation(name, None, problem))
    runs, accepted = 1, int(base.accepted)
    for fault in faults:
        if stop is not None and stop.is_set():
            break
        got = await judge(cassette, [fault], idle_timeout=idle, tools=tools)
        runs += 1
        accepted += got.accepted
        found = _faulted_problem(cassette, fault, base, got, idle)
        if found is not None:
            reason, unseen = found
            (undetectable if unseen else violations).append(Violation(name, str(fault), reason))
    return CassetteRow(
        name,
        cassette.protocol,
        runs,
        accepted,
        runs - accepted,
        tuple(violations),
        base,
        tuple(undetectable),
    )


def lab(
    cassettes: Sequence[Cassette],
    *,
    budget: int | None = None,
    seed: int = 0,
    idle_timeout: float = IDLE_SECONDS,
    stop: threading.Event | None = None,
    progress: Callable[[int, int, str], None] | None = None,
) -> LabReport:
    """Judge every cassette unfaulted and under its faults (see the module docstring), on a
    virtual-time loop of its own (call it from a thread that runs no loop). `stop`, once
    set, ends the lab after the run under way (`interrupted`)."""
    plan = _plan(cassettes, budget, seed)

    async def work() -> LabReport:
        rows: list[CassetteRow] = []
        for number, (cassette, faults) in enumerate(zip(cassettes, plan, strict=True), 1):
            if stop is not None and stop.is_set():
                return LabReport(tuple(rows), interrupted=True)
            if progress is not None:
                progress(number, len(cassettes), _name(cassette))
            rows.append(await _lab_one(cassette, faults, idle_timeout, stop))
        return LabReport(tuple(rows), interrupted=stop is not None and stop.is_set())

    report: LabReport = run_virtual(work)
    return report
