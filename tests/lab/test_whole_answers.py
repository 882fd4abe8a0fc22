"""A whole (non-streaming) answer of `lockgate serve` carries what its stream carries: the same
calls, cut where the stream cuts them, the same text and the same ending, for every reply turn
of every scenario on every protocol; and the official SDKs read the cut call of
`output-limit` in the whole answer as they read it in the stream.

A whole answer that is more complete than its stream (a call the stream cut off, whole) lets
a client that asks without a stream run what no streaming client could."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anthropic
import openai
import pytest

from lockgate.lab.scenarios import SCENARIOS, SCENARIOS_BY_NAME
from lockgate.lab.server import serve_script
from lockgate.providers import NAMES
from lockgate.providers import provider as registry_entry
from lockgate.scripted.renderer import Frame
from lockgate.scripted.reply import (
    LAB_MODEL,
    Call,
    CustomCall,
    Reply,
    ShellCall,
    argument_pieces,
)
from lockgate.scripted.script import Turn, json_answer

KEY = "sk-test-whole-answers"


@dataclass(frozen=True, slots=True)
class Read:
    """What a client reads from one answer: its calls (id, name, argument text), its answer
    text and how it ended (the protocol's own word)."""

    calls: tuple[tuple[str, str, str], ...]
    text: str
    ending: str | None


# --- the streams, read event by event ---------------------------------------------------------


def _chat_stream(events: list[Frame]) -> Read:
    calls: dict[int, list[str]] = {}
    text, ending = "", None
    for event in events:
        for choice in event.get("choices") or []:
            delta = choice.get("delta") or {}
            text += delta.get("content") or ""
            for fragment in delta.get("tool_calls") or []:
                call = calls.setdefault(fragment["index"], ["", "", ""])
                function = fragment.get("function") or {}
                call[0] = fragment.get("id") or call[0]
                call[1] = function.get("name") or call[1]
                call[2] += function.get("arguments") or ""
            ending = choice.get("finish_reason") or ending
    return Read(tuple((i, n, a) for i, n, a in calls.values()), text, ending)


def _responses_call(item: Mapping[str, Any]) -> list[str] | None:
    """(call id, name, argument text) of an item a client may run: a function call or a
    custom tool call (its name qualified by its namespace, its input as the text), a
    shell_call (its action as JSON); None for any other item."""
    name = item.get("name", "")
    if item.get("namespace"):
        name = f"{item['namespace']}.{name}"
    if item["type"] == "function_call":
        return [item["call_id"], name, item.get("arguments", "")]
    if item["type"] == "custom_tool_call":
        return [item["call_id"], name, item.get("input", "")]
    if item["type"] == "shell_call":
        return [item["call_id"], "shell_call", json.dumps(item["action"])]
    return None


def _responses_stream(events: list[Frame]) -> Read:
    calls: dict[str, list[str]] = {}
    text, ending = "", None
    for event in events:
        kind = event.get("type")
        if kind == "response.output_item.added" and event["item"]["type"] != "shell_call":
            call = _responses_call(event["item"])
            if call is not None:
                calls[event["item"]["id"]] = call
        elif kind == "response.output_item.done" and event["item"]["type"] == "shell_call":
            calls[event["item"]["id"]] = _responses_call(event["item"]) or []  # whole when done
        elif kind in (
            "response.function_call_arguments.delta",
            "response.custom_tool_call_input.delta",
        ):
            calls[event["item_id"]][2] += event["delta"]
        elif kind == "response.output_text.delta":
            text += event["delta"]
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            ending = event["response"]["status"]
    return Read(tuple((i, n, a) for i, n, a in calls.values()), text, ending)


def _anthropic_stream(events: list[Frame]) -> Read:
    calls: dict[int, list[str]] = {}
    text, ending = "", None
    for event in events:
        kind = event.get("type")
        if kind == "content_block_start" and event["content_block"]["type"] == "tool_use":
            block = event["content_block"]
            calls[event["index"]] = [block["id"], block["name"], ""]
        elif kind == "content_block_delta":
            delta = event["delta"]
            if delta["type"] == "input_json_delta" and event["index"] in calls:
                calls[event["index"]][2] += delta["partial_json"]
            elif delta["type"] == "text_delta":
                text += delta["text"]
        elif kind == "message_delta":
            ending = event["delta"]["stop_reason"]
    return Read(tuple((i, n, a) for i, n, a in calls.values()), text, ending)


def _gemini_parts(body: Mapping[str, Any]) -> tuple[list[dict[str, Any]], str | None]:
    candidates = body.get("candidates") or [{}]
    content = candidates[0].get("content") or {}
    return list(content.get("parts") or []), candidates[0].get("finishReason")


def _gemini_call(part: Mapping[str, Any]) -> tuple[str, str, str]:
    call = part["functionCall"]
    return (call.get("id", ""), call["name"], json.dumps(call.get("args", {})))


def _gemini_stream(events: list[Frame]) -> Read:
    calls: list[tuple[str, str, str]] = []
    text, ending = "", None
    for event in events:
        parts, finish = _gemini_parts(event)
        for part in parts:
            if "functionCall" in part:
                calls.append(_gemini_call(part))
            elif not part.get("thought"):
                text += part.get("text", "")
        ending = finish or ending
    return Read(tuple(calls), text, ending)


def _bedrock_stream(events: list[Frame]) -> Read:
    calls: dict[int, list[str]] = {}
    text, ending = "", None
    for event in events:
        kind = event.get("type")
        if kind == "contentBlockStart" and "toolUse" in event["start"]:
            tool = event["start"]["toolUse"]
            if tool.get("type") != "server_tool_use":
                calls[event["contentBlockIndex"]] = [tool["toolUseId"], tool["name"], ""]
        elif kind == "contentBlockDelta":
            delta = event["delta"]
            if "toolUse" in delta and event["contentBlockIndex"] in calls:
                calls[event["contentBlockIndex"]][2] += delta["toolUse"]["input"]
            text += delta.get("text", "")
        elif kind == "messageStop":
            ending = event["stopReason"]
    return Read(tuple((i, n, a) for i, n, a in calls.values()), text, ending)


# --- the whole answers, read as one document --------------------------------------------------


def _chat_whole(body: Mapping[str, Any]) -> Read:
    choice = body["choices"][0]
    message = choice["message"]
    calls = tuple(
        (call["id"], call["function"]["name"], call["function"]["arguments"])
        for call in message.get("tool_calls") or []
    )
    return Read(calls, message.get("content") or "", choice["finish_reason"])


def _responses_whole(body: Mapping[str, Any]) -> Read:
    calls, text = [], ""
    for item in body["output"]:
        call = _responses_call(item)
        if call is not None:
            calls.append((call[0], call[1], call[2]))
        elif item["type"] == "message":
            text += "".join(p.get("text", "") for p in item["content"])
    return Read(tuple(calls), text, body["status"])


def _anthropic_whole(body: Mapping[str, Any]) -> Read:
    calls, text = [], ""
    for block in body["content"]:
        if block["type"] == "tool_use":
            calls.append((block["id"], block["name"], json.dumps(block["input"])))
        elif block["type"] == "text":
            text += block["text"]
    return Read(tuple(calls), text, body["stop_reason"])


def _gemini_whole(body: Mapping[str, Any]) -> Read:
    parts, finish = _gemini_parts(body)
    calls = tuple(_gemini_call(part) for part in parts if "functionCall" in part)
    text = "".join(p.get("text", "") for p in parts if "text" in p and not p.get("thought"))
    return Read(calls, text, finish)


def _bedrock_whole(body: Mapping[str, Any]) -> Read:
    calls, text = [], ""
    for block in body["output"]["message"]["content"]:
        tool = block.get("toolUse")
        if tool is not None and tool.get("type") != "server_tool_use":
            calls.append((tool["toolUseId"], tool["name"], json.dumps(tool["input"])))
        text += block.get("text", "")
    return Read(tuple(calls), text, body["stopReason"])


STREAM_READERS = {
    "chat": _chat_stream,
    "responses": _responses_stream,
    "anthropic": _anthropic_stream,
    "gemini": _gemini_stream,
    "bedrock": _bedrock_stream,
}
WHOLE_READERS = {
    "chat": _chat_whole,
    "responses": _responses_whole,
    "anthropic": _anthropic_whole,
    "gemini": _gemini_whole,
    "bedrock": _bedrock_whole,
}


def _arguments_as_stated(provider: str, arguments: str) -> str:
    """The argument text a whole answer can state for what the stream sent: Anthropic's
    `input` is an object, so a stream's cut JSON is stated as `{}` (nothing of it), and an
    object's text is its JSON as Python writes it. Bedrock's `input` is an object too."""
    if provider not in ("anthropic", "bedrock"):
        return arguments
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return "{}"
    return json.dumps(value)


def _reply_turns() -> list[tuple[str, str, int, Turn]]:
    cases = []
    for scenario in SCENARIOS:
        for provider in NAMES:
            if not scenario.runs_on(provider):
                continue
            for number, turn in enumerate(scenario.turns(), start=1):
                if turn.reply is not None and json_answer(turn).outcome == "json":
                    cases.append((scenario.name, provider, number, turn))
    return cases


CASES = _reply_turns()


@pytest.mark.parametrize(
    ("scenario_name", "provider", "number", "turn"),
    CASES,
    ids=[f"{name}-{provider}-{number}" for name, provider, number, _ in CASES],
)
def test_a_whole_answer_carries_what_its_stream_carries(
    scenario_name: str, provider: str, number: int, turn: Turn
) -> None:
    assert turn.reply is not None
    renderer = registry_entry(provider).render()
    streamed = STREAM_READERS[provider](renderer.events(turn.reply))
    whole = WHOLE_READERS[provider](renderer.completion(turn.reply))
    stated = tuple(
        (call_id, name, _arguments_as_stated(provider, arguments))
        for call_id, name, arguments in streamed.calls
    )
    assert whole.calls == stated
    assert whole.text == streamed.text
    assert whole.ending == streamed.ending


def test_the_cases_cover_the_cut_call_of_output_limit_on_every_protocol() -> None:
    covered = {provider for name, provider, _, _ in CASES if name == "output-limit"}
    assert covered == set(NAMES)


def test_the_cases_cover_every_call_a_client_other_than_lockgate_may_run() -> None:
    covered = {name for name, provider, _, _ in CASES if provider == "responses"}
    assert covered >= {"custom-tool-call", "namespaced-call", "shell-call", "compaction-item"}


def test_the_responses_readers_see_each_kind_of_call() -> None:
    parts = (
        CustomCall("call_c", "exec", "ls -l", namespace="functions"),
        Call("call_f", "edit", {"path": "a"}, namespace="files"),
        ShellCall("call_s", ("pwd",)),
    )
    renderer = registry_entry("responses").render()
    reply = Reply("resp_kinds", parts)
    shell = json.dumps({"commands": ["pwd"], "timeout_ms": None, "max_output_length": None})
    calls = (
        ("call_c", "functions.exec", "ls -l"),
        ("call_f", "files.edit", '{"path": "a"}'),
        ("call_s", "shell_call", shell),
    )
    assert _responses_stream(renderer.events(reply)).calls == calls
    assert _responses_whole(renderer.completion(reply)).calls == calls


# --- the official SDKs read output-limit's whole answer as they read its stream ---------------

OUTPUT_LIMIT = SCENARIOS_BY_NAME["output-limit"]


def _cut_arguments() -> str:
    """The argument text output-limit's stream sends before the limit cuts it."""
    reply = OUTPUT_LIMIT.turns()[0].reply
    assert reply is not None
    [call] = reply.calls
    assert call.cut
    return "".join(argument_pieces(call.argument_text, call.pieces, cut=True))


CUT_ARGUMENTS = _cut_arguments()


def _not_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return True
    return False


async def test_openai_chat_reads_the_cut_call_without_a_stream_as_with_one() -> None:
    turns = OUTPUT_LIMIT.turns()
    async with serve_script([*turns, *turns], provider="chat") as server:
        client = openai.AsyncOpenAI(api_key=KEY, base_url=server.base_url, max_retries=0)
        messages: Any = [{"role": "user", "content": "fix it"}]
        try:
            streamed: dict[int, list[str]] = {}
            finish = None
            stream = await client.chat.completions.create(
                model=LAB_MODEL, messages=messages, stream=True
            )
            async for chunk in stream:
                for delta_choice in chunk.choices:
                    for fragment in delta_choice.delta.tool_calls or []:
                        call = streamed.setdefault(fragment.index, ["", "", ""])
                        call[0] = fragment.id or call[0]
                        call[1] = (fragment.function and fragment.function.name) or call[1]
                        call[2] += (fragment.function and fragment.function.arguments) or ""
                    finish = delta_choice.finish_reason or finish
            whole = await client.chat.completions.create(model=LAB_MODEL, messages=messages)
        finally:
            await client.close()
    choice = whole.choices[0]
    read = [
        (call.id, call.function.name, call.function.arguments)
        for call in choice.message.tool_calls or []
        if call.type == "function"
    ]
    assert read == [tuple(call) for call in streamed.values()]
    assert (choice.finish_reason, finish) == ("length", "length")
    [(_, _, arguments)] = read
    assert arguments == CUT_ARGUMENTS
    assert _not_json(arguments)


async def test_openai_responses_reads_the_cut_call_without_a_stream_as_with_one() -> None:
    turns = OUTPUT_LIMIT.turns()
    async with serve_script([*turns, *turns], provider="responses") as server:
        client = openai.AsyncOpenAI(api_key=KEY, base_url=server.base_url, max_retries=0)
        try:
            streamed: dict[str, list[str]] = {}
            status = None
            stream = await client.responses.create(model=LAB_MODEL, input="fix it", stream=True)
            async for event in stream:
                if event.type == "response.output_item.added":
                    item = event.item
                    if item.type == "function_call":
                        streamed[item.id or ""] = [item.call_id, item.name, item.arguments]
                elif event.type == "response.function_call_arguments.delta":
                    streamed[event.item_id][2] += event.delta
                elif event.type == "response.incomplete":
                    status = event.response.status
            whole = await client.responses.create(model=LAB_MODEL, input="fix it")
        finally:
            await client.close()
    read = [
        (item.call_id, item.name, item.arguments)
        for item in whole.output
        if item.type == "function_call"
    ]
    assert read == [tuple(call) for call in streamed.values()]
    assert (whole.status, status) == ("incomplete", "incomplete")
    [(_, _, arguments)] = read
    assert arguments == CUT_ARGUMENTS
    assert _not_json(arguments)
    [call] = [item for item in whole.output if item.type == "function_call"]
    assert call.status == "incomplete"


async def test_anthropic_reads_no_more_of_the_cut_call_without_a_stream_than_with_one() -> None:
    turns = OUTPUT_LIMIT.turns()
    async with serve_script([*turns, *turns], provider="anthropic") as server:
        client = anthropic.AsyncAnthropic(api_key=KEY, base_url=server.base_url, max_retries=0)
        messages: Any = [{"role": "user", "content": "fix it"}]
        try:
            async with client.messages.stream(
                model=LAB_MODEL, max_tokens=100, messages=messages
            ) as stream:
                streamed = await stream.get_final_message()
            whole = await client.messages.create(model=LAB_MODEL, max_tokens=100, messages=messages)
        finally:
            await client.close()
    assert (whole.stop_reason, streamed.stop_reason) == ("max_tokens", "max_tokens")
    uses = [b for b in whole.content if b.type == "tool_use"]
    streamed_uses = [b for b in streamed.content if b.type == "tool_use"]
    assert [(b.id, b.name) for b in uses] == [(b.id, b.name) for b in streamed_uses]
    # The SDK reads the stream's cut JSON leniently (a partial parse); the whole answer's
    # `input` states nothing of the cut arguments.
    for use, streamed_use in zip(uses, streamed_uses, strict=True):
        assert isinstance(use.input, dict)
        assert isinstance(streamed_use.input, dict)
        assert use.input.items() <= streamed_use.input.items()


async def test_google_genai_reads_no_cut_call_without_a_stream_nor_with_one() -> None:
    from google import genai
    from google.genai import types

    turns = OUTPUT_LIMIT.turns()
    async with serve_script([*turns, *turns], provider="gemini") as server:
        client = genai.Client(
            api_key="lab-key-not-a-secret",
            http_options=types.HttpOptions(base_url=server.base_url, api_version="v1beta"),
        )
        try:
            stream = await client.aio.models.generate_content_stream(
                model=LAB_MODEL, contents="fix it"
            )
            pieces = [piece async for piece in stream]
            whole = await client.aio.models.generate_content(model=LAB_MODEL, contents="fix it")
        finally:
            await client.aio.aclose()
    assert not any(piece.function_calls for piece in pieces)
    assert not whole.function_calls
    assert whole.candidates is not None
    assert pieces[-1].candidates is not None
    assert whole.candidates[0].finish_reason == types.FinishReason.MAX_TOKENS
    assert pieces[-1].candidates[0].finish_reason == types.FinishReason.MAX_TOKENS
