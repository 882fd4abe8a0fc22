"""The client side: one model turn, read from the events `lockgate run` observes, as a
`TurnSummary`; and `lockgate run` itself exporting to a loopback OTLP receiver."""

from __future__ import annotations

import importlib.util
from itertools import count

import pytest

from lockgate.conversation import Message, ToolCall, Usage
from lockgate.errors import FailureKind
from lockgate.events import (
    DecisionReady,
    ResponseFailed,
    ResponseStarted,
    TextDelta,
    ToolCallStarted,
    ToolFinished,
    ToolStarted,
    UsageReported,
)
from lockgate.lab.scenarios import repair_turns
from lockgate.providers.responses.render import ResponseBuilder
from lockgate.telemetry import TokenUsage
from lockgate.telemetry.client import TurnObserver, TurnSummary, operation_name

from ..helpers import EDIT, ServerThread, assert_no_traceback, run_lockgate

FAKE_KEY = "sk-lockgate-FAKE-KEY-otel-5e1d"


class Recorder:
    def __init__(self) -> None:
        self.turns: list[TurnSummary] = []

    def turn(self, summary: TurnSummary) -> None:
        self.turns.append(summary)


def test_a_turn_per_decision_or_failure() -> None:
    ticks = count()
    recorder = Recorder()
    observe = TurnObserver(
        recorder, protocol="anthropic", model="claude-x", clock=lambda: float(next(ticks))
    )  # created at 0
    call = ToolCall("call_1", "edit", {"path": "secret.py"})
    observe(ResponseStarted(response_id="msg_1", model="claude-x-2026"))  # the turn began at 0
    observe(TextDelta("thinking about the prompt"))
    observe(ToolCallStarted("k", "call_1", "edit"))
    observe(UsageReported(Usage(input_tokens=10, output_tokens=3)))
    observe(DecisionReady(Message("assistant", "", tool_calls=(call,)), "tool_calls", None))  # 1
    observe(ToolStarted(call))  # 2
    observe(ToolFinished("call_1", "edit", "ok"))  # 3: the next turn's clock starts
    observe(ResponseStarted(response_id="msg_2"))
    observe(ToolCallStarted("k", "call_2", "edit"))
    observe(ToolCallStarted("j", "call_3", "read"))
    observe(ResponseFailed(FailureKind.INVALID_BATCH, "bad arguments", "partial"))  # 4
    first, second = recorder.turns
    assert first == TurnSummary(
        protocol="anthropic",
        operation="chat",
        started=0.0,
        ended=1.0,
        request_model="claude-x",
        response_model="claude-x-2026",
        finish_reasons=("tool_calls",),
        usage=TokenUsage(10, 3),
        released_calls=1,
    )
    assert second == TurnSummary(
        protocol="anthropic",
        operation="chat",
        started=3.0,
        ended=4.0,
        request_model="claude-x",
        error_type="lockgate.invalid_batch",
        withheld_calls=2,
    )


def test_a_failing_tracer_never_fails_the_run() -> None:
    class Broken:
        def turn(self, summary: TurnSummary) -> None:
            raise RuntimeError("exporter down")

    observe = TurnObserver(Broken(), protocol="chat", model=None)
    observe(ResponseFailed(FailureKind.STREAM_ENDED, "cut", ""))  # no exception


def test_operation_names() -> None:
    assert operation_name("gemini") == "generate_content"
    assert operation_name("responses") == operation_name("chat") == "chat"


# --- `lockgate run`, exporting ----------------------------------------------------------

needs_otel = pytest.mark.skipif(
    importlib.util.find_spec("opentelemetry.sdk") is None
    or importlib.util.find_spec("opentelemetry.proto") is None,
    reason="the otel extra (opentelemetry-sdk, opentelemetry-proto) is absent",
)


@needs_otel
def test_lockgate_run_exports_a_client_span_per_turn() -> None:
    from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

    from .receiver import HttpReceiver, attributes

    with HttpReceiver() as receiver, ServerThread(repair_turns()) as server:
        result = run_lockgate(
            "run",
            "--base-url",
            server.base_url,
            "--allow-execution",
            "--max-turns",
            "3",
            key=FAKE_KEY,
            env={**receiver.environ(), "OTEL_SERVICE_NAME": "lockgate-run-test"},
        )
        assert result.returncode == 1, result.stderr  # the turn limit
        assert server.server is not None
        turns = len(server.server.requests)
    spans = receiver.spans()
    assert len(spans) == turns == 3
    for span in spans:
        assert span.name == "chat gpt-4.1-mini"
        assert span.kind == Span.SPAN_KIND_CLIENT
        assert span.status.code != Status.STATUS_CODE_ERROR
        values = attributes(span)
        assert values["gen_ai.provider.name"] == "openai"
        assert values["gen_ai.operation.name"] == "chat"
        assert values["gen_ai.request.model"] == "gpt-4.1-mini"
        assert "error.type" not in values
    finishes = [attributes(s)["gen_ai.response.finish_reasons"] for s in spans]
    assert finishes == [("tool_calls",)] * 3
    assert all(r["service.name"] == "lockgate-run-test" for r in receiver.resources())
    metrics = {m.name: m for m in receiver.metrics()}
    duration = metrics["gen_ai.client.operation.duration"]
    assert duration.unit == "s"
    assert sum(p.count for p in duration.histogram.data_points) == 3
    assert metrics["gen_ai.client.token.usage"].unit == "{token}"
    raw = receiver.raw()
    assert FAKE_KEY.encode() not in raw
    assert b"calculator" not in raw.lower()  # nothing of the fixture, its prompt or a path
    assert server.base_url.encode() not in raw
    assert "opentelemetry" not in result.stderr  # the fixture's own test output has tracebacks


@needs_otel
def test_lockgate_run_reports_a_refusal_as_an_error() -> None:
    from opentelemetry.proto.trace.v1.trace_pb2 import Status

    from .receiver import HttpReceiver, attributes

    cut = ResponseBuilder("resp_cut").created().call("fc_1", "call_1", "edit", EDIT).turn()
    with HttpReceiver() as receiver, ServerThread([cut]) as server:
        result = run_lockgate(
            "run",
            "--base-url",
            server.base_url,
            "--allow-execution",
            key=FAKE_KEY,
            env={
                **receiver.environ(),
                "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
            },
        )
    assert result.returncode == 1
    (span,) = receiver.spans()
    assert span.status.code == Status.STATUS_CODE_ERROR
    assert attributes(span)["error.type"] == "lockgate.stream_ended"
    (event,) = span.events
    assert attributes(event)["lockgate.gate.result"] == "withheld"
    assert attributes(event)["lockgate.calls.withheld"] == 1
    (point,) = next(
        m for m in receiver.metrics() if m.name == "gen_ai.client.operation.duration"
    ).histogram.data_points
    assert attributes(point)["error.type"] == "lockgate.stream_ended"
    assert FAKE_KEY.encode() not in receiver.raw()
    assert b"EDIT" not in receiver.raw()
    assert_no_traceback(result)
