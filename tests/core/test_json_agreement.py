"""JSON that two common readers read differently releases no call (issue 27, finding 1).

An event whose data a JavaScript reader refuses (NaN) is skipped by the AI SDK, which runs
the call built from the other events; a duplicate key, a lone surrogate escape, a number out
of a double's range or a prototype key is read differently by some reader too. Each protocol's
stream with such JSON in the event that carries a call's arguments, or in the arguments, is
refused by the proxy (the protocol's error, no call event released) and by `lockgate run`'s
own client; the same stream without it is accepted by both.
"""

from __future__ import annotations

import json

import pytest

from lockgate.providers.anthropic.render import MessageBuilder
from lockgate.providers.chat.render import ChunkBuilder as ChatChunks
from lockgate.providers.gemini.render import ChunkBuilder as GeminiChunks
from lockgate.providers.responses.render import ResponseBuilder
from lockgate.proxy import Accepted, Refused
from lockgate.scripted.script import Turn

from ..proxy.support import (
    PROTOCOLS,
    Chunks,
    ends_with_refusal,
    gate_stream,
    oracle_chunks,
    request_for,
    run,
    tool_events,
    turn_bytes,
)

EDIT = {"path": "calculator.py", "old": "return a - b", "new": "return a + b"}
ARGUMENTS = json.dumps(EDIT, separators=(",", ":"))


def call_turn(provider: str, arguments: str) -> Turn:
    """One `edit` call with `arguments` (JSON text) in one piece, then the protocol's
    terminal success."""
    if provider == "responses":
        builder = ResponseBuilder("resp_j").created()
        return builder.call("fc_1", "call_1", "edit", arguments, pieces=1).completed().turn()
    if provider == "chat":
        chunks = ChatChunks("chatcmpl_j").start(None)
        return chunks.call(0, "call_1", "edit", arguments, pieces=1).finish("tool_calls").turn()
    if provider == "anthropic":
        message = MessageBuilder("msg_j").start()
        return message.tool_use("toolu_1", "edit", arguments, pieces=1).finish("tool_use").turn()
    return GeminiChunks("r_j").call("edit", EDIT, "call_1").finish().turn()


def stream(provider: str, arguments: str = ARGUMENTS) -> bytes:
    """The stream's bytes; Gemini carries the arguments as an object in the event, written
    here as the JSON text `arguments` itself."""
    body = turn_bytes(call_turn(provider, arguments), provider)
    if provider == "gemini":
        assert body.count(ARGUMENTS.encode()) == 1
        body = body.replace(ARGUMENTS.encode(), arguments.encode("utf-8", "surrogatepass"))
    return body


def with_probe(body: bytes, probe: str) -> bytes:
    """`body` with `probe` (a key and value, as JSON text) added first to the event that
    carries the call's arguments."""
    lines = body.split(b"\n")
    [index] = [
        i
        for i, line in enumerate(lines)
        if line.startswith(b"data: {") and b"calculator.py" in line
    ][:1]
    lines[index] = b"data: {" + probe.encode("utf-8", "surrogatepass") + b"," + lines[index][7:]
    return b"\n".join(lines)


def assert_refused(provider: str, body: bytes) -> None:
    gated = run(gate_stream(provider, request_for(provider), Chunks([body])))
    assert isinstance(gated.outcome, Refused), gated.outcome
    assert tool_events(gated.output) == []
    assert ends_with_refusal(gated.output, provider)
    verdict = run(oracle_chunks(provider, [body]))
    assert not verdict.accepted, verdict


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_the_stream_without_a_probe_is_accepted(provider: str) -> None:
    body = with_probe(stream(provider), '"probe":1')
    gated = run(gate_stream(provider, request_for(provider), Chunks([body])))
    assert isinstance(gated.outcome, Accepted), gated.outcome
    assert tool_events(gated.output)
    assert run(oracle_chunks(provider, [body])).accepted


EVENT_PROBES = {
    "NaN": '"probe":NaN',
    "-Infinity": '"probe":-Infinity',
    "1e400": '"probe":1e400',
    "a 400-digit integer": '"probe":' + "9" * 400,
    "a duplicate key": '"probe":1,"probe":2',
    "a nested duplicate key": '"probe":{"a":1,"a":2}',
    "a lone surrogate escape": '"probe":"\\ud800"',
    "a __proto__ key": '"probe":{"__proto__":{}}',
    "constructor.prototype": '"probe":{"constructor":{"prototype":{}}}',
}


@pytest.mark.parametrize("provider", PROTOCOLS)
@pytest.mark.parametrize("probe", EVENT_PROBES.values(), ids=EVENT_PROBES.keys())
def test_a_disputed_event_carrying_arguments_releases_no_call(provider: str, probe: str) -> None:
    assert_refused(provider, with_probe(stream(provider), probe))


ARGUMENT_PROBES = {
    "a duplicate key": ARGUMENTS[:-1] + ',"new":"return a * b"}',
    "a lone surrogate escape": ARGUMENTS.replace("a - b", "a - b\\udc00"),
    "an escaped duplicate key": ARGUMENTS[:-1] + ',"\\u006eew":"return a * b"}',
}


@pytest.mark.parametrize("provider", PROTOCOLS)
@pytest.mark.parametrize("arguments", ARGUMENT_PROBES.values(), ids=ARGUMENT_PROBES.keys())
def test_disputed_arguments_release_no_call(provider: str, arguments: str) -> None:
    assert_refused(provider, stream(provider, arguments))
