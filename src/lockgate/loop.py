"""The agent loop: sequential turns over a model client and a tool executor."""

from __future__ import annotations

from collections.abc import Sequence

from .boundary import ModelClient
from .conversation import Message, RunResult, ToolSpec
from .events import Observer, RunStopped, ToolFinished, ToolStarted, ignore_event
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
) -> RunResult:
    """Run turns until the model answers without calls or `max_turns` is reached.

    A response enters history only when complete and validated (the model client
    guarantees that). Calls execute in order; an expected tool failure becomes an
    `error: …` observation carrying its call id. Provider failures propagate
    (`ResponseFailure`); the caller reports them as `provider_failure`.
    """
    if max_turns < 1:
        raise ValueError("max_turns must be at least 1")
    history: list[Message] = [Message("system", instructions), Message("user", prompt)]
    for _ in range(max_turns):
        message = await model_client.complete(tuple(history), tools)
        history.append(message)
        if not message.tool_calls:
            observer(RunStopped("model_finished"))
            return RunResult(tuple(history), "model_finished")
        for call in message.tool_calls:
            observer(ToolStarted(call))
            try:
                output = await executor.execute(call)
            except ToolError as exc:
                output = f"error: {exc}"
            observer(ToolFinished(call.id, call.name, output))
            history.append(Message("tool", output, tool_call_id=call.id))
    observer(RunStopped("turn_limit"))
    return RunResult(tuple(history), "turn_limit")
