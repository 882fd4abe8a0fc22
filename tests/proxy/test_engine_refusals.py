"""The engine's refusals other than its timers' (those are test_engine.py's), on every
protocol: a break, a failed close, a call to a tool the request does not expose, schemas
checked when asked, the protocol's error (Responses' sequence numbers, an error before
anything else, a message redacted and bounded), an unexpected error while judging, and a
legacy `function_call`. Time is virtual (`support.run`)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from lockgate.errors import FailureKind, ResponseFailure, StreamInterrupted
from lockgate.providers import provider as registry_entry
from lockgate.proxy import Accepted, GatingStream, Refused
from lockgate.sse import SSEDecoder

from .support import (
    PROTOCOLS,
    canonical,
    ends_with_refusal,
    options,
    request_for,
    run,
    sdk_raises,
    tool_events,
)
from .test_engine import Upstream, edit_reply, gate, native_frames, refusal_of, split_at_hold


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_a_reset_is_a_transport_refusal(provider: str) -> None:
    before, after = split_at_hold(native_frames(provider, edit_reply()))
    upstream = Upstream([*before, after[0], StreamInterrupted("connection reset by peer")])
    kind, transient, message = refusal_of(gate(provider, upstream))
    assert (kind, transient) == ("transport", True)
    assert "stream broke: StreamInterrupted: connection reset by peer" in message
    # Any exception the upstream raises is a break (an HTTP library's own).
    upstream = Upstream([*before, after[0], OSError("read failed")])
    assert refusal_of(gate(provider, upstream))[:2] == ("transport", True)


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_a_failed_close_withholds_the_decision(provider: str) -> None:
    frames = native_frames(provider, edit_reply())
    gated = gate(provider, Upstream(frames, close_error=True))
    kind, transient, message = refusal_of(gated)
    assert (kind, transient) == ("cleanup", True)
    assert "decision withheld" in message
    assert tool_events(gated.output) == []


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_a_call_to_a_tool_the_request_does_not_expose_is_refused(provider: str) -> None:
    frames = native_frames(provider, edit_reply(name="shell", arguments={"command": "rm -rf ."}))
    gated = gate(provider, Upstream(frames))
    kind, transient, message = refusal_of(gated)
    assert (kind, transient) == ("invalid_batch", False)
    assert "'shell' is not exposed" in message
    assert run(sdk_raises(provider, gated.output)) == []


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_schemas_are_checked_only_when_asked(provider: str) -> None:
    incomplete = {"path": "calculator.py", "old": "a - b"}  # `new` is required
    frames = native_frames(provider, edit_reply(arguments=incomplete))
    permissive = gate(provider, Upstream(frames), validate_schemas=False)
    assert isinstance(permissive.outcome, Accepted)
    assert permissive.output == canonical(frames)
    strict = gate(provider, Upstream(frames), validate_schemas=True)
    assert refusal_of(strict)[0] == "invalid_batch"
    # Arguments that are no JSON object fail either way.
    frames = native_frames(provider, edit_reply(arguments="[1, 2]"))
    assert refusal_of(gate(provider, Upstream(frames), validate_schemas=False))[0] == (
        "invalid_batch"
    )


def test_the_responses_error_takes_the_next_sequence_number() -> None:
    frames = native_frames("responses", edit_reply())
    before, after = split_at_hold(frames)
    gated = gate("responses", Upstream([*before, after[0]]))
    last_forwarded = json.loads(SSEDecoder().feed(before[-1])[-1].data)["sequence_number"]
    first, then = (json.loads(event.data) for event in SSEDecoder().feed(gated.pieces[-1]))
    assert (first["type"], then["type"]) == ("error", "response.failed")
    assert first["sequence_number"] == last_forwarded + 1
    assert then["sequence_number"] == last_forwarded + 2
    assert first["error"]["code"] == "lockgate_stream_ended"
    assert first["error"]["type"] == "server_error"
    # Codex reads only the second: the same code and message, the response's own id.
    assert then["response"]["error"] == {
        "code": "lockgate_stream_ended",
        "message": first["error"]["message"],
    }
    assert then["response"]["id"].startswith("resp_")


def test_an_error_before_anything_else_is_the_whole_output() -> None:
    overload = (
        b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error",'
        b'"message":"Overloaded"}}\n\n'
    )
    gated = gate("anthropic", Upstream([overload]))
    kind, transient, message = refusal_of(gated)
    assert (kind, transient) == ("provider_error", True)
    assert message == "lockgate refused the response: provider_error: " + (
        "provider error: Overloaded [overloaded_error]"
    )
    assert gated.pieces == (gated.output,)
    assert json.loads(SSEDecoder().feed(gated.output)[0].data)["error"]["type"] == (
        "overloaded_error"
    )


def test_the_refusal_message_is_redacted_and_bounded() -> None:
    secret = "sk-secret-value"
    leak = json.dumps(
        {"id": "c", "error": {"message": f"bad key {secret} " + "x" * 5000, "type": "invalid"}}
    )
    entry = registry_entry("chat")

    async def consume() -> bytes:
        stream = GatingStream(
            entry,
            request_for("chat"),
            Upstream([f"data: {leak}\n\n".encode()]),
            options(),
            redact=lambda text: text.replace(secret, "[redacted]"),
        )
        return b"".join([piece async for piece in stream])

    output = run(consume())
    message = json.loads(SSEDecoder().feed(output)[0].data)["error"]["message"]
    assert secret not in message
    assert "[redacted]" in message
    assert len(message) < 2200


def test_an_unexpected_error_while_judging_is_a_refusal_too() -> None:
    entry = registry_entry("chat")
    factory = entry.gateway
    assert factory is not None
    gateway = factory()

    class Broken:
        def decode(self, event: Any) -> Any:
            raise RuntimeError("decoder bug")

        def end_of_stream(self) -> Any:
            return ()

        def canonical_data(self) -> bytes | None:
            return None

    class BrokenGateway:
        def __getattr__(self, name: str) -> Any:
            return getattr(gateway, name)

        def new_decoder(self) -> Broken:
            return Broken()

    broken = dataclasses.replace(entry, gateway=BrokenGateway)

    async def consume() -> tuple[bytes, Any]:
        stream = GatingStream(broken, request_for("chat"), Upstream([b'data: {"id":"c"}\n\n']))
        return b"".join([piece async for piece in stream]), stream.outcome

    output, outcome = run(consume())
    assert isinstance(outcome, Refused)
    assert outcome.refusal.kind == "internal_error"
    assert "RuntimeError: decoder bug" in outcome.refusal.message
    assert ends_with_refusal(output, "chat")


def test_a_failure_inside_the_judgement_is_a_response_failure() -> None:
    # The engine's refusals carry the failure that caused them (for logs and the lab).
    before, after = split_at_hold(native_frames("responses", edit_reply()))
    gated = gate("responses", Upstream([*before, after[0]]))
    assert isinstance(gated.outcome, Refused)
    assert isinstance(gated.outcome.failure, ResponseFailure)
    assert gated.outcome.failure.kind is FailureKind.STREAM_ENDED


def test_a_legacy_function_call_is_refused_and_never_reaches_the_client() -> None:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return b"data: " + json.dumps({"id": "c", "choices": [choice]}).encode() + b"\n\n"

    body = [
        chunk({"role": "assistant", "content": "Cleaning up."}),
        chunk({"function_call": {"name": "rm_rf", "arguments": "{}"}}),
        chunk({}, "stop"),
        b"data: [DONE]\n\n",
    ]
    gated = gate("chat", Upstream(body))
    kind, transient, message = refusal_of(gated)
    assert (kind, transient) == ("unsupported_output", False)
    assert "legacy `function_call`" in message
    assert b"rm_rf" not in gated.output
    assert gated.output.startswith(body[0])
