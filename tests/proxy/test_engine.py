"""The engine's own behaviour, on every protocol: what is forwarded at once and what is held,
keep-alives while holding, the silence limit, the deadline, breaks, a failed close,
abandonment and cancellation, the tools of the request, and the helpers for what is not
gated. Time is virtual (`support.VirtualTimeLoop`): waits cost nothing, and no assertion
reads a clock."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from lockgate.errors import FailureKind, ResponseFailure, StreamInterrupted
from lockgate.gateway import ProtocolTarget
from lockgate.providers import provider as registry_entry
from lockgate.proxy import (
    Accepted,
    GatingOptions,
    GatingStream,
    HeldBudget,
    Refused,
    capped_body,
    forwarded_headers,
    gates,
)
from lockgate.scripted.reply import Call, Reply, Say
from lockgate.scripted.scenario import EDIT_FIX
from lockgate.sse import SSEDecoder

from .support import (
    PROTOCOLS,
    Gated,
    canonical,
    ends_with_refusal,
    gate_stream,
    keepalive_count,
    not_canonical,
    options,
    request_for,
    run,
    sdk_raises,
    sdk_reads,
    tool_events,
    without_keepalives,
)

HANG = object()


class Upstream:
    """A body played step by step: bytes (a read), a number (that many seconds of silence),
    `HANG` (silent until cancelled) or an exception (raised)."""

    def __init__(self, steps: Sequence[object], *, close_error: bool = False) -> None:
        self.steps = list(steps)
        self.close_error = close_error
        self.yielded = 0
        self.ended = False
        self.cancelled = False
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            for step in self.steps:
                if isinstance(step, bytes):
                    await asyncio.sleep(0)
                    self.yielded += 1
                    yield step
                elif isinstance(step, int | float):
                    await asyncio.sleep(step)
                elif step is HANG:
                    await asyncio.Event().wait()
                elif isinstance(step, BaseException):
                    raise step
            self.ended = True
        except asyncio.CancelledError:
            self.cancelled = True
            raise

    async def aclose(self) -> None:
        self.closed = True
        if self.close_error:
            raise OSError("simulated failure while closing")


def native_frames(provider: str, reply: Reply) -> list[bytes]:
    """The frames of `reply` as the provider sends them (Gemini's with CRLF line ends: a
    client receives them in the canonical form, `support.canonical`)."""
    renderer = registry_entry(provider).render()
    return [renderer.frame(event) for event in renderer.events(reply)]


def edit_reply(*, pieces: int = 5, arguments: Any = EDIT_FIX, name: str = "edit") -> Reply:
    return Reply("resp_engine", (Say("Fixing it now."), Call("call_1", name, arguments, pieces)))


def split_at_hold(frames: list[bytes]) -> tuple[list[bytes], list[bytes]]:
    """The frames before the first that carries a tool call, and the rest."""
    for index, frame in enumerate(frames):
        if tool_events(frame):
            return frames[:index], frames[index:]
    raise AssertionError("no tool event")


def gate(provider: str, upstream: Any, **overrides: Any) -> Gated:
    gating = options(**{"deadline": 600.0, **overrides})
    return run(gate_stream(provider, request_for(provider), upstream, gating))


def refusal_of(gated: Gated) -> tuple[str, bool, str]:
    assert isinstance(gated.outcome, Refused)
    refusal = gated.outcome.refusal
    return refusal.kind, refusal.transient, refusal.message


# --- forwarded at once, held from the first call ---------------------------------------------


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_text_is_forwarded_before_the_upstream_sends_more(provider: str) -> None:
    frames = native_frames(provider, edit_reply())
    before, after = split_at_hold(frames)
    seen = asyncio.Event()

    class Waiting(Upstream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            yield b"".join(before)
            await seen.wait()  # until the client has the text (else: the silence limit)
            for frame in after:
                yield frame

    async def consume() -> tuple[bytes, Accepted | Refused | None]:
        stream = GatingStream(registry_entry(provider), request_for(provider), Waiting([]))
        got = b""
        async for piece in stream:
            got += piece
            if got.startswith(canonical(before)):
                seen.set()
        return got, stream.outcome

    output, outcome = run(consume())
    assert isinstance(outcome, Accepted)
    assert output == canonical(frames)


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_held_frames_come_out_only_once_the_body_ended(provider: str) -> None:
    frames = native_frames(provider, edit_reply(pieces=8))
    upstream = Upstream(frames)
    early: list[bytes] = []

    async def consume() -> bytes:
        stream = GatingStream(registry_entry(provider), request_for(provider), upstream)
        got = b""
        async for piece in stream:
            if not upstream.ended:
                early.append(piece)
            got += piece
        return got

    output = run(consume())
    assert output == canonical(frames)
    assert early  # the text went out early …
    assert not any(tool_events(piece) for piece in early)  # … and no call did
    before, _ = split_at_hold(frames)
    assert b"".join(early) == canonical(before)


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_a_refused_stream_drops_what_it_held_and_ends_with_one_error(provider: str) -> None:
    frames = native_frames(provider, edit_reply())
    before, after = split_at_hold(frames)
    # A clean end too early: inside the call's events, or (Gemini, whose calls come whole,
    # one chunk each) right after the call, before the finish.
    gated = gate(provider, Upstream([*before, *after[: min(2, len(after) - 1)]]))
    kind, transient, message = refusal_of(gated)
    assert (kind, transient) == ("stream_ended", True)
    assert message.startswith("lockgate withheld 1 tool call: stream_ended: ")
    assert gated.output.startswith(canonical(before))
    assert tool_events(gated.output) == []
    assert ends_with_refusal(gated.output, provider)
    assert gated.pieces[-1] == gated.output[len(canonical(before)) :]
    assert run(sdk_raises(provider, gated.output)) == []


# --- keep-alives ------------------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_a_silent_upstream_gets_keepalives_while_frames_are_held(provider: str) -> None:
    frames = native_frames(provider, edit_reply())
    before, after = split_at_hold(frames)
    upstream = Upstream([*before, after[0], 100.0, *after[1:]])
    gated = gate(provider, upstream, idle_timeout=200.0, keepalive_interval=15.0, deadline=600.0)
    assert isinstance(gated.outcome, Accepted)
    assert keepalive_count(gated.output, gated.gateway) >= 6  # 100 s / 15 s
    assert gated.gateway.keepalive() in gated.pieces
    assert without_keepalives(gated.output, gated.gateway) == without_keepalives(
        b"".join(frames), gated.gateway
    )
    assert run(sdk_reads(provider, gated.output)) == []  # keep-alives disturb no SDK


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_keepalives_go_out_while_held_events_flow_without_pause(provider: str) -> None:
    reply = edit_reply(pieces=12)
    if provider == "gemini":  # its call is one chunk: what flows held is the text after it
        reply = dataclasses.replace(reply, parts=(*reply.parts, Say("Then a note.", 12)))
    frames = native_frames(provider, reply)
    before, after = split_at_hold(frames)
    steps: list[object] = [*before]
    for frame in after:
        steps.extend([frame, 5.0])  # upstream busy all along, every event held
    gated = gate(provider, Upstream(steps), idle_timeout=10.0, keepalive_interval=15.0)
    assert isinstance(gated.outcome, Accepted)
    assert keepalive_count(gated.output, gated.gateway) >= 3


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_no_keepalive_is_added_while_frames_are_forwarded(provider: str) -> None:
    frames = native_frames(provider, Reply("resp_text", (Say("Just text, slowly.", 6),)))
    steps: list[object] = []
    for number, frame in enumerate(frames, 1):
        # Slow text; the finish and the terminal (held until the end) come together.
        steps.extend([frame, 20.0] if number < len(frames) - 3 else [frame])
    gated = gate(provider, Upstream(steps), idle_timeout=30.0, keepalive_interval=15.0)
    assert isinstance(gated.outcome, Accepted)
    assert gated.output == canonical(frames)


def test_upstream_keepalives_pass_at_once_even_while_held() -> None:
    frames = native_frames("anthropic", edit_reply())
    before, after = split_at_hold(frames)
    ping = b'event: ping\ndata: {"type": "ping"}\n\n'
    comment = b": upstream keep-alive\n\n"
    upstream = Upstream([*before, after[0], ping, comment, *after[1:]])
    pieces: list[bytes] = []

    async def consume() -> None:
        stream = GatingStream(registry_entry("anthropic"), request_for("anthropic"), upstream)
        async for piece in stream:
            pieces.append(piece)

    run(consume())
    # Sent at once, not held: the ping as it came, the comment as the gateway's own
    # keep-alive (a ping too) …
    assert pieces.count(ping) == 2
    assert pieces.index(ping) < len(pieces) - 2  # … before the release at the end
    assert comment not in b"".join(pieces)


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_an_upstream_comment_while_held_is_the_gateways_keepalive_at_once(provider: str) -> None:
    before, after = split_at_hold(native_frames(provider, edit_reply()))
    upstream = Upstream([*before, after[0], b": upstream keep-alive\n\n", *after[1:]])
    pieces: list[bytes] = []

    async def consume() -> None:
        stream = GatingStream(registry_entry(provider), request_for(provider), upstream)
        async for piece in stream:
            pieces.append(piece)

    run(consume())
    gateway = registry_entry(provider).gateway
    assert gateway is not None
    keepalive = gateway().keepalive()  # Gemini's: a blank line; the others': a comment
    assert pieces[-2] == keepalive  # at once, before the release …
    assert b"".join(pieces[:-2]) == canonical(before)  # … after the text
    assert b"upstream keep-alive" not in b"".join(pieces)


# --- refusals -----------------------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_silence_while_holding_is_the_idle_timeout(provider: str) -> None:
    before, after = split_at_hold(native_frames(provider, edit_reply()))
    upstream = Upstream([*before, after[0], HANG])
    gated = gate(provider, upstream)
    kind, transient, message = refusal_of(gated)
    assert (kind, transient) == ("idle_timeout", True)
    assert "no bytes for 1 s" in message
    assert upstream.cancelled
    assert upstream.closed
    assert run(sdk_raises(provider, gated.output)) == []


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_silence_before_holding_is_the_idle_timeout_too(provider: str) -> None:
    before, _ = split_at_hold(native_frames(provider, edit_reply()))
    upstream = Upstream([*before, HANG])
    gated = gate(provider, upstream)
    assert refusal_of(gated)[:2] == ("idle_timeout", True)
    assert gated.output.startswith(canonical(before))
    assert upstream.closed


@pytest.mark.parametrize("holding", [False, True])
def test_the_deadline_bounds_a_stream_that_never_goes_silent(holding: bool) -> None:
    frames = native_frames("responses", edit_reply())
    before, after = split_at_hold(frames)
    drip = [b": tick\n\n", 2.0] * 100
    steps = [*before, after[0], *drip] if holding else [*before[:2], *drip]
    gated = gate("responses", Upstream(steps), idle_timeout=10.0, deadline=30.0)
    kind, transient, message = refusal_of(gated)
    assert (kind, transient) == ("deadline", True)
    assert "30 s deadline" in message


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


# --- the end of a body, abandonment, cancellation ------------------------------------------


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_what_follows_the_last_frame_is_not_released(provider: str) -> None:
    frames = native_frames(provider, edit_reply())
    body = [*frames, b": bye"]  # a comment without its blank line: not a cut …
    gated = gate(provider, Upstream(body))
    assert isinstance(gated.outcome, Accepted)
    assert gated.output == canonical(frames)  # … but nothing a client should read either


@pytest.mark.parametrize("holding", [False, True])
def test_an_abandoned_stream_stops_reading_and_closes_the_upstream(holding: bool) -> None:
    before, after = split_at_hold(native_frames("responses", edit_reply()))
    upstream = Upstream([b"".join(before), *(after[:1] if holding else []), HANG])

    async def consume() -> None:
        stream = GatingStream(
            registry_entry("responses"),
            request_for("responses"),
            upstream,
            options(idle_timeout=100.0, keepalive_interval=5.0),
        )
        iterator = aiter(stream)
        await anext(iterator)  # the text …
        if holding:
            assert await anext(iterator) == b": lockgate keep-alive\n\n"
        await iterator.aclose()  # type: ignore[attr-defined]
        assert stream.outcome is None

    run(consume())
    assert upstream.closed
    assert upstream.cancelled == holding  # a pending read is cancelled


def test_a_cancelled_consumer_cancels_the_pending_read_and_closes_the_upstream() -> None:
    before, after = split_at_hold(native_frames("chat", edit_reply()))
    upstream = Upstream([*before, after[0], HANG])

    async def consume() -> None:
        stream = GatingStream(
            registry_entry("chat"),
            request_for("chat"),
            upstream,
            options(idle_timeout=1000.0, keepalive_interval=10.0, deadline=600.0),
        )
        async for _ in stream:
            pass

    async def main() -> None:
        task = asyncio.create_task(consume())
        await asyncio.sleep(35.0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main())
    assert upstream.cancelled
    assert upstream.closed


def test_a_stream_is_iterated_once_and_needs_a_gateway() -> None:
    entry = registry_entry("responses")
    stream = GatingStream(entry, request_for("responses"), Upstream([]))
    aiter(stream)
    with pytest.raises(RuntimeError, match="once"):
        aiter(stream)
    with pytest.raises(ValueError, match="no gateway"):
        GatingStream(dataclasses.replace(entry, gateway=None), {}, Upstream([]))
    with pytest.raises(ValueError, match="keepalive_interval"):
        GatingOptions(keepalive_interval=0)
    with pytest.raises(ValueError, match="idle_timeout"):
        GatingOptions(idle_timeout=float("nan"))


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_an_empty_body_releases_nothing(provider: str) -> None:
    gated = gate(provider, Upstream([]))
    kind, transient, _ = refusal_of(gated)
    assert (kind, transient) == ("stream_ended", True)
    assert gated.pieces == (gated.output,)  # the refusal, alone
    assert run(sdk_raises(provider, gated.output)) == []


# --- what is not gated ------------------------------------------------------------------------


@pytest.mark.parametrize("provider", [p for p in PROTOCOLS if p != "gemini"])
def test_only_2xx_answers_to_streaming_requests_are_gated(provider: str) -> None:
    # The body's `stream` decides (Gemini's path does: the test below).
    gateway = registry_entry(provider).gateway
    assert gateway is not None
    streaming = request_for(provider)
    assert gates(gateway(), streaming, 200, ProtocolTarget())
    assert not gates(gateway(), streaming, 429, ProtocolTarget())
    assert not gates(gateway(), streaming, 500, ProtocolTarget())
    assert not gates(gateway(), {**streaming, "stream": False}, 200, ProtocolTarget())
    assert not gates(
        gateway(), {k: v for k, v in streaming.items() if k != "stream"}, 200, ProtocolTarget()
    )


def test_a_gemini_answer_is_gated_when_its_path_asks_for_a_stream() -> None:
    gateway = registry_entry("gemini").gateway
    assert gateway is not None
    request = request_for("gemini")
    models = "/v1beta/models/lab-model"
    streamed = gateway().target("POST", f"{models}:streamGenerateContent", {"alt": "sse"})
    whole = gateway().target("POST", f"{models}:generateContent", {})
    assert streamed == ProtocolTarget(stream=True)
    assert whole == ProtocolTarget(stream=False)
    # Whatever the body says: it has no `stream` of its own.
    for body in (request, {**request, "stream": False}):
        assert gates(gateway(), body, 200, streamed)
        assert not gates(gateway(), body, 429, streamed)
        assert not gates(gateway(), body, 200, whole)
    assert not gates(gateway(), {**request, "stream": True}, 200, whole)


def test_error_bodies_pass_under_the_cap() -> None:
    async def body(upstream: Upstream, cap: int) -> bytes:
        return b"".join([piece async for piece in capped_body(upstream, cap)])

    small = Upstream([b'{"error": ', b'{"type": "rate_limit"}}'])
    assert run(body(small, 1024)) == b'{"error": {"type": "rate_limit"}}'
    assert small.closed
    large = Upstream([b"x" * 700, b"y" * 700, b"z" * 700])
    assert run(body(large, 1000)) == b"x" * 700 + b"y" * 300
    assert large.yielded == 2  # the rest is never read
    assert large.closed
    broken = Upstream([b"partial", OSError("reset")])
    assert run(body(broken, 1024)) == b"partial"


def test_forwarded_headers_keep_the_servers_word_and_drop_the_framing() -> None:
    headers = {
        "retry-after": "2",
        "x-request-id": "req_1",
        "content-type": "text/event-stream",
        "Content-Length": "123",
        "content-encoding": "gzip",
        "Transfer-Encoding": "chunked",
        "connection": "keep-alive, x-hop",
        "x-hop": "1",
        "keep-alive": "timeout=5",
    }
    assert forwarded_headers(headers) == {
        "retry-after": "2",
        "x-request-id": "req_1",
        "content-type": "text/event-stream",
    }


def test_the_gate_observer_sees_the_calls() -> None:
    seen: list[object] = []
    frames = native_frames("responses", edit_reply())

    async def consume() -> None:
        stream = GatingStream(
            registry_entry("responses"),
            request_for("responses"),
            Upstream(frames),
            observer=seen.append,
        )
        async for _ in stream:
            pass

    run(consume())
    assert any(type(event).__name__ == "ToolCallStarted" for event in seen)


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


def test_what_a_stream_holds_is_bounded_even_where_the_gate_sees_nothing() -> None:
    frames = native_frames("responses", edit_reply())
    before, held = split_at_hold(frames)
    junk = b'event: response.x\ndata: {"type":"response.x","pad":"' + b"x" * 4000 + b'"}\n\n'
    body = [*before, held[0], *([junk] * 100), *held[1:]]
    bounded = gate("responses", Upstream(body), max_held_bytes=100_000)
    kind, _, message = refusal_of(bounded)
    assert kind == "bound_exceeded"
    assert "100000 bytes held" in message
    assert tool_events(bounded.output) == []
    assert isinstance(gate("responses", Upstream(body)).outcome, Accepted)  # the default: 64 MiB


# --- what a client can read: only judged events, in the canonical form ------------------------


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_bytes_the_gate_does_not_judge_never_reach_the_client(provider: str) -> None:
    # Around a valid text-only stream: a call in a line some readers read and lockgate does
    # not (a byte order mark at a line start, a comment holding a separator that
    # `str.splitlines` splits on), fields and lines no event carries, CR line ends.
    call = b'data: {"smuggled": "call"}'
    frames = native_frames(provider, Reply("resp_engine", (Say("Only text."),)))
    odd = [
        b"\xef\xbb\xbf" + call + b"\n\n",
        b": note\xe2\x80\xa8" + call + b"\n\n",
        b": note\x0b" + call + b"\n\n",
        b"id: 7\nretry: 10\nunknown: field\n\n",
    ]
    crlf = [frame.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n") for frame in frames[1:]]
    body = [frames[0], *odd, *crlf]
    gated = gate(provider, Upstream(body))
    assert isinstance(gated.outcome, Accepted)
    assert b"smuggled" not in gated.output
    assert not_canonical(gated.output, gated.gateway) == []
    assert without_keepalives(gated.output, gated.gateway) == without_keepalives(
        b"".join(frames), gated.gateway
    )
    # the two comments reach the client as the gateway's own keep-alives
    expected = keepalive_count(b"".join(frames), gated.gateway) + 2
    assert keepalive_count(gated.output, gated.gateway) == expected


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_a_json_answer_to_a_stream_request_forwards_nothing(provider: str) -> None:
    body = json.dumps({"choices": [{"message": {"tool_calls": [{"id": "call_1"}]}}]}, indent=2)
    gated = gate(provider, Upstream([body.encode() + b"\n\n\n"]))
    assert isinstance(gated.outcome, Refused)
    assert gated.output == gated.pieces[-1]  # the refusal frame, and nothing before it
    assert b"call_1" not in gated.output


def test_frames_the_decoder_skips_are_not_forwarded() -> None:
    # Anthropic's frames without an `event:` line (the SDK skips them; litellm reads them),
    # a `[DONE]` in the middle of a Responses stream (the SDK stops reading there).
    anthropic = native_frames("anthropic", edit_reply())
    before, after = split_at_hold(anthropic)
    hidden = b'data: {"type":"content_block_start","index":9,"content_block":{"type":"text"}}\n\n'
    gated = gate("anthropic", Upstream([*before, hidden, *after]))
    assert isinstance(gated.outcome, Accepted)
    assert b'"index":9' not in gated.output
    responses = native_frames("responses", edit_reply())
    gated = gate("responses", Upstream([responses[0], b"data: [DONE]\n\n", *responses[1:]]))
    assert isinstance(gated.outcome, Accepted)
    assert b"[DONE]" not in gated.output
    assert gated.output == b"".join(responses)


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_the_refusal_counts_the_call_beyond_the_bound_too(provider: str) -> None:
    calls = tuple(Call(f"call_{n}", "edit", EDIT_FIX, 1) for n in range(9))
    gated = gate(provider, Upstream(native_frames(provider, Reply("resp_engine", calls))))
    kind, _, message = refusal_of(gated)
    assert kind == "bound_exceeded"
    assert message.startswith("lockgate withheld 9 tool calls: bound_exceeded: ")


def test_one_held_bytes_budget_bounds_every_stream_and_is_given_back() -> None:
    frames = native_frames("chat", edit_reply(pieces=8))
    before, after = split_at_hold(frames)
    held = sum(len(frame) for frame in after)
    budget = HeldBudget(held + held // 2)  # room for one held response, not two

    async def both() -> tuple[Gated, Gated, int]:
        first_holds = asyncio.Event()
        second_ended = asyncio.Event()

        class Paced(Upstream):
            def __init__(self, wait_for: asyncio.Event | None, signal: asyncio.Event) -> None:
                super().__init__([])
                self.wait_for, self.signal = wait_for, signal

            async def __aiter__(self) -> AsyncIterator[bytes]:
                for frame in [*before, *after[:-1]]:
                    yield frame
                self.signal.set()
                if self.wait_for is not None:
                    await self.wait_for.wait()
                yield after[-1]

        async def one(upstream: Upstream) -> Gated:
            stream = GatingStream(
                registry_entry("chat"), request_for("chat"), upstream, options(), budget=budget
            )
            pieces = tuple([piece async for piece in stream])
            assert stream.outcome is not None
            return Gated(b"".join(pieces), pieces, stream.outcome, stream.gateway)

        first = asyncio.ensure_future(one(Paced(second_ended, first_holds)))
        await first_holds.wait()
        second = await one(Paced(None, asyncio.Event()))
        second_ended.set()
        return await first, second, budget.held

    first, second, left = run(both())
    assert isinstance(first.outcome, Accepted)
    assert isinstance(second.outcome, Refused)
    assert second.outcome.refusal.kind == "bound_exceeded"
    assert second.outcome.refusal.transient  # a new request may find room
    assert "the proxy holds" in second.outcome.refusal.message
    assert left == 0  # both streams gave back what they held


# --- the memory of what is held (issue 27) ------------------------------------------------------


@pytest.mark.parametrize("provider", ["chat", "anthropic", "responses"])
def test_a_large_held_stream_is_released_whole_in_pieces_and_never_copied_on_the_heap(
    provider: str,
) -> None:
    # 16,000 one-character argument deltas: megabytes of small held frames. Held as Python
    # objects they cost a third more than their bytes and the release joined them into a
    # second copy (peak RSS 3x what the budget counted); held in mapped segments, the Python
    # heap never holds them, and the release goes out in bounded pieces.
    import tracemalloc

    from lockgate.proxy.engine import RELEASE_SLICE_BYTES

    arguments = json.dumps({"path": "calculator.py", "old": "x" * 15950, "new": "y"})
    frames = native_frames(provider, edit_reply(pieces=len(arguments), arguments=arguments))
    body = b"".join(frames)
    held: list[int] = []
    budget = HeldBudget(1 << 40, held.append)

    async def reads() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 16384):
            yield body[start : start + 16384]

    async def consume() -> tuple[list[bytes], object, int]:
        entry = registry_entry(provider)
        stream = GatingStream(entry, request_for(provider), reads(), options(), budget=budget)
        tracemalloc.start()
        try:
            pieces = [piece async for piece in stream]
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        return pieces, stream.outcome, peak

    pieces, outcome, peak = run(consume())
    assert isinstance(outcome, Accepted)
    assert b"".join(pieces) == canonical(body)
    assert max(held) > 1024 * 1024
    assert max(map(len, pieces)) <= RELEASE_SLICE_BYTES + 64 * 1024
    # The pieces the test keeps are the one copy on the heap (the client's writes would
    # free them as they go): nothing else of the held bytes.
    assert peak < sum(map(len, pieces)) + max(held) // 2
    assert held[-1] == 0  # every byte given back to the budget


def test_held_bytes_come_out_in_order_across_segments() -> None:
    from lockgate.proxy.engine import _HeldBytes

    held = _HeldBytes()
    frames = [bytes([65 + n % 26]) * (1000 + n * 7) for n in range(3000)]
    for frame in frames:
        held.append(frame)
    assert held.size == sum(map(len, frames))
    assert held.size > 2 * _HeldBytes.SEGMENT  # it spans several segments
    out = list(held.pieces(100_000))
    assert b"".join(out) == b"".join(frames)
    assert max(map(len, out)) <= 100_000
    assert held.size == 0
    held.close()  # nothing left to give back: idempotent
