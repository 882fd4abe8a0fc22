"""The lab through the proxy (`lockgate lab --via proxy`): every scenario of every protocol
with a gateway, played as a deliberately naive client → `lockgate proxy` → the scripted
server.

The naive client is the kind the proxy exists for: it sends the requests `lockgate run`
sent for the scenario (the same turns are consumed, in the same order), reads each answer
to its end however it ends (an error frame, a reset, silence), and then *executes every
tool call it has seen*: every call start its protocol's decoder recognizes in what it
received, whether the stream was complete or not. Each scenario is played three times:

1. `lockgate run` itself, over HTTP (the lab's own run): the reference, the tools it
   executed;
2. the naive client straight to the server: the bytes a client receives without the proxy;
3. the naive client through the proxy.

The proxy runs with `--validate-schemas`: `lockgate run` validates every call against its
tools' schemas, and the requests carry those schemas. A scenario is as expected when the
naive client through the proxy executed exactly the tools `lockgate run` executed (none
where it refused), and every answer the proxy passed is byte for byte what the client
receives directly (keep-alives aside: the proxy passes the upstream's pings at once, ahead
of the frames it holds).

Scenarios whose fault is on the client's side (a close that fails in lockgate's own
transport, the neutral wire) have no wire the proxy could see; they are skipped, with the
reason.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ResponseFailure
from ..events import ToolCallStarted
from ..providers import provider as registry_entry
from ..scripted.scenario import Scenario
from ..sse import SSEDecoder, SSEFramer, canonical_frame
from .runner import LAB_API_KEY, LAB_DEADLINE_SECONDS, LAB_IDLE_TIMEOUT_SECONDS, run_scenario
from .scenarios import SCENARIOS
from .server import serve_script

__all__ = [
    "NAIVE_READ_TIMEOUT_SECONDS",
    "Answer",
    "ProxyLabResult",
    "calls_seen",
    "proxy_lab_runs",
    "run_via_proxy",
    "skip_reason",
]

# The naive client's credential: the scripted server takes any, and the proxy passes it on
# (the same header for every protocol: the naive client knows no provider).
_HEADERS = {"authorization": f"Bearer {LAB_API_KEY}"}

# The naive client's own silence limit (longer than the proxy's: the proxy decides first).
NAIVE_READ_TIMEOUT_SECONDS = 1.5


@dataclass(frozen=True, slots=True)
class Answer:
    """What the naive client received for one request: the status and every body byte
    until the body ended, broke or went silent."""

    status: int
    body: bytes
    ended: str  # "end", or what broke it


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

    @property
    def as_expected(self) -> bool:
        return not self.problems


def skip_reason(scenario: Scenario) -> str | None:
    """Why a scenario is not played through the proxy (None: it is)."""
    if "http" not in scenario.transports:
        return "in-process only: its fault is not on the wire"
    if scenario.options.neutral:
        return "the neutral wire is no protocol a client speaks"
    if scenario.options.close_fails:
        return "its fault (a failing close) is in lockgate's own transport, not on the wire"
    return None


def proxy_lab_runs(
    scenario: Scenario | None, providers: Sequence[str]
) -> tuple[list[tuple[Scenario, str]], list[tuple[Scenario, str, str]]]:
    """The (scenario, provider) runs to play through the proxy, and those skipped with
    their reason: every scenario (or the one named) on every asked provider with a
    gateway."""
    scenarios = SCENARIOS if scenario is None else (scenario,)
    runs: list[tuple[Scenario, str]] = []
    skipped: list[tuple[Scenario, str, str]] = []
    for candidate in scenarios:
        for name in providers:
            if not candidate.runs_on(name) or registry_entry(name).gateway is None:
                continue
            reason = skip_reason(candidate)
            if reason is None:
                runs.append((candidate, name))
            else:
                skipped.append((candidate, name, reason))
    return runs, skipped


def calls_seen(provider: str, body: bytes) -> int:
    """The tool calls a naive client sees in a body: every call start the protocol's
    decoder recognizes, reading on past whatever it refuses (an event it cannot take is
    skipped, a frame past the size bound ends the reading)."""
    entry = registry_entry(provider)
    assert entry.gateway is not None
    decoder = entry.gateway().new_decoder()
    frames = SSEDecoder()
    try:
        events = frames.feed(body)
        events.extend(frames.finish())
    except Exception:
        return 0
    seen = 0
    for event in events:
        try:
            decoded = decoder.decode(event)
        except Exception:
            continue
        seen += sum(1 for item in decoded if type(item) is ToolCallStarted)
    return seen


def _content(provider: str, body: bytes) -> list[bytes]:
    """What a client reads of a body: its events in the canonical form the proxy sends
    (`sse.canonical_frame`), keep-alives and the events the protocol's decoder skips left
    out (the proxy sends a held stream's keep-alives at once, ahead of the frames it
    holds, and never forwards what it does not judge)."""
    entry = registry_entry(provider)
    assert entry.gateway is not None
    gateway = entry.gateway()
    framer = SSEFramer(len(body) + 1)
    frames = framer.feed(body)
    frames.extend(framer.finish())
    kept: list[bytes] = []
    for frame in frames:
        event = frame.event
        if event is None or gateway.is_keepalive(event) or gateway.skipped(event):
            continue
        try:
            kept.append(canonical_frame(event))
        except ResponseFailure:
            kept.append(frame.raw)  # no client may read it: the proxy refuses it
    return kept


async def _naive(url: str, requests: Sequence[Mapping[str, Any]], provider: str) -> list[Answer]:
    """The naive client: each request in turn, each answer read to its end."""
    import httpx2

    timeout = httpx2.Timeout(10.0, read=NAIVE_READ_TIMEOUT_SECONDS)
    answers: list[Answer] = []
    async with httpx2.AsyncClient(timeout=timeout, trust_env=False) as http:
        for body in requests:
            received = bytearray()
            status = 0
            ended = "end"
            try:
                async with http.stream("POST", url, json=dict(body), headers=_HEADERS) as response:
                    status = response.status_code
                    async for piece in response.aiter_raw():
                        received += piece
            except httpx2.HTTPError as exc:
                ended = type(exc).__name__
            answers.append(Answer(status, bytes(received), ended))
    return answers


async def run_via_proxy(scenario: Scenario, provider: str) -> ProxyLabResult:
    """Play one scenario three ways (`lockgate run`, naive direct, naive through the proxy)
    and judge what the naive client executed through the proxy."""
    from ..proxy import GatingOptions
    from ..proxy.server import ProxyConfig, ProxyRecord, serving

    reference = await run_scenario(scenario, "http", provider=provider)
    requests = reference.requests
    renderer = registry_entry(provider).render()
    where = renderer.path + (f"?{renderer.stream_query}" if renderer.stream_query else "")
    turns = scenario.turns()
    async with serve_script(turns, provider=provider) as server:
        origin = f"http://{server.host}:{server.port}"
        direct = await _naive(origin + where, requests, provider)
    records: list[ProxyRecord] = []
    gating = GatingOptions(
        idle_timeout=LAB_IDLE_TIMEOUT_SECONDS,
        deadline=LAB_DEADLINE_SECONDS,
        keepalive_interval=LAB_DEADLINE_SECONDS,  # no keep-alive within a lab run
        validate_schemas=True,  # `lockgate run` checks its calls against its tools' schemas
    )
    async with serve_script(turns, provider=provider) as server:
        upstream = f"http://{server.host}:{server.port}"
        config = ProxyConfig(upstream=upstream, gating=gating)
        async with serving(config, records.append) as running:
            via = await _naive(running.url + where, requests, provider)
        await server.settle()
    for _ in range(50):  # the log line of the last request may follow its body
        if len(records) >= len(requests):
            break
        await asyncio.sleep(0.01)
    naive_tools = sum(calls_seen(provider, answer.body) for answer in via)
    direct_tools = sum(calls_seen(provider, answer.body) for answer in direct)
    problems: list[str] = []
    if naive_tools != reference.tools_executed:
        problems.append(
            f"the naive client executed {naive_tools} tools through the proxy, "
            f"lockgate run {reference.tools_executed}"
        )
    passed = withheld = 0
    outcomes = [record.outcome for record in records]
    for number, (through, plain) in enumerate(zip(via, direct, strict=False), 1):
        outcome = outcomes[number - 1] if number <= len(outcomes) else "unlogged"
        if outcome == "passed":
            passed += 1
            if (through.status, _content(provider, through.body)) != (
                plain.status,
                _content(provider, plain.body),
            ):
                problems.append(f"answer {number}: passed, but not the bytes sent directly")
        elif outcome in ("withheld", "refused"):
            withheld += 1
    if len(via) != len(requests):
        problems.append(f"{len(via)} answers to {len(requests)} requests")
    return ProxyLabResult(
        scenario=scenario,
        provider=provider,
        run_tools=reference.tools_executed,
        naive_tools=naive_tools,
        direct_tools=direct_tools,
        requests=len(requests),
        passed=passed,
        withheld=withheld,
        problems=tuple(problems),
    )
