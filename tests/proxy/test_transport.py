"""The gating transport under the official SDKs (`openai`, `anthropic`), on every protocol:
the SDK's own stream helpers raise on every refused stream before any tool call of it is
seen, and give the same final message as without the transport on accepted ones; a whole
answer is judged (refused: the SDK's 502); opening errors and requests of no protocol pass
unchanged; the upstream is read once and closed, also when the SDK leaves early.

The upstream is in memory (`httpx2.MockTransport` as the inner transport), the loop's time
virtual (`support.run`): nothing here opens a socket or waits on the wall clock."""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from lockgate.providers import provider as registry_entry
from lockgate.proxy import GatingOptions
from lockgate.proxy.transport import GatingTransport, gated_client
from lockgate.scripted.reply import Call, Reply, Say
from lockgate.scripted.scenario import EDIT_FIX

from .support import (
    BODY_STREAMED_PROTOCOLS as PROTOCOLS,
)
from .support import (
    SDK_ERRORS,
    ends_with_refusal,
    options,
    request_for,
    run,
    tool_events,
)

ORIGIN = "http://upstream.test"
STREAM_HEADERS = {"content-type": "text/event-stream", "x-request-id": "req_123"}


# --- the upstream -----------------------------------------------------------------------------


class Body(httpx2.AsyncByteStream):
    """A response body of given reads, then a clean end or `error` raised (a reset)."""

    def __init__(self, chunks: Sequence[bytes], error: Exception | None = None) -> None:
        self.chunks = list(chunks)
        self.error = error
        self.yielded = 0
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            await asyncio.sleep(0)
            self.yielded += 1
            yield chunk
        if self.error is not None:
            raise self.error

    async def aclose(self) -> None:
        self.closed = True


@dataclass
class Upstream:
    """The inner transport's answers: `answer` makes each response; every request seen is
    kept (method, path, body)."""

    answer: Callable[[httpx2.Request], httpx2.Response]
    seen: list[tuple[str, str, bytes]] = field(default_factory=list)

    def transport(self) -> httpx2.MockTransport:
        def handler(request: httpx2.Request) -> httpx2.Response:
            self.seen.append((request.method, request.url.path, request.content))
            return self.answer(request)

        return httpx2.MockTransport(handler)


def streaming(chunks: Sequence[bytes], error: Exception | None = None) -> tuple[Upstream, Body]:
    body = Body(chunks, error)
    return Upstream(lambda _: httpx2.Response(200, headers=STREAM_HEADERS, stream=body)), body


def native_frames(provider: str, reply: Reply) -> list[bytes]:
    renderer = registry_entry(provider).render()
    return [renderer.frame(event) for event in renderer.events(reply)]


def gated(upstream: Upstream, gating: GatingOptions | None = None) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=GatingTransport(upstream.transport(), gating or options()))


def direct(upstream: Upstream) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=upstream.transport())


# --- the SDKs ---------------------------------------------------------------------------------

TOOLS = {provider: request_for(provider)["tools"] for provider in PROTOCOLS}


def openai_client(http: httpx2.AsyncClient) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        api_key="sk-test", base_url=f"{ORIGIN}/v1", max_retries=0, http_client=http
    )


def anthropic_client(http: httpx2.AsyncClient) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        api_key="sk-ant-test", base_url=ORIGIN, max_retries=0, http_client=http
    )


async def sdk_stream(
    provider: str, http: httpx2.AsyncClient, seen: list[str], *, leave_after: int | None = None
) -> dict[str, Any] | None:
    """The SDK's stream helper to its final message (None: left after `leave_after`
    events); the type of every event it gave is appended to `seen`."""
    messages: Any = [{"role": "user", "content": "Fix the bug in add."}]
    tools = TOOLS[provider]
    if provider == "anthropic":
        async with (
            anthropic_client(http) as claude,
            claude.messages.stream(
                model="lab-model", max_tokens=64, messages=messages, tools=tools
            ) as stream,
        ):
            async for event in stream:
                seen.append(described(event))
                if leave_after is not None and len(seen) >= leave_after:
                    return None
            return (await stream.get_final_message()).model_dump()
    async with openai_client(http) as client:
        if provider == "chat":
            async with client.chat.completions.stream(
                model="lab-model", messages=messages, tools=tools
            ) as chat:
                async for chunk in chat:
                    seen.append(described(chunk))
                    if leave_after is not None and len(seen) >= leave_after:
                        return None
                completion: dict[str, Any] = (await chat.get_final_completion()).model_dump()
                return completion
        async with client.responses.stream(
            model="lab-model", input="Fix the bug in add.", tools=tools
        ) as responses:
            async for item in responses:
                seen.append(described(item))
                if leave_after is not None and len(seen) >= leave_after:
                    return None
            response: dict[str, Any] = (await responses.get_final_response()).model_dump()
            return response


async def sdk_whole(provider: str, http: httpx2.AsyncClient) -> dict[str, Any]:
    """The SDK's non-streaming call, its parsed result."""
    messages: Any = [{"role": "user", "content": "Fix the bug in add."}]
    tools = TOOLS[provider]
    if provider == "anthropic":
        async with anthropic_client(http) as claude:
            message = await claude.messages.create(
                model="lab-model", max_tokens=64, messages=messages, tools=tools
            )
            return message.model_dump()
    async with openai_client(http) as client:
        if provider == "chat":
            completion = await client.chat.completions.create(
                model="lab-model", messages=messages, tools=tools
            )
            return completion.model_dump()
        response = await client.responses.create(
            model="lab-model", input="Fix the bug in add.", tools=tools
        )
        return response.model_dump()


def described(event: Any) -> str:
    """An SDK event's type, marked `call:` when it carries a tool call (its start, id or
    arguments)."""
    kind: str = event.type
    carries = False
    if kind in ("content_block_start", "content_block_stop"):  # anthropic
        carries = event.content_block.type != "text"
    elif kind == "content_block_delta":
        carries = event.delta.type == "input_json_delta"
    elif kind == "input_json" or kind.startswith(("tool_calls.", "response.function_call")):
        carries = True
    elif kind == "chunk":  # chat: the raw chunk
        carries = any(choice.delta.tool_calls for choice in event.chunk.choices)
    elif kind in ("response.output_item.added", "response.output_item.done"):
        carries = event.item.type not in ("message", "reasoning")
    return f"call:{kind}" if carries else kind


def tool_events_seen(seen: list[str]) -> list[str]:
    return [kind for kind in seen if kind.startswith("call:")]


# --- replies ------------------------------------------------------------------------------------


def text_reply() -> Reply:
    return Reply("resp_text", (Say("The bug is in add: it subtracts."),))


def call_reply() -> Reply:
    return Reply("resp_call", (Say("Fixing it now."), Call("call_1", "edit", EDIT_FIX)))


def two_calls(second: Call) -> Reply:
    return Reply("resp_two", (Say("Two steps."), Call("call_1", "edit", EDIT_FIX), second))


ACCEPTED = {"text": text_reply(), "call": call_reply()}


def refused_bodies(provider: str) -> dict[str, tuple[list[bytes], Exception | None]]:
    """Refused streams: (the reads, the error that ends the body, if any)."""
    unknown = two_calls(Call("call_2", "delete_everything", {"path": "/"}))
    not_object = two_calls(Call("call_2", "read", "[1, 2]"))
    cut = Reply("resp_cut", (Say("Fixing."), Call("call_1", "edit", EDIT_FIX, cut=True)))
    open_end = Reply("resp_open", call_reply().parts, ending="open")
    whole = native_frames(provider, call_reply())
    reset = httpx2.ReadError("simulated connection reset by peer")
    return {
        "invalid-second-call": (native_frames(provider, unknown), None),
        "second-call-arguments-not-an-object": (native_frames(provider, not_object), None),
        "cut-inside-the-arguments": (native_frames(provider, cut), None),
        "reset-before-the-terminal": (whole[:-1], reset),
        "no-terminal": (native_frames(provider, open_end), None),
        "body-ends-inside-an-event": ([*whole[:-1], whole[-1][:-3]], None),
    }


REFUSED_CASES = [(provider, name) for provider in PROTOCOLS for name in refused_bodies(provider)]


# --- streams ------------------------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROTOCOLS)
@pytest.mark.parametrize("reply", sorted(ACCEPTED))
def test_an_accepted_stream_gives_the_sdk_the_same_final_message(provider: str, reply: str) -> None:
    frames = native_frames(provider, ACCEPTED[reply])

    async def both() -> tuple[Any, Any, list[str], Body, Upstream]:
        plain, _ = streaming(frames)
        seen_plain: list[str] = []
        want = await sdk_stream(provider, direct(plain), seen_plain)
        upstream, body = streaming(frames)
        seen: list[str] = []
        got = await sdk_stream(provider, gated(upstream), seen)
        assert seen == seen_plain  # the same events, in the same order
        return want, got, seen, body, upstream

    want, got, seen, body, upstream = run(both())
    assert got is not None
    assert got == want
    assert body.closed
    assert body.yielded == len(frames)
    assert len(upstream.seen) == 1
    if reply == "call":
        assert tool_events_seen(seen)  # the helper saw the call: the comparison means something


@pytest.mark.parametrize(
    ("provider", "case"), REFUSED_CASES, ids=[f"{p}-{c}" for p, c in REFUSED_CASES]
)
def test_the_sdk_raises_on_every_refused_stream_before_seeing_a_call(
    provider: str, case: str
) -> None:
    chunks, error = refused_bodies(provider)[case]

    async def attempt() -> tuple[BaseException | None, list[str], Body, Upstream]:
        upstream, body = streaming(chunks, error)
        seen: list[str] = []
        try:
            await sdk_stream(provider, gated(upstream), seen)
        except Exception as exc:
            return exc, seen, body, upstream
        return None, seen, body, upstream

    raised, seen, body, upstream = run(attempt())
    assert isinstance(raised, SDK_ERRORS[provider]), repr(raised)
    assert str(raised).count("lockgate") >= 1
    assert tool_events_seen(seen) == []
    assert body.closed
    assert len(upstream.seen) == 1  # the transport never retries


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_the_same_refused_stream_reaches_the_sdk_without_the_transport(provider: str) -> None:
    # The refusals above are the transport's doing: directly, the SDK takes the invalid
    # batch and sees its calls.
    chunks, _ = refused_bodies(provider)["invalid-second-call"]
    upstream, _ = streaming(chunks)
    seen: list[str] = []
    final = run(sdk_stream(provider, direct(upstream), seen))
    assert final is not None
    assert tool_events_seen(seen)


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_the_sdk_that_leaves_early_closes_the_upstream(provider: str) -> None:
    reply = Reply("resp_long", (Say("word " * 60, pieces=30), Call("call_1", "edit", EDIT_FIX)))
    frames = native_frames(provider, reply)

    async def leave() -> tuple[object, bool, Body]:
        upstream, body = streaming(frames)
        final = await sdk_stream(provider, gated(upstream), [], leave_after=3)
        return final, body.closed, body  # closed when the SDK's context ends, not later

    final, closed, body = run(leave())
    assert final is None
    assert closed
    assert body.yielded < len(frames) // 2  # nothing more was read after the SDK left


def test_closing_the_gated_response_closes_the_inner_one_at_once() -> None:
    # Without an SDK: one read of the body, then the response is closed; the engine's
    # iteration is still referenced (nothing is left to the garbage collector).
    frames = native_frames("chat", call_reply())

    async def leave() -> tuple[Body, bytes, bool]:
        upstream, body = streaming(frames)
        async with gated(upstream) as http:
            request = http.build_request(
                "POST", f"{ORIGIN}/v1/chat/completions", json=request_for("chat")
            )
            response = await http.send(request, stream=True)
            pieces = response.aiter_raw()
            first = await anext(pieces)
            await response.aclose()
            closed = body.closed
            await pieces.aclose()
        return body, first, closed

    body, first, closed = run(leave())
    assert first == frames[0]
    assert closed
    assert body.yielded < len(frames)


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_the_gated_response_keeps_the_headers_and_passes_the_bytes(provider: str) -> None:
    frames = native_frames(provider, call_reply())
    path = registry_entry(provider).render().path
    request = request_for(provider)
    compressed = gzip.compress(b"".join(frames))
    pieces = [compressed[i : i + 37] for i in range(0, len(compressed), 37)]

    async def read() -> tuple[httpx2.Response, bytes, list[tuple[str, str, bytes]]]:
        body = Body(pieces)
        headers = {**STREAM_HEADERS, "content-encoding": "gzip", "content-length": "999"}
        upstream = Upstream(lambda _: httpx2.Response(200, headers=headers, stream=body))
        async with gated(upstream) as http, http.stream("POST", ORIGIN + path, json=request) as r:
            data = b"".join([piece async for piece in r.aiter_bytes()])
        return r, data, upstream.seen

    response, data, seen = run(read())
    assert response.status_code == 200
    assert response.headers["x-request-id"] == "req_123"
    assert response.headers["content-type"] == "text/event-stream"
    assert "content-encoding" not in response.headers  # the bytes are decoded already
    assert "content-length" not in response.headers
    assert data == b"".join(frames)
    assert [(method, where) for method, where, _ in seen] == [("POST", path)]
    assert json.loads(seen[0][2]) == request  # the request went on unchanged


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_a_compressed_stream_reaches_the_sdk_decoded_once(provider: str) -> None:
    frames = native_frames(provider, call_reply())
    compressed = gzip.compress(b"".join(frames))

    def answer(_: httpx2.Request) -> httpx2.Response:
        headers = {**STREAM_HEADERS, "content-encoding": "gzip"}
        return httpx2.Response(
            200, headers=headers, stream=Body([compressed[:50], compressed[50:]])
        )

    async def both() -> tuple[Any, Any]:
        want = await sdk_stream(provider, direct(Upstream(answer)), [])
        got = await sdk_stream(provider, gated(Upstream(answer)), [])
        return want, got

    want, got = run(both())
    assert got is not None
    assert got == want


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_a_refused_stream_ends_with_the_protocols_error(provider: str) -> None:
    chunks, _ = refused_bodies(provider)["invalid-second-call"]
    path = registry_entry(provider).render().path
    outcomes: list[object] = []

    async def read() -> bytes:
        upstream, _ = streaming(chunks)
        transport = GatingTransport(upstream.transport(), options(), observer=outcomes.append)
        async with (
            httpx2.AsyncClient(transport=transport) as http,
            http.stream("POST", ORIGIN + path, json=request_for(provider)) as response,
        ):
            assert response.status_code == 200
            return b"".join([piece async for piece in response.aiter_bytes()])

    data = run(read())
    assert ends_with_refusal(data, provider)
    assert tool_events(data) == []  # only the error: no call of the batch
    assert outcomes  # the observer saw the judged events


# --- whole answers ------------------------------------------------------------------------------


def whole_upstream(provider: str, reply: Reply) -> Upstream:
    document = registry_entry(provider).render().completion(reply)
    return Upstream(
        lambda _: httpx2.Response(200, headers={"x-request-id": "req_9"}, json=document)
    )


@pytest.mark.parametrize("provider", PROTOCOLS)
@pytest.mark.parametrize("reply", sorted(ACCEPTED))
def test_an_accepted_whole_answer_passes(provider: str, reply: str) -> None:
    async def both() -> tuple[Any, Any]:
        want = await sdk_whole(provider, direct(whole_upstream(provider, ACCEPTED[reply])))
        got = await sdk_whole(provider, gated(whole_upstream(provider, ACCEPTED[reply])))
        return want, got

    want, got = run(both())
    assert got == want


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_a_refused_whole_answer_is_the_sdks_502(provider: str) -> None:
    reply = two_calls(Call("call_2", "delete_everything", {"path": "/"}))
    upstream = whole_upstream(provider, reply)
    errors = (openai.InternalServerError, anthropic.InternalServerError)

    async def attempt() -> BaseException | None:
        try:
            await sdk_whole(provider, gated(upstream))
        except Exception as exc:
            return exc
        return None

    raised = run(attempt())
    assert isinstance(raised, errors), repr(raised)
    assert raised.status_code == 502
    assert raised.response.headers["content-type"] == "application/json"
    assert "lockgate withheld 2 tool calls" in str(raised)
    assert len(upstream.seen) == 1
    # Directly, the same answer is taken with both calls.
    assert "delete_everything" in json.dumps(run(sdk_whole(provider, direct(upstream))))


# --- what passes unchanged ----------------------------------------------------------------------

RATE_LIMITED = {
    "chat": {"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit"}},
    "responses": {"error": {"message": "Rate limit reached", "type": "requests", "code": None}},
    "anthropic": {"type": "error", "error": {"type": "rate_limit_error", "message": "Slow down"}},
}


@pytest.mark.parametrize("provider", PROTOCOLS)
@pytest.mark.parametrize("streamed", [True, False], ids=["stream", "whole"])
def test_an_opening_error_reaches_the_sdk_unchanged(provider: str, streamed: bool) -> None:
    def answer(_: httpx2.Request) -> httpx2.Response:
        headers = {"retry-after": "7", "x-request-id": "req_429"}
        return httpx2.Response(429, headers=headers, json=RATE_LIMITED[provider])

    async def attempt(http: httpx2.AsyncClient) -> BaseException | None:
        try:
            if streamed:
                await sdk_stream(provider, http, [])
            else:
                await sdk_whole(provider, http)
        except Exception as exc:
            return exc
        return None

    plain = Upstream(answer)
    upstream = Upstream(answer)
    want = run(attempt(direct(plain)))
    got = run(attempt(gated(upstream)))
    rate_limited = (openai.RateLimitError, anthropic.RateLimitError)
    assert isinstance(want, rate_limited)
    assert isinstance(got, rate_limited)
    assert type(got) is type(want)
    assert (got.status_code, str(got), got.body) == (want.status_code, str(want), want.body)
    assert got.response.headers["retry-after"] == "7"
    assert got.response.headers["x-request-id"] == "req_429"
    assert len(upstream.seen) == 1  # no retry


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_a_request_of_no_protocol_passes(provider: str) -> None:
    listing = {
        "object": "list",
        "data": [
            {
                "id": "lab-model",
                "object": "model",
                "created": 1,
                "owned_by": "lab",
                "type": "model",
                "display_name": "Lab",
                "created_at": "2025-01-01T00:00:00Z",
            }
        ],
        "has_more": False,
        "first_id": "lab-model",
        "last_id": "lab-model",
    }

    async def models(upstream: Upstream, http: httpx2.AsyncClient) -> list[str]:
        if provider == "anthropic":
            async with anthropic_client(http) as client:
                return [model.id async for model in client.models.list()]
        async with openai_client(http) as client:
            return [model.id async for model in client.models.list()]

    upstream = Upstream(lambda _: httpx2.Response(200, json=listing))
    assert run(models(upstream, gated(upstream))) == ["lab-model"]
    assert [(method, path) for method, path, _ in upstream.seen] == [("GET", "/v1/models")]


def test_a_body_that_is_not_a_json_object_fails_closed() -> None:
    # Not a request the engine can read: it is sent as it is (the upstream validates
    # requests), but a 2xx answer to it exposes no tools and is no stream it asked for:
    # refused, never passed ungated.
    chunks, _ = refused_bodies("chat")["invalid-second-call"]

    async def post(content: bytes) -> tuple[int, bytes, bytes]:
        upstream, _ = streaming(chunks)
        async with gated(upstream) as http:
            response = await http.post(f"{ORIGIN}/v1/chat/completions", content=content)
            return response.status_code, response.content, upstream.seen[0][2]

    for content in (b"[1, 2, 3]", b"not json"):
        status, body, sent = run(post(content))
        assert sent == content
        assert status == 502
        assert b"lockgate" in body
        assert b"call_" not in body
    status, body, _ = run(post(json.dumps(request_for("chat")).encode()))
    assert status == 200
    assert body != b"".join(chunks)


def test_a_get_to_a_protocol_path_passes() -> None:
    chunks, _ = refused_bodies("responses")["invalid-second-call"]
    upstream, _ = streaming(chunks)

    async def get() -> bytes:
        async with gated(upstream) as http:
            return (await http.get(f"{ORIGIN}/v1/responses")).content

    assert run(get()) == b"".join(chunks)


# --- the convenience client -----------------------------------------------------------------------


def test_gated_client_wraps_the_given_transport() -> None:
    chunks, _ = refused_bodies("anthropic")["invalid-second-call"]
    upstream, _ = streaming(chunks)
    http = gated_client(options(), transport=upstream.transport(), base_url=ORIGIN)
    assert isinstance(http._transport, GatingTransport)

    async def read() -> bytes:
        async with http, http.stream("POST", "/v1/messages", json=request_for("anthropic")) as r:
            return b"".join([piece async for piece in r.aiter_bytes()])

    assert ends_with_refusal(run(read()), "anthropic")


def test_the_sdk_does_not_retry_a_refusal_a_new_request_cannot_change() -> None:
    # With the SDK's default retries, a refused whole answer (an invalid batch) is asked
    # once: the 502 says `x-should-retry: false`, which the official SDKs obey.
    reply = two_calls(Call("call_2", "delete_everything", {"path": "/"}))
    upstream = whole_upstream("chat", reply)

    raised = run(_refused_chat_call(upstream))
    assert raised.response.headers["x-should-retry"] == "false"
    assert len(upstream.seen) == 1


async def _refused_chat_call(upstream: Upstream) -> openai.InternalServerError:
    """What the openai SDK (its own two retries on) raises for a Chat call the gate refuses."""
    client = openai.AsyncOpenAI(
        api_key="sk-test", base_url=f"{ORIGIN}/v1", http_client=gated(upstream), max_retries=2
    )
    with pytest.raises(openai.InternalServerError) as caught:
        await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "fix it"}], tools=TOOLS["chat"]
        )
    return caught.value


def test_a_refusal_says_do_not_retry_in_place_of_an_upstream_should_retry_in_any_case() -> None:
    # An upstream's `X-Should-Retry: true` beside the refusal's `x-should-retry: false` made
    # the header read `true, false`, which the SDK ignores, retrying the 502 (issue 27).
    reply = two_calls(Call("call_2", "delete_everything", {"path": "/"}))
    document = registry_entry("chat").render().completion(reply)
    upstream = Upstream(
        lambda _: httpx2.Response(200, headers={"X-Should-Retry": "true"}, json=document)
    )

    raised = run(_refused_chat_call(upstream))
    assert raised.response.headers.get_list("x-should-retry") == ["false"]
    assert len(upstream.seen) == 1
