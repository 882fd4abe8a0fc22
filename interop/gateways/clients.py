"""The clients the harnesses drive, and what each saw.

`openai_stream` runs one streaming Chat Completions request with the official `openai` SDK
(`AsyncOpenAI`, its retries as given), `anthropic_stream` one Messages request with the
official `anthropic` SDK; each returns an `Outcome`: the text, the tool calls and the finish
it read, or the exception the SDK raised, and how long it took. `verdict` reads an outcome
against what the scenario must end with.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterable, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import anthropic
import openai

from .model import EDIT_TOOL, GOOD
from .scenarios import Fault

__all__ = ["Outcome", "anthropic_stream", "openai_stream", "verdict"]

PROMPT = "Fix the bug in add."  # then the run's marker: `[run ID]`
FAKE_OPENAI_KEY = "sk-test-gateways-0000"
FAKE_ANTHROPIC_KEY = "sk-ant-test-gateways-0000"
MESSAGE_CAP = 150


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a client ended with."""

    text: str
    calls: tuple[tuple[str, str], ...]  # (name, arguments) as the client assembled them
    finish: str | None
    error: str | None  # "ExceptionType: message" (None: the stream ended without one)
    elapsed: float

    @property
    def call_names(self) -> str:
        return ",".join(name for name, _ in self.calls) or "-"


def _error(exc: BaseException) -> str:
    message = " ".join(str(exc).split())
    if len(message) > MESSAGE_CAP:
        message = message[: MESSAGE_CAP - 1] + "…"
    return f"{type(exc).__name__}: {message}"


@dataclass
class _Reading:
    """What a client has read of its stream so far."""

    text: str = ""
    calls: dict[int, list[str]] = field(default_factory=dict)  # index -> [name, arguments]
    finish: str | None = None


async def _read(
    client: openai.AsyncOpenAI | anthropic.AsyncAnthropic,
    open_stream: Callable[[], Awaitable[AsyncIterable[Any]]],
    read: Callable[[dict[str, Any], _Reading], None],
) -> Outcome:
    """The outcome of the stream `open_stream` opens, each event (`model_dump`) handed to
    `read`; the client is closed at the end."""
    reading = _Reading()
    error: str | None = None
    started = time.monotonic()
    try:
        async for event in await open_stream():
            read(event.model_dump(), reading)
    except Exception as exc:
        error = _error(exc)
    finally:
        await client.close()
    elapsed = time.monotonic() - started
    calls = tuple((name, arguments) for _, (name, arguments) in sorted(reading.calls.items()))
    return Outcome(reading.text, calls, reading.finish, error, elapsed)


def _read_chat_chunk(chunk: dict[str, Any], reading: _Reading) -> None:
    for choice in chunk["choices"]:
        delta = choice.get("delta") or {}
        reading.text += delta.get("content") or ""
        for call in delta.get("tool_calls") or []:
            entry = reading.calls.setdefault(call["index"], ["", ""])
            function = call.get("function") or {}
            entry[0] += function.get("name") or ""
            entry[1] += function.get("arguments") or ""
        if choice.get("finish_reason") is not None:
            reading.finish = choice["finish_reason"]


def _read_messages_event(data: dict[str, Any], reading: _Reading) -> None:
    delta = data.get("delta") or {}
    block = data.get("content_block") or {}
    if data["type"] == "content_block_start" and block.get("type") == "tool_use":
        reading.calls[data["index"]] = [block.get("name") or "", ""]
    elif data["type"] == "content_block_delta":
        if delta.get("type") == "text_delta":
            reading.text += delta.get("text") or ""
        elif delta.get("type") == "input_json_delta" and data["index"] in reading.calls:
            reading.calls[data["index"]][1] += delta.get("partial_json") or ""
    elif data["type"] == "message_delta":
        reading.finish = delta.get("stop_reason")


async def openai_stream(
    base_url: str,
    model: str,
    *,
    max_retries: int,
    read_timeout: float = 20.0,
    api_key: str = FAKE_OPENAI_KEY,
    run: str = "",
) -> Outcome:
    client = openai.AsyncOpenAI(
        base_url=base_url, api_key=api_key, max_retries=max_retries, timeout=read_timeout
    )
    tools: Any = [{"type": "function", "function": EDIT_TOOL}]
    return await _read(
        client,
        lambda: client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": f"{PROMPT} [run {run}]"}],
            tools=tools,
            stream=True,
        ),
        _read_chat_chunk,
    )


async def anthropic_stream(
    base_url: str,
    model: str,
    *,
    max_retries: int,
    read_timeout: float = 20.0,
    api_key: str = FAKE_ANTHROPIC_KEY,
    run: str = "",
) -> Outcome:
    client = anthropic.AsyncAnthropic(
        base_url=base_url, api_key=api_key, max_retries=max_retries, timeout=read_timeout
    )
    tools: Any = [
        {
            "name": EDIT_TOOL["name"],
            "description": EDIT_TOOL["description"],
            "input_schema": EDIT_TOOL["parameters"],
        }
    ]
    return await _read(
        client,
        lambda: client.messages.create(
            model=model,
            max_tokens=1024,
            messages=[{"role": "user", "content": f"{PROMPT} [run {run}]"}],
            tools=tools,
            stream=True,
        ),
        _read_messages_event,
    )


Verdict = Literal["error", "full answer", "WRONG ANSWER", "FABRICATED SUCCESS", "INVALID PASSED"]


def _arguments(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def is_full_good_answer(outcome: Outcome) -> bool:
    """The good answer, whole: its text, its one edit with the arguments it streamed, and a
    finish that says tool calls."""
    expected_arguments = json.loads("".join(GOOD.calls[0].arguments))
    return (
        outcome.error is None
        and outcome.text == "".join(GOOD.text)
        and [name for name, _ in outcome.calls] == ["edit"]
        and _arguments(outcome.calls[0][1]) == expected_arguments
        and outcome.finish in ("tool_calls", "tool_use")
    )


def verdict(outcome: Outcome, fault: Fault) -> Verdict:
    """What the client ended with, against what the scenario must end with: an error; the
    full good answer (a retry or a fall-back got it unseen); another answer where the good
    one was due; a normal end of a stream the provider never completed (fabricated); or a
    complete but invalid answer (a bad call, a cut call with `length`) passed as a success."""
    if outcome.error is not None:
        return "error"
    if fault.expect == "success":
        return "full answer" if is_full_good_answer(outcome) else "WRONG ANSWER"
    if fault.scenario.attempt(0).end == "complete":
        return "INVALID PASSED"
    return "FABRICATED SUCCESS"
