"""One agent session on a fresh fixture: shared by `lockgate run` and the lab."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from .client import ModelClient
from .context import base_instructions, build_instructions, task_prompt
from .errors import ResponseFailure
from .events import Observer
from .fixture import FixtureExecutor, FixtureTools, exposed_tools
from .loop import run_agent


@dataclass(frozen=True, slots=True)
class SessionOutcome:
    """How a session ended. `stopped` is the CLI's stop line after `stopped: `."""

    outcome: str  # model_finished | model_refused | turn_limit | interrupted | a failure kind
    stopped: str
    executed_tools: int
    final_source: str
    final_answer: str = ""  # the last assistant text, when the model finished


async def run_session(
    fixture: Path,
    model_client: ModelClient,
    *,
    allow_execution: bool,
    max_turns: int,
    observer: Observer,
    interrupt: Callable[[], Awaitable[object]] | None = None,
    recovery_budget: int = 0,
) -> SessionOutcome:
    """Run the agent on `fixture`; a provider failure, or `interrupt` completing first,
    stops the run. Nothing from an interrupted or failed response executes."""
    tools = exposed_tools(allow_execution)
    executor = FixtureExecutor(FixtureTools(fixture), allow_execution=allow_execution)
    instructions = build_instructions(base_instructions(allow_execution), tools, fixture)
    run = asyncio.ensure_future(
        run_agent(
            task_prompt(allow_execution),
            model_client,
            tools,
            executor,
            instructions=instructions,
            max_turns=max_turns,
            observer=observer,
            recovery_budget=recovery_budget,
        )
    )
    waiter = asyncio.ensure_future(interrupt()) if interrupt is not None else None
    try:
        if waiter is not None:
            await asyncio.wait({run, waiter}, return_when=asyncio.FIRST_COMPLETED)
            if not run.done():
                run.cancel()
        outcome: str
        stopped: str
        answer = ""
        try:
            result = await run
            outcome = stopped = result.stop_reason
            last = result.history[-1]
            answer = last.content if result.stop_reason != "turn_limit" else ""
            if result.stop_reason == "model_refused":
                stopped = f"model_refused ({last.refusal})"
        except ResponseFailure as failure:
            outcome = failure.kind
            stopped = f"provider_failure ({failure})"
        except asyncio.CancelledError:
            if waiter is None or not waiter.done():
                raise
            outcome = stopped = "interrupted"
    finally:
        if waiter is not None:
            waiter.cancel()
        if not run.done():
            run.cancel()
    source = (fixture / "calculator.py").read_text(encoding="utf-8", errors="replace")
    return SessionOutcome(str(outcome), stopped, len(executor.executed), source, answer)
