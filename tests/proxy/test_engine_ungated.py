"""What the engine does not gate: which answers are gated (2xx answers to streaming
requests; Gemini's by its path), error bodies passed under a cap, and the headers forwarded
with them."""

from __future__ import annotations

import pytest

from lockgate.gateway import ProtocolTarget
from lockgate.providers import provider as registry_entry
from lockgate.proxy import capped_body, forwarded_headers, gates

from .support import PROTOCOLS, request_for, run
from .test_engine import Upstream


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
