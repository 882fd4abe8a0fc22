"""Record, replay, fault, end to end, on each gated protocol: a `repair` session recorded
through `lockgate proxy --record` in front of the scripted server replays offline through
`serve --cassette`, and `lockgate run`'s session repairs the fixture the same way; with each
fault kind overlaid on the first exchange (at the event that starts its call), the run
executes nothing from that response (a fault that cannot change a decision, such as a split
read, repairs the same way)."""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from lockgate.cassette import Cassette, load_all
from lockgate.cassette.faults import Fault, parse_fault
from lockgate.cassette.serving import exchanges
from lockgate.client import StreamingModelClient
from lockgate.events import ToolArgumentsDelta, ignore_event
from lockgate.fixture import CALCULATOR, create_fixture
from lockgate.lab.scenarios import FIXED_SOURCE, repair_turns
from lockgate.lab.server import serve_script
from lockgate.lab.via_proxy import calls_seen
from lockgate.providers import provider as registry_entry
from lockgate.providers.base import CodecOptions
from lockgate.proxy.server import ProxyConfig, serving
from lockgate.retry import RetryPolicy
from lockgate.scripted.script import Turn
from lockgate.session import SessionOutcome, run_session
from lockgate.transport import TransportOptions

PROTOCOLS = ("responses", "chat", "anthropic")
KEY = "sk-roundtrip-SECRET-4321"


async def _repair(provider: str, origin: str) -> SessionOutcome:
    """`lockgate run`'s session (execution allowed, 1 s idle) against a server at `origin`."""
    entry = registry_entry(provider)
    renderer = entry.render()
    transport = entry.make_transport(
        TransportOptions(
            api_key=KEY, base_url=renderer.base_url(origin), timeout=10.0, trust_env=False
        )
    )
    client = StreamingModelClient(
        entry.make_codec(CodecOptions("lab-model")),
        transport,
        retry=RetryPolicy(attempts=1),
        idle_timeout=1.0,
        deadline=30.0,
    )
    with tempfile.TemporaryDirectory(prefix="lockgate-roundtrip-") as parent:
        try:
            return await run_session(
                create_fixture(Path(parent)),
                client,
                allow_execution=True,
                max_turns=10,
                observer=ignore_event,
            )
        finally:
            await client.aclose()


async def _record(provider: str, folder: Path) -> SessionOutcome:
    async with serve_script(repair_turns(), provider=provider) as upstream:
        config = ProxyConfig(upstream=f"http://{upstream.host}:{upstream.port}", record=folder)
        async with serving(config) as proxy:
            return await _repair(provider, proxy.url)


async def _replay(provider: str, turns: Sequence[Turn]) -> SessionOutcome:
    async with serve_script(turns, provider=provider) as server:
        return await _repair(provider, f"http://{server.host}:{server.port}")


def _call_event(cassette: Cassette) -> int:
    """The number (1-based) of the first event that shows a tool call."""
    frames, _ = cassette.frames()
    for number in range(1, len(frames) + 1):
        body = b"".join(frame.raw for frame in frames[:number])
        if calls_seen(cassette.protocol, body):
            return number
    raise AssertionError("the exchange makes no call")


def _argument_events(cassette: Cassette) -> list[tuple[int, str]]:
    """(event number, argument text) of every event that streams argument text."""
    entry = registry_entry(cassette.protocol)
    assert entry.gateway is not None
    decoder = entry.gateway().new_decoder()
    found: list[tuple[int, str]] = []
    frames, _ = cassette.frames()
    for number, frame in enumerate(frames, 1):
        if frame.event is None:
            continue
        for event in decoder.decode(frame.event):
            if isinstance(event, ToolArgumentsDelta) and event.delta:
                found.append((number, event.delta))
    return found


def _placed(spec: str, cassettes: Sequence[Cassette]) -> tuple[int, Fault]:
    """Where a fault kind changes what a response asks for: (the exchange's index, the
    fault). Cuts, resets, drops and stalls go at the first exchange's call; a duplicate
    doubles an argument piece; a reorder swaps two different argument pieces."""
    if spec.startswith("duplicate"):
        for index, cassette in enumerate(cassettes):
            pieces = _argument_events(cassette)
            if pieces:
                return index, parse_fault(f"duplicate:{pieces[0][0]}")
    elif spec.startswith("reorder"):
        for index, cassette in enumerate(cassettes):
            pieces = _argument_events(cassette)
            for (first, text), (second, other) in itertools.pairwise(pieces):
                if second == first + 1 and text != other:
                    return index, parse_fault(f"reorder:{first}")
    else:
        n = _call_event(cassettes[0])
        return 0, parse_fault(spec.format(n=n, next=n + 1))
    raise AssertionError(f"no exchange to place {spec} in")


@pytest.fixture(scope="module", params=PROTOCOLS)
def recorded(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, list[Cassette]]:
    import asyncio

    provider: str = request.param
    folder = tmp_path_factory.mktemp(f"cassettes-{provider}")
    outcome = asyncio.run(_record(provider, folder))
    assert (outcome.outcome, outcome.executed_tools) == ("model_finished", 6)
    assert outcome.final_source == FIXED_SOURCE
    cassettes = load_all(folder)
    for path in folder.iterdir():
        assert KEY.encode() not in path.read_bytes()
    return provider, cassettes


async def test_a_recorded_session_replays_offline_the_same_way(
    recorded: tuple[str, list[Cassette]],
) -> None:
    provider, cassettes = recorded
    assert len(cassettes) == 7
    assert [c.verdict.outcome if c.verdict else None for c in cassettes] == ["accepted"] * 7
    outcome = await _replay(provider, [exchange.turn for exchange in exchanges(cassettes)])
    assert (outcome.outcome, outcome.executed_tools) == ("model_finished", 6)
    assert outcome.final_source == FIXED_SOURCE


# Each kind, placed relative to N, the event that starts the first exchange's call.
CHANGING = (
    "cut:after={n}",
    "cut:inside={n}",
    "reset:after={n}",
    "reset:inside={n}",
    "stall:before={next}:seconds=5",
    "drop:{n}",
    "duplicate:{next}",
    "reorder:{n}",
    "status:400",
    "corrupt-terminal",
)
PRESERVING = ("split:bytes=1", "split-utf8")


@pytest.mark.parametrize("spec", CHANGING)
async def test_a_fault_executes_nothing_from_the_faulted_response(
    recorded: tuple[str, list[Cassette]], spec: str
) -> None:
    provider, cassettes = recorded
    index, fault = _placed(spec, cassettes)
    turns = [exchange.turn for exchange in exchanges(cassettes)]
    turns[index] = exchanges([cassettes[index]], [fault])[0].turn
    outcome = await _replay(provider, turns)
    # Every exchange before the faulted one ran its calls; the faulted one's never ran.
    before = sum(c.verdict.calls for c in cassettes[:index] if c.verdict is not None)
    assert outcome.executed_tools == before, (str(fault), outcome)
    assert outcome.outcome != "model_finished"
    assert outcome.final_source == CALCULATOR


@pytest.mark.parametrize("spec", PRESERVING)
async def test_a_fault_that_cannot_change_the_decision_repairs_the_same_way(
    recorded: tuple[str, list[Cassette]], spec: str
) -> None:
    provider, cassettes = recorded
    outcome = await _replay(
        provider, [exchange.turn for exchange in exchanges(cassettes, [parse_fault(spec)])]
    )
    assert (outcome.outcome, outcome.executed_tools) == ("model_finished", 6)
    assert outcome.final_source == FIXED_SOURCE
