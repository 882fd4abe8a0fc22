"""The retry owner: classification, the server's word, the policy and its overrides."""

from __future__ import annotations

import email.utils
from typing import Any

import pytest

from lockgate.client import StreamingModelClient
from lockgate.conversation import Message
from lockgate.errors import FailureKind, OpenFailure, ResponseFailure
from lockgate.events import ResponseFailed, Retrying
from lockgate.fixture import ALL_TOOLS
from lockgate.lab.server import serve_script
from lockgate.providers.anthropic.errors import classify_anthropic_failure
from lockgate.providers.openai.errors import classify_openai_failure
from lockgate.providers.responses.codec import ResponsesCodec
from lockgate.providers.responses.render import ResponseBuilder
from lockgate.retry import RetryPolicy, parse_go_duration, standard_wait
from lockgate.scripted.script import Turn
from lockgate.transport import TransportOptions

from ..helpers import EDIT, HISTORY, KEY, edit_turn, replay_client, responses_transport, text_turn

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1s", 1.0),
        ("6m0s", 360.0),
        ("12ms", 0.012),
        ("2m59.56s", 179.56),
        ("1h2m", 3720.0),
        ("0", 0.0),
        ("1.5s", 1.5),
    ],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "soon", "5", "1x", "s1", "1s garbage"])
def test_not_go_durations(text: str) -> None:
    assert parse_go_duration(text) is None


def test_standard_wait_precedence_and_formats() -> None:
    assert standard_wait({"retry-after-ms": "400", "retry-after": "9"}, NOW) == 0.4
    assert standard_wait({"Retry-After": "2.5"}, NOW) == 2.5
    date = email.utils.formatdate(NOW + 30, usegmt=True)
    assert standard_wait({"retry-after": date}, NOW) == pytest.approx(30, abs=1)
    assert standard_wait({"retry-after": "tomorrow"}, NOW) is None
    assert standard_wait({"retry-after-ms": "soon"}, NOW) is None
    assert standard_wait({}, NOW) is None


def test_openai_reset_headers_count_only_exhausted_limits() -> None:
    headers = {
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": "1.5s",
        "x-ratelimit-remaining-tokens": "40000",
        "x-ratelimit-reset-tokens": "6m0s",
    }
    assert classify_openai_failure(429, {}, headers).retry_after == 1.5
    both_unknown = {"x-ratelimit-reset-requests": "2s", "x-ratelimit-reset-tokens": "12ms"}
    assert classify_openai_failure(429, {}, both_unknown).retry_after == 2.0
    standard_first = {**both_unknown, "retry-after": "7"}
    assert classify_openai_failure(429, {}, standard_first).retry_after == 7.0


def test_anthropic_reset_timestamps_and_billing() -> None:
    from datetime import UTC, datetime

    reset = datetime.fromtimestamp(NOW + 12, UTC).isoformat().replace("+00:00", "Z")
    headers = {
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": reset,
        "anthropic-ratelimit-tokens-remaining": "9000",
        "anthropic-ratelimit-tokens-reset": "2999-01-01T00:00:00Z",
    }
    body = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}
    failure = classify_anthropic_failure(429, body, headers, now=NOW)
    assert failure.retryable
    assert failure.retry_after == pytest.approx(12)
    assert "rate_limit_error" in failure.message
    overloaded = classify_anthropic_failure(
        529, {"type": "error", "error": {"type": "overloaded_error"}}
    )
    assert overloaded.retryable
    billing = classify_anthropic_failure(
        402, {"type": "error", "error": {"type": "billing_error", "message": "x"}}
    )
    assert billing.kind is FailureKind.QUOTA_EXHAUSTED


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 504, 529])
def test_retryable_statuses(status: int) -> None:
    failure = classify_openai_failure(status, {"error": {"code": "whatever", "message": "m"}})
    assert failure.retryable
    assert failure.kind is FailureKind.OPENING


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 422])
def test_terminal_statuses(status: int) -> None:
    assert not classify_openai_failure(status, {"error": {"message": "no"}}).retryable


@pytest.mark.parametrize(
    "body",
    [
        {"error": {"code": "insufficient_quota", "message": "x"}},
        {"error": {"type": "insufficient_quota", "code": None, "message": "x"}},
        {"error": {"code": "billing_hard_limit_reached"}},
        {"error": {"code": "usage_limit_reached"}},
    ],
)
def test_quota_codes_are_terminal_whatever_the_headers(body: object) -> None:
    failure = classify_openai_failure(429, body, {"x-should-retry": "true", "retry-after": "1"})
    assert not failure.retryable
    assert failure.kind is FailureKind.QUOTA_EXHAUSTED
    assert "quota exhausted" in failure.message


def test_quota_is_read_from_codes_never_from_prose() -> None:
    prose = {"error": {"code": "rate_limit_exceeded", "message": "You exceeded your current quota"}}
    assert classify_openai_failure(429, prose).retryable


def test_x_should_retry_overrides_the_status() -> None:
    assert not classify_openai_failure(503, {}, {"x-should-retry": "false"}).retryable
    assert classify_openai_failure(400, {}, {"X-Should-Retry": "true"}).retryable


def test_classification_carries_the_requested_wait() -> None:
    failure = classify_openai_failure(429, {}, {"retry-after-ms": "400"})
    assert failure.retry_after == 0.4


def test_policy_from_environment_and_overrides() -> None:
    environ = {"LOCKGATE_RETRY_ATTEMPTS": "5", "LOCKGATE_RETRY_MAX_DELAY": "10"}
    policy = RetryPolicy.from_environment(environ, base_delay=1.0, attempts=None)
    assert policy == RetryPolicy(attempts=5, base_delay=1.0, max_delay=10.0, jitter=0.1)
    assert RetryPolicy.from_environment({}, attempts=2).attempts == 2
    with pytest.raises(ValueError, match="LOCKGATE_RETRY_JITTER"):
        RetryPolicy.from_environment({"LOCKGATE_RETRY_JITTER": "lots"})
    with pytest.raises(ValueError, match="whole number"):
        RetryPolicy.from_environment({"LOCKGATE_RETRY_ATTEMPTS": "2.5"})
    with pytest.raises(ValueError, match="jitter"):
        RetryPolicy(jitter=1.5)


def test_backoff_is_capped_by_the_maximum() -> None:
    policy = RetryPolicy(base_delay=4, max_delay=5, jitter=0)
    assert [policy.backoff(n) for n in (1, 2, 3)] == [4, 5, 5]


async def test_server_wait_is_honoured_exactly() -> None:
    turns = [Turn(status=429, headers={"retry-after-ms": "400"}), text_turn()]
    client, transport, recorder = replay_client(turns)
    await client.complete([Message("user", "go")], ALL_TOOLS)
    assert recorder.sleeps == [0.4]
    retrying = [e for e in recorder.events if isinstance(e, Retrying)]
    assert retrying[0].delay == 0.4
    assert len(transport.requests) == 2


async def test_a_wait_beyond_the_maximum_fails_at_once() -> None:
    turns = [Turn(status=429, headers={"retry-after": "3600"}), text_turn()]
    client, transport, recorder = replay_client(turns)
    with pytest.raises(OpenFailure) as caught:
        await client.complete([Message("user", "go")], ALL_TOOLS)
    assert caught.value.kind is FailureKind.RETRY_WAIT_TOO_LONG
    assert "3600 s" in caught.value.message
    assert recorder.sleeps == []
    assert len(transport.requests) == 1


async def test_policy_attempts_are_the_limit() -> None:
    turns = [Turn(status=503) for _ in range(6)]
    client, transport, _ = replay_client(turns)
    client.retry = RetryPolicy(attempts=5)
    with pytest.raises(OpenFailure):
        await client.complete([Message("user", "go")], ALL_TOOLS)
    assert len(transport.requests) == 5


@pytest.mark.parametrize("header", [{"retry-after": "0"}, {"retry-after-ms": "0"}])
async def test_a_zero_server_wait_still_backs_off(header: dict[str, str]) -> None:
    # Audit 3: `retry-after: 0` retried a 503 after 0.0 s; the backoff is the floor.
    turns = [Turn(status=503, headers=header), Turn(status=503, headers=header), text_turn()]
    client, _, recorder = replay_client(turns)
    client.retry = RetryPolicy(base_delay=0.25, jitter=0)
    await client.complete([Message("user", "go")], ALL_TOOLS)
    assert recorder.sleeps == [0.25, 0.5]


async def test_a_server_wait_longer_than_the_backoff_is_kept() -> None:
    turns = [Turn(status=503, headers={"retry-after": "2"}), text_turn()]
    client, _, recorder = replay_client(turns)
    client.retry = RetryPolicy(base_delay=0.25, jitter=0)
    await client.complete([Message("user", "go")], ALL_TOOLS)
    assert recorder.sleeps == [2.0]


@pytest.mark.parametrize("provider", ["responses", "chat", "anthropic"])
async def test_every_attempt_tells_the_server_its_retry_count(provider: str) -> None:
    # Audit 3: every request said `x-stainless-retry-count: 0`, retries included.
    from lockgate.client import StreamingModelClient
    from lockgate.lab.server import serve_script
    from lockgate.providers import PROVIDERS
    from lockgate.providers.base import CodecOptions
    from lockgate.scripted.reply import Reply, Say
    from lockgate.scripted.scenario import reply_turn
    from lockgate.transport import TransportOptions

    entry = PROVIDERS[provider]
    turns = [Turn(status=503), Turn(connection_error=True), reply_turn(Reply("r", (Say("ok"),)))]
    async with serve_script(turns, provider=provider) as server:
        transport = entry.make_transport(
            TransportOptions(api_key="sk-test-retry", base_url=server.base_url, trust_env=False)
        )
        client = StreamingModelClient(
            entry.make_codec(CodecOptions("m")), transport, retry=RetryPolicy(base_delay=0)
        )
        try:
            assert (await client.complete([Message("user", "go")], ALL_TOOLS)).content == "ok"
        finally:
            await client.aclose()
        counts = [r.headers.get("x-stainless-retry-count") for r in server.requests]
    assert counts == ["0", "1", "2"]


# --- classifiers never crash -------------------------------------------------------------


def test_a_server_timestamp_never_crashes_the_classifier() -> None:
    from lockgate.providers.anthropic.errors import classify_anthropic_failure
    from lockgate.retry import seconds_until_timestamp

    body = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow"}}
    for stamp in ("0001-01-01T00:00:00", "9999-12-31T23:59:59+14:00", "2026-13-40T00:00:00"):
        headers = {
            "anthropic-ratelimit-requests-remaining": "0",
            "anthropic-ratelimit-requests-reset": stamp,
        }
        failure = classify_anthropic_failure(429, body, headers, now=1_800_000_000)
        assert failure.retryable
    # A timestamp without a zone is UTC, whatever the machine's zone.
    assert seconds_until_timestamp("2027-01-01T00:00:10", 1798761600.0) == 10.0


async def test_a_classifier_failure_is_an_opening_failure_not_a_crash() -> None:
    import httpx2

    from lockgate.providers.openai.transport import OPENAI_SDK
    from lockgate.sdk import SDKTransport

    def explode(status: int, body: object, headers: object) -> Any:
        raise ValueError("a classifier bug")

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(429, json={"error": {"message": "x"}})

    options = TransportOptions(
        api_key=KEY,
        base_url="http://provider.test/v1",
        http_transport=httpx2.MockTransport(handler),
    )
    transport = SDKTransport(options, OPENAI_SDK, "/responses", explode)
    client = StreamingModelClient(ResponsesCodec("m"), transport)
    try:
        with pytest.raises(ResponseFailure) as caught:
            await client.complete([Message("user", "go")], ALL_TOOLS)
    finally:
        await client.aclose()
    assert caught.value.kind is FailureKind.OPENING
    assert "HTTP 429" in caught.value.message


# --- the client retries openings only -------------------------------------------------

SERVER_ERROR = {"error": {"message": "overloaded", "code": "server_error"}}


async def test_retryable_opening_failures_are_retried_three_times_at_most() -> None:
    turns = [
        Turn(status=503, body=SERVER_ERROR),
        Turn(connection_error=True),
        Turn(status=500, body=SERVER_ERROR),
    ]
    client, transport, recorder = replay_client(turns)
    with pytest.raises(OpenFailure) as caught:
        await client.complete(HISTORY, ALL_TOOLS)
    assert caught.value.status == 500
    assert len(transport.requests) == 3
    retries = [event for event in recorder.events if isinstance(event, Retrying)]
    assert [(r.attempt, r.max_attempts) for r in retries] == [(2, 3), (3, 3)]
    # 0.25·2ⁿ s with ±10% jitter, and the sleep was injected (no wall time).
    assert 0.225 <= recorder.sleeps[0] <= 0.275
    assert 0.45 <= recorder.sleeps[1] <= 0.55


async def test_retry_then_success() -> None:
    client, transport, _ = replay_client([Turn(status=503, body=SERVER_ERROR), text_turn()])
    decision = await client.complete(HISTORY, ALL_TOOLS)
    assert decision.content == "All done."
    assert len(transport.requests) == 2
    assert transport.requests[0] == transport.requests[1]


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_other_statuses_are_not_retried(status: int) -> None:
    client, transport, recorder = replay_client(
        [Turn(status=status, body={"error": {"message": "no"}}), text_turn()]
    )
    with pytest.raises(OpenFailure) as caught:
        await client.complete(HISTORY, ALL_TOOLS)
    assert caught.value.retryable is False
    assert len(transport.requests) == 1
    assert recorder.sleeps == []


def test_backoff_schedule() -> None:
    policy = RetryPolicy(jitter=0)
    assert [policy.backoff(n) for n in (1, 2, 3)] == [0.25, 0.5, 1.0]


async def test_stream_failures_are_never_retried() -> None:
    cut = ResponseBuilder("resp_1").created().call("fc_1", "call_1", "edit", EDIT).turn()
    client, transport, recorder = replay_client([cut, edit_turn()])
    with pytest.raises(ResponseFailure) as caught:
        await client.complete(HISTORY, ALL_TOOLS)
    assert caught.value.kind is FailureKind.STREAM_ENDED
    assert len(transport.requests) == 1
    assert transport.streams[0].closed
    assert isinstance(recorder.events[-1], ResponseFailed)


async def test_empty_stream_is_a_failure_not_a_retry() -> None:
    client, transport, _ = replay_client([Turn(events=()), text_turn()])
    with pytest.raises(ResponseFailure, match="without a terminal event"):
        await client.complete(HISTORY, ALL_TOOLS)
    assert len(transport.requests) == 1


# --- the server's word over HTTP, with the SDK -------------------------------------------

RATE_LIMITED = {
    "error": {"message": "Rate limit reached.", "type": "requests", "code": "rate_limit_exceeded"}
}
ANSWER = ResponseBuilder("resp_ok").created().text("msg", "The bug is in add.").completed().turn()


async def test_retry_after_an_hour_fails_at_once_naming_the_wait() -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    async with serve_script(
        [Turn(status=429, body=RATE_LIMITED, headers={"retry-after": "3600"}), ANSWER]
    ) as server:
        transport = responses_transport(api_key="sk-retry-test-key", base_url=server.base_url)
        client = StreamingModelClient(ResponsesCodec("gpt-4.1-mini"), transport, sleep=sleep)
        try:
            with pytest.raises(ResponseFailure) as caught:
                await client.complete([Message("user", "go")], ALL_TOOLS)
        finally:
            await transport.aclose()
        assert len(server.requests) == 1
    assert waits == []  # no wait at all, not a shorter one
    assert caught.value.kind is FailureKind.RETRY_WAIT_TOO_LONG
    assert "3600 s" in caught.value.message
