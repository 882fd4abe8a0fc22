"""Runs lab scenarios through the real pipeline, in-process or over loopback HTTP with the
real SDK, and judges what they showed."""

from __future__ import annotations

import contextlib
import random
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

from ..client import StreamingModelClient
from ..codec import ProviderCodec
from ..conversation import Usage
from ..events import Observer, UsageMeter, fan_out, ignore_event
from ..fixture import CALCULATOR, create_fixture
from ..providers.base import CodecOptions, Provider
from ..providers.variants import lab_entry, server_provider, with_variants
from ..retry import RetryPolicy
from ..scripted.renderer import Renderer
from ..scripted.scenario import FIXED_SOURCE, LabOptions, Observation, Scenario
from ..scripted.script import Turn
from ..session import run_session
from ..transport import Transport, TransportOptions
from .neutral import NeutralCodec
from .replay import InstrumentedTransport, ReplayTransport
from .scenarios import SCENARIOS, runs_on
from .server import serve_script

LabTransport = Literal["inprocess", "http"]
LAB_API_KEY = "lab-key-not-a-secret"
LAB_IDLE_TIMEOUT_SECONDS = 1.0
LAB_DEADLINE_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class ServerView:
    """What the loopback server saw (HTTP runs only)."""

    requests: int  # to the protocol's path
    closed_early: int
    stray: tuple[str, ...] = ()  # requests to any other method or path


@dataclass(frozen=True, slots=True)
class LabResult:
    scenario: Scenario
    provider: str
    transport: LabTransport
    observed: str
    stopped: str
    tools_executed: int
    streams_closed: bool
    attempts: int
    final_source: str
    final_answer: str
    server: ServerView | None = None
    check_problems: tuple[str, ...] = ()
    usage: Usage | None = None  # None: no response reported usage
    requests: tuple[Mapping[str, Any], ...] = ()  # the bodies of the requests that took turns

    @property
    def problems(self) -> list[str]:
        """Every way the observation differs from the expectation (empty: as expected)."""
        expect = self.scenario.expect
        problems = []
        if self.observed != expect.outcome:
            problems.append(f"outcome {self.observed}, expected {expect.outcome}")
        if self.attempts != expect.attempts:
            problems.append(f"{self.attempts} opening attempts, expected {expect.attempts}")
        if self.tools_executed != expect.tools_executed:
            problems.append(
                f"{self.tools_executed} tools executed, expected {expect.tools_executed}"
            )
        if not self.streams_closed:
            problems.append("a stream was left open")
        wanted_source = FIXED_SOURCE if expect.fixed else CALCULATOR
        if self.final_source != wanted_source:
            problems.append("calculator.py is " + ("not fixed" if expect.fixed else "changed"))
        if expect.answer is not None and self.final_answer != expect.answer:
            problems.append(f"answer {self.final_answer!r}, expected {expect.answer!r}")
        if self.server is not None:
            if self.server.requests != self.attempts:
                problems.append(
                    f"server saw {self.server.requests} requests for {self.attempts} attempts"
                )
            if self.server.stray:
                problems.append(f"requests to other paths: {', '.join(self.server.stray)}")
            if expect.closed_early is not None and self.server.closed_early != expect.closed_early:
                problems.append(
                    f"client closed early on {self.server.closed_early} streams, "
                    f"expected {expect.closed_early}"
                )
        problems.extend(self.check_problems)
        return problems

    @property
    def as_expected(self) -> bool:
        return not self.problems


@dataclass(frozen=True, slots=True)
class _Wiring:
    transport: Transport
    protocol: Renderer
    interrupt: Callable[[], Awaitable[object]]
    server_view: Callable[[], Awaitable[ServerView | None]]
    requests: Callable[[], list[Mapping[str, Any]]]


@contextlib.asynccontextmanager
async def _wiring(
    turns: list[Turn], kind: LabTransport, provider: Provider
) -> AsyncIterator[_Wiring]:
    if kind == "inprocess":
        replay = ReplayTransport(turns, provider.name)

        async def no_server() -> None:
            return None

        yield _Wiring(
            replay, replay.protocol, replay.paused.wait, no_server, lambda: list(replay.requests)
        )
        return
    async with serve_script(turns, provider=server_provider(provider.name)) as server:
        transport = provider.make_transport(  # the SDK: imported only over HTTP
            TransportOptions(
                api_key=LAB_API_KEY,
                base_url=server.base_url,
                timeout=10.0,
                trust_env=False,
            )
        )

        async def view() -> ServerView:
            await server.settle()
            closed_early = sum(request.client_closed_early for request in server.requests)
            stray = [f"{r.method} {r.path}" for r in server.stray_requests]
            return ServerView(len(server.requests) - len(stray), closed_early, tuple(stray))

        yield _Wiring(
            transport,
            provider.render(),
            server.paused.wait,
            view,
            lambda: [
                r.body for r in server.requests if r.consumed_turn and isinstance(r.body, dict)
            ],
        )


@contextlib.contextmanager
def _fresh_fixture(workspace: Path | None) -> Iterator[Path]:
    """A fresh fixture project for one run, removed after it: in `workspace` (a lab of many
    runs shares one folder, so a run makes and removes one directory, not two), else in a
    temporary directory of its own."""
    if workspace is None:
        with tempfile.TemporaryDirectory(prefix="lockgate-lab-") as parent:
            yield create_fixture(Path(parent))
        return
    root = create_fixture(workspace)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _codec(options: LabOptions, provider: Provider) -> ProviderCodec:
    if options.neutral:
        return NeutralCodec(options.model)
    return provider.make_codec(
        CodecOptions(options.model, provider_options=options.provider_options)
    )


def lab_runs(
    scenario: Scenario | None, providers: Sequence[str], transport: str
) -> list[tuple[Scenario, str, LabTransport]]:
    """The (scenario, provider, transport) runs asked for: every scenario (or the one
    named) on every asked provider (and its lab variants, `variants.with_variants`) it
    applies to, over every asked transport it supports."""
    wanted: tuple[LabTransport, ...] = (
        ("inprocess", "http") if transport == "both" else (cast(LabTransport, transport),)
    )
    scenarios = SCENARIOS if scenario is None else (scenario,)
    return [
        (s, provider, kind)
        for s in scenarios
        for provider in with_variants(providers)
        if runs_on(s, provider)
        for kind in wanted
        if kind in s.transports
    ]


async def run_scenario(
    scenario: Scenario,
    transport: LabTransport = "inprocess",
    observer: Observer = ignore_event,
    *,
    provider: str | None = None,
    workspace: Path | None = None,
) -> LabResult:
    """Run one scenario on a fresh fixture (made in `workspace` when given, else in a
    temporary directory), with execution allowed; opening delays are recorded, not slept
    (the attempt sequence and the requested waits are what matter)."""
    delays: list[float] = []

    async def skip_wall_time(delay: float) -> None:
        delays.append(delay)

    meter = UsageMeter()
    turns = scenario.turns()
    entry = lab_entry(provider)
    async with _wiring(turns, transport, entry) as wiring:
        instrumented = InstrumentedTransport(wiring.transport, scenario.options.close_fails)
        client = StreamingModelClient(
            _codec(scenario.options, entry),
            instrumented,
            observer=fan_out(meter, observer),
            retry=RetryPolicy(retry_unstarted=scenario.options.retry_unstarted),
            sleep=skip_wall_time,
            rng=random.Random(0),
            idle_timeout=LAB_IDLE_TIMEOUT_SECONDS,
            deadline=LAB_DEADLINE_SECONDS,
        )
        with _fresh_fixture(workspace) as fixture:
            try:
                outcome = await run_session(
                    fixture,
                    client,
                    allow_execution=True,
                    max_turns=10,
                    observer=observer,
                    interrupt=wiring.interrupt,
                    recovery_budget=scenario.options.recovery_budget,
                )
            finally:
                await instrumented.aclose()
        server = await wiring.server_view()
        requests = wiring.requests()
    observation = Observation(
        tuple(requests),
        tuple(delays),
        meter.usage,
        outcome.stopped,
        wiring.protocol,
    )
    try:
        check_problems = tuple(scenario.check(observation))
    except (IndexError, KeyError, TypeError, ValueError) as exc:
        check_problems = (f"check could not read the run: {type(exc).__name__}: {exc}",)
    return LabResult(
        scenario=scenario,
        provider=entry.name,
        transport=transport,
        observed=outcome.outcome,
        stopped=outcome.stopped,
        tools_executed=outcome.executed_tools,
        streams_closed=all(stream.closed for stream in instrumented.streams),
        attempts=client.opening_attempts,
        final_source=outcome.final_source,
        final_answer=outcome.final_answer,
        server=server,
        check_problems=check_problems,
        usage=meter.usage,
        requests=tuple(requests),
    )
