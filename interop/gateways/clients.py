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
from dataclasses import dataclass
from typing import Any, Literal

import anthropic
import openai

from .scenarios import Fault
from .upstream import EDIT_TOOL, GOOD

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
    text = ""
    calls: dict[int, list[str]] = {}
    finish: str | None = None
    error: str | None = None
    started = time.monotonic()
    try:
        stream = await client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": f"{PROMPT} [run {run}]"}],
            tools=tools,
            stream=True,
        )
        async for chunk in stream:
            for choice in chunk.model_dump()["choices"]:
                delta = choice.get("delta") or {}
                text += delta.get("content") or ""
                for call in delta.get("tool_calls") or []:
                    entry = calls.setdefault(call["index"], ["", ""])
                    function = call.get("function") or {}
                    entry[0] += function.get("name") or ""
                    entry[1] += function.get("arguments") or ""
                if choice.get("finish_reason") is not None:
                    finish = choice["finish_reason"]
    except Exception as exc:
        error = _error(exc)
    finally:
        await client.close()
    elapsed = time.monotonic() - started
    assembled = tuple((name, arguments) for _, (name, arguments) in sorted(calls.items()))
    return Outcome(text, assembled, finish, error, elapsed)


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
    text = ""
    calls: dict[int, list[str]] = {}
    finish: str | None = None
    error: str | None = None
    started = time.monotonic()
    try:
        stream = await client.messages.create(
            model=model,
            max_tokens=1024,
            messages=[{"role": "user", "content": f"{PROMPT} [run {run}]"}],
            tools=tools,
            stream=True,
        )
        async for event in stream:
            data = event.model_dump()
            delta = data.get("delta") or {}
            block = data.get("content_block") or {}
            if data["type"] == "content_block_start" and block.get("type") == "tool_use":
                calls[data["index"]] = [block.get("name") or "", ""]
            elif data["type"] == "content_block_delta":
                if delta.get("type") == "text_delta":
                    text += delta.get("text") or ""
                elif delta.get("type") == "input_json_delta" and data["index"] in calls:
                    calls[data["index"]][1] += delta.get("partial_json") or ""
            elif data["type"] == "message_delta":
                finish = delta.get("stop_reason")
    except Exception as exc:
        error = _error(exc)
    finally:
        await client.close()
    elapsed = time.monotonic() - started
    assembled = tuple((name, arguments) for _, (name, arguments) in sorted(calls.items()))
    return Outcome(text, assembled, finish, error, elapsed)


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
