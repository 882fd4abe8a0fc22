"""The agent loop: sequential turns over a model client and a tool executor."""

from __future__ import annotations

from collections.abc import Sequence

from .client import ModelClient
from .conversation import Message, RunResult, StopReason, ToolSpec, Usage
from .errors import ResponseFailure
from .events import Observer, Recovering, RunStopped, ToolFinished, ToolStarted, ignore_event
from .tools import ToolError, ToolExecutor


async def run_agent(
    prompt: str,
    model_client: ModelClient,
    tools: Sequence[ToolSpec],
    executor: ToolExecutor,
    *,
    instructions: str,
    max_turns: int = 10,
    observer: Observer = ignore_event,
    recovery_budget: int = 0,
) -> RunResult:
    """Run turns until the model answers without calls or `max_turns` is reached.

    A response enters history only when complete and validated (the model client
    guarantees that). Calls execute in order; an expected tool failure becomes an
    `error: …` observation carrying its call id. Provider failures propagate
    (`ResponseFailure`); the caller reports them as `provider_failure`.

    A paused response (the provider paused its own turn: finish reason `pause_turn`) enters
    history and is sent back as it is on the next turn, within `max_turns`; nothing runs
    locally. A refusal stops the run with
    `model_refused`.

    Recovery contracts (`recovery_budget` > 0): a completed response whose batch failed
    validation, or a response cut off by the output limit with buffered calls, enters
    history with its calls, each answered by an `error: …` observation; nothing of it
    runs, and the model may reissue. More than `recovery_budget` such responses in a row
    stop the run with the last failure.
    """
    if max_turns < 1:
        raise ValueError("max_turns must be at least 1")
    if recovery_budget < 0:
        raise ValueError("recovery_budget must not be negative")
    history: list[Message] = [Message("system", instructions), Message("user", prompt)]
    consecutive = 0
    for _ in range(max_turns):
        try:
            message = await model_client.complete(tuple(history), tools)
        except ResponseFailure as failure:
            if failure.recovery is None or recovery_budget == 0:
                raise
            consecutive += 1
            if consecutive > recovery_budget:
                raise ResponseFailure(
                    failure.kind,
                    f"recovery budget of {recovery_budget} spent: {failure.message}",
                ) from failure
            recovery = failure.recovery
            observer(
                Recovering(
                    str(failure.kind),
                    len(recovery.message.tool_calls),
                    consecutive,
                    recovery_budget,
                )
            )
            history.append(recovery.message)
            for call, observation in zip(
                recovery.message.tool_calls, recovery.observations, strict=True
            ):
                observer(ToolFinished(call.id, call.name, observation))
                history.append(Message("tool", observation, tool_call_id=call.id))
            continue
        consecutive = 0
        history.append(message)
        if message.paused:
            continue  # the provider paused its own work: send it back as it is, next turn
        if not message.tool_calls:
            stop: StopReason = "model_refused" if message.refusal else "model_finished"
            observer(RunStopped(stop, message.refusal))
            return RunResult(tuple(history), stop, _usage(history))
        for call in message.tool_calls:
            observer(ToolStarted(call))
            try:
                output = await executor.execute(call)
            except ToolError as exc:
                output = f"error: {exc}"
            observer(ToolFinished(call.id, call.name, output))
            history.append(Message("tool", output, tool_call_id=call.id))
    observer(RunStopped("turn_limit"))
    return RunResult(tuple(history), "turn_limit", _usage(history))


def _usage(history: Sequence[Message]) -> Usage:
    total = Usage()
    for message in history:
        if message.usage is not None:
            total += message.usage
    return total
