"""Conformance against real recorded traffic (`../shared/real-streams/`, never copied here).

Every recording of every protocol lockgate speaks is replayed through the real client, SSE
decoder, that protocol's decoder and the gate, with the recording's own function tools,
split into random chunks (and whole). Every complete, successful recording must release
exactly the recorded text and calls; every error, truncated or incomplete one must release
nothing. The few complete successes lockgate refuses on purpose are listed in `JUSTIFIED`
(and in the README) with the failure they must end in. The table per protocol and server
is printed (run with `-s`, or see the test's output in CI).
"""

from __future__ import annotations

import base64
import json
import random
from collections import Counter
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lockgate.client import StreamingModelClient
from lockgate.conversation import Message, ToolSpec
from lockgate.errors import OpenFailure, ResponseFailure
from lockgate.providers import PROVIDERS
from lockgate.providers.base import CodecOptions

from ..helpers import ROOT

CORPUS = ROOT.parent / "shared" / "real-streams"
if not CORPUS.is_dir():
    pytest.skip(
        f"no real recordings at {CORPUS} (they live beside the project in the development "
        "workspace, not in a clone)",
        allow_module_level=True,
    )

# Complete, successful recordings lockgate refuses on purpose: file -> (failure kind, why).
JUSTIFIED: dict[str, tuple[str, str]] = {
    "responses-pydantic-ai-1.json": (
        "unsupported_output",
        "its only output is a client-executed tool_search_call (execution: client): a request "
        "for a client action lockgate has no executor for, so it fails closed",
    ),
    **{
        name: (
            "lifecycle",
            "recorded with n=2: two choices carry content; lockgate asks for one choice and "
            "fails closed rather than pick one",
        )
        for name in (
            "chat-opentelemetry-python-contrib-1.json",
            "chat-opentelemetry-python-contrib-4.json",
            "chat-openllmetry-20.json",
        )
    },
    "chat-magentic-26.json": (
        "invalid_batch",
        "the model (a small local Ollama model) sent a string where the tool's schema asks "
        "for an array of integers: the call does not validate, so the batch is refused",
    ),
}


# Gemini's `parameters` are an OpenAPI subset, not JSON Schema: the recording's tools are
# checked for their names and for arguments that are objects.
PERMISSIVE = {"type": "object"}


def _function_tools(
    protocol: str, request: Mapping[str, Any] | None
) -> tuple[list[ToolSpec], list[str]]:
    """The recording's function tools as ToolSpecs, and the names of those that could not be
    made (noted, not fatal)."""
    specs: list[ToolSpec] = []
    refused: list[str] = []
    tools = (request or {}).get("tools") or []
    if protocol == "gemini":  # tools: [{functionDeclarations: [...]}], many to one entry
        tools = [
            {"gemini": declaration}
            for tool in tools
            for declaration in tool.get("functionDeclarations") or []
        ]
    if protocol == "bedrock":  # toolConfig.tools[].toolSpec {name, description, inputSchema.json}
        tools = [
            {"bedrock": tool["toolSpec"]}
            for tool in ((request or {}).get("toolConfig") or {}).get("tools") or []
            if isinstance(tool.get("toolSpec"), dict)
        ]
    for tool in tools:
        if protocol == "bedrock":
            spec = tool["bedrock"]
            name, description = spec.get("name"), spec.get("description")
            schema = (spec.get("inputSchema") or {}).get("json")
        elif protocol == "gemini":
            declaration = tool["gemini"]
            name, description = declaration.get("name"), declaration.get("description")
            schema = declaration.get("parametersJsonSchema") or PERMISSIVE
        elif protocol == "responses":
            if tool.get("type") != "function":
                continue
            name, description, schema = (
                tool.get("name"),
                tool.get("description"),
                tool.get("parameters"),
            )
        elif protocol == "chat":
            function = tool.get("function") if tool.get("type") == "function" else None
            if not isinstance(function, dict):
                continue
            name, description, schema = (
                function.get("name"),
                function.get("description"),
                function.get("parameters"),
            )
        else:
            if "input_schema" not in tool:
                continue  # a server tool
            name, description, schema = (
                tool.get("name"),
                tool.get("description"),
                tool.get("input_schema"),
            )
        try:
            specs.append(
                ToolSpec(
                    str(name), description or "", schema or {"type": "object", "properties": {}}
                )
            )
        except ValueError:
            refused.append(str(name))
    return specs, refused


class _Body:
    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk

    async def aclose(self) -> None:
        return None


class _Recorded:
    """A transport that answers with a recording (an HTTP error, or its body in chunks)."""

    def __init__(self, recording: Mapping[str, Any], chunks: list[bytes], provider: str) -> None:
        self._recording = recording
        self._chunks = chunks
        self._classify = PROVIDERS[provider].classify_error

    async def open(self, request: Mapping[str, Any], *, attempt: int = 0) -> _Body:
        status = int(self._recording["status"])
        if status >= 400:
            try:
                body: object = json.loads(self._recording["body"])
            except ValueError:
                body = None
            raise self._classify(status, body, dict(self._recording["headers"]))
        return _Body(self._chunks)

    async def aclose(self) -> None:
        return None


def _chunks(body: bytes, rng: random.Random | None) -> list[bytes]:
    if rng is None:
        return [body]
    pieces, position = [], 0
    while position < len(body):
        size = rng.randint(1, 64)
        pieces.append(body[position : position + size])
        position += size
    return pieces


@dataclass(frozen=True)
class Outcome:
    released: Message | None
    failure: str = ""


async def _play(
    recording: Mapping[str, Any], tools: Sequence[ToolSpec], rng: random.Random | None
) -> Outcome:
    provider = recording["protocol"]
    entry = PROVIDERS[provider]
    # Bedrock's binary event-stream bodies are stored as base64 (`body_b64`).
    encoded = recording.get("body_b64")
    body = base64.b64decode(encoded) if encoded else recording["body"].encode("utf-8")
    client = StreamingModelClient(
        entry.make_codec(CodecOptions("recorded-model")),
        _Recorded(recording, _chunks(body, rng), provider),
        retry=None,
        sleep=_no_sleep,
    )
    try:
        return Outcome(await client.complete([Message("user", "go")], tools))
    except OpenFailure as failure:
        return Outcome(None, str(failure.kind))
    except ResponseFailure as failure:
        return Outcome(None, str(failure.kind))


async def _no_sleep(delay: float) -> None:
    return None


def _success(recording: Mapping[str, Any]) -> bool:
    """Whether the recording states a complete, successful response: a successful finish
    and the protocol's end marker — for Chat, whose end may be the end of the body after
    the finish (servers without [DONE]), the finish is enough."""
    expect = recording["expect"]
    if recording["status"] >= 400 or expect["finish"] not in ("stop", "tool_calls", "pause_turn"):
        return False
    # Chat servers without [DONE] end the body after the finish: that completes them.
    return bool(expect["complete"]) or recording["protocol"] == "chat"


# What a failed recording must end in, by its recorded finish.
EXPECTED_FAILURES: dict[str | None, set[str]] = {
    "length": {"response_incomplete"},
    # Bedrock: a guardrail blocked the output (its text masked): incomplete, nothing runs.
    "guardrail_intervened": {"response_incomplete"},
    "error": {"provider_error", "response_failed", "opening", "quota_exhausted"},
    None: {"lifecycle", "stream_ended"},
}


def _disagreement(recording: Mapping[str, Any], message: Message) -> str:
    expect = recording["expect"]
    if message.content != (expect["text"] or ""):
        return f"text {message.content[:60]!r} != recorded {str(expect['text'])[:60]!r}"
    calls = [(c.id, c.name, c.arguments_json) for c in message.tool_calls]
    wanted = [(c["id"], c["name"], c["arguments"]) for c in expect["tool_calls"]]
    if len(calls) != len(wanted):
        return f"{len(calls)} calls released, {len(wanted)} recorded"
    for (got_id, got_name, got_args), (want_id, want_name, want_args) in zip(
        calls, wanted, strict=True
    ):
        # The exact argument bytes; one normalization: Anthropic's "" (a tool without
        # parameters, nothing streamed) is released as "{}".
        same = got_args == want_args or (want_args == "" and got_args == "{}")
        if got_name != want_name or not same:
            return f"call {got_name} {got_args!r} != recorded {want_name} {want_args!r}"
        if want_id and got_id != want_id:
            return f"call id {got_id} != recorded {want_id}"
    if expect["finish"] == "pause_turn" and not message.paused:
        return "a pause_turn recording was not released as paused"
    return ""


def _shape(message: Message | None) -> object:
    """What must not depend on chunking (a response without any id gets a fresh
    synthesized one per decoding, and so do its calls)."""
    if message is None:
        return None
    calls = [(c.name, c.arguments_json) for c in message.tool_calls]
    return (message.content, message.refusal, calls, message.paused, len(message.output))


def _recordings() -> list[Path]:
    return sorted(path for path in CORPUS.glob("*.json") if path.name.split("-", 1)[0] in PROVIDERS)


async def test_every_recording_releases_exactly_what_it_states(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rows: Counter[tuple[str, str, str]] = Counter()
    wrong: list[str] = []
    unjustified: list[str] = []
    notes: list[str] = []
    recordings = _recordings()
    assert recordings, f"no recording of a registered protocol in {CORPUS}"
    missing = sorted(set(JUSTIFIED) - {path.name for path in recordings})
    assert not missing, f"JUSTIFIED names recordings that are not there: {missing}"
    for path in recordings:
        recording = json.loads(path.read_text(encoding="utf-8"))
        protocol = recording["protocol"]
        server = recording["source"].get("server", "?")
        tools, refused = _function_tools(protocol, recording.get("request"))
        if refused:
            notes.append(f"{path.name}: tool schema(s) refused by ToolSpec: {', '.join(refused)}")
        whole = await _play(recording, tools, None)
        chunked = await _play(recording, tools, random.Random(path.name))
        if (whole.released is None) != (
            chunked.released is None
        ) or whole.failure != chunked.failure:
            wrong.append(
                f"{path.name}: chunking changed the outcome "
                f"({whole.failure!r} vs {chunked.failure!r})"
            )
            continue
        if whole.released is not None and _shape(chunked.released) != _shape(whole.released):
            wrong.append(f"{path.name}: chunking changed the released message")
            continue
        if _success(recording):
            if path.name in JUSTIFIED:
                kind, _ = JUSTIFIED[path.name]
                if whole.failure != kind:
                    wrong.append(
                        f"{path.name}: expected the justified refusal {kind}, "
                        f"got {whole.failure or 'a release'}"
                    )
                rows[(protocol, server, "refused (justified)")] += 1
                continue
            if whole.released is None:
                unjustified.append(f"{path.name} ({server}): refused with {whole.failure}")
                rows[(protocol, server, "REFUSED")] += 1
                continue
            problem = _disagreement(recording, whole.released)
            if problem:
                wrong.append(f"{path.name} ({server}): {problem}")
                rows[(protocol, server, "DISAGREE")] += 1
            else:
                rows[(protocol, server, "agree")] += 1
        elif whole.released is not None:
            wrong.append(f"{path.name} ({server}): released a decision from a failed recording")
            rows[(protocol, server, "RELEASED WRONGLY")] += 1
        else:
            kinds = EXPECTED_FAILURES.get(recording["expect"]["finish"], set())
            if whole.failure not in kinds:
                wrong.append(
                    f"{path.name} ({server}): released nothing, but as {whole.failure!r}, "
                    f"not one of {sorted(kinds)}"
                )
            rows[(protocol, server, "released nothing")] += 1
    with capsys.disabled():
        print("\nconformance against real recordings (protocol / server / outcome: count)")
        for (protocol, server, outcome), count in sorted(rows.items()):
            print(f"  {protocol:<9} {server:<60} {outcome:<20} {count}")
        totals: Counter[tuple[str, str]] = Counter()
        for (protocol, _, outcome), count in rows.items():
            totals[(protocol, outcome)] += count
        for (protocol, outcome), count in sorted(totals.items()):
            print(f"  total {protocol:<9} {outcome:<20} {count}")
        for note in notes:
            print(f"  note: {note}")
    assert not wrong, "\n".join(wrong)
    assert not unjustified, "\n".join(unjustified)
    assert sum(rows.values()) == len(recordings)
