"""The Gemini transport over httpx2.MockTransport (no network): the URL and headers it
sends (the key only in `x-goog-api-key`), the raw 200 body decoded and gated, opening
failures classified from Google error documents (RetryInfo, QuotaFailure, the statuses),
the status read before the body, bounded error bodies, no redirects, redacted connection
errors."""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx2
import pytest

from lockgate.client import StreamingModelClient
from lockgate.conversation import Message
from lockgate.errors import FailureKind, OpenFailure, ResponseFailure
from lockgate.fixture import ALL_TOOLS
from lockgate.providers.gemini import KEY_VARIABLES, PROVIDER
from lockgate.providers.gemini.codec import GeminiCodec, stream_path
from lockgate.providers.gemini.errors import classify_gemini_failure, read_google_error
from lockgate.providers.gemini.options import GeminiOptions
from lockgate.providers.gemini.render import (
    PER_DAY,
    PER_MINUTE,
    ChunkBuilder,
    GeminiRenderer,
    google_error,
    quota_failure,
    retry_info,
)
from lockgate.providers.gemini.transport import (
    BASE_URL_VARIABLE,
    DEFAULT_BASE_URL,
    GeminiTransport,
)
from lockgate.scripted.script import fragments
from lockgate.transport import TransportOptions

from ...helpers import EDIT, Recorder

FAKE_KEY = "AIzaSyFAKE-MOCKTRANSPORT-0123456789abcd"
HISTORY = [Message("system", "Be careful."), Message("user", "fix it")]
SSE = {"content-type": "text/event-stream"}
LAB = GeminiRenderer()


class ChunkedBody(httpx2.AsyncByteStream):
    def __init__(self, chunks: list[bytes], fail_after: int | None = None) -> None:
        self.chunks = chunks
        self.fail_after = fail_after
        self.sent = 0
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for index, chunk in enumerate(self.chunks):
            if index == self.fail_after:
                raise httpx2.ReadError("connection reset by peer")
            self.sent += 1
            yield chunk

    async def aclose(self) -> None:
        self.closed = True


def edit_body() -> list[bytes]:
    builder = ChunkBuilder("resp-1").text("Fixing.", 2).call("edit", EDIT, "fc_1").finish()
    payload = b"".join(LAB.frame(event) for event in builder.events)
    return list(fragments(payload, (3, 11, 1, 97)))


def make_client(
    handler: Callable[[httpx2.Request], httpx2.Response],
    recorder: Recorder | None = None,
    **options: Any,
) -> tuple[StreamingModelClient, GeminiTransport, Recorder]:
    options.setdefault("base_url", "http://provider.test")
    transport = GeminiTransport(
        TransportOptions(api_key=FAKE_KEY, http_transport=httpx2.MockTransport(handler), **options)
    )
    recorder = recorder or Recorder()
    client = StreamingModelClient(
        GeminiCodec("gemini-test"),
        transport,
        observer=recorder,
        sleep=recorder.sleep,
        rng=random.Random(2),
    )
    return client, transport, recorder


def answering(status: int, document: object, headers: dict[str, str] | None = None) -> Any:
    """A handler that fails every opening with `status` and the JSON `document`, as Google
    sends it (`text/event-stream`, pretty-printed), counting the requests."""
    seen: list[httpx2.Request] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        content = json.dumps(document, indent=2).encode()
        return httpx2.Response(status, headers={**SSE, **(headers or {})}, content=content)

    handler.seen = seen  # type: ignore[attr-defined]
    return handler


async def fail_opening(handler: Any, **options: Any) -> tuple[OpenFailure, Recorder]:
    client, transport, recorder = make_client(handler, **options)
    with pytest.raises(OpenFailure) as caught:
        await client.complete(HISTORY, ALL_TOOLS)
    await transport.aclose()
    return caught.value, recorder


# --- the request ---------------------------------------------------------------------------------


async def test_a_raw_stream_is_decoded_and_gated_and_the_request_is_as_google_wants() -> None:
    seen: list[httpx2.Request] = []
    bodies: list[ChunkedBody] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        bodies.append(ChunkedBody(edit_body()))
        return httpx2.Response(200, headers=SSE, stream=bodies[-1])

    client, transport, _ = make_client(handler)
    message = await client.complete(HISTORY, ALL_TOOLS)
    await transport.aclose()
    [request] = seen
    assert request.method == "POST"
    assert request.url.path == "/v1beta/models/gemini-test:streamGenerateContent"
    assert dict(request.url.params) == {"alt": "sse"}  # no key in the URL
    assert FAKE_KEY not in str(request.url)
    assert request.headers["x-goog-api-key"] == FAKE_KEY
    assert "authorization" not in request.headers
    assert request.headers["accept-encoding"] == "identity"
    assert request.headers["content-type"] == "application/json"
    sent = json.loads(request.content)
    assert "model" not in sent  # the model is in the path, not the body
    assert sent["contents"] == [{"role": "user", "parts": [{"text": "fix it"}]}]
    assert message.content == "Fixing."
    assert [(c.id, c.name) for c in message.tool_calls] == [("fc_1", "edit")]
    assert bodies[0].closed


@pytest.mark.parametrize(
    ("model", "path"),
    [
        ("gemini-2.5-flash", "/v1beta/models/gemini-2.5-flash:streamGenerateContent"),
        ("models/gemini-2.5-pro", "/v1beta/models/gemini-2.5-pro:streamGenerateContent"),
        ("../x?key=1#y", "/v1beta/models/..%2Fx%3Fkey%3D1%23y:streamGenerateContent"),
    ],
)
def test_the_model_is_one_path_segment(model: str, path: str) -> None:
    assert stream_path(model) == path


def options(**fields: Any) -> TransportOptions:
    return TransportOptions(api_key=FAKE_KEY, **fields)


def test_the_base_url_is_the_flag_else_the_variable_else_googles(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(BASE_URL_VARIABLE, raising=False)
    assert GeminiTransport(options()).url("m").startswith(DEFAULT_BASE_URL + "/v1beta/")
    monkeypatch.setenv(BASE_URL_VARIABLE, "http://gateway.test/gemini/")
    assert GeminiTransport(options()).url("m") == (
        "http://gateway.test/gemini/v1beta/models/m:streamGenerateContent?alt=sse"
    )
    given = GeminiTransport(options(base_url="http://flag.test"))
    assert given.url("m").startswith("http://flag.test/v1beta/models/m:")
    monkeypatch.setenv(BASE_URL_VARIABLE, "ftp://user:pw@x")
    with pytest.raises(ValueError, match=BASE_URL_VARIABLE):
        GeminiTransport(options())


def test_the_registry_entry() -> None:
    assert (PROVIDER.name, PROVIDER.key_variable, PROVIDER.base_url_variable) == (
        "gemini",
        "GEMINI_API_KEY",
        BASE_URL_VARIABLE,
    )
    assert KEY_VARIABLES == ("GEMINI_API_KEY", "GOOGLE_API_KEY")
    assert PROVIDER.default_model == "gemini-2.5-flash"
    assert PROVIDER.options is GeminiOptions
    assert isinstance(PROVIDER.make_transport(options()), GeminiTransport)
    assert isinstance(PROVIDER.render(), GeminiRenderer)
    assert PROVIDER.classify_error is classify_gemini_failure


async def test_a_closed_transport_makes_no_request() -> None:
    calls = 0

    def handler(request: httpx2.Request) -> httpx2.Response:
        nonlocal calls
        calls += 1
        return httpx2.Response(200, headers=SSE, stream=ChunkedBody(edit_body()))

    _, transport, _ = make_client(handler)
    await transport.aclose()
    with pytest.raises(OpenFailure) as caught:
        await transport.open({"model": "m", "contents": []})
    assert not caught.value.retryable
    assert calls == 0


async def test_a_request_without_a_model_is_not_sent() -> None:
    _, transport, _ = make_client(lambda request: httpx2.Response(500))
    with pytest.raises(OpenFailure, match="no model") as caught:
        await transport.open({"contents": []})
    await transport.aclose()
    assert not caught.value.retryable


# --- opening failures -----------------------------------------------------------------------------

API_KEY_INVALID = google_error(
    400,
    "API key not valid. Please pass a valid API key.",
    [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}],
)


@pytest.mark.parametrize(
    ("status", "document", "retryable"),
    [
        (400, API_KEY_INVALID, False),
        (403, google_error(403, "Permission denied."), False),
        (404, google_error(404, "models/x is not found for API version v1beta"), False),
        (500, google_error(500, "An internal error has occurred."), True),
        (503, google_error(503, "The model is overloaded."), True),
        (504, google_error(504, "Deadline expired before operation could complete."), True),
        (429, google_error(429, "Resource has been exhausted (e.g. check quota)."), True),
    ],
)
async def test_opening_status_classification(status: int, document: Any, retryable: bool) -> None:
    handler = answering(status, document)
    failure, _ = await fail_opening(handler)
    assert failure.status == status
    assert failure.kind is FailureKind.OPENING
    assert failure.retryable is retryable
    assert len(handler.seen) == (3 if retryable else 1)
    error = document["error"]
    assert error["status"] in str(failure)
    assert error["message"].split(".")[0] in str(failure)


async def test_a_per_minute_quota_waits_the_retry_delay() -> None:
    document = google_error(
        429, "Quota exceeded. Please retry in 12s.", [quota_failure(PER_MINUTE), retry_info(12)]
    )
    handler = answering(429, document)
    failure, recorder = await fail_opening(handler)
    assert failure.retryable
    assert failure.retry_after == 12.0
    assert recorder.sleeps == [12.0, 12.0]
    assert len(handler.seen) == 3


async def test_a_daily_quota_is_exhausted_at_once() -> None:
    document = google_error(
        429,
        "You exceeded your current quota, please check your plan and billing details.",
        [quota_failure(PER_DAY, "250"), quota_failure(PER_MINUTE), retry_info(40)],
    )
    handler = answering(429, document)
    failure, recorder = await fail_opening(handler)
    assert failure.kind is FailureKind.QUOTA_EXHAUSTED
    assert not failure.retryable
    assert len(handler.seen) == 1
    assert recorder.sleeps == []


async def test_a_standard_retry_after_header_wins_over_the_retry_delay() -> None:
    document = google_error(429, "Slow down.", [retry_info(30)])
    failure, _ = await fail_opening(answering(429, document, {"retry-after": "2"}))
    assert failure.retry_after == 2.0


async def test_a_retry_delay_above_the_maximum_fails_at_once() -> None:
    handler = answering(429, google_error(429, "Slow down.", [retry_info(3600)]))
    failure, _ = await fail_opening(handler)
    assert failure.kind is FailureKind.RETRY_WAIT_TOO_LONG
    assert len(handler.seen) == 1


async def test_an_error_document_in_an_array_is_read_the_same() -> None:
    document = [google_error(429, "Quota.", [quota_failure(PER_DAY)])]
    failure, _ = await fail_opening(answering(429, document))
    assert failure.kind is FailureKind.QUOTA_EXHAUSTED


async def test_a_body_that_is_not_json_keeps_its_status() -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(502, headers={"content-type": "text/html"}, content=b"<h1>Bad")

    failure, _ = await fail_opening(handler)
    assert failure.status == 502
    assert failure.retryable
    assert str(failure).startswith("opening: HTTP 502")


async def test_an_sse_framed_error_document_is_read_too() -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        document = google_error(429, "Quota.", [quota_failure(PER_DAY)])
        return httpx2.Response(429, headers=SSE, content=f"data: {json.dumps(document)}\r\n\r\n")

    failure, _ = await fail_opening(handler)
    assert failure.kind is FailureKind.QUOTA_EXHAUSTED


@pytest.mark.parametrize(
    ("violation", "terminal"),
    [
        ({"quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier"}, True),
        ({"quotaMetric": "generate_content_requests_per_day"}, True),
        ({"quotaId": "GenerateRequestsPerMinutePerProjectPerModel", "quotaValue": "0"}, True),
        ({"quotaId": "GenerateContentInputTokensPerModelPerMinute-FreeTier"}, False),
        ({"quotaId": "GenerateRequestsPerMinutePerProjectPerModel", "quotaValue": "15"}, False),
    ],
)
def test_which_quotas_are_terminal(violation: dict[str, str], terminal: bool) -> None:
    detail = {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [violation]}
    failure = classify_gemini_failure(429, google_error(429, "Quota.", [detail]), {})
    assert (failure.kind is FailureKind.QUOTA_EXHAUSTED) is terminal
    assert failure.retryable is not terminal


def test_the_older_error_info_quota_form_is_read() -> None:
    detail = {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": "RATE_LIMIT_EXCEEDED",
        "metadata": {"quota_limit": "GenerateContentRequestsPerMinute", "quota_limit_value": "0"},
    }
    assert read_google_error(google_error(429, "Quota.", [detail])).terminal_quota


@pytest.mark.parametrize("delay", ["12s", "0.250s", "1.5s", "0s"])
def test_retry_delays_are_protobuf_durations(delay: str) -> None:
    detail = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay}
    failure = classify_gemini_failure(429, google_error(429, "Wait.", [detail]), {})
    assert failure.retry_after == float(delay.removesuffix("s"))


@pytest.mark.parametrize("delay", ["12", "soon", "-1s", "1e9s", 12, None])
def test_other_retry_delays_are_ignored(delay: object) -> None:
    detail = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay}
    assert (
        classify_gemini_failure(429, google_error(429, "Wait.", [detail]), {}).retry_after is None
    )


@pytest.mark.parametrize(
    "body", [None, "text", 7, [], [1, 2], {"error": None}, {"error": {"details": "x"}}, {}]
)
def test_any_error_body_classifies_by_its_status(body: object) -> None:
    failure = classify_gemini_failure(503, body, {})
    assert failure.retryable
    assert failure.status == 503


# --- the bounded client ---------------------------------------------------------------------------


async def test_a_huge_error_body_is_read_under_the_cap() -> None:
    inflated = b'{"error": {"code": 429, "message": "' + b"x" * (64 * 1024**2)
    compressed = gzip.compress(inflated, compresslevel=9)
    chunks = [compressed[i : i + 4096] for i in range(0, len(compressed), 4096)]
    bodies: list[ChunkedBody] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        bodies.append(ChunkedBody(chunks))
        return httpx2.Response(400, headers={"content-encoding": "gzip"}, stream=bodies[-1])

    failure, _ = await fail_opening(handler)
    assert failure.status == 400
    assert len(bodies) == 1
    assert bodies[0].sent < len(chunks)  # the rest was never read, let alone inflated
    assert bodies[0].closed
    assert len(str(failure)) < 1000


async def test_a_redirect_is_not_followed() -> None:
    seen: list[str] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(str(request.url))
        return httpx2.Response(307, headers={"location": "http://elsewhere.test/v1beta/x"})

    failure, _ = await fail_opening(handler)
    assert seen == ["http://provider.test/v1beta/models/gemini-test:streamGenerateContent?alt=sse"]
    assert failure.status == 307
    assert not failure.retryable
    assert "redirects are not followed" in str(failure)


async def test_connection_errors_while_opening_are_retried_and_redacted() -> None:
    calls = 0

    def handler(request: httpx2.Request) -> httpx2.Response:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise httpx2.ConnectError(f"connection refused (key {FAKE_KEY})")
        return httpx2.Response(200, headers=SSE, stream=ChunkedBody(edit_body()))

    recorder = Recorder()
    client, transport, _ = make_client(handler, recorder)
    message = await client.complete(HISTORY, ALL_TOOLS)
    await transport.aclose()
    assert calls == 3
    assert message.tool_calls
    reasons = [getattr(event, "reason", "") for event in recorder.events]
    assert sum("connection failed" in reason for reason in reasons) == 2
    assert not any(FAKE_KEY in reason for reason in reasons)


async def test_a_timeout_while_opening_is_a_retryable_connection_failure() -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ReadTimeout("timed out", request=request)

    failure, _ = await fail_opening(handler)
    assert failure.retryable
    assert "connection failed: ReadTimeout" in str(failure)


async def test_a_read_error_mid_stream_fails_without_retry() -> None:
    calls = 0
    body = ChunkedBody(edit_body(), fail_after=5)

    def handler(request: httpx2.Request) -> httpx2.Response:
        nonlocal calls
        calls += 1
        return httpx2.Response(200, headers=SSE, stream=body)

    client, transport, _ = make_client(handler)
    with pytest.raises(ResponseFailure) as caught:
        await client.complete(HISTORY, ALL_TOOLS)
    await transport.aclose()
    assert caught.value.kind is FailureKind.TRANSPORT
    assert calls == 1
    assert body.closed


async def test_an_error_chunk_before_content_is_retried_only_when_enabled() -> None:
    from lockgate.retry import RetryPolicy

    error = LAB.frame(google_error(503, "The model is overloaded."))
    calls = 0

    def handler(request: httpx2.Request) -> httpx2.Response:
        nonlocal calls
        calls += 1
        chunks = [error] if calls == 1 else edit_body()
        return httpx2.Response(200, headers=SSE, stream=ChunkedBody(chunks))

    client, transport, _ = make_client(handler)
    with pytest.raises(ResponseFailure) as caught:
        await client.complete(HISTORY, ALL_TOOLS)
    assert caught.value.kind is FailureKind.PROVIDER_ERROR
    assert calls == 1
    client.retry = RetryPolicy(retry_unstarted=True)
    calls = 0
    message = await client.complete(HISTORY, ALL_TOOLS)
    await transport.aclose()
    assert calls == 2
    assert message.tool_calls


def test_a_key_that_cannot_travel_in_a_header_is_refused_without_echo() -> None:
    with pytest.raises(ValueError, match="api_key") as caught:
        TransportOptions(api_key="AIza key with spaces")
    assert "AIza" not in str(caught.value)
