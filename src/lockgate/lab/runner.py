"""Runs lab scenarios through the real pipeline and judges what they showed."""

from __future__ import annotations

import random
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..boundary import StreamingModelClient
from ..events import Observer, ignore_event
from ..fixture import CALCULATOR, create_fixture
from ..providers.openai_responses import ResponsesCodec
from ..session import run_session
from .replay import ReplayTransport
from .scenarios import FIXED_SOURCE, Scenario

LAB_MODEL = "lab-model"


@dataclass(frozen=True, slots=True)
class LabResult:
    scenario: Scenario
    observed: str
    stopped: str
    tools_executed: int
    streams_opened: int
    streams_closed: bool
    attempts: int
    final_source: str

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
        return problems

    @property
    def as_expected(self) -> bool:
        return not self.problems


async def run_scenario(scenario: Scenario, observer: Observer = ignore_event) -> LabResult:
    """Replay one scenario in-process on a fresh fixture, with execution allowed."""
    transport = ReplayTransport(scenario.turns())
    delays: list[float] = []

    async def skip_wall_time(delay: float) -> None:
        delays.append(delay)

    client = StreamingModelClient(
        ResponsesCodec(LAB_MODEL),
        transport,
        observer=observer,
        sleep=skip_wall_time,
        rng=random.Random(0),
    )
    with tempfile.TemporaryDirectory(prefix="lockgate-lab-") as parent:
        fixture = create_fixture(Path(parent))
        try:
            outcome = await run_session(
                fixture,
                client,
                allow_execution=True,
                max_turns=10,
                observer=observer,
                interrupt=transport.paused.wait,
            )
        finally:
            await transport.aclose()
    return LabResult(
        scenario=scenario,
        observed=outcome.outcome,
        stopped=outcome.stopped,
        tools_executed=outcome.executed_tools,
        streams_opened=len(transport.streams),
        streams_closed=all(stream.closed for stream in transport.streams),
        attempts=client.opening_attempts,
        final_source=outcome.final_source,
    )
