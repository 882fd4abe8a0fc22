"""The OpenTelemetry tracer, driven as the proxy drives it, against loopback OTLP receivers
(HTTP and gRPC): what they decoded, and what never reached them."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra (opentelemetry-sdk) is absent")
pytest.importorskip("opentelemetry.proto", reason="the otel extra (opentelemetry-proto) is absent")

from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from lockgate.telemetry import RequestSummary, TokenUsage
from lockgate.telemetry.config import tracing_from_environment
from lockgate.telemetry.otel import GUARDRAIL_EVENT, OtelTracing

from .receiver import GrpcReceiver, HttpReceiver, attributes

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"
TRACESTATE = "vendor=opaque"

# Things a request carries that must never be exported.
PROMPT = "please summarise the quarterly numbers PROMPT-MARKER"
ARGUMENT = '{"path": "ARGUMENT-MARKER"}'
KEY = "sk-test-KEYMARKER0123456789"
TOKEN = "Bearer TOKEN-MARKER-abcdef"
ROUTE = "/v1/ROUTE-MARKER/chat/completions"
FORBIDDEN = (PROMPT, ARGUMENT, KEY, TOKEN, ROUTE, "ROUTE-MARKER", "MARKER")


@pytest.fixture(params=["http", "grpc"])
def receiver(request: pytest.FixtureRequest) -> Iterator[HttpReceiver | GrpcReceiver]:
    server = HttpReceiver() if request.param == "http" else GrpcReceiver()
    with server:
        yield server


def _drive(tracing: OtelTracing) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """A passed request (a retried attempt, then a fall-back) and a refused one."""
    client_headers = {
        "TraceParent": TRACEPARENT,
        "tracestate": TRACESTATE,
        "authorization": TOKEN,
        "x-api-key": KEY,
        "x-prompt": PROMPT,
    }
    started = time.monotonic()
    request = tracing.request(client_headers, started)
    first = request.attempt(1, "primary", False)
    first_headers = dict(first.headers())
    first.end(503, "upstream_status")
    second = request.attempt(2, "backup", True)
    second_headers = dict(second.headers())
    second.end(200, None)
    request.end(
        RequestSummary(
            protocol="chat",
            operation="chat",
            route=ROUTE,
            outcome="released",
            started=started,
            ended=started + 0.25,
            status=200,
            request_model="gpt-x",
            response_model="gpt-x-2026",
            finish_reasons=("tool_calls",),
            usage=TokenUsage(input_tokens=120, output_tokens=30),
            first_token_at=started + 0.05,
            released_calls=1,
            retries=1,
        )
    )
    refused_started = time.monotonic()
    refused = tracing.request({"authorization": TOKEN}, refused_started)
    only = refused.attempt(1, "anthropic-main", False)
    only_headers = dict(only.headers())
    only.end(200, None)
    refused.end(
        RequestSummary(
            protocol="anthropic",
            operation="chat",
            route=ROUTE,
            outcome="refused",
            started=refused_started,
            ended=refused_started + 0.1,
            status=200,
            request_model="claude-x",
            usage=TokenUsage(input_tokens=50),
            error_type="lockgate.invalid_batch",
            withheld_calls=2,
        )
    )
    return first_headers, second_headers, only_headers


def _environ(receiver: HttpReceiver | GrpcReceiver, opt_in: bool) -> dict[str, str]:
    environ = {**receiver.environ(), "OTEL_SERVICE_NAME": "lockgate-test"}
    if opt_in:
        environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "http,gen_ai_latest_experimental"
    return environ


def _run(receiver: HttpReceiver | GrpcReceiver, opt_in: bool = False) -> tuple[dict[str, str], ...]:
    tracing = tracing_from_environment(_environ(receiver, opt_in))
    assert isinstance(tracing, OtelTracing)
    try:
        return _drive(tracing)
    finally:
        tracing.close()


def test_spans_names_kinds_links_and_trace_context(receiver: HttpReceiver | GrpcReceiver) -> None:
    first_headers, second_headers, only_headers = _run(receiver)
    spans = receiver.spans()
    servers = {s.name: s for s in spans if s.kind == Span.SPAN_KIND_SERVER}
    clients = [s for s in spans if s.kind == Span.SPAN_KIND_CLIENT]
    assert set(servers) == {"chat gpt-x", "chat claude-x"}
    assert len(clients) == 3
    passed, refused = servers["chat gpt-x"], servers["chat claude-x"]
    # The client's trace continues: same trace id, the client's span the parent.
    assert passed.trace_id.hex() == TRACE_ID
    assert passed.parent_span_id.hex() == CLIENT_SPAN
    assert passed.trace_state == TRACESTATE
    # No client context: a new trace, a root span.
    assert refused.trace_id.hex() != TRACE_ID
    assert refused.parent_span_id == b""
    attempts = sorted(
        (s for s in clients if s.trace_id == passed.trace_id),
        key=lambda s: attributes(s)["lockgate.attempt"],  # type: ignore[arg-type,return-value]
    )
    assert [attributes(s)["lockgate.upstream"] for s in attempts] == ["primary", "backup"]
    assert [attributes(s)["lockgate.fallback"] for s in attempts] == [False, True]
    for attempt, headers in zip(attempts, (first_headers, second_headers), strict=True):
        assert attempt.name == "chat gpt-x"
        assert attempt.parent_span_id == passed.span_id
        # What went upstream names this attempt's span, in the client's trace.
        assert headers["traceparent"] == f"00-{TRACE_ID}-{attempt.span_id.hex()}-01"
        assert headers["tracestate"] == TRACESTATE
    (refused_attempt,) = (s for s in clients if s.trace_id == refused.trace_id)
    assert refused_attempt.parent_span_id == refused.span_id
    assert only_headers["traceparent"].split("-")[1:3] == [
        refused.trace_id.hex(),
        refused_attempt.span_id.hex(),
    ]
    assert all(resource["service.name"] == "lockgate-test" for resource in receiver.resources())


def test_attributes_and_refusal_status(receiver: HttpReceiver | GrpcReceiver) -> None:
    _run(receiver)
    spans = {(s.name, s.kind, attributes(s).get("lockgate.attempt")): s for s in receiver.spans()}
    passed = spans[("chat gpt-x", Span.SPAN_KIND_SERVER, None)]
    values = attributes(passed)
    assert values["gen_ai.operation.name"] == "chat"
    assert values["gen_ai.provider.name"] == "openai"
    assert values["gen_ai.request.model"] == "gpt-x"
    assert values["gen_ai.response.model"] == "gpt-x-2026"
    assert values["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert values["gen_ai.usage.input_tokens"] == 120
    assert values["gen_ai.usage.output_tokens"] == 30
    assert values["lockgate.calls.released"] == 1
    assert "error.type" not in values
    assert passed.status.code != Status.STATUS_CODE_ERROR
    retried = spans[("chat gpt-x", Span.SPAN_KIND_CLIENT, 1)]
    assert retried.status.code == Status.STATUS_CODE_ERROR
    assert attributes(retried)["error.type"] == "upstream_status"
    assert attributes(retried)["http.response.status_code"] == 503
    assert "gen_ai.usage.input_tokens" not in attributes(retried)
    fallback = attributes(spans[("chat gpt-x", Span.SPAN_KIND_CLIENT, 2)])
    assert fallback["gen_ai.usage.output_tokens"] == 30
    assert fallback["gen_ai.provider.name"] == "openai"

    refused = spans[("chat claude-x", Span.SPAN_KIND_SERVER, None)]
    values = attributes(refused)
    assert refused.status.code == Status.STATUS_CODE_ERROR
    assert values["error.type"] == "lockgate.invalid_batch"
    assert values["gen_ai.provider.name"] == "anthropic"
    assert values["lockgate.calls.withheld"] == 2
    # Only what the provider stated: no response model, no finish reason, no output count.
    assert "gen_ai.response.model" not in values
    assert "gen_ai.response.finish_reasons" not in values
    assert values["gen_ai.usage.input_tokens"] == 50
    assert "gen_ai.usage.output_tokens" not in values
    # No guardrail event without the opt-in.
    assert all(not s.events for s in receiver.spans())


def test_metrics_names_units_and_attributes(receiver: HttpReceiver | GrpcReceiver) -> None:
    _run(receiver)
    metrics = {m.name: m for m in receiver.metrics()}
    assert {name: metrics[name].unit for name in metrics} == {
        "gen_ai.server.request.duration": "s",
        "gen_ai.server.time_to_first_token": "s",
        "gen_ai.client.token.usage": "{token}",
    }
    duration = {
        attributes(p).get("error.type"): (attributes(p), p.count, p.sum)
        for p in metrics["gen_ai.server.request.duration"].histogram.data_points
    }
    assert set(duration) == {None, "lockgate.invalid_batch"}
    values, count, total = duration[None]
    assert count == 1
    assert total == pytest.approx(0.25)
    assert values["gen_ai.provider.name"] == "openai"
    assert values["gen_ai.request.model"] == "gpt-x"
    assert duration["lockgate.invalid_batch"][0]["gen_ai.provider.name"] == "anthropic"
    (first_token,) = metrics["gen_ai.server.time_to_first_token"].histogram.data_points
    assert first_token.sum == pytest.approx(0.05)  # only the successful response
    tokens = {
        (attributes(p)["gen_ai.token.type"], attributes(p)["gen_ai.provider.name"]): p.sum
        for p in metrics["gen_ai.client.token.usage"].histogram.data_points
    }
    assert tokens == {
        ("input", "openai"): 120,
        ("output", "openai"): 30,
        ("input", "anthropic"): 50,
    }


def test_guardrail_event_only_with_the_opt_in(receiver: HttpReceiver | GrpcReceiver) -> None:
    _run(receiver, opt_in=True)
    servers = {s.name: s for s in receiver.spans() if s.kind == Span.SPAN_KIND_SERVER}
    (released,) = servers["chat gpt-x"].events
    assert released.name == GUARDRAIL_EVENT
    assert attributes(released) == {
        "lockgate.gate.result": "released",
        "lockgate.calls.released": 1,
        "lockgate.calls.withheld": 0,
    }
    (withheld,) = servers["chat claude-x"].events
    assert attributes(withheld) == {
        "lockgate.gate.result": "withheld",
        "lockgate.calls.released": 0,
        "lockgate.calls.withheld": 2,
        "error.type": "lockgate.invalid_batch",
    }


def test_nothing_secret_reaches_the_receiver(receiver: HttpReceiver | GrpcReceiver) -> None:
    _run(receiver, opt_in=True)
    raw = receiver.raw()
    assert receiver.spans()
    assert receiver.metrics()
    assert b"gpt-x" in raw  # the check reads the bytes the receiver got
    for value in FORBIDDEN:
        assert value.encode() not in raw, value


def test_close_is_idempotent_and_an_ended_request_ends_once(
    receiver: HttpReceiver | GrpcReceiver,
) -> None:
    tracing = tracing_from_environment(_environ(receiver, False))
    assert isinstance(tracing, OtelTracing)
    started = time.monotonic()
    request = tracing.request({}, started)
    summary = RequestSummary("gemini", "generate_content", "", "released", started, started + 1)
    request.end(summary)
    request.end(summary)
    tracing.close()
    tracing.close()
    (span,) = receiver.spans()
    assert span.name == "generate_content"  # no request model stated
    assert attributes(span)["gen_ai.provider.name"] == "gcp.gemini"


def test_a_broken_tracer_never_fails_a_request(receiver: HttpReceiver | GrpcReceiver) -> None:
    tracing = tracing_from_environment(_environ(receiver, False))
    assert isinstance(tracing, OtelTracing)
    traced = tracing.request({"traceparent": TRACEPARENT}, time.monotonic())
    tracing.close()
    del tracing.tracer  # anything the SDK might raise
    attempt = traced.attempt(1, "primary", False)  # untraced, not failed
    assert attempt.headers() == {}
    attempt.end(200, None)
    traced.end(RequestSummary("chat", "chat", "", "released", 0.0, 1.0))
    untraced = tracing.request({"traceparent": TRACEPARENT}, time.monotonic())
    assert untraced.attempt(1, "primary", False).headers() == {}
    untraced.end(RequestSummary("chat", "chat", "", "released", 0.0, 1.0))
