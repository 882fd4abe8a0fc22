"""The proxy with OpenTelemetry on, end to end: a client request with a `traceparent`
through `lockgate proxy` to a loopback upstream, the export read back from a loopback OTLP
receiver. The server span continues the client's trace, the attempt span's context is the
`traceparent` the upstream received, a refusal is an Error with lockgate's kind, and nothing
of the prompt, the arguments, the key or the path reaches the receiver."""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

import aiohttp
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from lockgate.lab.server import serve_script
from lockgate.proxy.server import ProxyConfig, serving
from lockgate.telemetry.config import tracing_from_environment
from lockgate.telemetry.otel import OtelTracing

from ..proxy.support import request_for
from ..proxy.test_server import ACCEPTED, INVALID_SECOND, gating, origin
from .receiver import HttpReceiver, attributes

PATH = "/v1/chat/completions"
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_PARENT = f"00-{TRACE}-00f067aa0ba902b7-01"
KEY = "sk-lockgate-test-key-0123456789"


async def _through_proxy(receiver: HttpReceiver, turn: object) -> tuple[int, dict[str, str]]:
    tracing = tracing_from_environment({**receiver.environ(), "OTEL_SERVICE_NAME": "proxy"})
    assert isinstance(tracing, OtelTracing)
    async with serve_script([turn], provider="chat") as server:  # type: ignore[list-item]
        config = ProxyConfig(origin(server), gating=gating(), api_key=KEY)
        async with (
            serving(config, tracing=tracing) as running,
            aiohttp.ClientSession() as session,
            session.post(
                running.url + PATH,
                json=request_for("chat"),
                headers={"traceparent": CLIENT_PARENT},
            ) as response,
        ):
            await response.read()
            status = response.status
        [upstream] = server.requests
    tracing.force_flush()
    return status, upstream.headers


async def test_a_passed_stream_continues_the_clients_trace_to_the_upstream() -> None:
    with HttpReceiver() as receiver:
        status, upstream = await _through_proxy(receiver, ACCEPTED)
        spans = receiver.spans()
        raw = receiver.raw()
    assert status == 200
    [server] = [s for s in spans if s.kind == Span.SPAN_KIND_SERVER]
    [attempt] = [s for s in spans if s.kind == Span.SPAN_KIND_CLIENT]
    assert server.name == "chat lab-model"
    assert server.trace_id.hex() == TRACE  # the client's trace continues
    assert server.parent_span_id.hex() == "00f067aa0ba902b7"
    assert attempt.parent_span_id == server.span_id
    sent = {k.lower(): v for k, v in upstream.items()}["traceparent"]
    assert sent == f"00-{TRACE}-{attempt.span_id.hex()}-01"
    found = attributes(server)
    assert found["gen_ai.operation.name"] == "chat"
    assert found["gen_ai.provider.name"] == "openai"
    assert found["gen_ai.request.model"] == "lab-model"
    assert "error.type" not in found
    assert server.status.code != Status.STATUS_CODE_ERROR
    for secret in (KEY.encode(), PATH.encode(), b"rm_rf"):
        assert secret not in raw


async def test_a_refused_stream_is_an_error_with_lockgates_kind() -> None:
    with HttpReceiver() as receiver:
        await _through_proxy(receiver, INVALID_SECOND)
        spans = receiver.spans()
    [server] = [s for s in spans if s.kind == Span.SPAN_KIND_SERVER]
    assert server.status.code == Status.STATUS_CODE_ERROR
    assert attributes(server)["error.type"] == "lockgate.invalid_batch"
